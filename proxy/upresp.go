package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/textproto"
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
	if hasCTL(line[13:]) {
		return nil, false
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
	case chunked: // never with a Content-Length: both were refused above
		resp.TransferEncoding = []string{"chunked"}
		resp.Body = &chunkedBody{br: br}
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

// chunkedBody decodes a chunked response body (RFC 9112 §7.1) from the
// connection's buffer. It accepts and rejects what net/http's decoder does
// (the same line rules, size limits and non-data guard), with one
// difference that matters to a streaming proxy: once a Read has bytes for
// its caller it returns them rather than read the connection again. net/http's
// decoder reads on to finish a chunk its buffer cut in two, so with a small
// buffer and a fast upstream an SSE event already received waited for the
// events behind it (docs/gateway.md, "Measuring"). At its end it reads the
// trailer section, so the next response starts where it should.
type chunkedBody struct {
	br     *bufio.Reader
	left   uint64 // data bytes left in the current chunk
	crlf   bool   // the chunk's data is read, its closing CRLF is not
	excess int64  // framing bytes beyond a fair share (net/http's guard against 1-byte chunks)
	err    error  // sticky; io.EOF after the trailer section
}

var (
	errTrailer      = errors.New("malformed chunked trailer from upstream")
	errChunkLine    = errors.New("malformed chunk size line from upstream")
	errChunkEnd     = errors.New("malformed chunked encoding from upstream")
	errChunkNonData = errors.New("chunked encoding from upstream contains too much non-data")
)

// maxChunkLine is net/http's limit on a chunk size line.
const maxChunkLine = 4096

func (b *chunkedBody) Read(p []byte) (n int, err error) {
	for b.err == nil {
		if b.crlf {
			if n > 0 && b.br.Buffered() < 2 {
				break
			}
			var end [2]byte
			if _, err := io.ReadFull(b.br, end[:]); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				b.err = err // a reset or a deadline stays what it is (the executor's outcome kind)
				break
			}
			if end != [2]byte{'\r', '\n'} {
				b.err = errChunkEnd
				break
			}
			b.crlf = false
		}
		if b.left == 0 {
			if n > 0 && !b.lineBuffered() {
				break // never wait for the next chunk with bytes in hand
			}
			b.beginChunk()
			continue
		}
		if len(p) == n || (n > 0 && b.br.Buffered() == 0) {
			break // the difference from net/http: return what is here
		}
		q := p[n:]
		if uint64(len(q)) > b.left {
			q = q[:b.left]
		}
		k, rerr := b.br.Read(q)
		n += k
		b.left -= uint64(k)
		switch {
		case rerr == io.EOF:
			b.err = io.ErrUnexpectedEOF
		case rerr != nil:
			b.err = rerr
		case b.left == 0:
			b.crlf = true
		}
	}
	return n, b.err
}

// lineBuffered says whether a whole chunk size line is in the buffer.
func (b *chunkedBody) lineBuffered() bool {
	buf, _ := b.br.Peek(b.br.Buffered())
	return bytes.IndexByte(buf, '\n') >= 0
}

// beginChunk reads a chunk size line; the last chunk's is followed by the
// trailer section.
func (b *chunkedBody) beginChunk() {
	line, err := b.br.ReadSlice('\n')
	switch {
	case err == io.EOF:
		b.err = io.ErrUnexpectedEOF
		return
	case err != nil:
		b.err = err // bufio.ErrBufferFull: a line longer than the buffer
		return
	}
	// CRLF only: no bare LF, no other CR (RFC 9112 errata 7633, as net/http).
	if i := bytes.IndexByte(line, '\r'); i < 0 || i != len(line)-2 || len(line)-2 >= maxChunkLine {
		b.err = errChunkLine
		return
	}
	line = line[:len(line)-2]
	b.excess += int64(len(line)) + 2
	line = bytes.TrimRight(line, " \t")
	line, _, _ = bytes.Cut(line, []byte(";")) // a chunk extension is ignored (spaces before it are not)
	size, ok := parseChunkSize(line)
	if !ok {
		b.err = errChunkLine
		return
	}
	// As net/http: framing may not outweigh data by more than 16 KiB.
	b.excess = max(b.excess-16-2*int64(size), 0)
	if b.excess > 16<<10 {
		b.err = errChunkNonData
		return
	}
	if size > 0 {
		b.left = size
		return
	}
	// The trailer section, judged as net/http judges it (its fields are
	// dropped: nothing here reads Response.Trailer): nearly always just
	// the empty line; else header fields that end within the buffer.
	end, _ := b.br.Peek(2)
	switch {
	case string(end) == "\r\n":
		b.br.Discard(2)
	case len(end) < 2:
		b.err = io.ErrUnexpectedEOF
		return
	case !trailerEndBuffered(b.br):
		b.err = errTrailer
		return
	default:
		if _, err := textproto.NewReader(b.br).ReadMIMEHeader(); err != nil {
			b.err = errTrailer
			return
		}
	}
	b.err = io.EOF
}

// trailerEndBuffered says whether the blank line ending a trailer section
// comes within the read buffer (net/http's bound on a trailer's size).
func trailerEndBuffered(br *bufio.Reader) bool {
	for n := 4; ; n++ {
		buf, err := br.Peek(n)
		if bytes.HasSuffix(buf, []byte("\r\n\r\n")) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// parseChunkSize reads 1 to 16 hex digits.
func parseChunkSize(v []byte) (uint64, bool) {
	if len(v) == 0 || len(v) > 16 {
		return 0, false
	}
	var n uint64
	for _, c := range v {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(c)
	}
	return n, true
}

func (b *chunkedBody) Close() error { return nil }
