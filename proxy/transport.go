package proxy

import (
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
// bytes nobody asked for (an upstream that writes past its answer never
// hands them to the next request), and speaks HTTP/2 to https upstreams
// that offer it.
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
	idle int // MaxIdleConnsPerHost: the provider's concurrency
	tr   *http.Transport
}

func newUpstreamPool(g *Gateway, idle int) *upstreamPool {
	return &upstreamPool{idle: idle, tr: newUpstreamTransport(g, idle)}
}

func (p *upstreamPool) closeIdle() { p.tr.CloseIdleConnections() }

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

// withReuseGuard is an attempt's context for its upstream request: the
// reuse guard below rides on it. Set before the request is built, so the
// request is not copied again to carry it.
func withReuseGuard(ctx context.Context) context.Context {
	if httptrace.ContextClientTrace(ctx) == nil {
		return httptrace.WithClientTrace(ctx, reuseGuard)
	}
	// WithClientTrace composes the hooks already there into the trace it
	// is given: the shared one must not be that trace.
	g := *reuseGuard
	return httptrace.WithClientTrace(ctx, &g)
}

// roundTrip sends one attempt's request, built on a context from
// withReuseGuard, on its provider's Transport. Redirects are not
// followed: a 3xx is the upstream's answer.
func (p *provRuntime) roundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.pool.tr.RoundTrip(req)
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
// written are refused the same way. Bytes that arrive after the request
// went out cannot be told from its answer on HTTP/1.1; HTTP/2 (https
// upstreams that offer it) frames every answer by stream.
var reuseGuard = &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
	if !info.Reused {
		return
	}
	uc, plain := info.Conn.(*upConn)
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
	}
}}

const (
	settleWaits = 1000
	settleStep  = 100 * time.Microsecond
)

// errUnsolicited is what a reused connection's read returns for bytes that
// arrived before the next request was written.
var errUnsolicited = errors.New("upstream sent bytes on an idle connection")

// upConn is an upstream connection as dialed: it tracks whether the
// Transport is reading from it and whether the request it was handed for
// has been written yet. It does no framing.
type upConn struct {
	net.Conn
	reading atomic.Bool // a Read is blocked on the socket
	closed  atomic.Bool
	handed  atomic.Bool // handed to a request on reuse, not yet written
}

func (c *upConn) settled() bool { return c.reading.Load() || c.closed.Load() }

func (c *upConn) Read(p []byte) (int, error) {
	c.reading.Store(true)
	n, err := c.Conn.Read(p)
	c.reading.Store(false)
	if n > 0 && c.handed.Load() {
		c.Conn.Close()
		return 0, errUnsolicited
	}
	return n, err
}

func (c *upConn) Write(p []byte) (int, error) {
	c.handed.Store(false)
	return c.Conn.Write(p)
}

func (c *upConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}
