package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// h1Server is the gateway's listener. It reads each connection's requests
// itself and serves the one request that nearly all traffic is — a
// well-formed HTTP/1.1 `POST /v1/chat/completions` with a Content-Length
// body — on the connection's own goroutine; the first request that is
// anything else (another path, chunked or Expect: 100-continue bodies,
// HTTP/1.0, an upgrade, a head that does not fit the 4 KiB buffer, a head
// it would have to judge as malformed) hands the connection, with the bytes
// already read, to a net/http Server for the rest of its life. So net/http
// decides every unusual case exactly as before, and the fast path only has
// to be right about the narrow shape it accepts (h1server_test.go pins it
// against net/http).
//
// Why: net/http's server starts a goroutine per request to watch for the
// client closing the connection, and stops it when the handler returns — a
// goroutine start and a cross-goroutine wake-up per request, which on a
// small shared machine is a measurable share of the gateway's added latency
// (docs/gateway.md, "Measuring"). Here the watch starts only when a request
// is still running after clientWatchDelay: a client that goes away is still
// noticed (its request context is cancelled), a little later.
type h1Server struct {
	handler    http.Handler
	fallback   *http.Server
	handoff    *connListener
	readHeader time.Duration
	idle       time.Duration
	log        *slog.Logger
	poll       *busyPoller // nil: never polls

	closing atomic.Bool
	fbOnce  sync.Once // starts the net/http side on the first Serve
	// base is the net/http side's requests' parent context; cutBase ends
	// them (CutRequests). The fast path's requests are cut one by one.
	base    context.Context
	cutBase context.CancelCauseFunc
	mu      sync.Mutex
	lns     map[net.Listener]struct{}
	conns   map[*h1Conn]struct{}
	done    chan struct{} // closed when conns becomes empty while closing
}

// clientWatchDelay is how long a request runs before its connection is
// watched for the client going away.
const clientWatchDelay = 20 * time.Millisecond

// maxDiscard is the most unread request body read off after a response to
// keep the connection (net/http uses the same figure).
const maxDiscard = 256 << 10

const chatPath = "/v1/chat/completions"

var errClientGone = errors.New("client closed the connection")

func newH1Server(h http.Handler, log *slog.Logger, readHeader, idle time.Duration) *h1Server {
	s := &h1Server{handler: h, readHeader: readHeader, idle: idle, log: log,
		lns: map[net.Listener]struct{}{}, conns: map[*h1Conn]struct{}{},
		handoff: &connListener{ch: make(chan net.Conn), done: make(chan struct{})}}
	s.base, s.cutBase = context.WithCancelCause(context.Background())
	s.fallback = &http.Server{Handler: h, ReadHeaderTimeout: readHeader, IdleTimeout: idle,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return s.base }}
	return s
}

// setPoller makes s busy-poll with p; the requests of connections handed to
// net/http are counted as in flight too.
func (s *h1Server) setPoller(p *busyPoller) {
	s.poll = p
	if p != nil {
		s.fallback.Handler = p.counting(s.handler)
	}
}

// CutRequests ends the context of every request in flight with cause,
// leaving the connections open: the handlers still answer (Shutdown, when
// its drain runs out of time, cuts before it closes the sockets, so a
// request gets a typed error and a stream its error event instead of an
// empty reply).
func (s *h1Server) CutRequests(cause error) {
	s.cutBase(cause)
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.watch.mu.Lock()
		if c.watch.cancel != nil {
			c.watch.cancel(cause)
			if c.body.remaining.Load() > 0 {
				// The handler is still reading the body, which no context
				// interrupts: a past deadline ends the read, so the handler
				// answers (and the body's client is told) before the close.
				c.nc.SetReadDeadline(aLongTimeAgo)
			}
		}
		c.watch.mu.Unlock()
	}
}

// Serve accepts connections on l until Shutdown or Close; like
// http.Server.Serve it may run on several listeners at once.
func (s *h1Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.lns[l] = struct{}{}
	s.fbOnce.Do(func() {
		s.handoff.addr = l.Addr()
		go s.fallback.Serve(s.handoff)
	})
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				// Out of descriptors and the like: back off as net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "error", err.Error(), "in", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := s.newConn(nc)
		if c == nil {
			nc.Close()
			continue
		}
		go c.serve()
	}
}

func (s *h1Server) newConn(nc net.Conn) *h1Conn {
	c := &h1Conn{s: s, nc: nc, remote: nc.RemoteAddr().String()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return nil
	}
	s.conns[c] = struct{}{}
	return c
}

func (s *h1Server) forget(c *h1Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if len(s.conns) == 0 && s.done != nil {
		close(s.done)
		s.done = nil
	}
	s.mu.Unlock()
}

// Shutdown stops accepting, ends idle connections (after serving a request
// already sent on one), and waits until the requests in flight (its own and
// net/http's) are answered or ctx ends.
func (s *h1Server) Shutdown(ctx context.Context) error {
	wait := s.beginClose(false)
	err := s.fallback.Shutdown(ctx)
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// Close closes the listener and every connection at once.
func (s *h1Server) Close() error {
	s.beginClose(true)
	return s.fallback.Close()
}

func (s *h1Server) beginClose(all bool) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing.Store(true)
	for l := range s.lns {
		l.Close()
	}
	s.handoff.Close()
	for c := range s.conns {
		switch {
		case all:
			c.nc.Close()
		case c.head.Load():
			// A head still arriving gets as long as a last look; one
			// that does not complete in it (half sent, a slow client)
			// ends the connection instead of holding the exit for the
			// header timeout, as net/http does.
			c.nc.SetReadDeadline(time.Now().Add(lastLookWait))
		case c.idle.Load():
			// Woken, not closed: a request already sent on it is
			// answered (lastLook).
			c.nc.SetReadDeadline(aLongTimeAgo)
		}
	}
	if len(s.conns) == 0 {
		return nil
	}
	if s.done == nil {
		s.done = make(chan struct{})
	}
	return s.done
}

// h1Conn is one client connection on the fast path.
type h1Conn struct {
	s      *h1Server
	nc     net.Conn
	remote string
	br     *bufio.Reader
	bw     *bufio.Writer
	idle   atomic.Bool // waiting for a request: Shutdown may close it
	head   atomic.Bool // reading a request head: Shutdown gives it lastLookWait
	poll   pollWindow

	body   h1Body
	resp   h1Response
	watch  clientWatch
	cancel context.CancelCauseFunc // the current request's, until serveOne takes it
}

func (c *h1Conn) serve() {
	handedOff := false
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			c.s.log.Error("connection panic", "panic", v)
		}
		if !handedOff {
			c.nc.Close()
		}
		c.s.poll.closeClient(&c.poll)
		c.release()
		c.s.forget(c)
	}()
	c.br = readerPool.Get().(*bufio.Reader)
	c.br.Reset(c.nc)
	first := true
	for {
		c.idle.Store(true)
		if !c.awaitRequest(first) {
			return
		}
		c.head.Store(true) // before idle goes false: Shutdown looks at head first
		c.idle.Store(false)
		req, head, ok := c.readHead(first)
		c.head.Store(false)
		if !ok {
			handedOff = true
			c.handOff()
			return
		}
		first = false
		if !c.serveOne(req, head) {
			return
		}
	}
}

// lastLookWait is how long a connection that is idle when the server
// shuts down is watched for a request the client already sent.
const lastLookWait = 5 * time.Millisecond

// awaitRequest waits for the first byte of the connection's next request;
// false: the connection ends with nothing to answer (closed, reset, idle
// for too long, or the server shutting down with no request waiting).
func (c *h1Conn) awaitRequest(first bool) bool {
	if c.s.closing.Load() {
		return c.lastLook()
	}
	wait := c.s.idle
	if first {
		wait = c.s.readHeader
	}
	var deadline time.Time // none, also after a client watch cut its read short
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	c.nc.SetReadDeadline(deadline)
	// Shutdown sets closing before it wakes idle connections with a past
	// deadline: seen here, that deadline may have been overwritten above.
	if c.s.closing.Load() {
		return c.lastLook()
	}
	var waited time.Time
	if !first {
		waited = c.s.poll.before(c.nc, c.br, &c.poll, pollClient)
	}
	if _, err := c.br.Peek(1); err != nil {
		if c.s.closing.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
			return c.lastLook()
		}
		return false
	}
	c.s.poll.after(&c.poll, waited, pollClient)
	return true
}

// lastLook: the server is shutting down while the connection is idle. A
// request the client has already sent (it may be in the socket, not yet
// read) is served, with Connection: close on its answer; closing the
// connection under it would lose it without an answer.
func (c *h1Conn) lastLook() bool {
	if c.br.Buffered() > 0 {
		return true
	}
	c.nc.SetReadDeadline(time.Now().Add(lastLookWait))
	_, err := c.br.Peek(1)
	return err == nil
}

// release returns the connection's buffers to their pools.
func (c *h1Conn) release() {
	if c.br != nil {
		c.br.Reset(nil)
		readerPool.Put(c.br)
		c.br = nil
	}
	if c.bw != nil {
		c.bw.Reset(nil)
		writerPool.Put(c.bw)
		c.bw = nil
	}
}

// handOff gives the connection and what was read of it to net/http.
func (c *h1Conn) handOff() {
	nc := &bufConn{Conn: c.nc, r: c.br}
	c.br = nil // bufConn owns it now; it is not pooled again
	c.nc.SetReadDeadline(time.Time{})
	if !c.s.handoff.give(nc) {
		c.nc.Close()
	}
}

// readHead reads the request head; ok false means the connection goes to
// net/http (with every byte still unread in c.br).
func (c *h1Conn) readHead(first bool) (*http.Request, fastHead, bool) {
	var h fastHead
	for extended := false; ; {
		buf, _ := c.br.Peek(c.br.Buffered())
		end, st := scanHead(buf)
		switch st {
		case headSlow:
			return nil, h, false
		case headComplete:
			if !parseFastHead(buf[:end], &h) {
				return nil, h, false
			}
			c.br.Discard(end)
			return c.newRequest(&h), h, true
		}
		if len(buf) == c.br.Size() {
			return nil, h, false // larger than the buffer: net/http has the limits for that
		}
		if !extended && !first {
			// The idle deadline was for the first byte; the rest of the
			// head gets the header timeout, as with net/http.
			extended = true
			if c.s.readHeader > 0 {
				c.nc.SetReadDeadline(time.Now().Add(c.s.readHeader))
			}
			if c.s.closing.Load() {
				// Shutdown's shorter deadline (beginClose) may have been
				// overwritten just above.
				c.nc.SetReadDeadline(time.Now().Add(lastLookWait))
			}
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return nil, h, false // net/http answers a cut or slow head as it always did
		}
	}
}

var chatURL = url.URL{Path: chatPath}

func (c *h1Conn) newRequest(h *fastHead) *http.Request {
	ctx, cancel := context.WithCancelCause(context.Background())
	u := new(url.URL)
	*u = chatURL
	c.body.c, c.body.closed = c, false
	c.body.remaining.Store(h.contentLength)
	var base http.Request
	base.Method = http.MethodPost
	base.URL = u
	base.Proto, base.ProtoMajor, base.ProtoMinor = "HTTP/1.1", 1, 1
	base.Header = h.header
	base.Body = &c.body
	base.ContentLength = h.contentLength
	base.Host = h.host
	base.RemoteAddr = c.remote
	base.Close = h.close
	base.RequestURI = chatPath
	if h.contentLength == 0 {
		base.Body = http.NoBody
	}
	r := base.WithContext(ctx)
	c.cancel = cancel
	return r
}

// serveOne runs the handler for r and finishes its response; false when the
// connection must close.
func (c *h1Conn) serveOne(r *http.Request, h fastHead) (keep bool) {
	if c.bw == nil {
		c.bw = writerPool.Get().(*bufio.Writer) // upclient's pool: the same 4 KiB writers
		c.bw.Reset(c.nc)
	}
	if c.body.remaining.Load() > int64(c.br.Buffered()) {
		// The body is still arriving: no deadline for it (net/http's
		// ReadTimeout is not set either).
		c.nc.SetReadDeadline(time.Time{})
	}
	w := &c.resp
	*w = h1Response{c: c, header: make(http.Header, 8), closeAfter: h.close}
	cancel := c.cancel
	c.cancel = nil
	c.watch.arm(c, cancel)
	c.s.poll.serving(&c.poll, 1)
	defer func() {
		c.s.poll.serving(&c.poll, -1)
		if !c.watch.stop(c) {
			w.closeAfter = true
		}
		cancel(context.Canceled)
	}()
	c.s.handler.ServeHTTP(w, r)
	if err := w.finish(); err != nil {
		return false
	}
	if rem := c.body.remaining.Load(); rem > 0 {
		if rem > maxDiscard || w.closeAfter {
			return false
		}
		if c.s.readHeader > 0 {
			c.nc.SetReadDeadline(time.Now().Add(c.s.readHeader))
		}
		if _, err := c.br.Discard(int(rem)); err != nil {
			return false
		}
	}
	// An answer that went out before Shutdown began did not say
	// Connection: close: the connection stays for its last look
	// (awaitRequest), since the client may already be sending on it.
	return !w.closeAfter
}

// clientWatch notices a client that closes its connection while its request
// runs: after clientWatchDelay a timer goroutine waits for a byte from the
// connection (without taking it: it may be the next pipelined request); an
// error there cancels the request's context.
type clientWatch struct {
	mu      sync.Mutex
	timer   *time.Timer
	state   int // watchOff, watchArmed, watchReading
	stopped bool
	done    chan struct{}
	cancel  context.CancelCauseFunc
	gone    bool
}

const (
	watchOff = iota
	watchArmed
	watchReading
)

func (w *clientWatch) arm(c *h1Conn, cancel context.CancelCauseFunc) {
	w.mu.Lock()
	w.state, w.stopped, w.gone, w.cancel = watchArmed, false, false, cancel
	if w.timer == nil {
		w.timer = time.AfterFunc(clientWatchDelay, func() { w.run(c) })
	} else {
		w.timer.Reset(clientWatchDelay)
	}
	w.mu.Unlock()
}

func (w *clientWatch) run(c *h1Conn) {
	w.mu.Lock()
	if w.state != watchArmed || c.body.remaining.Load() > 0 {
		// The request finished, or its body is still being read (the
		// handler owns the reader until it is consumed).
		w.mu.Unlock()
		return
	}
	w.state = watchReading
	w.done = make(chan struct{})
	cancel, done := w.cancel, w.done
	// The head's deadline is not the request's. Cleared under the lock:
	// stop sets a past deadline after it, never before.
	c.nc.SetReadDeadline(time.Time{})
	w.mu.Unlock()
	_, err := c.br.Peek(1)
	w.mu.Lock()
	if err != nil && !w.stopped {
		w.gone = true
		cancel(errClientGone)
	}
	w.state = watchOff
	w.mu.Unlock()
	close(done)
}

// stop ends the watch when the request is done; false when the client went
// away (or the watch had to be cut off the connection) and it must close.
func (w *clientWatch) stop(c *h1Conn) bool {
	w.mu.Lock()
	w.cancel = nil // a running watch holds its own copy
	switch w.state {
	case watchArmed:
		w.timer.Stop()
		w.state = watchOff
		w.mu.Unlock()
		return true
	case watchReading:
		w.stopped = true
		done := w.done
		w.mu.Unlock()
		c.nc.SetReadDeadline(aLongTimeAgo)
		<-done
		// A read cut by the deadline leaves the buffered reader's error
		// consumed and its bytes intact; the next request sets its own
		// deadline.
		return true
	}
	gone := w.gone
	w.mu.Unlock()
	return !gone
}

// h1Body is a fast-path request body: exactly Content-Length bytes.
type h1Body struct {
	c         *h1Conn
	remaining atomic.Int64
	closed    bool
}

var errBodyClosed = errors.New("http: invalid Read on closed Body")

func (b *h1Body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errBodyClosed
	}
	rem := b.remaining.Load()
	if rem <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := b.c.br.Read(p)
	rem -= int64(n)
	b.remaining.Store(rem)
	if err == io.EOF && rem > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && rem == 0 {
		err = io.EOF
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.closed = true
	return nil
}

// connListener hands connections the fast path gave up on to net/http.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func (l *connListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// bufConn reads what the fast path had buffered before the connection.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) {
	if b.r != nil {
		if b.r.Buffered() > 0 {
			return b.r.Read(p)
		}
		b.r = nil
	}
	return b.Conn.Read(p)
}
