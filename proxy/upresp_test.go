package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// sameRead reads raw with readResponse and with http.ReadResponse, then
// each body to its end and what is left after it, and reports a difference;
// fast says whether readResponse took its own path.
func sameRead(t *testing.T, raw []byte) (fast bool) {
	t.Helper()
	req := &http.Request{Method: http.MethodPost}
	probe := bufio.NewReaderSize(bytes.NewReader(raw), 4096)
	probe.Peek(1)
	_, fast = readResponseFast(probe, req)

	fbr := bufio.NewReaderSize(bytes.NewReader(raw), 4096)
	sbr := bufio.NewReaderSize(bytes.NewReader(raw), 4096)
	fr, ferr := readResponse(fbr, req)
	sr, serr := http.ReadResponse(sbr, req)
	if (ferr == nil) != (serr == nil) {
		t.Fatalf("errors differ: %v vs net/http %v\n%q", ferr, serr, raw)
	}
	if ferr != nil {
		return fast
	}
	type head struct {
		Status           string
		StatusCode       int
		Proto            string
		Header           http.Header
		ContentLength    int64
		TransferEncoding []string
		Close            bool
	}
	fh := head{fr.Status, fr.StatusCode, fr.Proto, fr.Header, fr.ContentLength, fr.TransferEncoding, fr.Close}
	sh := head{sr.Status, sr.StatusCode, sr.Proto, sr.Header, sr.ContentLength, sr.TransferEncoding, sr.Close}
	if !reflect.DeepEqual(fh, sh) {
		t.Fatalf("heads differ (fast path %v):\n%+v\nnet/http:\n%+v\n%q", fast, fh, sh, raw)
	}
	fb, fe := io.ReadAll(fr.Body)
	sb, se := io.ReadAll(sr.Body)
	if !bytes.Equal(fb, sb) || (fe == nil) != (se == nil) {
		t.Fatalf("bodies differ (fast path %v): %q, %v\nnet/http: %q, %v\n%q", fast, fb, fe, sb, se, raw)
	}
	if fe == nil {
		// What is left is the next response on a kept connection.
		fl, _ := io.ReadAll(fbr)
		sl, _ := io.ReadAll(sbr)
		if !bytes.Equal(fl, sl) {
			t.Fatalf("left after the body (fast path %v): %q\nnet/http: %q\n%q", fast, fl, sl, raw)
		}
	}
	return fast
}

// TestReadResponseMatchesNetHTTP: the upstream response reader gives what
// http.ReadResponse gives — status, header, framing, Close, body and the
// bytes left for the next response — and takes its own path only for the
// ordinary shapes.
func TestReadResponseMatchesNetHTTP(t *testing.T) {
	fastCases := []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: application/json\r\nX-Request-Id: a\r\n\r\nhelloHTTP/1.1 200 OK\r\n",
		"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 2\r\nretry-after: 3\r\nx-ratelimit-remaining-requests: 0\r\nX-A: 1\r\nx-a: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n5\r\ndata:\r\n3;ext=1\r\n abc\r\n0\r\n\r\nNEXT",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Trailer: v\r\n\r\nNEXT",
		"HTTP/1.1 503 \r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
		"HTTP/1.1 599 whatever reason\r\nContent-Length: 3\r\nConnection: Keep-Alive\r\nX-Pad:  \t v \t\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
		"HTTP/1.1 200 OK\r\nX-Latin: caf\xe9\r\nContent-Length: 1\r\n\r\nx",
	}
	for _, raw := range fastCases {
		if !sameRead(t, []byte(raw)) {
			t.Errorf("not on the fast path: %q", raw)
		}
	}
	slowCases := []string{
		"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Fold: a\r\n b\r\n\r\nok",
		"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
		"HTTP/1.1 200 OK\r\nBad Name: v\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 20x OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nConnection: close, upgrade\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: " + strings.Repeat("9", 20) + "\r\n\r\n",
		"",
		"garbage",
	}
	for _, raw := range slowCases {
		if sameRead(t, []byte(raw)) {
			t.Errorf("on the fast path: %q", raw)
		}
	}
}

type failReader struct{ err error }

func (r failReader) Read([]byte) (int, error) { return 0, r.err }

// TestReadResponseFirstReadError: an upstream that closes or fails before
// its first byte gives the same error as with http.ReadResponse (the
// executor turns it into the outcome kind: early EOF, reset, timeout).
func TestReadResponseFirstReadError(t *testing.T) {
	boom := errors.New("connection reset by peer")
	for _, src := range []io.Reader{strings.NewReader(""), failReader{boom}} {
		req := &http.Request{Method: http.MethodPost}
		_, ferr := readResponse(bufio.NewReader(src), req)
		if s, ok := src.(*strings.Reader); ok {
			s.Seek(0, io.SeekStart)
		}
		_, serr := http.ReadResponse(bufio.NewReader(src), req)
		if ferr == nil || ferr != serr {
			t.Errorf("error %v, net/http %v", ferr, serr)
		}
	}
}

// FuzzReadResponse: for any bytes, readResponse and http.ReadResponse read
// the same response, body and remainder (sameRead).
func FuzzReadResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\nhello"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ndata:\r\n0\r\nX: y\r\n\r\nNEXT"))
	f.Add([]byte("HTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		sameRead(t, raw)
	})
}

// onceReader gives its bytes in one Read; any later Read is a test failure
// (it would have blocked on a live connection).
type onceReader struct {
	t    *testing.T
	data []byte
	used bool
}

func (r *onceReader) Read(p []byte) (int, error) {
	if r.used {
		r.t.Error("the decoder read the connection again with bytes in hand")
		return 0, errors.New("would block")
	}
	r.used = true
	return copy(p, r.data), nil
}

// TestChunkedBodyReturnsWhatIsHere pins why chunkedBody exists: with one
// whole chunk and part of the next in the buffer, a Read returns them
// without reading the connection again (net/http's decoder reads on to
// finish the cut chunk, so an SSE event already received waited for the
// next one).
func TestChunkedBodyReturnsWhatIsHere(t *testing.T) {
	src := &onceReader{t: t, data: []byte("5\r\nhello\r\n5\r\nwo")}
	b := &chunkedBody{br: bufio.NewReaderSize(src, 64)}
	p := make([]byte, 64)
	n, err := b.Read(p)
	if err != nil || string(p[:n]) != "hellowo" {
		t.Fatalf("Read = %q, %v; want \"hellowo\", nil", p[:n], err)
	}
	// A chunk's closing CRLF or the next size line not yet here: the same.
	for _, raw := range []string{"3\r\nabc", "3\r\nabc\r", "3\r\nabc\r\n", "3\r\nabc\r\n1"} {
		src := &onceReader{t: t, data: []byte(raw)}
		b := &chunkedBody{br: bufio.NewReaderSize(src, 64)}
		if n, err := b.Read(p); err != nil || string(p[:n]) != "abc" {
			t.Errorf("%q: Read = %q, %v; want \"abc\", nil", raw, p[:n], err)
		}
	}
}

// segReader gives at most seg bytes per Read (first bytes in its first), as
// a connection does, then fails with err (io.EOF when nil).
type segReader struct {
	data       []byte
	first, seg int
	err        error
}

func (r *segReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		if r.err == nil {
			return 0, io.EOF
		}
		return 0, r.err
	}
	seg := r.seg
	if r.first > 0 {
		seg, r.first = r.first, 0
	}
	n := copy(p[:min(len(p), seg)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// readAllBy reads r to its end with Read sizes taken in turn from sizes.
func readAllBy(r io.Reader, sizes []byte) ([]byte, error) {
	var out []byte
	for i := 0; ; i++ {
		p := make([]byte, 1+int(sizes[i%len(sizes)]))
		n, err := r.Read(p)
		out = append(out, p[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if i > 1<<20 {
			return out, errors.New("no progress")
		}
	}
}

// FuzzChunkedBody: for any chunked body, delivered in any segments and read
// with any Read sizes, chunkedBody gives what net/http gives for the same
// response: the same bytes, an error exactly when net/http has one, and the
// same remainder for the next response.
func FuzzChunkedBody(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\nNEXT"), uint8(3), []byte{0, 7, 255})
	f.Add([]byte("f1\r\n"+strings.Repeat("d", 0xf1)+"\r\n0\r\n\r\n"), uint8(100), []byte{63})
	f.Add([]byte("5 \r\nhello\r\n5 ;e\r\nworld\r\n0\r\n\r\n"), uint8(1), []byte{1, 2})
	f.Add([]byte("5\nhello\r\n0\r\n\r\n"), uint8(9), []byte{4})
	f.Fuzz(func(t *testing.T, body []byte, seg uint8, sizes []byte) {
		if len(sizes) == 0 {
			sizes = []byte{255}
		}
		head := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		raw := append([]byte(head), body...)
		req := &http.Request{Method: http.MethodPost}
		read := func(own bool) (data, rest []byte, err error) {
			br := bufio.NewReaderSize(&segReader{data: raw, first: len(head), seg: 1 + int(seg)}, 4096)
			var resp *http.Response
			if own {
				resp, err = readResponse(br, req)
			} else {
				resp, err = http.ReadResponse(br, req)
			}
			if err != nil {
				t.Fatalf("own %v: the head did not read: %v", own, err)
			}
			if _, ok := resp.Body.(*chunkedBody); own && !ok {
				t.Fatalf("readResponse did not take its own path: %T", resp.Body)
			}
			data, err = readAllBy(resp.Body, sizes)
			if err == nil {
				rest, _ = io.ReadAll(br)
			}
			return data, rest, err
		}
		od, or, oe := read(true)
		sd, sr, se := read(false)
		if (oe == nil) != (se == nil) || (oe == nil && (!bytes.Equal(od, sd) || !bytes.Equal(or, sr))) {
			t.Fatalf("chunkedBody: %q, rest %q, %v\nnet/http:    %q, rest %q, %v\nbody %q", od, or, oe, sd, sr, se, body)
		}
	})
}

// TestChunkedBodyKeepsReadErrors: a connection error inside a chunked body
// (a reset, the deadline a cancellation sets) reaches the executor as that
// error, wherever in the framing it happens, since the outcome kind is read
// from it; only a clean end of input becomes io.ErrUnexpectedEOF.
func TestChunkedBodyKeepsReadErrors(t *testing.T) {
	reset := errors.New("connection reset by peer")
	for _, raw := range []string{"3\r\nab", "3\r\nabc", "3\r\nabc\r", "3\r\nabc\r\n", "3\r\nabc\r\n5"} {
		for _, end := range []error{reset, io.EOF} {
			b := &chunkedBody{br: bufio.NewReaderSize(&segReader{data: []byte(raw), seg: len(raw), err: end}, 64)}
			_, err := readAllBy(b, []byte{63})
			want := end
			if end == io.EOF {
				want = io.ErrUnexpectedEOF
			}
			if !errors.Is(err, want) {
				t.Errorf("%q then %v: got %v, want %v", raw, end, err, want)
			}
		}
	}
}
