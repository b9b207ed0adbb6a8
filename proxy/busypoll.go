package proxy

import (
	"bufio"
	"net"
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
// It polls only where polling is likely to pay, like the kernel's haltpoll
// governor: each wait site keeps a window that opens after a wait shorter
// than the limit and halves after a longer one, so a site whose answers
// take a real model's hundreds of milliseconds stops polling after a few
// waits and a client that sends a request every few seconds never starts.
// It polls only while the gateway is nearly idle: fewer other requests in
// flight than its slots (half the scheduler's processors, at most
// maxPollSlots), and no more pollers than that, so under load every CPU
// goes to requests. With one processor (GOMAXPROCS=1) it never polls.
type busyPoller struct {
	limit   time.Duration // 0: off
	slots   int32         // most pollers at once; also the in-flight bound
	active  atomic.Int32  // fast-path requests being served
	looping atomic.Int32  // of those, from a client connection with an open window
	polling atomic.Int32
	// hits and misses count polls that found the data and polls that ran
	// out (breakwater_busy_polls_total): whether polling pays here.
	hits, misses atomic.Uint64
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

// before runs right before a wait on c (read through br) that may park; it
// returns the wait's start for after. upstream says whether the waiting
// goroutine serves a request (counted in active) and waits for the
// upstream's answer, or waits for a client's next request.
//
// The upstream's answer is polled for only while a client in a tight loop
// is being served (looping): a client whose next request comes within the
// window. With requests arriving on their own schedule (perfkit's r2000)
// the client's hop wakes a parked thread anyway, the other CPU is busy with
// the load and the upstream, and polling for the answer cost about 100 µs
// of CPU per request for no latency gained (docs/gateway.md).
func (p *busyPoller) before(c net.Conn, br *bufio.Reader, w *pollWindow, upstream bool) time.Time {
	if p == nil || p.limit <= 0 {
		return time.Time{}
	}
	start := time.Now()
	others := p.active.Load()
	if upstream {
		others--
	}
	if w.d <= 0 || br.Buffered() > 0 || others >= p.slots || upstream && p.looping.Load() == 0 {
		return start
	}
	if p.polling.Add(1) <= p.slots {
		if pollReadable(c, w.d, &w.sock) {
			p.hits.Add(1)
		} else {
			p.misses.Add(1)
		}
	}
	p.polling.Add(-1)
	return start
}

// after updates the window with how long the wait took.
func (p *busyPoller) after(w *pollWindow, start time.Time) {
	if start.IsZero() {
		return
	}
	if time.Since(start) <= p.limit {
		w.d = p.limit
	} else if w.d /= 2; w.d < p.limit/8 {
		w.d = 0
	}
}
