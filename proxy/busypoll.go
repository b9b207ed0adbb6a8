package proxy

import (
	"bufio"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"
)

// busyPoller saves a parked thread's wake-up where an answer is due within
// microseconds: the upstream's answer to a request just written, and a
// kept-alive client's next request. Before the goroutine parks on such a
// socket it polls the socket for a bounded time (server.busyPollUs) with a
// non-blocking peek, yielding the CPU between peeks. On a virtual machine
// whose idle vCPUs halt, waking a parked reader costs tens of microseconds
// per hop (docs/gateway.md, "Busy polling"); the peek finds the data
// without it.
//
// Polling pays only when the request chain it waits on has the machine to
// itself; anywhere else it takes a CPU from the clients, the upstream or
// other requests. So:
//   - each wait site keeps a window, like the kernel's haltpoll governor:
//     it opens after a wait shorter than the limit and halves after a
//     longer one, so an upstream that takes a real model's hundreds of
//     milliseconds and a client that sends a request every few seconds are
//     not polled for after their first waits;
//   - it polls only while at most slots clients are in a tight loop (client
//     connections whose window is open), fewer other requests than slots
//     are in flight (net/http's included), and fewer than slots goroutines
//     poll: slots is half the scheduler's processors, at most maxPollSlots,
//     so on two CPUs one client in a tight loop is polled for and two are
//     not (with two the spinning thread took the CPU their own processes
//     needed: −16 % at c2 under the default scheduler);
//   - the upstream's answer is polled for only for a request from a client
//     in a tight loop: with requests arriving on their own schedule
//     (perfkit's r2000) it gained no latency and cost CPU.
//
// With one processor (GOMAXPROCS=1) it never polls.
type busyPoller struct {
	limit   time.Duration
	slots   int32
	active  atomic.Int32 // requests being served
	looping atomic.Int32 // of those, from a client connection whose window is open
	loops   atomic.Int32 // client connections whose window is open
	polling atomic.Int32
	// ready and timeouts count, by site, polls that ended with the socket
	// readable (data, or its end) and polls that ran out
	// (breakwater_busy_polls_total): whether polling pays here.
	ready, timeouts [2]atomic.Uint64
}

// pollSite is what a wait waits for.
type pollSite int

const (
	pollClient   pollSite = iota // a kept-alive client connection's next request
	pollUpstream                 // the upstream's answer to the request just written
)

func (s pollSite) String() string {
	if s == pollUpstream {
		return "upstream"
	}
	return "client"
}

// defaultBusyPollUs covers a loopback or same-host upstream's answer and a
// client's next request in a tight loop (100-200 µs on the 2-core machine
// of docs/gateway.md); maxBusyPollUs keeps a typo from spinning for long.
// maxPollSlots bounds the CPUs a large machine spends polling.
const (
	defaultBusyPollUs = 300
	maxBusyPollUs     = 5000
	maxPollSlots      = 4
)

func newBusyPoller(limitUs *int) *busyPoller {
	us := defaultBusyPollUs
	if limitUs != nil {
		us = *limitUs
	}
	if us <= 0 {
		return nil
	}
	return &busyPoller{limit: time.Duration(us) * time.Microsecond, slots: int32(min(runtime.GOMAXPROCS(0)/2, maxPollSlots))}
}

// pollWindow is one wait site's polling window. A site is used by one
// goroutine at a time (a client connection's serving goroutine, or the
// request holding an upstream connection), so it needs no lock.
type pollWindow struct {
	d    time.Duration
	sock pollSock
}

// before runs right before a wait at site on c (read through br) that may
// park; it returns the wait's start for after.
func (p *busyPoller) before(c net.Conn, br *bufio.Reader, w *pollWindow, site pollSite) time.Time {
	if p == nil {
		return time.Time{}
	}
	start := time.Now()
	others := p.active.Load()
	if site == pollUpstream {
		others-- // the waiting request itself
	}
	if w.d <= 0 || br.Buffered() > 0 || others >= p.slots || p.loops.Load() > p.slots ||
		site == pollUpstream && p.looping.Load() == 0 {
		return start
	}
	if p.polling.Add(1) <= p.slots {
		if pollReadable(c, w.d, &w.sock) {
			p.ready[site].Add(1)
		} else {
			p.timeouts[site].Add(1)
			if site == pollClient {
				// The client did not send within its window: it is no
				// longer in a tight loop, though it may keep the
				// connection open for minutes. Counted on, it would
				// stop polling for a client that is.
				p.setClientWindow(w, 0)
			}
		}
	}
	p.polling.Add(-1)
	return start
}

// after updates the window at site with how long the wait took.
func (p *busyPoller) after(w *pollWindow, start time.Time, site pollSite) {
	if start.IsZero() {
		return
	}
	d := w.d
	if time.Since(start) <= p.limit {
		d = p.limit
	} else if d /= 2; d < p.limit/8 {
		d = 0
	}
	if site == pollClient {
		p.setClientWindow(w, d)
	} else {
		w.d = d
	}
}

// setClientWindow sets a client connection's window, counting the
// connection in loops while it is open.
func (p *busyPoller) setClientWindow(w *pollWindow, d time.Duration) {
	if (w.d > 0) != (d > 0) {
		if d > 0 {
			p.loops.Add(1)
		} else {
			p.loops.Add(-1)
		}
	}
	w.d = d
}

// closeClient forgets a client connection's window when it closes.
func (p *busyPoller) closeClient(w *pollWindow) {
	if p != nil {
		p.setClientWindow(w, 0)
	}
}

// serving counts a request on a client connection with window w as in
// flight (d = 1) or over (d = -1), and as looping while the window is open
// (it does not change while the request runs). Out of line, so a held
// stream's connection goroutine does not carry it (TestHeldStreamStack).
//
//go:noinline
func (p *busyPoller) serving(w *pollWindow, d int32) {
	if p == nil {
		return
	}
	p.active.Add(d)
	if w.d > 0 {
		p.looping.Add(d)
	}
}

// counting counts the requests h serves as in flight: those of the
// connections handed to net/http (the fast path counts its own).
func (p *busyPoller) counting(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.active.Add(1)
		defer p.active.Add(-1)
		h.ServeHTTP(w, r)
	})
}
