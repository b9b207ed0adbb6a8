package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
)

// readResponse reads an upstream response head from br. The common shape —
// an HTTP/1.1 head already in the buffer, a status other than 1xx/204/304,
// a body framed by one Content-Length or by chunked encoding, no field net/http
// would have to judge — is read here; anything else by http.ReadResponse,
// which reads this shape identically (upresp_test.go compares the two,
// head, body and the bytes left for the next response). The reason:
// textproto's general reader cost ~4.5k instructions per upstream answer of
// four header lines, about 5 % of a proxied JSON request.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	// Wait for the first bytes. An error there is reported as ReadResponse
	// reports an error on its first read (the executor maps it to an
	// outcome kind: reset, early EOF, timeout).
	if _, err := br.Peek(1); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if req.Method != http.MethodHead {
		if resp, ok := readResponseFast(br, req); ok {
			return resp, nil
		}
	}
	return http.ReadResponse(br, req)
}

func readResponseFast(br *bufio.Reader, req *http.Request) (*http.Response, bool) {
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 || !bytes.HasPrefix(buf, []byte("HTTP/1.1 ")) {
		return nil, false
	}
	head := buf[:end+2] // through the last field's CRLF
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if len(line) < 13 || line[12] != ' ' || bytes.IndexByte(line, '\n') >= 0 {
		return nil, false
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return nil, false
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}
	for _, c := range line[13:] {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, false
		}
	}
	lines := bytes.Count(rest, []byte{'\n'})
	h := make(http.Header, lines)
	vals := make([]string, lines)
	length, chunked, closing, sawLength, sawConn := int64(-1), false, false, false, false
	for len(rest) > 0 {
		l, r, _ := bytes.Cut(rest, []byte("\r\n"))
		rest = r
		name, v, ok := splitField(l) // a bare LF is a control character: refused
		if !ok {
			return nil, false
		}
		key := canonicalKey(name)
		switch key {
		case "Content-Length":
			n, ok := parseLength(v)
			if sawLength || !ok {
				return nil, false
			}
			sawLength, length = true, n
		case "Transfer-Encoding":
			if chunked || !asciiEqualFold(v, "chunked") {
				return nil, false
			}
			chunked = true
			continue // net/http moves it to Response.TransferEncoding
		case "Connection":
			if sawConn {
				return nil, false
			}
			sawConn = true
			switch {
			case asciiEqualFold(v, "close"):
				closing = true
				continue // net/http drops it once it has set Close
			case asciiEqualFold(v, "keep-alive"):
			default:
				return nil, false
			}
		case "Trailer", "Pragma":
			return nil, false
		}
		vals = addField(h, vals, key, v)
	}
	if chunked == sawLength {
		return nil, false // neither (read until close) or both: net/http's call
	}
	br.Discard(end + 4)
	resp := &http.Response{
		Status:     string(line[9:]),
		StatusCode: code,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        h,
		ContentLength: length,
		Close:         closing,
		Request:       req,
	}
	switch {
	case chunked:
		delete(h, "Content-Length")
		resp.TransferEncoding = []string{"chunked"}
		resp.Body = &chunkedBody{br: br, r: httputil.NewChunkedReader(br)}
	case length == 0:
		resp.Body = http.NoBody
	default:
		resp.Body = &lengthBody{br: br, left: length}
	}
	return resp, true
}

// lengthBody is a Content-Length response body.
type lengthBody struct {
	br   *bufio.Reader
	left int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	if err == nil && b.left == 0 {
		err = io.EOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }

// chunkedBody is a chunked response body; at its end it reads the (empty)
// trailer section, so the next response starts where it should.
type chunkedBody struct {
	br  *bufio.Reader
	r   io.Reader
	eof bool
}

var errTrailer = errors.New("malformed chunked trailer from upstream")

// maxTrailerLines bounds the trailer fields skipped at a chunked body's end.
const maxTrailerLines = 64

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		// The trailer section: fields (skipped; nothing here reads
		// Response.Trailer) up to the empty line.
		for i := 0; ; i++ {
			line, lerr := b.br.ReadSlice('\n')
			if lerr != nil {
				return n, io.ErrUnexpectedEOF
			}
			if string(line) == "\r\n" {
				break
			}
			if i == maxTrailerLines {
				return n, errTrailer
			}
		}
		b.eof = true
	}
	return n, err
}

func (b *chunkedBody) Close() error { return nil }
