package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
)

// Upstream calls go through net/http's Transport, one per provider, which
// owns the framing: it bounds response heads (MaxResponseHeaderBytes,
// interim 1xx answers included), drops a pooled connection that receives
// bytes nobody asked for, and speaks HTTP/2 to https upstreams that offer
// it. Bytes an HTTP/1.1 upstream writes past its answer that arrive after
// the next request went out on the connection are read as that request's
// answer; the reuse guard below bounds how often that can happen.
//
// A request that was written is never sent again by this layer: every
// retry is the model's decision and counts in the request budget. The
// Transport re-sends a request only when nothing of it reached the
// connection (a kept-alive connection the upstream had closed), or when
// the request is replayable: a POST with a GetBody and an Idempotency-Key
// or X-Idempotency-Key header. The gateway sets neither header; a client's
// passed through (server.passHeaders) comes on a request without GetBody
// (upstreamRequest), which the Transport never replays.

// maxResponseHeaderBytes bounds an upstream's response head.
const maxResponseHeaderBytes = 1 << 20

// upstreamIdleFor closes an idle upstream connection.
const upstreamIdleFor = 90 * time.Second

// upstreamPool is a provider's Transport. It has no ResponseHeaderTimeout:
// the attempt clock bounds the wait for the response head
// (upstreamTimeouts.responseHeaderMs, read per attempt so PATCH applies)
// and names the cause, and a second timer per request in the Transport
// would only cost its allocation and timer-heap work on every attempt.
type upstreamPool struct {
	idle     int // MaxIdleConnsPerHost: the provider's concurrency
	tr       *http.Transport
	g        *Gateway
	provider string
	// caught: the provider's upstream sent bytes outside an answer (see
	// stray); from then on its requests go out on fresh, a copy of tr
	// with keep-alives off, for the pool's life.
	caught atomic.Bool
	fresh  atomic.Pointer[http.Transport]
}

func newUpstreamPool(g *Gateway, provider string, idle int) *upstreamPool {
	p := &upstreamPool{idle: idle, g: g, provider: provider, tr: newUpstreamTransport(g, idle)}
	p.tr.DialContext = p.dial
	return p
}

// dial is the pool's dialer: its connections know their pool, which the
// reuse guard's findings go to.
func (p *upstreamPool) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := p.g.dialUpstream(ctx, network, addr)
	if uc, ok := c.(*upConn); ok {
		uc.pool = p
	}
	return c, err
}

func (p *upstreamPool) closeIdle() { p.tr.CloseIdleConnections() }

// transport is the Transport an attempt goes out on: fresh connections
// once the upstream is known to write outside its answers.
func (p *upstreamPool) transport() *http.Transport {
	if p.caught.Load() {
		return p.fresh.Load()
	}
	return p.tr
}

// stray is the reuse guard's finding that the upstream wrote bytes
// outside an answer on one of the pool's HTTP/1.1 connections. Such bytes
// that arrive after the next request went out on that connection would
// be read as its answer, another client's (HTTP/1.1 cannot tell them
// apart). An upstream that did it once can do it again at any time, so
// the provider's connections are not reused for the pool's life: its idle
// ones are closed and its requests go out on fresh ones. A reload or a
// PUT of the provider (reloadPool) gives it a new pool, once the operator
// has fixed the upstream.
func (p *upstreamPool) stray() {
	if p.fresh.Load() == nil {
		f := p.tr.Clone()
		f.DisableKeepAlives = true
		p.fresh.CompareAndSwap(nil, f)
	}
	if !p.caught.Swap(true) {
		p.g.log.Error("upstream sent bytes outside an answer on a kept-alive connection; its connections are no longer reused (a reload starts over)",
			"provider", p.provider)
	}
	if m := p.g.met; m != nil {
		m.upstreamStray.WithLabelValues(p.provider).Inc()
	}
	go p.tr.CloseIdleConnections() // not on the Transport's read loop, which found it
}

func newUpstreamTransport(g *Gateway, idle int) *http.Transport {
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            g.dialUpstream,
		ForceAttemptHTTP2:      true,
		MaxIdleConnsPerHost:    idle,
		IdleConnTimeout:        upstreamIdleFor,
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		DisableCompression:     true, // pass bodies through as they are
		// Go's default 4 KiB read and write buffers: larger ones cost
		// that much more per held stream and per idle connection.
	}
}

// idleConnsFor sizes a provider's idle upstream connections to its
// concurrency: the sum of its connections' caps, bounded by the
// provider's and the global cap; 1024 when nothing bounds it.
func idleConnsFor(p ProviderConfig, global int) int {
	n := 0
	for _, c := range p.Connections {
		if c.MaxConcurrent <= 0 {
			n = 0
			break
		}
		n += c.MaxConcurrent
	}
	for _, limit := range []int{p.MaxConcurrent, global} {
		if limit > 0 && (n == 0 || limit < n) {
			n = limit
		}
	}
	if n == 0 {
		n = 1024
	}
	return n
}

// roundTrip sends one attempt's request, built on a context from
// withReuseGuard, on its provider's Transport. Redirects are not
// followed: a 3xx is the upstream's answer.
func (p *provRuntime) roundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.pool.transport().RoundTrip(req)
	if err == nil {
		decodeGzip(resp)
	}
	return resp, err
}

// drainAfterDone reads what follows a stream's [DONE] (on HTTP/1.1 the
// chunked body's last chunk, which usually arrives with it or right
// after) so that the Transport sees the body end and keeps the connection
// for the next request. A body closed before its end costs the
// connection: the next request dials (and on https, handshakes) a new
// one. Bounded in bytes and time: an upstream that sends more after
// [DONE], or holds the body open, has its connection closed as before.
func drainAfterDone(body io.ReadCloser) {
	t := time.AfterFunc(drainWait, func() { body.Close() })
	drainBody(body)
	t.Stop()
}

// drainBody reads body to its end, maxDrain bytes at most: io.CopyN
// without its LimitReader allocation (what follows [DONE] is the chunked
// body's last few bytes).
func drainBody(body io.Reader) {
	var buf [256]byte
	for n := 0; n < maxDrain; {
		k, err := body.Read(buf[:min(len(buf), maxDrain-n)])
		n += k
		if err != nil {
			return
		}
	}
}

const (
	drainWait = 10 * time.Millisecond
	maxDrain  = 4 << 10
)

// scrubHeader replaces the connection's key wherever an answer's head
// quotes it: the gateway passes some upstream header values on (the
// Content-Type, X-Request-Id as X-Upstream-Request-Id), and an upstream may
// echo the Authorization it was sent, as error bodies are redacted for.
// A key shorter than minScrubbedKey is left alone: a placeholder such as
// "x" or "none" (a local upstream that checks no key) guards nothing, and
// would be found inside ordinary values ("text/event-stream").
func scrubHeader(h http.Header, secret string) {
	if len(secret) < minScrubbedKey {
		return
	}
	for _, vs := range h {
		for i, v := range vs {
			if strings.Contains(v, secret) {
				vs[i] = strings.ReplaceAll(v, secret, "[redacted]")
			}
		}
	}
}

const minScrubbedKey = 8

// decodeGzip decodes an answer gzip-encoded although the gateway asked for
// no encoding (no Accept-Encoding: the Transport's own decoding is off so
// that a body passes through as it came). Such an answer from a CDN or a
// misconfigured upstream reaches the client decoded, as the JSON or SSE
// the gateway validates and relays; decoded bytes count against the same
// bounds as any body (maxResponseBody, maxErrorBody, maxStreamEvent). Any
// other encoding is left as is, and fails the output validation.
func decodeGzip(resp *http.Response) {
	ce := resp.Header["Content-Encoding"]
	if len(ce) != 1 || !(strings.EqualFold(ce[0], "gzip") || strings.EqualFold(ce[0], "x-gzip")) {
		return
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	resp.Body = &gzipBody{src: resp.Body}
}

// gzipBody reads its source through gzip, opened on the first Read (the
// gzip header is read under the attempt's clock like any body byte).
type gzipBody struct {
	src io.ReadCloser
	zr  *gzip.Reader
	err error
}

func (b *gzipBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.zr == nil {
		if b.zr, b.err = gzip.NewReader(b.src); b.err != nil {
			if b.err == io.EOF {
				b.err = io.ErrUnexpectedEOF // gzip-encoded, and empty
			}
			return 0, b.err
		}
	}
	return b.zr.Read(p)
}

func (b *gzipBody) Close() error { return b.src.Close() }

// Reuse guard. The Transport puts an HTTP/1.1 connection back in its idle
// pool as soon as an answer's body has been read, and only then looks at
// whether bytes nobody asked for wait on it (an upstream that wrote past
// its answer); a request that takes the connection in between reads those
// bytes as its own answer — another client's. So before a reused
// connection carries a request, reuseGuard waits until the Transport has
// looked (its read is blocked on the socket: nothing was waiting) or has
// dropped the connection (then the request, not yet written, goes out on
// a fresh one). Bytes that arrive after that and before the request is
// written are refused the same way.
//
// Bytes that arrive after the request went out cannot be told from its
// answer on HTTP/1.1 (HTTP/2, for https upstreams that offer it, frames
// every answer by stream). What can be told is that the upstream writes
// outside its answers: on a plain http:// connection, bytes other than CR
// and LF that arrive while it sits idle in the pool (its last answer read
// whole, as connWatch reports), bytes the Transport found buffered past
// an answer (it drops the connection without reading on), and an answer
// that does not start with a status line. CR and LF between answers are
// the previous answer's tail and are dropped (upConn.Read). A finding
// stops the reuse of the provider's connections (upstreamPool.stray):
// late bytes reach another request only until the upstream is first
// caught, and on the connections that were already carrying a request
// then.
var reuseGuard = &httptrace.ClientTrace{GotConn: guardConn}

func guardConn(info httptrace.GotConnInfo) {
	uc, plain := info.Conn.(*upConn)
	if !info.Reused {
		if plain {
			uc.take()
		}
		return
	}
	if tc, ok := info.Conn.(*tls.Conn); ok {
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return // framed by stream
		}
		// HTTP/1.1 over TLS: wait for the look the same way; the raw
		// bytes are TLS records (a session ticket may come at any time),
		// so they are not judged.
		uc, _ = tc.NetConn().(*upConn)
	}
	if uc == nil {
		return
	}
	for i := 0; !uc.settled(); i++ {
		if i < 100 {
			runtime.Gosched()
		} else if i < 100+settleWaits {
			time.Sleep(settleStep)
		} else {
			break // the Transport's read loop did not run for settleWaits×settleStep: go on
		}
	}
	if plain {
		uc.handed.Store(true)
		uc.take()
	}
}

const (
	settleWaits = 1000
	settleStep  = 100 * time.Microsecond
)

// connWatch is an attempt's reuse guard on a plain http:// upstream: it
// learns the attempt's connection (GotConn) and tells it when the
// Transport pooled it with the answer read whole (PutIdleConn), from
// which on any byte that arrives is outside an answer. It lives in the
// attempt's attemptRun. On an https upstream it runs the shared guard and
// sees what sendOnce needs; requests outside an attempt use the shared
// reuseGuard.
//
// The hooks do not say which request they are for: when the attempt makes
// more than one request (an embeddings call in batches), a PutIdleConn
// could be another request's, so only a lone request's is believed.
type connWatch struct {
	trace httptrace.ClientTrace
	got   atomic.Int32 // GotConns so far
	uc    *upConn      // the first's connection
	tok   uint64
	// On an https upstream (sendOnce): the request went out over
	// HTTP/2, and all of it was written.
	h2, wrote atomic.Bool
}

// withReuseGuard is an attempt's context for its upstream request, with
// the reuse guard on it (w's for a plain http:// upstream). Set before
// the request is built, so the request is not copied again to carry it.
func withReuseGuard(ctx context.Context, w *connWatch, plain bool) context.Context {
	if plain && w != nil {
		w.trace.GotConn = w.gotConn
		w.trace.PutIdleConn = w.putIdleConn
		return httptrace.WithClientTrace(ctx, &w.trace)
	}
	if w != nil { // an https upstream's attempt: sendOnce's view too
		w.trace.GotConn = w.gotTLSConn
		w.trace.WroteRequest = w.wroteRequest
		return httptrace.WithClientTrace(ctx, &w.trace)
	}
	if httptrace.ContextClientTrace(ctx) == nil {
		return httptrace.WithClientTrace(ctx, reuseGuard)
	}
	// WithClientTrace composes the hooks already there into the trace it
	// is given: the shared one must not be that trace.
	g := *reuseGuard
	return httptrace.WithClientTrace(ctx, &g)
}

func (w *connWatch) gotConn(info httptrace.GotConnInfo) {
	guardConn(info)
	if uc, ok := info.Conn.(*upConn); ok && w.got.Add(1) == 1 {
		w.uc, w.tok = uc, uc.state.Load()
	}
}

// sendOnceTransport is the gateway's own calls' Transport (g.client: the
// models probe, connection tests, spend-wall resets, token counts) with
// each request's sendOnce, so none of them is sent again once written
// over HTTP/2 (a spend-wall reset is good once per window).
type sendOnceTransport struct{ tr *http.Transport }

func (t sendOnceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.GetBody == nil {
		return t.tr.RoundTrip(req)
	}
	w := new(connWatch)
	r := req.WithContext(withReuseGuard(req.Context(), w, false))
	w.sendOnce(r)
	return t.tr.RoundTrip(r)
}

// errSentOnce is what the Transport gets for a written request it would
// send again: the attempt fails as the reset that caused the resend.
var errSentOnce = errors.New("the upstream reset a request it was sent whole; not sent again")

// sendOnce keeps net/http's HTTP/2 transport from sending a written
// request again: it retries a stream the peer reset with PROTOCOL_ERROR
// (and REFUSED_STREAM, GOAWAY) by asking the request for its body again
// (GetBody). Once the whole request went out over HTTP/2, GetBody refuses,
// so the attempt fails and any retry is the model's, in the request's
// budget. Before that, nothing of it reached the upstream, and a resend
// is safe. HTTP/1.1 resends a POST only when nothing of it was written
// (its WroteRequest comes before the flush, so the guard is HTTP/2's
// alone).
func (w *connWatch) sendOnce(req *http.Request) {
	get := req.GetBody
	if get == nil {
		return
	}
	req.GetBody = func() (io.ReadCloser, error) {
		if w.h2.Load() && w.wrote.Load() {
			return nil, errSentOnce
		}
		return get()
	}
}

func (w *connWatch) gotTLSConn(info httptrace.GotConnInfo) {
	guardConn(info)
	if tc, ok := info.Conn.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol == "h2" {
		w.h2.Store(true)
	}
}

func (w *connWatch) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err == nil {
		w.wrote.Store(true)
	}
}

// putIdleConn runs on the Transport's read loop once the answer was read
// whole and the connection pooled.
func (w *connWatch) putIdleConn(err error) {
	if err == nil && w.got.Load() == 1 && w.uc != nil {
		w.uc.answered(w.tok)
	}
}

// errUnsolicited is what a connection's read returns for bytes that
// arrived outside an answer, before a request was written.
var errUnsolicited = errors.New("upstream sent bytes outside an answer")

// upConn is an upstream connection as dialed: it tracks whether the
// Transport is reading from it, and (plain http:// only) whether a
// request holds it and whether that request's answer has begun. It does
// no framing.
type upConn struct {
	net.Conn
	pool    *upstreamPool // nil outside a provider's pool
	reading atomic.Bool   // a Read is blocked on the socket
	closed  atomic.Bool
	handed  atomic.Bool // handed to a request on reuse, not yet written
	// state is 0 until a request on plain HTTP/1.1 takes the connection;
	// then odd while a request holds it (take), and even once the
	// Transport pooled it with the answer read whole (answered): idle.
	state     atomic.Uint64
	peeked    atomic.Bool // a Read began since the connection went idle
	unwritten atomic.Bool // taken by a request, nothing of it written yet
	awaiting  atomic.Bool // a request was written, no byte of its answer read
}

func (c *upConn) settled() bool { return c.reading.Load() || c.closed.Load() }

func idleState(s uint64) bool { return s != 0 && s&1 == 0 }

// take marks the connection held by a request (the odd state after the
// current one: an answered that comes late finds the state moved on).
func (c *upConn) take() {
	for {
		s := c.state.Load()
		if c.state.CompareAndSwap(s, s&^1+3) {
			c.unwritten.Store(true)
			return
		}
	}
}

// answered marks the connection idle, if the request that held it at tok
// still does.
func (c *upConn) answered(tok uint64) {
	c.peeked.Store(false)
	c.state.CompareAndSwap(tok, tok+1)
}

// maxNewlines bounds the CR and LF bytes one Read drops: an upstream that
// sends more between its answers is writing outside them, and the bound
// keeps an endless run from holding the read.
const maxNewlines = 64

func (c *upConn) Read(p []byte) (int, error) {
	for dropped := 0; ; {
		n, err := c.readRaw(p)
		if n == 0 {
			return n, err
		}
		between := c.handed.Load() || idleState(c.state.Load())
		if !between && !c.awaiting.Load() {
			return n, err // the answer, under way
		}
		// Between answers, or where this request's answer starts: CR and
		// LF there are the previous answer's tail, harmless (no answer
		// starts so, and nothing can be taken for one). They are dropped
		// and the connection stays good. Anything else between answers
		// would be read as the next request's answer.
		k := newlines(p[:n])
		if dropped += k; dropped > maxNewlines || (between && k < n) {
			c.Conn.Close()
			if !(between && idle408(p[k:n])) {
				c.found()
			}
			return 0, errUnsolicited
		}
		if k == n {
			if err == nil {
				continue
			}
			return 0, err
		}
		n = copy(p, p[k:n])
		if m := min(n, len(statusLine)); string(p[:m]) != statusLine[:m] {
			// Not an answer either: the previous answer's tail (a body
			// longer than its length). The Transport refuses it.
			c.found()
		}
		c.awaiting.Store(false)
		return n, err
	}
}

// readRaw reads from the socket, noting that a read is under way (and,
// on an idle connection, that the Transport looked).
func (c *upConn) readRaw(p []byte) (int, error) {
	if idleState(c.state.Load()) {
		c.peeked.Store(true)
	}
	c.reading.Store(true)
	n, err := c.Conn.Read(p)
	c.reading.Store(false)
	return n, err
}

// idle408 reports whether b, arriving between answers, is a 408 answer:
// servers and their proxies (HAProxy, Google's front ends) send one on a
// connection they close for being idle. net/http drops such a connection
// quietly; so does the guard, without taking the upstream for one that
// writes outside its answers. The connection is closed all the same.
func idle408(b []byte) bool {
	return bytes.HasPrefix(b, []byte("HTTP/1.1 408")) || bytes.HasPrefix(b, []byte("HTTP/1.0 408"))
}

// newlines is how many CR and LF bytes b starts with.
func newlines(b []byte) int {
	k := 0
	for k < len(b) && (b[k] == '\r' || b[k] == '\n') {
		k++
	}
	return k
}

// statusLine is how every HTTP/1.x answer starts.
const statusLine = "HTTP/"

func (c *upConn) Write(p []byte) (int, error) {
	if !c.unwritten.Load() && idleState(c.state.Load()) {
		// A request that came without the guard (its context had no
		// trace from withReuseGuard): its answer is not outside one.
		c.take()
	}
	if c.unwritten.Load() { // the request's first write (a body may take more)
		c.unwritten.Store(false)
		c.awaiting.Store(true) // before handed goes: a read in between sees one of them
		c.handed.Store(false)
	}
	return c.Conn.Write(p)
}

func (c *upConn) Close() error {
	if !c.closed.Swap(true) && idleState(c.state.Load()) && !c.peeked.Load() {
		// Dropped right after it was pooled, without a read: the
		// Transport found bytes buffered past the answer.
		c.found()
	}
	return c.Conn.Close()
}

// found reports bytes outside an answer to the connection's pool.
func (c *upConn) found() {
	if c.pool != nil {
		c.pool.stray()
	}
}
