package proxy

import (
	"bufio"
	"net"
	"regexp"
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
	p.after(&w, ago(time.Second))
	if w.d != 0 {
		t.Fatalf("a new site after a long wait: window %v, want closed", w.d)
	}
	p.after(&w, ago(50*time.Microsecond))
	if w.d != p.limit {
		t.Fatalf("after a short wait: window %v, want the limit %v", w.d, p.limit)
	}
	var closedAfter int
	for i := 1; i <= 10 && w.d > 0; i++ {
		p.after(&w, ago(200*time.Millisecond))
		closedAfter = i
	}
	if w.d != 0 || closedAfter > 4 {
		t.Fatalf("long waits: window %v after %d of them, want closed within 4", w.d, closedAfter)
	}
	p.after(&w, time.Time{}) // a wait that was not timed (polling off) changes nothing
	if w.d != 0 {
		t.Fatalf("untimed wait opened the window: %v", w.d)
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

// Polling only while the gateway is nearly idle: never with fewer than two
// processors (slots 0), never with another request in flight, never on a
// closed window or with data already buffered; for the upstream's answer
// only while a client in a tight loop is served.
func TestBusyPollerPollsOnlyWhenIdle(t *testing.T) {
	if !pollSupported {
		t.Skip("busy polling is implemented for Linux only")
	}
	client, server := tcpPair(t)
	br := bufio.NewReader(server)
	open := pollWindow{d: time.Millisecond}
	polls := func(p *busyPoller) uint64 { return p.hits.Load() + p.misses.Load() }

	one := &busyPoller{limit: time.Millisecond, slots: 0}
	one.before(server, br, &open, false)
	if polls(one) != 0 {
		t.Fatal("polled with no slot (GOMAXPROCS 1)")
	}
	p := &busyPoller{limit: time.Millisecond, slots: 1}
	closed := pollWindow{}
	p.before(server, br, &closed, false)
	if polls(p) != 0 {
		t.Fatal("polled on a closed window")
	}
	p.active.Store(2) // this request and another
	p.looping.Store(1)
	p.before(server, br, &open, true)
	if polls(p) != 0 {
		t.Fatal("polled with another request in flight")
	}
	p.active.Store(1)
	p.looping.Store(0)
	p.before(server, br, &open, true)
	if polls(p) != 0 {
		t.Fatal("polled for the upstream of a request whose client is not in a tight loop")
	}
	p.before(server, br, &open, false)
	if polls(p) != 0 {
		t.Fatal("polled for a client's next request while serving one")
	}
	p.looping.Store(1)
	p.before(server, br, &open, true)
	if p.misses.Load() != 1 {
		t.Fatalf("alone with an open window: misses %d, want 1", p.misses.Load())
	}
	client.Write([]byte("ab"))
	start := p.before(server, br, &open, true)
	if p.hits.Load() != 1 || start.IsZero() {
		t.Fatalf("data sent: hits %d, start %v", p.hits.Load(), start)
	}
	br.Peek(1) // buffered now
	p.before(server, br, &open, true)
	if polls(p) != 2 {
		t.Fatal("polled with data already buffered")
	}
	var nilPoller *busyPoller
	if !nilPoller.before(server, br, &open, false).IsZero() {
		t.Fatal("a nil poller (busyPollUs 0) timed a wait")
	}
}

// End to end: a client sending requests one after another on a kept-alive
// connection to a fast upstream is served by polling (with two or more
// processors); busyPollUs: 0 turns it off, with no series.
func TestBusyPollServesAFastLoop(t *testing.T) {
	up := newFakeUp(t)
	up.set("k1", okJSON("hi"))
	cfg := `
server: {busyPollUs: 5000}
providers:
  - id: p
    baseURL: {{UP}}
    models: [m]
    connections: [{id: k1, apiKey: k1}]
`
	g := newGW(t, up, cfg)
	hits := regexp.MustCompile(`breakwater_busy_polls_total\{outcome="data"\} (\d+)`)
	count := func() int {
		m := hits.FindStringSubmatch(g.do("GET", "/metrics", "").body)
		if m == nil {
			t.Fatal("no breakwater_busy_polls_total series with busy polling on")
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if g.g.up.poll.slots == 0 {
		for i := 0; i < 20; i++ {
			if r := g.chat("p/m"); r.code != 200 {
				t.Fatalf("chat: %d %s", r.code, r.body)
			}
		}
		if n := count(); n != 0 {
			t.Fatalf("one processor: %d polls, want none", n)
		}
		return
	}
	eventually(t, "a poll that found the upstream's answer or the next request", func() bool {
		for i := 0; i < 10; i++ {
			if r := g.chat("p/m"); r.code != 200 || !strings.Contains(r.body, "hi") {
				t.Fatalf("chat: %d %s", r.code, r.body)
			}
		}
		return count() > 0
	})

	off := newGW(t, up, strings.Replace(cfg, "busyPollUs: 5000", "busyPollUs: 0", 1))
	for i := 0; i < 5; i++ {
		off.chat("p/m")
	}
	if m := off.do("GET", "/metrics", "").body; strings.Contains(m, "breakwater_busy_polls_total") {
		t.Fatal("busyPollUs: 0 still exports polls")
	}
}
