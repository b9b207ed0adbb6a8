package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"time"
)

// upClient sends upstream requests to plain-HTTP upstreams (local models,
// sidecars, egress proxies) over HTTP/1.1 keep-alive connections it drives
// from the calling goroutine. net/http's Transport hands every request to a
// per-connection write goroutine and every response back from a read
// goroutine; on loopback those two hand-offs cost about as much as the rest
// of the gateway together (docs/gateway.md, "Overhead"). TLS upstreams, a
// configured HTTP proxy and anything unusual keep using the Transport, which
// also brings HTTP/2.
//
// Cancellation: the request's context closing sets a past deadline on the
// connection, so a blocked read or write returns at once and the caller
// reads the cause from the context (the phase timers and watchdogs cancel
// with a cause). A connection that saw a cancellation is never reused.
type upClient struct {
	fallback *http.Client
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	poll     *busyPoller // nil: never polls

	mu      sync.Mutex
	idle    map[string][]*upConn // by host:port, most recently used last
	maxIdle int                  // per host
	idleFor time.Duration        // an idle connection older than this is closed
	swept   time.Time
	closed  bool
}

type upConn struct {
	c     net.Conn
	br    *bufio.Reader
	used  time.Time // when it went idle
	reuse bool      // it served a request before
	poll  pollWindow
}

func newUpClient(fallback *http.Client, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *upClient {
	return &upClient{fallback: fallback, dial: dial, idle: map[string][]*upConn{}, maxIdle: 1024, idleFor: 90 * time.Second}
}

// direct reports whether req can take the direct path.
func (u *upClient) direct(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.User != nil || req.Close {
		return false
	}
	if p, err := http.ProxyFromEnvironment(req); err != nil || p != nil {
		return false
	}
	return true
}

// Do sends req and returns the response; its Body must be closed. The
// request body must be replayable (GetBody) so a stale keep-alive
// connection can be retried once on a fresh one.
func (u *upClient) Do(req *http.Request) (*http.Response, error) {
	if !u.direct(req) {
		return u.fallback.Do(req)
	}
	host := req.URL.Host
	if req.URL.Port() == "" {
		host = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	for try := 0; ; try++ {
		pc, err := u.get(req.Context(), host)
		if err != nil {
			return nil, err
		}
		if tr := httptrace.ContextClientTrace(req.Context()); tr != nil && tr.GotConn != nil {
			// Honour the standard hook like net/http does: the egress-IP
			// probe of SPEC §7 (proxy/egress.go) reads the local address.
			tr.GotConn(httptrace.GotConnInfo{Conn: pc.c, Reused: pc.reuse})
		}
		resp, err := u.roundTrip(pc, req)
		if err == nil {
			return resp, nil
		}
		// A reused connection the upstream had already closed fails
		// before any response byte: the request never reached a handler,
		// so one retry on a fresh connection is safe (net/http does the
		// same for its idle connections).
		if try == 0 && pc.reuse && req.Context().Err() == nil && staleConnError(err) && req.GetBody != nil {
			body, berr := req.GetBody()
			if berr == nil {
				req.Body = body
				continue
			}
		}
		return nil, err
	}
}

func staleConnError(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && (op.Op == "write" || op.Op == "read") && !op.Timeout()
}

func (u *upClient) get(ctx context.Context, host string) (*upConn, error) {
	now := time.Now()
	u.mu.Lock()
	if now.Sub(u.swept) > u.idleFor {
		u.sweepLocked(now)
	}
	for list := u.idle[host]; len(list) > 0; list = u.idle[host] {
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		u.idle[host] = list[:len(list)-1]
		if now.Sub(pc.used) < u.idleFor && pc.br.Buffered() == 0 {
			u.mu.Unlock()
			return pc, nil
		}
		pc.c.Close()
	}
	u.mu.Unlock()
	c, err := u.dial(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	return &upConn{c: c, br: bufio.NewReaderSize(c, upReadBuf)}, nil
}

// upReadBuf is a connection's read buffer, kept for the connection's life
// (held streams and idle connections). 1 KiB holds an ordinary stream event
// and the response head of a plain-HTTP upstream; a longer header line is
// assembled by textproto, a larger body read bypasses the buffer, and a
// burst of events takes a few more reads (docs/gateway.md, "Measuring").
const upReadBuf = 1 << 10

func (u *upClient) put(host string, pc *upConn) {
	pc.used = time.Now()
	pc.reuse = true
	u.mu.Lock()
	if u.closed || len(u.idle[host]) >= u.maxIdle {
		u.mu.Unlock()
		pc.c.Close()
		return
	}
	u.idle[host] = append(u.idle[host], pc)
	u.mu.Unlock()
}

// sweepLocked closes connections idle for longer than idleFor, so hosts no
// longer used do not keep file descriptors.
func (u *upClient) sweepLocked(now time.Time) {
	u.swept = now
	for h, list := range u.idle {
		keep := list[:0]
		for _, pc := range list {
			if now.Sub(pc.used) < u.idleFor {
				keep = append(keep, pc)
			} else {
				pc.c.Close()
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(u.idle, h)
		} else {
			u.idle[h] = keep
		}
	}
}

// CloseIdle closes every idle connection; with stop, later connections are
// not kept either.
func (u *upClient) CloseIdle(stop bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = u.closed || stop
	for h, list := range u.idle {
		for _, pc := range list {
			pc.c.Close()
		}
		delete(u.idle, h)
	}
	u.fallback.CloseIdleConnections()
}

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}

// aLongTimeAgo is a deadline in the past: it wakes blocked I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

func (u *upClient) roundTrip(pc *upConn, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { pc.c.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		pc.c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	// The write buffer is only needed while the request goes out: pooled,
	// not kept per connection (a held stream or an idle connection would
	// otherwise carry 4 KiB it never uses again).
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(pc.c)
	err := writeRequest(bw, req)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writerPool.Put(bw)
	if err != nil {
		return fail(err)
	}
	var resp *http.Response
	waited := u.poll.before(pc.c, pc.br, &pc.poll, pollUpstream)
	for {
		r, err := readResponse(pc.br, req)
		if err != nil {
			return fail(err)
		}
		// Informational answers (100 Continue, 103 Early Hints) precede
		// the real one.
		if r.StatusCode >= 100 && r.StatusCode < 200 && r.StatusCode != http.StatusSwitchingProtocols {
			r.Body.Close()
			continue
		}
		resp = r
		break
	}
	u.poll.after(&pc.poll, waited, pollUpstream)
	host := req.URL.Host
	if req.URL.Port() == "" {
		host = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	resp.Body = &upBody{u: u, pc: pc, host: host, body: resp.Body, stop: stop, keep: !resp.Close}
	return resp, nil
}

// upBody returns its connection to the pool when the body was read to its
// end and nothing cancelled it; otherwise it closes the connection.
type upBody struct {
	u    *upClient
	pc   *upConn
	host string
	body io.ReadCloser
	stop func() bool
	keep bool
	eof  bool
	done bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, errors.New("read on closed response body")
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *upBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	notFired := b.stop()
	if b.keep && notFired && !b.eof && b.pc.br.Buffered() > 0 {
		// A stream read up to its [DONE] leaves the chunked terminator
		// behind; when it is already buffered, finish the body so the
		// connection stays reusable. The deadline bounds a terminator that
		// is only half here.
		b.pc.c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := io.CopyN(io.Discard, b.body, 4<<10)
		b.eof = err == io.EOF && n < 4<<10
		b.pc.c.SetReadDeadline(time.Time{})
	}
	if b.eof && b.keep && notFired && b.pc.br.Buffered() == 0 {
		b.u.put(b.host, b.pc)
		return nil
	}
	return b.pc.c.Close()
}

// writeRequest writes an ordinary upstream request (a known-length body,
// no trailers or transfer codings) the way Request.Write does, without its
// per-request allocations; anything else goes through Request.Write.
// Header lines follow Request.Write: Host and User-Agent first, then the
// rest sorted, values trimmed and CR/LF turned into spaces so no value can
// split the head.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	body := req.Body != nil && req.Body != http.NoBody
	if req.URL.Opaque != "" || req.Close || req.Trailer != nil || len(req.TransferEncoding) > 0 ||
		req.ContentLength < 0 || (body && req.ContentLength == 0) || len(req.Header) > 16 {
		return req.Write(bw)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f || c == '%' { // punycode, zones, junk: Request.Write's checks
			return req.Write(bw)
		}
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(req.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	writeHeaderValue(bw, host)
	bw.WriteString("\r\n")
	if ua, ok := req.Header["User-Agent"]; !ok {
		bw.WriteString("User-Agent: Go-http-client/1.1\r\n")
	} else if len(ua) > 0 && ua[0] != "" {
		bw.WriteString("User-Agent: ")
		writeHeaderValue(bw, ua[0])
		bw.WriteString("\r\n")
	}
	if body || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		var n [20]byte
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(n[:0], req.ContentLength, 10))
		bw.WriteString("\r\n")
	}
	var keys [16]string
	ks := keys[:0]
	for k := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		// insertion sort: a handful of keys, and slices.Sort would move
		// the array to the heap
		i := len(ks)
		ks = append(ks, k)
		for ; i > 0 && ks[i-1] > k; i-- {
			ks[i] = ks[i-1]
		}
		ks[i] = k
	}
	for _, k := range ks {
		for _, v := range req.Header[k] {
			bw.WriteString(k)
			bw.WriteString(": ")
			writeHeaderValue(bw, v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
	if !body {
		return nil
	}
	n, err := io.Copy(bw, req.Body)
	if err == nil && n != req.ContentLength {
		err = fmt.Errorf("http: ContentLength=%d with Body length %d", req.ContentLength, n)
	}
	return err
}

// writeHeaderValue writes v with CR and LF as spaces, trimmed of
// surrounding whitespace (Request.Write does the same).
func writeHeaderValue(bw *bufio.Writer, v string) {
	for len(v) > 0 && isHeaderSpace(v[0]) {
		v = v[1:]
	}
	for len(v) > 0 && isHeaderSpace(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	start := 0
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' {
			bw.WriteString(v[start:i])
			bw.WriteByte(' ')
			start = i + 1
		}
	}
	bw.WriteString(v[start:])
}

func isHeaderSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
