package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"time"
)

// The fast path's wire format (h1server.go): which request heads it takes,
// how it reads them, and how it writes responses. Anything it does not take
// is net/http's to answer, so every check here errs towards "not ours".

type headState int

const (
	headIncomplete headState = iota
	headComplete
	headSlow
)

const chatRequestLine = "POST " + chatPath + " HTTP/1.1\r\n"

// scanHead finds the end of the request head in buf (the index after its
// blank line) when buf holds a complete head of the fast path's shape; slow
// as soon as it can tell the request is not (another request line, a bare
// LF line end).
func scanHead(buf []byte) (int, headState) {
	n := min(len(buf), len(chatRequestLine))
	if string(buf[:n]) != chatRequestLine[:n] {
		return 0, headSlow
	}
	if n < len(chatRequestLine) {
		return 0, headIncomplete
	}
	for i := len(chatRequestLine); ; {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return 0, headIncomplete
		}
		j += i
		if buf[j-1] != '\r' {
			return 0, headSlow
		}
		if j-1 == i {
			return j + 1, headComplete
		}
		i = j + 1
	}
}

// fastHead is what the fast path reads of a request head.
type fastHead struct {
	header        http.Header
	host          string
	contentLength int64
	close         bool
}

// parseFastHead reads the header fields of a complete head (scanHead); false
// when any of them is outside the fast path's shape, which includes every
// field net/http would refuse.
func parseFastHead(head []byte, h *fastHead) bool {
	lines := bytes.Count(head, []byte{'\n'}) - 2
	h.header = make(http.Header, lines)
	vals := make([]string, lines) // one block for every field's value slice, as textproto does
	hasLength := false
	rest := head[len(chatRequestLine) : len(head)-2]
	for len(rest) > 0 {
		end := bytes.IndexByte(rest, '\n')
		line := rest[:end-1]
		rest = rest[end+1:]
		name, v, ok := splitField(line)
		if !ok {
			return false
		}
		key := canonicalKey(name)
		switch key {
		case "Host":
			if h.host != "" || !validHost(v) {
				return false
			}
			h.host = string(v)
			continue // net/http keeps it in Request.Host only
		case "Content-Length":
			n, ok := parseLength(v)
			if hasLength || !ok {
				return false
			}
			hasLength, h.contentLength = true, n
		case "Transfer-Encoding", "Expect", "Upgrade", "Pragma": // Pragma: net/http derives a Cache-Control from it
			return false
		case "Connection":
			switch {
			case asciiEqualFold(v, "close"):
				h.close = true
			case asciiEqualFold(v, "keep-alive"):
			default:
				return false
			}
		}
		vals = addField(h.header, vals, key, v)
	}
	return hasLength && h.host != ""
}

// splitField splits a header field line (without its CRLF) into a name of
// token characters and a value trimmed of spaces and tabs, holding no
// control character but tab; false for anything else, a folded line (it
// starts with a space) and a stray LF included.
func splitField(line []byte) (name, value []byte, ok bool) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return nil, nil, false
	}
	name = line[:colon]
	for _, c := range name {
		if !isTokenChar(c) {
			return nil, nil, false
		}
	}
	v := line[colon+1:]
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	if hasCTL(v) {
		return nil, nil, false
	}
	return name, v, true
}

// hasCTL says whether b holds a control character other than tab (what a
// field value or a reason phrase may not hold).
func hasCTL(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return true
		}
	}
	return false
}

// addField adds value v under key to h, taking a first value's slice from
// vals (one block for the whole head, as textproto does) and returning
// what is left of it.
func addField(h http.Header, vals []string, key string, v []byte) []string {
	if old, ok := h[key]; ok {
		h[key] = append(old, string(v))
		return vals
	}
	vals[0] = string(v)
	h[key] = vals[:1:1]
	return vals[1:]
}

func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// validHost takes the characters of a host[:port] or an IPv6 literal:
// whatever else there is, net/http judges.
func validHost(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_':
		default:
			return false
		}
	}
	return true
}

// tokenChars are RFC 9110's tchar.
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isTokenChar(c byte) bool { return tokenChars[c] }

func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !tokenChars[k[i]] {
			return false
		}
	}
	return true
}

// commonKeys interns the field names clients send, so reading them does
// not allocate.
var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
		"Connection", "Content-Length", "Content-Type", "Cookie", "Host", "Origin", "Referer",
		"User-Agent", "X-Request-Id", "X-Forwarded-For", "X-Forwarded-Proto", "X-Real-Ip",
		"X-Session-Id", "X-Breakwater-Session", "X-Breakwater-Lease", "Openai-Organization",
		"Openai-Project", "X-Stainless-Arch", "X-Stainless-Lang", "X-Stainless-Os",
		"X-Stainless-Package-Version", "X-Stainless-Runtime", "X-Stainless-Runtime-Version",
		"X-Stainless-Retry-Count", "X-Stainless-Timeout", "X-Stainless-Async", "Traceparent",
		"Tracestate",
	} {
		m[k] = k
	}
	return m
}()

// canonicalKey is textproto.CanonicalMIMEHeaderKey for a name of token
// characters, without allocating for the common ones.
func canonicalKey(name []byte) string {
	var buf [64]byte
	if len(name) > len(buf) {
		return textproto.CanonicalMIMEHeaderKey(string(name))
	}
	upper := true
	for i, c := range name {
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
		upper = c == '-'
	}
	k := buf[:len(name)]
	if s, ok := commonKeys[string(k)]; ok {
		return s
	}
	return string(k)
}

// h1Response is the fast path's http.ResponseWriter and http.Flusher. The
// head is written at WriteHeader (later header changes are ignored, as with
// net/http); a body without a Content-Length is sent chunked.
type h1Response struct {
	c           *h1Conn
	header      http.Header
	status      int
	wroteHeader bool
	chunked     bool
	noBody      bool
	cl          int64 // the declared Content-Length, -1 when none
	written     int64
	closeAfter  bool
	ended       bool // endBody wrote the terminating chunk
}

func (w *h1Response) Header() http.Header { return w.header }

func (w *h1Response) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http
	}
	bw := w.c.bw
	if code < 200 && code != http.StatusSwitchingProtocols {
		// Informational (103 Early Hints): its own head; the final one follows.
		writeStatusLine(bw, code)
		writeFields(bw, w.header)
		bw.WriteString("\r\n")
		bw.Flush()
		return
	}
	w.wroteHeader, w.status = true, code
	h := w.header
	w.cl = -1
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	if v := h["Content-Length"]; len(v) == 1 {
		if n, ok := parseLength([]byte(v[0])); ok {
			w.cl = n
		} else {
			delete(h, "Content-Length")
		}
	} else if len(v) > 1 {
		delete(h, "Content-Length")
	}
	delete(h, "Transfer-Encoding")
	if !w.noBody && w.cl < 0 {
		w.chunked = true
	}
	if rem := w.c.body.remaining.Load(); rem > maxDiscard || w.c.s.closing.Load() {
		w.closeAfter = true // an unread body too large to skip, or shutting down
	}
	writeStatusLine(bw, code)
	writeFields(bw, h)
	if _, ok := h["Date"]; !ok {
		bw.WriteString("Date: ")
		bw.WriteString(httpDate(time.Now())[0])
		bw.WriteString("\r\n")
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.closeAfter {
		if _, ok := h["Connection"]; !ok {
			bw.WriteString("Connection: close\r\n")
		}
	}
	bw.WriteString("\r\n")
}

func writeStatusLine(bw *bufio.Writer, code int) {
	var n [3]byte
	bw.WriteString("HTTP/1.1 ")
	bw.Write(strconv.AppendInt(n[:0], int64(code), 10))
	bw.WriteString(" ")
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	bw.WriteString(text)
	bw.WriteString("\r\n")
}

func writeFields(bw *bufio.Writer, h http.Header) {
	for k, vs := range h {
		if !validFieldName(k) {
			continue // net/http drops these too
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			writeHeaderValue(bw, v) // CR/LF to spaces, trimmed: no response splitting by a value
			bw.WriteString("\r\n")
		}
	}
}

func (w *h1Response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.ended {
		return 0, errBodyEnded
	}
	if w.cl >= 0 && w.written+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	if len(p) == 0 {
		return 0, nil
	}
	w.written += int64(len(p))
	bw := w.c.bw
	if !w.chunked {
		return bw.Write(p)
	}
	var n [16]byte
	bw.Write(strconv.AppendInt(n[:0], int64(len(p)), 16))
	bw.WriteString("\r\n")
	bw.Write(p)
	_, err := bw.WriteString("\r\n")
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *h1Response) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.c.bw.Flush()
}

// bodyEnder is a response writer that can end its body before the handler
// returns: the fast path's h1Response (and statusRecorder over it).
type bodyEnder interface{ endBody() }

var errBodyEnded = errors.New("proxy: write after the response body was ended")

// endBody puts a chunked body's terminating chunk into the write buffer, so
// the next flush sends it in the same write as the last events: a streaming
// client then reads the end of its stream in one wake-up instead of two
// (docs/gateway.md, "Measuring"). Later writes fail.
func (w *h1Response) endBody() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked && !w.ended {
		w.c.bw.WriteString("0\r\n\r\n")
	}
	w.ended = true
}

// finish ends the response; an error means the connection cannot be reused.
func (w *h1Response) finish() error {
	if !w.wroteHeader {
		if _, ok := w.header["Content-Length"]; !ok {
			w.header["Content-Length"] = []string{"0"}
		}
		w.WriteHeader(http.StatusOK)
	}
	w.endBody()
	if err := w.c.bw.Flush(); err != nil {
		return err
	}
	if w.cl >= 0 && w.written < w.cl {
		return http.ErrContentLength // the client waits for bytes that will not come
	}
	return nil
}
