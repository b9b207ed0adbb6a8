package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Busy polling (docs/gateway.md "Busy polling"): a wait site polls only
// after a wait shorter than the limit, and stops after a few longer ones,
// so an upstream that takes a real model's time is never polled for.
func TestBusyPollWindowFollowsTheWaits(t *testing.T) {
	p := &busyPoller{limit: 300 * time.Microsecond, slots: 1}
	var w pollWindow
	ago := func(d time.Duration) time.Time { return time.Now().Add(-d) }
	p.after(&w, ago(time.Second), pollUpstream)
	if w.d != 0 {
		t.Fatalf("a new site after a long wait: window %v, want closed", w.d)
	}
	p.after(&w, ago(50*time.Microsecond), pollUpstream)
	if w.d != p.limit {
		t.Fatalf("after a short wait: window %v, want the limit %v", w.d, p.limit)
	}
	var closedAfter int
	for i := 1; i <= 10 && w.d > 0; i++ {
		p.after(&w, ago(200*time.Millisecond), pollUpstream)
		closedAfter = i
	}
	if w.d != 0 || closedAfter > 4 {
		t.Fatalf("long waits: window %v after %d of them, want closed within 4", w.d, closedAfter)
	}
	p.after(&w, time.Time{}, pollUpstream) // a wait that was not timed (polling off) changes nothing
	if w.d != 0 {
		t.Fatalf("untimed wait opened the window: %v", w.d)
	}
	if p.loops.Load() != 0 {
		t.Fatalf("an upstream window counted as a client in a tight loop: %d", p.loops.Load())
	}

	// A client connection whose window is open is a client in a tight
	// loop, counted while it is open and until the connection closes.
	var a, b pollWindow
	p.after(&a, ago(50*time.Microsecond), pollClient)
	p.after(&a, ago(50*time.Microsecond), pollClient)
	p.after(&b, ago(50*time.Microsecond), pollClient)
	if n := p.loops.Load(); n != 2 {
		t.Fatalf("two open client windows: loops %d", n)
	}
	for a.d > 0 {
		p.after(&a, ago(time.Second), pollClient)
	}
	p.closeClient(&a) // already closed: no change
	p.closeClient(&b)
	if n := p.loops.Load(); n != 0 {
		t.Fatalf("windows closed and connections gone: loops %d", n)
	}
}

// tcpPair is a connected loopback TCP pair.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// The poll peeks: the byte it saw is still there for the read after it.
func TestPollReadableLeavesTheDataToTheRead(t *testing.T) {
	if !pollSupported {
		t.Skip("busy polling is implemented for Linux only")
	}
	client, server := tcpPair(t)
	var s pollSock
	if pollReadable(server, time.Millisecond, &s) {
		t.Fatal("nothing was sent, yet the poll reported data")
	}
	sent := make(chan struct{})
	go func() {
		time.Sleep(2 * time.Millisecond)
		client.Write([]byte("x"))
		close(sent)
	}()
	if !pollReadable(server, 10*time.Second, &s) {
		t.Fatal("the poll ran out although a byte was sent")
	}
	<-sent
	b := make([]byte, 4)
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := server.Read(b); err != nil || string(b[:n]) != "x" {
		t.Fatalf("read after the poll: %q, %v", b[:n], err)
	}
	client.Close()
	if !pollReadable(server, 10*time.Second, &s) {
		t.Fatal("a closed peer must end the poll (the read then sees EOF)")
	}
	a, b2 := net.Pipe() // not a socket: never polled
	defer a.Close()
	defer b2.Close()
	var ps pollSock
	if pollReadable(a, time.Second, &ps) || pollReadable(a, time.Second, &ps) {
		t.Fatal("a pipe reported data")
	}
}

// Polling only while the request chain has the machine to itself: never
// with fewer than two processors (slots 0), never with another request in
// flight, another poller, or more clients in a tight loop than slots, never
// on a closed window or with data already buffered; for the upstream's
// answer only while a client in a tight loop is served.
func TestBusyPollerPollsOnlyWhenIdle(t *testing.T) {
	if !pollSupported {
		t.Skip("busy polling is implemented for Linux only")
	}
	client, server := tcpPair(t)
	br := bufio.NewReader(server)
	open := pollWindow{d: time.Millisecond}
	polls := func(p *busyPoller) uint64 {
		var n uint64
		for i := range p.ready {
			n += p.ready[i].Load() + p.timeouts[i].Load()
		}
		return n
	}
	refuses := func(p *busyPoller, site pollSite, w *pollWindow, why string) {
		t.Helper()
		before := polls(p)
		p.before(server, br, w, site)
		if polls(p) != before {
			t.Fatalf("polled %s", why)
		}
	}

	refuses(&busyPoller{limit: time.Millisecond, slots: 0}, pollClient, &open, "with no slot (GOMAXPROCS 1)")
	p := &busyPoller{limit: time.Millisecond, slots: 1}
	refuses(p, pollClient, &pollWindow{}, "on a closed window")
	p.active.Store(2) // this request and another
	p.looping.Store(1)
	refuses(p, pollUpstream, &open, "with another request in flight")
	p.active.Store(1)
	p.looping.Store(0)
	refuses(p, pollUpstream, &open, "for the upstream of a request whose client is not in a tight loop")
	refuses(p, pollClient, &open, "for a client's next request while serving one")
	p.looping.Store(1)
	p.loops.Store(2)
	refuses(p, pollUpstream, &open, "with two clients in a tight loop on one slot")
	p.loops.Store(1)
	p.polling.Store(1)
	refuses(p, pollUpstream, &open, "while another goroutine polls")
	p.polling.Store(0)

	p.before(server, br, &open, pollUpstream)
	if p.timeouts[pollUpstream].Load() != 1 {
		t.Fatalf("alone with an open window: timeouts %d, want 1", p.timeouts[pollUpstream].Load())
	}
	client.Write([]byte("ab"))
	start := p.before(server, br, &open, pollUpstream)
	if p.ready[pollUpstream].Load() != 1 || start.IsZero() {
		t.Fatalf("data sent: ready %d, start %v", p.ready[pollUpstream].Load(), start)
	}
	br.Peek(1) // buffered now
	refuses(p, pollUpstream, &open, "with data already buffered")
	// A client that does not send within its window is no longer in a
	// tight loop, though its connection stays open: it stops counting.
	q := &busyPoller{limit: time.Millisecond, slots: 1}
	_, quiet := tcpPair(t)
	var cw pollWindow
	q.after(&cw, time.Now(), pollClient)
	if q.loops.Load() != 1 {
		t.Fatalf("an open client window: loops %d", q.loops.Load())
	}
	q.before(quiet, bufio.NewReader(quiet), &cw, pollClient)
	if q.timeouts[pollClient].Load() != 1 || cw.d != 0 || q.loops.Load() != 0 {
		t.Fatalf("a client poll that ran out: timeouts %d, window %v, loops %d; want 1, closed, 0",
			q.timeouts[pollClient].Load(), cw.d, q.loops.Load())
	}

	var nilPoller *busyPoller
	if !nilPoller.before(server, br, &open, pollClient).IsZero() {
		t.Fatal("a nil poller (busyPollUs 0) timed a wait")
	}
}

// End to end: a client sending requests one after another on a kept-alive
// connection to a fast upstream is served by polling, for its next request
// and for the upstream's answer (with two or more processors); nothing is
// polled for while another request is in flight, one that net/http serves
// included; busyPollUs: 0 turns it off, with no series.
func TestBusyPollServesAFastLoop(t *testing.T) {
	up := newFakeUp(t)
	up.set("k1", okJSON("hi"))
	up.set("k2", slow(time.Second, okJSON("late")))
	cfg := `
server: {busyPollUs: 5000}
providers:
  - id: p
    baseURL: {{UP}}
    models: [m]
    connections: [{id: k1, apiKey: k1}]
  - id: q
    baseURL: {{UP}}
    models: [m]
    connections: [{id: k2, apiKey: k2}]
`
	g := newGW(t, up, cfg)
	if want := int32(min(runtime.GOMAXPROCS(0)/2, maxPollSlots)); g.g.up.poll.slots != want {
		t.Fatalf("slots %d, want half of GOMAXPROCS at most %d: %d", g.g.up.poll.slots, maxPollSlots, want)
	}
	series := regexp.MustCompile(`breakwater_busy_polls_total\{outcome="(\w+)",site="(\w+)"\} (\d+)`)
	count := func() map[string]int {
		out := map[string]int{}
		for _, m := range series.FindAllStringSubmatch(g.do("GET", "/metrics", "").body, -1) {
			n, _ := strconv.Atoi(m[3])
			out[m[2]+"/"+m[1]] = n
		}
		if len(out) != 4 {
			t.Fatalf("want the four busy_polls series with busy polling on, got %v", out)
		}
		return out
	}
	loop := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if r := g.chat("p/m"); r.code != 200 || !strings.Contains(r.body, "hi") {
				t.Fatalf("chat: %d %s", r.code, r.body)
			}
		}
	}
	if g.g.up.poll.slots == 0 {
		loop(20)
		for k, n := range count() {
			if n != 0 {
				t.Fatalf("one processor: %s polls %d, want none", k, n)
			}
		}
		return
	}
	eventually(t, "polls that found the next request and the upstream's answer", func() bool {
		loop(10)
		c := count()
		return c["client/ready"] > 0 && c["upstream/ready"] > 0
	})

	// A request held in flight by a slow upstream, served on the fast path
	// or by net/http (a chunked upload is handed to it): the loop beside
	// it is not polled for.
	polled := func(c map[string]int) int {
		return c["client/ready"] + c["client/timeout"] + c["upstream/ready"] + c["upstream/timeout"]
	}
	for _, chunked := range []bool{false, true} {
		body := `{"model":"q/m","messages":[{"role":"user","content":"hi"}]}`
		var rd io.Reader = strings.NewReader(body)
		pr, pw := io.Pipe()
		if chunked {
			rd = pr
		}
		held := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest("POST", g.srv.URL+"/v1/chat/completions", rd)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				held <- -1
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			held <- res.StatusCode
		}()
		if chunked {
			io.WriteString(pw, body)
			pw.Close()
		}
		eventually(t, "the held request in flight", func() bool { return g.g.up.poll.active.Load() == 1 })
		before := count()
		loop(20)
		if after := count(); polled(after) != polled(before) {
			t.Fatalf("chunked %v: polled while another request was in flight: %v, then %v", chunked, before, after)
		}
		if code := <-held; code != 200 {
			t.Fatalf("chunked %v: held request: %d", chunked, code)
		}
	}

	off := newGW(t, up, strings.Replace(cfg, "busyPollUs: 5000", "busyPollUs: 0", 1))
	for i := 0; i < 5; i++ {
		off.chat("p/m")
	}
	if m := off.do("GET", "/metrics", "").body; strings.Contains(m, "breakwater_busy_polls_total") {
		t.Fatal("busyPollUs: 0 still exports polls")
	}
}
