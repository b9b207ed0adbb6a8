package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/store"
)

// Memory per held stream (docs/gateway.md "Measuring", target ≤ 64 KiB per
// in-flight request): N SSE streams are held open through the gateway
// (served by Serve, as `breakwater serve` does) against an upstream that
// sent the role chunk and the first content chunk and then stays silent.
// The client and the upstream are raw sockets driven from the benchmark's
// goroutine (no goroutine, no buffer per stream), and the same N streams
// opened straight at the upstream are subtracted, so the figures are the
// gateway's share:
//
//	heap-KiB/stream   live heap (HeapAlloc after two GCs)
//	stack-KiB/stream  goroutine stacks (StackInuse)
//	gor/stream        goroutines
//	rss-KiB/stream    VmRSS once every stream is open, before any forced GC
//	                  (the external figure: live heap + stacks + GC headroom)
//
//	go test -run '^$' -bench HeldStreams -benchtime 1x ./proxy/
//
// rss-KiB/stream is only meaningful on the first iteration (-benchtime 1x):
// later ones reuse the memory the first one made resident. HELD_PROFILE=FILE
// writes the heap (FILE) and goroutine (FILE.gor) profiles while the
// streams are held.
func BenchmarkHeldStreams(b *testing.B) {
	const n = 500
	h := newHeldGateway(b)
	var sum heldPerStream
	for range b.N {
		m := h.measure(b, n, os.Getenv("HELD_PROFILE"))
		sum.heap += m.heap
		sum.stack += m.stack
		sum.rss += m.rss
		sum.gor += m.gor
	}
	b.ReportMetric(sum.heap/float64(b.N), "heap-KiB/stream")
	b.ReportMetric(sum.stack/float64(b.N), "stack-KiB/stream")
	b.ReportMetric(sum.rss/float64(b.N), "rss-KiB/stream")
	b.ReportMetric(sum.gor/float64(b.N), "gor/stream")
	b.ReportMetric(0, "ns/op")
}

// TestHeldStreamHeap pins the live heap a held stream costs the gateway
// (memory per held stream, docs/gateway.md "Measuring": at most 64 KiB).
// Its goroutine stacks are net/http's (the connection's goroutine and its
// background read, the Transport's read and write loops) and are reported,
// not pinned. A build that changes allocations (the race detector) skips
// it; `make unit` runs it in a normal build as well.
func TestHeldStreamHeap(t *testing.T) {
	if opt := frameChangingBuild(); opt != "" {
		t.Skipf("built with %s: allocations are not the release build's", opt)
	}
	h := newHeldGateway(t)
	m := h.measure(t, 100, "")
	t.Logf("per held stream: heap %.1f KiB, stacks %.1f KiB, %.0f goroutines", m.heap, m.stack, m.gor)
	if m.heap > 64 {
		t.Fatalf("live heap per held stream: %.1f KiB, want ≤ 64", m.heap)
	}
}

// frameChangingBuild names a build option of the test binary that changes
// stack frames (the race detector, sanitizers, compiler flags), or "".
func frameChangingBuild() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "-race", "-asan", "-msan":
			if s.Value == "true" {
				return s.Key
			}
		case "-gcflags":
			return "-gcflags=" + s.Value
		}
	}
	return ""
}

type heldGateway struct {
	up     *heldUp
	gwAddr string
}

// newHeldGateway starts a gateway in front of a heldUp and warms it (pools,
// metrics label sets, the engine's state for the route).
func newHeldGateway(tb testing.TB) *heldGateway {
	up := newHeldUp(tb)
	cfgYAML := `
providers:
  - id: mock
    baseURL: http://` + up.ln.Addr().String() + `/v1
    models: [gpt-4o-mini]
    connections:
      - {id: k1, apiKey: bench}
`
	cfg, _, err := ParseConfig("held.yaml", []byte(cfgYAML), nil)
	if err != nil {
		tb.Fatal(err)
	}
	// The store `breakwater serve` opens without store.url (with its
	// request log).
	st := store.NewMemory(store.MemoryOptions{})
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Store: st})
	if err != nil {
		tb.Fatal(err)
	}
	addr := serveLoopback(tb, g)
	tb.Cleanup(func() { g.Shutdown(context.Background()) })
	h := &heldGateway{up: up, gwAddr: addr}
	for range 2 {
		h.up.finish(tb, h.up.open(tb, h.gwAddr, 16))
	}
	return h
}

// heldPerStream is the gateway's share per held stream: KiB, goroutines.
type heldPerStream struct{ heap, stack, rss, gor float64 }

// measure holds n streams straight at the upstream, then n through the
// gateway, and returns the difference per stream.
func (h *heldGateway) measure(tb testing.TB, n int, profile string) heldPerStream {
	up := h.up
	d0 := heldSample(false)
	cs := up.open(tb, up.ln.Addr().String(), n)
	d1 := heldSample(false)
	up.finishDirect(cs)

	s0 := heldSample(false)
	cs = up.open(tb, h.gwAddr, n)
	sRSS := heldSample(true)
	s1 := heldSample(false)
	if profile != "" {
		writeHeldProfiles(tb, profile)
	}
	up.finish(tb, cs)

	per := func(a, z, da, dz uint64) float64 {
		return (float64(z) - float64(a) - (float64(dz) - float64(da))) / float64(n) / 1024
	}
	return heldPerStream{
		heap:  per(s0.heap, s1.heap, d0.heap, d1.heap),
		stack: per(s0.stack, s1.stack, d0.stack, d1.stack),
		rss:   (float64(sRSS.rss) - float64(s0.rss)) / float64(n) / 1024,
		gor:   float64(s1.gor-s0.gor-(d1.gor-d0.gor)) / float64(n),
	}
}

func writeHeldProfiles(tb testing.TB, name string) {
	for _, p := range []struct {
		file, profile string
		debug         int
	}{{name, "heap", 0}, {name + ".gor", "goroutine", 2}} {
		f, err := os.Create(p.file)
		if err != nil {
			tb.Fatal(err)
		}
		pprof.Lookup(p.profile).WriteTo(f, p.debug)
		f.Close()
	}
}

type heldPoint struct {
	heap, stack, rss uint64
	gor              int
}

var heldMemStats runtime.MemStats

// heldSample reads the live heap and stacks after two GCs, or with noGC
// only the resident set as it stands.
func heldSample(noGC bool) heldPoint {
	if !noGC {
		runtime.GC()
		runtime.GC()
	}
	m := &heldMemStats // not a local: 6 KiB of stack
	runtime.ReadMemStats(m)
	return heldPoint{heap: m.HeapAlloc, stack: m.StackInuse, rss: vmRSS(), gor: runtime.NumGoroutine()}
}

// vmRSS is the process's resident set in bytes (0 off Linux).
func vmRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// heldUp is an SSE upstream driven by the caller's goroutine: accept sends
// the response head, the role chunk and one content chunk; finish the rest.
type heldUp struct {
	ln      *net.TCPListener
	br      *bufio.Reader
	scratch []byte
}

type heldStream struct{ client, up net.Conn }

func newHeldUp(tb testing.TB) *heldUp {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	return &heldUp{ln: ln.(*net.TCPListener), br: bufio.NewReader(nil), scratch: make([]byte, 8<<10)}
}

const heldChunk = `{"id":"chatcmpl-held","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_mock","choices":[{"index":0,`

func heldEvent(w io.Writer, s string) {
	ev := "data: " + s + "\n\n"
	fmt.Fprintf(w, "%x\r\n%s\r\n", len(ev), ev)
}

// open holds n streams: each request goes to addr (the gateway, or the
// upstream itself), the upstream answers its head and first content, and
// the client reads up to that content.
func (u *heldUp) open(tb testing.TB, addr string, n int) []heldStream {
	tb.Helper()
	body := `{"model":"mock/gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	cs := make([]heldStream, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := io.WriteString(c, req); err != nil {
			tb.Fatal(err)
		}
		u.ln.SetDeadline(time.Now().Add(10 * time.Second))
		uc, err := u.ln.Accept()
		if err != nil {
			c.SetReadDeadline(time.Now().Add(time.Second))
			got, _ := io.ReadAll(c)
			tb.Fatalf("stream %d: the upstream got no request (%v); the client got %q", len(cs), err, got)
		}
		u.br.Reset(uc)
		r, err := http.ReadRequest(u.br)
		if err != nil {
			tb.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		u.br.Reset(nil)
		bw := bufio.NewWriterSize(uc, 1024)
		io.WriteString(bw, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
		heldEvent(bw, heldChunk+`"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`)
		heldEvent(bw, heldChunk+`"delta":{"content":"tok0 "},"logprobs":null,"finish_reason":null}]}`)
		if err := bw.Flush(); err != nil {
			tb.Fatal(err)
		}
		u.readUntil(tb, c, "tok0")
		cs = append(cs, heldStream{client: c, up: uc})
	}
	return cs
}

// readUntil reads c until what it read contains s.
func (u *heldUp) readUntil(tb testing.TB, c net.Conn, s string) {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := 0
	for !bytes.Contains(u.scratch[:got], []byte(s)) {
		if got == len(u.scratch) {
			tb.Fatalf("no %q in %q", s, u.scratch[:got])
		}
		m, err := c.Read(u.scratch[got:])
		got += m
		if err != nil {
			tb.Fatalf("reading for %q: %v (got %q)", s, err, u.scratch[:got])
		}
	}
}

// finish ends the streams through the gateway: the rest of each stream,
// then the client reads the [DONE] the gateway passes on.
func (u *heldUp) finish(tb testing.TB, cs []heldStream) {
	tb.Helper()
	for _, s := range cs {
		bw := bufio.NewWriterSize(s.up, 1024)
		heldEvent(bw, heldChunk+`"delta":{},"logprobs":null,"finish_reason":"stop"}]}`)
		heldEvent(bw, "[DONE]")
		io.WriteString(bw, "0\r\n\r\n")
		bw.Flush()
		u.readUntil(tb, s.client, "[DONE]")
		s.up.Close()
		s.client.Close()
	}
}

// finishDirect closes streams opened straight at the upstream.
func (u *heldUp) finishDirect(cs []heldStream) {
	for _, s := range cs {
		s.up.Close()
		s.client.Close()
	}
}
