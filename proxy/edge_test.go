package proxy

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The edge against hostile peers: each test drives the gateway with a
// raw-TCP upstream or client written here, so the bytes on the wire are
// exactly the hostile ones (a well-kept server or client would refuse to
// send them).

// rawUp is an upstream on raw TCP: serve runs on every accepted connection.
type rawUp struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newRawUp(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *rawUp {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUp{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			go func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for _, c := range u.conns {
			c.Close()
		}
		u.mu.Unlock()
	})
	return u
}

func (u *rawUp) baseURL() string { return "http://" + u.ln.Addr().String() + "/v1" }

// rawGW is a gateway in front of a raw upstream (one provider p, one
// connection c that never cools down), with extra YAML appended; tune, if
// given, adjusts the gateway before it serves.
func rawGW(t *testing.T, u *rawUp, extra string, tune ...func(*Gateway)) *gw {
	t.Helper()
	return rawGWConns(t, u, "[{id: c, apiKey: k, disableCooling: true}]", extra, tune...)
}

// rawGWConns is rawGW with the provider's connections given (YAML flow list).
func rawGWConns(t *testing.T, u *rawUp, conns, extra string, tune ...func(*Gateway)) *gw {
	t.Helper()
	cfg, _, err := ParseConfig("test.yaml", []byte(`
providers:
  - id: p
    baseURL: `+u.baseURL()+`
    models: [m]
    connections: `+conns+`
`+extra), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tune {
		f(g)
	}
	srv := serveGW(t, g)
	t.Cleanup(func() { g.Close(context.Background()) })
	return &gw{t: t, g: g, srv: srv}
}

// readRawRequest reads one request and its body off an upstream connection.
func readRawRequest(br *bufio.Reader) (string, error) {
	r, err := http.ReadRequest(br)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(r.Body)
	return string(b), err
}

func chatAnswerJSON(content string) string {
	return fmt.Sprintf(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, content)
}

func rawAnswer(status int, body string) string {
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", status, http.StatusText(status), len(body), body)
}

var tagPattern = regexp.MustCompile(`tag-[0-9]+-[0-9]+`)

// (1) Bytes an upstream writes after its answer — an unsolicited second
// response, a body longer than its Content-Length, an error answer with
// trailing bytes — never become another request's answer: the Transport
// drops a pooled connection that holds bytes nobody asked for, and the
// reuse guard (transport.go) keeps a request off the connection until it
// has looked. Three clients in tight loops tag their requests and the
// upstream echoes the tag; no client ever gets a tag but its own. On
// failure the upstream's view (connection, order, tag) is logged.
func TestUpstreamBytesAfterAnAnswerNeverReachAnotherClient(t *testing.T) {
	var n atomic.Int64
	var poisoned atomic.Int64
	var logMu sync.Mutex
	var seen []string
	defer func() {
		if t.Failed() {
			logMu.Lock()
			t.Log(strings.Join(seen, "\n"))
			logMu.Unlock()
		}
	}()
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		for {
			body, err := readRawRequest(br)
			if err != nil {
				return
			}
			tag := tagPattern.FindString(body)
			ans := rawAnswer(200, chatAnswerJSON(tag))
			i := n.Add(1)
			logMu.Lock()
			seen = append(seen, fmt.Sprintf("%p i=%d %s", c, i, tag))
			logMu.Unlock()
			switch {
			case i == 5:
				// An error answer with the next answer already behind it.
				ans = rawAnswer(500, `{"error":{"message":"boom"}}`) + ans
				poisoned.Add(1)
			case i%10 == 3:
				// An unsolicited second response.
				ans += rawAnswer(200, chatAnswerJSON(tag))
				poisoned.Add(1)
			case i%10 == 7:
				// A body longer than its Content-Length.
				ans += `,"excess":"` + tag + `"}`
				poisoned.Add(1)
			}
			if _, err := io.WriteString(c, ans); err != nil { // one write: the excess is there when the answer is
				return
			}
		}
	})
	g := rawGW(t, up, testBase)
	const clients, each = 3, 60
	var wg sync.WaitGroup
	var ok, crossed atomic.Int64
	for ci := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tag := fmt.Sprintf("tag-%d-%d", ci, i)
				r := g.do("POST", "/v1/chat/completions", `{"model":"p/m","messages":[{"role":"user","content":"`+tag+`"}]}`)
				for _, got := range tagPattern.FindAllString(r.body, -1) {
					if got != tag {
						crossed.Add(1)
						t.Errorf("client %d sent %s and got another client's answer (%s): %d %s", ci, tag, got, r.code, r.body)
					}
				}
				if r.code == 200 && strings.Contains(r.body, tag) {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if poisoned.Load() == 0 {
		t.Fatal("no answer was poisoned: the test proves nothing")
	}
	if crossed.Load() == 0 && ok.Load() < clients*each*9/10 {
		t.Fatalf("only %d of %d requests served", ok.Load(), clients*each)
	}
}

// (1), late: bytes an upstream writes a little after its answer (here an
// unsolicited second answer, 2 ms later) that arrive once the next request
// went out on the connection cannot be told from that request's answer on
// HTTP/1.1. The reuse guard catches the upstream writing outside its
// answers (bytes on an idle connection, or buffered past an answer) and
// then no connection to it is reused (transport.go): answers may cross
// only until the upstream is first caught. Phase one runs until
// it is caught; phase two, with the upstream poisoning as before, must see
// no crossing at all.
func TestLateUpstreamBytesCrossOnlyUntilCaught(t *testing.T) {
	var n atomic.Int64
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		for {
			body, err := readRawRequest(br)
			if err != nil {
				return
			}
			tag := tagPattern.FindString(body)
			if _, err := io.WriteString(c, rawAnswer(200, chatAnswerJSON(tag))); err != nil {
				return
			}
			if n.Add(1)%10 == 3 {
				time.Sleep(2 * time.Millisecond)
				io.WriteString(c, rawAnswer(200, chatAnswerJSON(tag)))
			}
		}
	})
	g := rawGW(t, up, testBase)
	pool := poolOf(g.g, "p")
	caught := pool.caught.Load
	const clients = 3
	run := func(phase, each int, untilCaught bool) (crossed, served int64) {
		var wg sync.WaitGroup
		var x, ok atomic.Int64
		for ci := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if untilCaught && caught() {
						return
					}
					tag := fmt.Sprintf("tag-%d-%d", ci, phase*1000+i)
					r := g.do("POST", "/v1/chat/completions", `{"model":"p/m","messages":[{"role":"user","content":"`+tag+`"}]}`)
					for _, got := range tagPattern.FindAllString(r.body, -1) {
						if got != tag {
							x.Add(1)
							break
						}
					}
					if r.code == 200 && strings.Contains(r.body, tag) {
						ok.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return x.Load(), ok.Load()
	}
	before, _ := run(1, 200, true)
	if !caught() {
		t.Fatalf("600 requests, every 10th answer followed by another, and the upstream was never caught (%d crossed)", before)
	}
	// Before the first finding a crossing needs the next request written
	// before the upstream's late bytes, and each crossing leaves the
	// victim's own answer late in turn, which is caught when it lands on
	// an idle connection or behind the crossed answer: about one per
	// client in flight then (0-3 seen), bounded here at two per client.
	if before > 2*clients {
		t.Errorf("%d answers crossed before the upstream was caught, want %d at most", before, 2*clients)
	}
	after, served := run(2, 60, false)
	if after != 0 {
		t.Errorf("%d answers reached the wrong client after the upstream was caught", after)
	}
	if served < clients*60*9/10 {
		t.Errorf("only %d of %d requests served after the upstream was caught", served, clients*60)
	}
	if m := g.do("GET", "/metrics", "").body; !strings.Contains(m, `breakwater_upstream_stray_bytes_total{provider="p"}`) {
		t.Error("the finding is not counted in breakwater_upstream_stray_bytes_total")
	}
	t.Logf("crossed %d before the upstream was caught, %d after", before, after)
}

// (2) A POST the upstream read and then reset on a reused connection is
// not sent again by the transport layer: exactly one upstream call per
// model attempt (maxAttempts 1: one call, a typed 502) — also when the
// client's passed-through headers carry an idempotency key, which
// net/http reads as leave to send the request twice.
func TestWrittenRequestIsNeverResent(t *testing.T) {
	for _, key := range []string{"", "Idempotency-Key", "X-Idempotency-Key"} {
		t.Run("key="+key, func(t *testing.T) {
			var calls atomic.Int64
			var reusedReset atomic.Bool
			up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
				for k := 1; ; k++ {
					if _, err := readRawRequest(br); err != nil {
						return
					}
					if calls.Add(1) == 1 {
						io.WriteString(c, rawAnswer(200, chatAnswerJSON("first")))
						continue
					}
					// Read whole, then reset (no answer).
					reusedReset.Store(k > 1)
					c.(*net.TCPConn).SetLinger(0)
					c.Close()
					return
				}
			})
			extra := testBase + "  requestBudget: {maxAttempts: 1}\n"
			var hdr []string
			if key != "" {
				extra = "server: {passHeaders: [" + key + "]}\n" + extra
				hdr = []string{key, "abc"}
			}
			g := rawGW(t, up, extra)
			if r := g.chat("p/m"); r.code != 200 {
				t.Fatalf("first request: %d %s", r.code, r.body)
			}
			r := g.do("POST", "/v1/chat/completions", `{"model":"p/m","messages":[{"role":"user","content":"hi"}]}`, hdr...)
			if r.code != 502 {
				t.Fatalf("after a reset: %d %s, want a typed 502", r.code, r.body)
			}
			if !reusedReset.Load() {
				t.Fatal("the reset request did not come on the kept-alive connection: the test proves nothing")
			}
			if a := r.h.Get("X-Breakwater-Attempts"); a != "1" || calls.Load() != 2 {
				t.Fatalf("upstream calls %d for 1+%s model attempts, want exactly one per attempt", calls.Load(), a)
			}
		})
	}
}

// peakHeap samples the heap while f runs and returns the most it grew.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base, peak := m.HeapAlloc, m.HeapAlloc
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var s runtime.MemStats
		for {
			runtime.ReadMemStats(&s)
			peak = max(peak, s.HeapAlloc)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak - min(peak, base)
}

// (3) An endless upstream header line and a flood of interim 1xx answers
// end the attempt with a typed answer and bounded memory: response heads
// are bounded (1 MiB, interim answers included), and a head that never
// ends is cut by the header timeout.
func TestUpstreamHeadsAreBounded(t *testing.T) {
	t.Run("endless header line", func(t *testing.T) {
		var wrote atomic.Int64
		up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Endless: ")
			chunk := []byte(strings.Repeat("a", 64<<10))
			for wrote.Load() < 64<<20 { // 64 MiB at most, then the test has failed anyway
				if _, err := c.Write(chunk); err != nil {
					return
				}
				wrote.Add(int64(len(chunk)))
			}
		})
		g := rawGW(t, up, testBase+"  requestBudget: {maxAttempts: 1}\n")
		var r resp
		grew := peakHeap(func() { r = g.chat("p/m") })
		if r.code != 502 && r.code != 504 {
			t.Fatalf("endless header line: %d %s, want a typed 502 or 504", r.code, r.body)
		}
		if grew > 32<<20 {
			t.Fatalf("the heap grew %d MiB reading an endless header line", grew>>20)
		}
		t.Logf("answer %d after %d KiB sent; heap grew %d KiB", r.code, wrote.Load()>>10, grew>>10)
	})
	t.Run("10000 interim answers", func(t *testing.T) {
		up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			bw := bufio.NewWriter(c)
			for range 10000 {
				bw.WriteString("HTTP/1.1 102 Processing\r\n\r\n")
			}
			bw.Flush()
			io.Copy(io.Discard, c) // then nothing more: held until the gateway gives up
		})
		g := rawGW(t, up, testBase+"  requestBudget: {maxAttempts: 1}\n  upstreamTimeouts: {responseHeaderMs: 500}\n")
		var r resp
		grew := peakHeap(func() { r = g.chat("p/m") })
		if r.code != 502 && r.code != 504 {
			t.Fatalf("10000 interim answers: %d %s, want a typed 502 or 504", r.code, r.body)
		}
		if grew > 32<<20 {
			t.Fatalf("the heap grew %d MiB over 10000 interim answers", grew>>20)
		}
	})
}

// (4) A stray CRLF after an upstream body does not cost the next client
// anything: the Transport drops the connection that holds it, the next
// request is served on its first attempt, and nothing is charged to the
// provider.
func TestStrayCRLFAfterABodyCostsTheNextClientNothing(t *testing.T) {
	var conns atomic.Int64
	closed := make(chan struct{}, 4)
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		conns.Add(1)
		defer func() { closed <- struct{}{} }()
		for {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			io.WriteString(c, rawAnswer(200, chatAnswerJSON("hello"))+"\r\n")
		}
	})
	g := rawGW(t, up, testBase)
	if r := g.chat("p/m"); r.code != 200 {
		t.Fatalf("first request: %d %s", r.code, r.body)
	}
	select {
	case <-closed: // the gateway dropped the connection with the stray bytes
	case <-time.After(10 * time.Second):
		t.Fatal("the connection holding a stray CRLF was kept")
	}
	r := g.chat("p/m")
	if r.code != 200 || r.h.Get("X-Breakwater-Attempts") != "1" {
		t.Fatalf("the next client: %d attempts %s %s, want 200 on its first attempt", r.code, r.h.Get("X-Breakwater-Attempts"), r.body)
	}
	noAttemptCharged(t, g)
	if conns.Load() != 2 {
		t.Fatalf("%d upstream connections, want 2 (the one with the stray bytes dropped)", conns.Load())
	}
}

// lateBytesUp is a raw upstream that follows every answer, 2 ms later,
// with tail: bytes that belong to no answer.
func lateBytesUp(t *testing.T, tail string) *rawUp {
	return newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			if _, err := io.WriteString(c, rawAnswer(200, chatAnswerJSON("hello"))); err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
			io.WriteString(c, tail)
		}
	})
}

// (4), late and back to back: the stray CRLF comes 2 ms after the answer,
// and each client sends as soon as the one before was answered, so the
// CRLF lands on an idle connection, on one handed to the next request, or
// after that request went out, just before its answer. No answer starts
// with CR or LF: the reuse guard drops them there (transport.go). Every
// client is served on its first attempt and nothing is charged to the
// provider.
func TestLateStrayCRLFCostsTheNextClientsNothing(t *testing.T) {
	up := lateBytesUp(t, "\r\n")
	g := rawGW(t, up, testBase)
	for i := range 50 {
		r := g.chat("p/m")
		if r.code != 200 || r.h.Get("X-Breakwater-Attempts") != "1" {
			t.Fatalf("client %d: %d attempts %s %s, want 200 on its first attempt", i, r.code, r.h.Get("X-Breakwater-Attempts"), r.body)
		}
	}
	noAttemptCharged(t, g)
}

// (4), the connection: a CRLF that arrives after the answer was read whole
// (here: once the client has it, so it is never read with the answer) is
// dropped by the reuse guard, on the idle connection or ahead of the next
// answer, and the connection stays in use: one upstream connection for 50
// requests, and the upstream is not taken for one that writes outside its
// answers.
func TestStrayCRLFBetweenAnswersKeepsTheConnection(t *testing.T) {
	var conns atomic.Int64
	answered := make(chan struct{})
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		conns.Add(1)
		for {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			if _, err := io.WriteString(c, rawAnswer(200, chatAnswerJSON("hello"))); err != nil {
				return
			}
			<-answered
			io.WriteString(c, "\r\n")
		}
	})
	g := rawGW(t, up, testBase)
	for i := range 50 {
		r := g.chat("p/m")
		if r.code != 200 || r.h.Get("X-Breakwater-Attempts") != "1" {
			t.Fatalf("client %d: %d attempts %s %s, want 200 on its first attempt", i, r.code, r.h.Get("X-Breakwater-Attempts"), r.body)
		}
		answered <- struct{}{} // the upstream writes its CRLF now
	}
	noAttemptCharged(t, g)
	if poolOf(g.g, "p").caught.Load() {
		t.Error("CRLF between answers was taken for bytes outside an answer")
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d upstream connections for 50 requests, want 1 (kept across the CRLFs)", n)
	}
}

// An endless run of CR and LF between answers is not a tail: past
// maxNewlines the reuse guard takes it for bytes outside an answer, drops
// the connection and stops reusing the upstream's; the next client is
// served on a fresh connection.
func TestEndlessNewlinesBetweenAnswersAreCaught(t *testing.T) {
	answered := make(chan struct{})
	var first atomic.Bool
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err != nil {
			return
		}
		io.WriteString(c, rawAnswer(200, chatAnswerJSON("hello")))
		if first.Swap(true) {
			return // the fresh connection after the catch
		}
		<-answered
		for range 1000 {
			if _, err := io.WriteString(c, "\r\n"); err != nil {
				return
			}
		}
		readRawRequest(br) // until the gateway drops the connection
	})
	g := rawGW(t, up, testBase)
	pool := poolOf(g.g, "p")
	if r := g.chat("p/m"); r.code != 200 {
		t.Fatalf("first request: %d %s", r.code, r.body)
	}
	answered <- struct{}{}
	eventually(t, "the upstream caught for an endless run of newlines", pool.caught.Load)
	if r := g.chat("p/m"); r.code != 200 || r.h.Get("X-Breakwater-Attempts") != "1" {
		t.Fatalf("the next client: %d attempts %s %s, want 200 on its first attempt", r.code, r.h.Get("X-Breakwater-Attempts"), r.body)
	}
}

// A 408 an upstream (or the proxy in front of it) sends on a connection
// it closes for being idle is not bytes outside an answer: the guard drops
// that connection, as net/http does, without stopping the provider's reuse,
// and the next client is served on its first attempt.
func TestIdle408ClosesTheConnectionOnly(t *testing.T) {
	answered, dropped := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			io.WriteString(c, rawAnswer(200, chatAnswerJSON("hello")))
			if first.Swap(true) {
				continue // later connections behave
			}
			<-answered
			io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			io.Copy(io.Discard, c) // until the gateway drops the connection
			close(dropped)
			return
		}
	})
	g := rawGW(t, up, testBase)
	if r := g.chat("p/m"); r.code != 200 {
		t.Fatalf("first request: %d %s", r.code, r.body)
	}
	answered <- struct{}{}
	select { // the 408 on the idle connection (one that lands after the next request went out is that request's answer: HTTP/1.1)
	case <-dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway kept the connection that sent an idle 408")
	}
	pool := poolOf(g.g, "p")
	for i := range 5 {
		if r := g.chat("p/m"); r.code != 200 || r.h.Get("X-Breakwater-Attempts") != "1" {
			t.Fatalf("client %d after the idle 408: %d attempts %s %s", i, r.code, r.h.Get("X-Breakwater-Attempts"), r.body)
		}
	}
	if pool.caught.Load() {
		t.Fatal("an idle 408 was taken for bytes outside an answer")
	}
	noAttemptCharged(t, g)
}

// noAttemptCharged fails t if the provider was charged an attempt that did
// not answer 200.
func noAttemptCharged(t *testing.T, g *gw) {
	t.Helper()
	m := g.do("GET", "/metrics", "").body
	for l := range strings.SplitSeq(m, "\n") {
		if strings.HasPrefix(l, "breakwater_upstream_attempts_total{") && !strings.Contains(l, `result="200"`) {
			t.Fatalf("an attempt was charged to the provider: %s", l)
		}
	}
}

// (4), other late bytes: an upstream whose answers are each followed, 2 ms
// later, by more body bytes (a body longer than its Content-Length) makes
// the next request on the connection read them where its answer's status
// line should be. That request fails (the upstream wrote it), but the
// upstream is caught on the first such answer: from then on its requests
// go out on fresh connections and every client is served.
func TestLateExcessBodyBytesAreCaughtOnce(t *testing.T) {
	up := lateBytesUp(t, `,"excess":1}`)
	g := rawGW(t, up, testBase+"  requestBudget: {maxAttempts: 1}\n")
	pool := poolOf(g.g, "p")
	failed := 0
	for i := 0; i < 40 && !pool.caught.Load(); i++ {
		if r := g.chat("p/m"); r.code != 200 {
			failed++
		}
	}
	if !pool.caught.Load() {
		t.Fatal("40 answers each followed by excess bytes, and the upstream was never caught")
	}
	if m := g.do("GET", "/metrics", "").body; !strings.Contains(m, `breakwater_upstream_reuse_off{provider="p"} 1`) {
		t.Error("the caught provider is not shown in breakwater_upstream_reuse_off")
	}
	if failed > 1 {
		t.Errorf("%d clients failed before the upstream was caught, want one at most", failed)
	}
	for i := range 20 {
		if r := g.chat("p/m"); r.code != 200 {
			t.Fatalf("client %d after the upstream was caught: %d %s", i, r.code, r.body)
		}
	}
}

// (5) A request head sent a byte at a time is closed at the header
// timeout (Options.ReadHeaderTimeout, 1 s here), not held past it: not
// before it (the server's deadline starts after the dial), and well
// within twice it, while the client is still sending its head a byte
// every 50 ms.
func TestSlowHeadIsClosedAtReadHeaderTimeout(t *testing.T) {
	const timeout = time.Second
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {})
	cfg, _, err := ParseConfig("test.yaml", []byte("providers:\n  - id: p\n    baseURL: "+up.baseURL()+"\n    models: [m]\n    connections: [{id: c, apiKey: k}]\n"+testBase), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Seed: 1, ReadHeaderTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	srv := serveGW(t, g)
	// Taken before the dial: the server's header deadline starts once it
	// has accepted the connection, never before this.
	start := time.Now()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Padding: " +
		strings.Repeat("p", 100) + "\r\nContent-Length: 2\r\n\r\n"
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		io.Copy(io.Discard, c) // returns when the gateway closes the connection
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < len(head); i++ {
		select {
		case <-gone:
			took := time.Since(start)
			if took < timeout {
				t.Fatalf("closed after %v, before the header timeout %v", took, timeout)
			}
			if took > 2*timeout {
				t.Fatalf("closed after %v with %d head bytes sent, past twice the header timeout %v", took, i, timeout)
			}
			t.Logf("closed after %v with %d of %d head bytes sent", took, i, len(head))
			return
		case <-tick.C:
		}
		c.Write([]byte{head[i]})
	}
	t.Fatalf("the whole head was accepted a byte every 50 ms over %v (header timeout %v)", time.Since(start), timeout)
}

// (6) A client that hangs up while its request runs is noticed at once,
// even when its body arrived well after its head: the request is
// cancelled (499) and the upstream call ends.
func TestClientHangingUpAfterALateBodyIsCancelled(t *testing.T) {
	upGone := make(chan struct{})
	got := make(chan struct{}, 1)
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err != nil {
			return
		}
		got <- struct{}{}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br.ReadByte() // returns when the gateway ends the call
		close(upGone)
	})
	g := rawGW(t, up, testBase)
	c, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"p/m","messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	time.Sleep(100 * time.Millisecond) // the body comes well after the head
	io.WriteString(c, body)
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	c.Close()
	select {
	case <-upGone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream call went on after the client hung up")
	}
	eventually(t, "a 499 in the metrics", func() bool {
		return strings.Contains(g.do("GET", "/metrics", "").body, `breakwater_requests_total{connection="c",provider="p",status="499"} 1`)
	})
}

// (7) Bodies declared at the limit and never sent cost what arrived, not
// what was declared, and end at the body deadline with a typed 408: 20
// connections declaring 16 MiB and sending one byte.
func TestDeclaredBodiesCostWhatArrives(t *testing.T) {
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {})
	g := rawGW(t, up, "server: {maxBodyBytes: 16777216}\n"+testBase, func(g *Gateway) { g.bodyReadTimeout = time.Second })
	const n = 20
	cs := make([]net.Conn, n)
	var grew uint64
	grew = peakHeap(func() {
		for i := range cs {
			c, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			cs[i] = c
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 16<<20)
		}
		eventually(t, "every body being read", func() bool { return g.g.active.Load() == n })
	})
	if grew > 32<<20 {
		t.Fatalf("the heap grew %d MiB for %d bodies declared at 16 MiB with 1 byte sent", grew>>20, n)
	}
	for i, c := range cs {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("connection %d: no answer at the body deadline: %v", i, err)
		}
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 408 {
			t.Fatalf("connection %d: %d %s, want 408", i, res.StatusCode, b)
		}
		if _, err := br.ReadByte(); err == nil {
			t.Fatalf("connection %d stayed open after its 408", i)
		}
		c.Close()
	}
	t.Logf("heap grew %d KiB for %d connections", grew>>10, n)
}

// (8) A key set at run time with a control character is refused (400
// naming the field) and never reaches an upstream; the config file's is a
// config error naming the field.
func TestKeysWithControlCharactersAreRefused(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	r := admin(g, "PUT", "/api/providers/glm", `{"connections":[{"id":"k1","apiKey":"new\r\nX-Injected: 1"}]}`)
	if r.code != 400 || !strings.Contains(r.body, "connections[0].apiKey") || !strings.Contains(r.body, "control character") {
		t.Fatalf("PUT with a control character in apiKey: %d %s, want 400 naming the field", r.code, r.body)
	}
	if strings.Contains(r.body, "X-Injected") {
		t.Fatalf("the answer quotes the key: %s", r.body)
	}
	if c := g.chat("glm/glm-5"); c.code != 200 || up.count("glm-k1") == 0 {
		t.Fatalf("the old key no longer serves: %d %s", c.code, c.body)
	}

	_, _, err := ParseConfig("test.yaml", []byte("providers:\n  - id: p\n    baseURL: http://x/v1\n    models: [m]\n    connections:\n      - {id: c, apiKey: \"k\\x01ey\"}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "providers[0].connections[0].apiKey") || !strings.Contains(err.Error(), "control character") {
		t.Fatalf("config with a control character in apiKey: %v, want an error naming the field", err)
	}
	if strings.Contains(err.Error(), "k\x01ey") {
		t.Fatalf("the config error quotes the key: %v", err)
	}
}

// Shutdown ends an idle kept-alive connection and one whose next request
// head is half sent at once (the header timeout does not hold the exit),
// and returns.
func TestShutdownEndsIdleAndHalfSentConnections(t *testing.T) {
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			io.WriteString(c, rawAnswer(200, chatAnswerJSON("hello")))
		}
	})
	g := rawGW(t, up, testBase)
	body := `{"model":"p/m","messages":[{"role":"user","content":"hi"}]}`
	var brs []*bufio.Reader
	for _, half := range []bool{false, true} {
		c, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("first request: %v %v", res, err)
		}
		io.Copy(io.Discard, res.Body)
		if half {
			io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		brs = append(brs, br)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.g.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with an idle and a half-sent connection: %v", err)
	}
	for i, br := range brs {
		if _, err := br.ReadByte(); err == nil {
			t.Fatalf("connection %d was not ended", i)
		}
	}
}

// The shared reuse guard is never the trace another one is composed into
// (an attempt that already carries a trace, as the egress-IP probe's): its
// hooks stay its own for every other request.
func TestReuseGuardStaysShared(t *testing.T) {
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err == nil {
			io.WriteString(c, rawAnswer(200, chatAnswerJSON("hello")))
		}
	})
	g := rawGW(t, up, testBase)
	wrote := false
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote = true }})
	req, _ := http.NewRequestWithContext(ctx, "POST", up.baseURL()+"/chat/completions", strings.NewReader("{}"))
	res, err := g.g.provider("p").roundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if !wrote {
		t.Fatal("the attempt's own trace was not called")
	}
	if reuseGuard.WroteRequest != nil {
		t.Fatal("the shared reuse guard took another trace's hooks")
	}
}

// A body trickled to a handler that reads none itself (here an unknown
// path, whose unread body net/http drains) is bounded by the server's read
// timeout, not held for as long as the client keeps sending.
func TestTrickledBodyElsewhereIsBounded(t *testing.T) {
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {})
	g := rawGW(t, up, testBase, func(g *Gateway) { g.srv.ReadTimeout = time.Second })
	c, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		io.Copy(io.Discard, c)
	}()
	for i := 0; i < 40; i++ { // 40 bytes over 10 s at most
		select {
		case <-gone:
			return
		case <-time.After(250 * time.Millisecond):
		}
		if _, err := c.Write([]byte{'x'}); err != nil {
			return
		}
	}
	t.Fatal("a trickled body was read for 10 s with a 1 s read timeout")
}

// A stream runs past the server's read timeout and the body deadline: once
// the chat body has been read to its end, net/http clears the read
// deadline as it starts watching for the client going away, so neither
// cuts the stream.
func TestLongStreamOutlivesTheReadTimeout(t *testing.T) {
	up := newFakeUp(t)
	up.set("k", sse(streamOpt{chunks: 15, interval: 100 * time.Millisecond}))
	cfg, _, err := ParseConfig("test.yaml", []byte(`
providers:
  - id: p
    baseURL: `+up.url()+`
    models: [m]
    connections: [{id: c, apiKey: k}]
`+testBase), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	g.srv.ReadTimeout = 500 * time.Millisecond
	g.bodyReadTimeout = 500 * time.Millisecond
	srv := serveGW(t, g)
	t.Cleanup(func() { g.Close(context.Background()) })
	res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"p/m","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), "tok14") || !strings.Contains(string(b), "[DONE]") {
		t.Fatalf("a 1.5 s stream with 0.5 s read and body timeouts: %d %s", res.StatusCode, b)
	}
}

// An upstream's final status that is neither an answer nor an error — a
// redirect, 101 Switching Protocols, 304, a status of 600 and up — reaches
// the client as 502 upstream_bad_status naming it (and a redirect's scheme
// and host, never the rest of its Location), not relayed: a 101 would tell
// the client its connection switched protocols, a 307 without its Location
// leaves the client nothing to act on. The redirect is not followed.
func TestUnrelayableUpstreamStatusIsA502(t *testing.T) {
	answers := []string{
		"HTTP/1.1 307 Temporary Redirect\r\nLocation: https://api.example.com/v1/chat/completions?key=sk-echoed\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 301 Moved Permanently\r\nLocation: https://api.example.com/v1/chat/completions\r\nContent-Type: application/json\r\nContent-Length: 29\r\n\r\n{\"error\":{\"message\":\"moved\"}}",
		"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: evil\r\n\r\n{\"error\":{\"message\":\"x\"}}",
		"HTTP/1.1 304 Not Modified\r\n\r\n",
		rawAnswer(999, chatAnswerJSON("not an answer")),
	}
	var n atomic.Int64
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			a := answers[int(n.Add(1)-1)%len(answers)]
			io.WriteString(c, a)
			if strings.Contains(a, " 101 ") {
				return // the upgraded "protocol" ends at once
			}
		}
	})
	g := rawGW(t, up, `
resilience:
  requestBudget: {maxAttempts: 1}
  waitForCooldown: {enabled: false}
`)
	for i, want := range []string{"307 Temporary Redirect; the gateway does not follow redirects (it points to https://api.example.com",
		"301 Moved Permanently; the gateway does not follow redirects", "101 Switching Protocols", "304 Not Modified", "999"} {
		r := g.chat("p/m")
		if r.code != http.StatusBadGateway || r.errCode() != "upstream_bad_status" || !strings.Contains(r.body, want) {
			t.Fatalf("answer %d: %d %s, want 502 upstream_bad_status naming %q", i, r.code, r.body, want)
		}
		if strings.Contains(r.body, "sk-echoed") || strings.Contains(r.body, "chat/completions") {
			t.Fatalf("answer %d shows the Location past its host: %s", i, r.body)
		}
	}
	if got := n.Load(); got != int64(len(answers)) {
		t.Fatalf("%d upstream calls, want %d (a redirect is not followed)", got, len(answers))
	}
}

// A stream event is bounded (maxStreamEvent), as an upstream head is: an
// endless data line, endless lines without the blank line that ends an
// event, or endless metadata events before any content end the attempt
// with a typed answer — a 502 before commit, the stream's error event
// after — and the heap grows by a bounded amount, not by what the
// upstream sends.
func TestStreamEventsAreBounded(t *testing.T) {
	const sent = 128 << 20 // the upstream stops here; without a bound the heap grows past it
	first := "data: " + `{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n"
	role := "data: " + `{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"}}]}` + "\n\n"
	for _, tc := range []struct {
		name, prefix, repeat string
		committed            bool
	}{
		{"endless line after content", first + "data: ", strings.Repeat("a", 64<<10), true},
		{"endless line before any event", "data: ", strings.Repeat("a", 64<<10), false},
		{"endless lines in one event", "", strings.Repeat("data: a\n", 8<<10), false},
		{"endless metadata before content", "", strings.Repeat(role, 512), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := readRawRequest(br); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"+tc.prefix)
				chunk := []byte(tc.repeat)
				for n := 0; n < sent; n += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			})
			g := rawGW(t, up, testBase+"  requestBudget: {maxAttempts: 1}\n")
			var r resp
			grew := peakHeap(func() { r = g.stream("p/m") })
			if tc.committed {
				ev := sseEvents(r.body)
				if r.code != 200 || len(ev) == 0 || !strings.Contains(ev[len(ev)-1], "stream event over") {
					t.Fatalf("%d %q, want the stream's error event naming the bound", r.code, ev)
				}
			} else if r.code != 502 {
				t.Fatalf("%d %s, want a typed 502", r.code, r.body)
			}
			if grew > 96<<20 {
				t.Fatalf("the heap grew %d MiB reading one unbounded stream event", grew>>20)
			}
			t.Logf("%d; heap grew %d MiB", r.code, grew>>20)
		})
	}
}

// An answer gzip-encoded although the gateway asked for no encoding (a CDN
// in front of an upstream does this) reaches the client decoded: a JSON
// answer, a stream and an error body alike, never the compressed bytes
// under a Content-Encoding the client did not ask for. Another encoding the
// gateway cannot decode fails the output validation (502), not relayed.
func TestGzipAnswersReachTheClientDecoded(t *testing.T) {
	gz := func(s string) string {
		var b strings.Builder
		zw := gzip.NewWriter(&b)
		io.WriteString(zw, s)
		zw.Close()
		return b.String()
	}
	head := func(status int, ct, ce string, body string) string {
		return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s", status, http.StatusText(status), ct, ce, len(body), body)
	}
	stream := "data: " + `{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"zipped"}}]}` + "\n\ndata: [DONE]\n\n"
	errBody := `{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limited"}}`
	answers := []string{
		head(200, "application/json", "gzip", gz(chatAnswerJSON("zipped"))),
		head(200, "text/event-stream", "x-gzip", gz(stream)),
		head(429, "application/json", "gzip", gz(errBody)),
		head(200, "application/json", "br", chatAnswerJSON("zipped")), // not brotli: refused before it is read
	}
	var n atomic.Int64
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			io.WriteString(c, answers[int(n.Add(1)-1)%len(answers)])
		}
	})
	g := rawGW(t, up, testBase+"  requestBudget: {maxAttempts: 1}\n")
	if r := g.chat("p/m"); r.code != 200 || !strings.Contains(r.body, `"zipped"`) || r.h.Get("Content-Encoding") != "" {
		t.Fatalf("gzip JSON answer: %d %q %s, want it decoded", r.code, r.h.Get("Content-Encoding"), r.body)
	}
	if r := g.stream("p/m"); r.code != 200 || !strings.Contains(r.body, `"zipped"`) || !strings.Contains(r.body, "[DONE]") {
		t.Fatalf("gzip stream: %d %s, want it decoded", r.code, r.body)
	}
	if r := g.chat("p/m"); r.code != 429 || !strings.Contains(r.body, "slow down") {
		t.Fatalf("gzip error body: %d %s, want the 429 with its message", r.code, r.body)
	}
	if r := g.chat("p/m"); r.code != 502 || strings.Contains(r.body, `"zipped"`) {
		t.Fatalf("br answer: %d %s, want 502 (an encoding the gateway does not decode)", r.code, r.body)
	}
}

// A management body that fails other than by its size gets the answer for
// what happened — a broken chunked framing is a 400, a client gone before
// its body ended a 499 — not "413 body exceeds": only a body past
// maxManagementBody is a 413.
func TestManagementBodyFailuresAreNamed(t *testing.T) {
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {})
	g := rawGW(t, up, testBase)
	send := func(req string, halfClose bool) string {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, req)
		if halfClose {
			c.(*net.TCPConn).CloseWrite()
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		b, _ := io.ReadAll(res.Body)
		return fmt.Sprintf("%d %s", res.StatusCode, b)
	}
	head := "PATCH /api/resilience HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	if got := send(head+"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", false); !strings.HasPrefix(got, "400 ") || !strings.Contains(got, "chunk") {
		t.Fatalf("broken chunked body: %s, want 400 naming the framing", got)
	}
	if got := send(head+"Content-Length: 100\r\n\r\n{\"a\":", true); !strings.HasPrefix(got, "499 ") {
		t.Fatalf("client gone mid-body: %s, want 499", got)
	}
	big := strings.Repeat(" ", maxManagementBody) + "{}"
	if got := send(head+"Transfer-Encoding: chunked\r\n\r\n"+fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big), false); !strings.HasPrefix(got, "413 ") {
		t.Fatalf("chunked body past the limit: %s, want 413", got)
	}
}

// An upstream answer's declared Content-Length reserves at most
// firstAnswerBuffer before its body arrives, as a client body's does:
// answers that declare 60 MiB and send one byte cost what arrived.
// Counted in bytes allocated (TotalAlloc), not sampled.
func TestDeclaredAnswersCostWhatArrives(t *testing.T) {
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err != nil {
			return
		}
		// Then the connection closes: the answer is cut short.
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 60<<20)
	})
	g := rawGW(t, up, testBase+"  requestBudget: {maxAttempts: 1}\n")
	const n = 10
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		if r := g.chat("p/m"); r.code != 502 {
			t.Fatalf("answer %d: %d %s, want 502 (cut short)", i, r.code, r.body)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Fatalf("%d answers declaring 60 MiB with 1 byte sent allocated %d MiB", n, got>>20)
	}
}

// A client that keeps its connection open and reads nothing does not hold
// its slot past the attempt's cut: the upstream streams until the
// gateway's write to the client blocks, the stall watchdog cuts the
// attempt, and the blocked write fails clientWriteGrace later, ending the
// request (the client's abort) and freeing the slot.
func TestClientThatReadsNothingFreesItsSlot(t *testing.T) {
	ev := "data: " + `{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("z", 4000) + `"}}]}` + "\n\n"
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
		for range 16 << 10 { // 64 MiB at most: far past every buffer on the way
			if _, err := io.WriteString(c, ev); err != nil {
				return
			}
		}
		io.Copy(io.Discard, c)
	})
	g := rawGW(t, up, `
resilience:
  requestBudget: {maxAttempts: 1}
  waitForCooldown: {enabled: false}
  upstreamTimeouts: {streamIdleMs: 300}
`, func(g *Gateway) { g.clientWriteGrace = 300 * time.Millisecond })
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"p/m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	eventually(t, "the stream to start", func() bool { return g.g.active.Load() == 1 })
	// Read nothing; the connection stays open.
	eventually(t, "the request of a client that reads nothing to end", func() bool { return g.g.active.Load() == 0 })
}

// A cut attempt's write deadline does not outlive the attempt: the first
// attempt's stream stalls before any content and is cut; the retry (on the
// sibling connection: a stalled one is never tried again in the request,
// docs/catalogue.md) streams to the same client for longer than
// clientWriteGrace, and every event reaches it.
func TestCutAttemptLeavesTheNextOneUnbounded(t *testing.T) {
	var n atomic.Int64
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
		if n.Add(1) == 1 {
			io.Copy(io.Discard, c) // then silent: the watchdog cuts it
			return
		}
		for i := range 8 {
			time.Sleep(100 * time.Millisecond)
			fmt.Fprintf(c, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
		}
		io.WriteString(c, "data: [DONE]\n\n")
	})
	g := rawGWConns(t, up, "[{id: c, apiKey: k, disableCooling: true}, {id: c2, apiKey: k2, disableCooling: true}]", `
resilience:
  requestBudget: {maxAttempts: 2}
  waitForCooldown: {enabled: false}
  upstreamTimeouts: {streamIdleMs: 300, firstContentMs: 300}
`, func(g *Gateway) { g.clientWriteGrace = 200 * time.Millisecond })
	r := g.stream("p/m")
	if r.code != 200 || !strings.Contains(r.body, "t7") || !strings.Contains(r.body, "[DONE]") {
		t.Fatalf("%d attempts %s: %s, want the retry's whole stream", r.code, r.h.Get("X-Breakwater-Attempts"), r.body)
	}
	if n.Load() != 2 {
		t.Fatalf("%d upstream calls, want 2 (the stalled one, then the retry)", n.Load())
	}
}

// A new user's two config slips are config errors naming the field, not
// a gateway that starts and then fails every request: a baseURL that
// already ends in /chat/completions (the gateway appends it; every call
// would go to .../chat/completions/chat/completions), also refused by PUT
// /api/providers; and a maxBodyBytes past 1 GiB, which bounds nothing.
func TestNewUserConfigSlipsAreNamed(t *testing.T) {
	for _, tc := range []struct{ yaml, field, want string }{
		{"providers:\n  - id: p\n    baseURL: https://api.example.com/v1/chat/completions/\n    models: [m]\n    connections: [{id: c, apiKey: k}]\n",
			"providers[0].baseURL", "without /chat/completions"},
		{"server: {maxBodyBytes: 99999999999999}\nproviders:\n  - id: p\n    baseURL: http://x/v1\n    models: [m]\n    connections: [{id: c, apiKey: k}]\n",
			"server.maxBodyBytes", "at most 1073741824"},
	} {
		_, _, err := ParseConfig("test.yaml", []byte(tc.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want an error naming %s: %s", tc.field, err, tc.field, tc.want)
		}
	}
	if _, _, err := ParseConfig("test.yaml", []byte("server: {maxBodyBytes: 1073741824}\nproviders:\n  - id: p\n    baseURL: http://x/v1/chat\n    models: [m]\n    connections: [{id: c, apiKey: k}]\n"), nil); err != nil {
		t.Fatalf("a 1 GiB limit and a base URL ending in /chat: %v, want accepted", err)
	}
	g := newGW(t, newFakeUp(t), mgmtConfig, "ADMIN=s3cret")
	if r := admin(g, "PUT", "/api/providers/glm", `{"baseURL":"https://api.example.com/v1/chat/completions"}`); r.code != 400 || !strings.Contains(r.body, "without /chat/completions") {
		t.Fatalf("PUT with a baseURL ending in /chat/completions: %d %s, want 400", r.code, r.body)
	}
}

// The connection test (POST /api/providers/{id}/test) reads a gzip
// answer decoded and names where a redirect points, as an attempt does:
// "upstream answered 301" alone leaves a new user guessing at the baseURL.
func TestConnectionTestNamesRedirectsAndReadsGzip(t *testing.T) {
	var n atomic.Int64
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			if n.Add(1) == 1 {
				io.WriteString(c, "HTTP/1.1 301 Moved Permanently\r\nLocation: https://api.example.com/v1/models\r\nContent-Length: 0\r\n\r\n")
				continue
			}
			var b strings.Builder
			zw := gzip.NewWriter(&b)
			io.WriteString(zw, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
			zw.Close()
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s", b.Len(), b.String())
		}
	})
	g := rawGW(t, up, testBase)
	if r := g.do("POST", "/api/providers/p/test", ""); r.code != 200 || !strings.Contains(r.body, "it points to https://api.example.com") {
		t.Fatalf("redirected test: %d %s, want the redirect's target named", r.code, r.body)
	}
	if r := g.do("POST", "/api/providers/p/test", ""); r.code != 200 || !strings.Contains(r.body, `"ok":true`) {
		t.Fatalf("gzip test: %d %s, want ok", r.code, r.body)
	}
}

// An upstream that echoes the Authorization it was sent in a header the
// gateway passes on (the Content-Type, X-Request-Id as
// X-Upstream-Request-Id) does not hand the connection's key to the
// client: on a JSON answer, a stream and an error answer alike.
func TestEchoedKeyInAnswerHeadsIsRedacted(t *testing.T) {
	const key = "sk-upstream-secret-0123456789"
	var n atomic.Int64
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, r.Body)
			a := r.Header.Get("Authorization")
			switch n.Add(1) {
			case 1:
				b := chatAnswerJSON("hi")
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json; x=%s\r\nX-Request-Id: id-%s\r\nContent-Length: %d\r\n\r\n%s", a, a, len(b), b)
			case 2:
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Request-Id: id-%s\r\n\r\n"+
					"data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", a)
				return
			default:
				b := `{"error":{"message":"no","type":"invalid_request_error","code":"bad"}}`
				fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; x=%s\r\nContent-Length: %d\r\n\r\n%s", a, len(b), b)
			}
		}
	})
	g := rawGWConns(t, up, "[{id: c, apiKey: "+key+", disableCooling: true}]", testBase)
	for i, r := range []resp{g.chat("p/m"), g.stream("p/m"), g.chat("p/m")} {
		if i == 1 && (r.code != 200 || !strings.Contains(r.body, "[DONE]")) {
			t.Fatalf("stream: %d %s, want it whole", r.code, r.body)
		}
		var head strings.Builder
		r.h.Write(&head)
		if strings.Contains(head.String(), key) || strings.Contains(r.body, key) {
			t.Fatalf("answer %d (%d) hands the upstream key to the client:\n%s\n%s", i, r.code, head.String(), r.body)
		}
		if i < 2 && (r.code != 200 || !strings.Contains(r.h.Get("X-Upstream-Request-Id"), "[redacted]")) {
			t.Fatalf("answer %d: %d, X-Upstream-Request-Id %q, want it passed on redacted", i, r.code, r.h.Get("X-Upstream-Request-Id"))
		}
	}
}

// A placeholder key too short to be a secret ("st", "x": a local upstream
// that checks none) is not searched for in an answer's head: it would be
// found inside ordinary values, and "text/event-stream" with "st" replaced
// is no longer a stream.
func TestShortPlaceholderKeyLeavesHeadsAlone(t *testing.T) {
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"+
			"data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	})
	g := rawGWConns(t, up, "[{id: c, apiKey: st}]", testBase)
	if r := g.stream("p/m"); r.code != 200 || r.h.Get("Content-Type") != "text/event-stream" || !strings.Contains(r.body, "[DONE]") {
		t.Fatalf("%d %q %s, want the stream whole", r.code, r.h.Get("Content-Type"), r.body)
	}
}

// An upstream that streams to a request that asked for one JSON answer
// (stream false or absent) is not relayed: an API client cannot read an
// SSE body as its completion. The client gets a typed 502 (the output
// validation case), never the event stream.
func TestStreamToANonStreamRequestIsRefused(t *testing.T) {
	up := newRawUp(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"+
			"data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	})
	g := rawGW(t, up, testBase+"  requestBudget: {maxAttempts: 1}\n")
	r := g.chat("p/m")
	if r.code != 502 || r.errCode() != "quality_failure" || strings.Contains(r.body, "data:") || strings.HasPrefix(r.h.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %q %s, want a JSON 502 quality_failure", r.code, r.h.Get("Content-Type"), r.body)
	}
}
