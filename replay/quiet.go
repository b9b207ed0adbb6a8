package replay

import (
	"sync"
	"time"
)

// progress follows each in-process replay request between the fault
// upstream and the gateway's model, so an `at:` read can wait until the
// gateway has taken in every upstream answer that came before it. After
// an upstream wait ends (an answer, a cut) the gateway's next observable
// step, a "flow step" log line, comes from its own work alone: no timer
// of the gateway's runs before the model decides what comes next. So the
// wait for it is bounded generously (quietBound), and on a loaded machine
// the read no longer sees a state the gateway had not caught up with yet.
type progress struct {
	mu  sync.Mutex
	seq uint64
	req map[int]*reqProgress
}

type reqProgress struct {
	waits   int       // upstream waits in progress
	due     time.Time // on the replay's clock, when the latest wait ends
	upEnd   uint64    // seq of the last upstream wait's end
	stepped uint64    // seq of the last flow step
	// transit: the last flow step was an attempt that has not reached
	// an upstream wait yet (on its way, answered at once, or queued by
	// the gateway's admission, which no line shows); received: the
	// upstream has that attempt's call, so what is left until the next
	// step is work, no gateway timer.
	transit, received bool
	done              bool
}

func newProgress() *progress { return &progress{req: map[int]*reqProgress{}} }

func (p *progress) of(n int) *reqProgress {
	r := p.req[n]
	if r == nil {
		r = &reqProgress{}
		p.req[n] = r
	}
	return r
}

// upstream notes an upstream wait of request n beginning (+1, ending at
// due on the replay's clock) or ending (-1).
func (p *progress) upstream(n, d int, due time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.of(n)
	r.waits += d
	if d > 0 {
		r.due = due
	}
	r.transit, r.received = false, false
	if d < 0 {
		p.seq++
		r.upEnd = p.seq
	}
}

// step notes a flow step of request n; attempt says it was an attempt.
func (p *progress) step(n int, attempt bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	r := p.of(n)
	r.stepped, r.transit, r.received = p.seq, attempt, false
}

// receivedCall notes that the fault upstream has a call of request n.
func (p *progress) receivedCall(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.of(n); r.transit {
		r.received = true
	}
}

// finished notes that request n's client has its answer.
func (p *progress) finished(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.of(n).done = true
}

// behind reports whether the gateway has caught up: no request's last
// upstream wait ended by mark (a seq) without the step after it, and no
// attempt the upstream received (answered at once) without it; and
// whether some attempt is in transit.
func (p *progress) behind(mark uint64) (caughtUp, transit bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	caughtUp = true
	for _, r := range p.req {
		if r.done || r.waits > 0 {
			continue
		}
		if (r.upEnd > r.stepped && r.upEnd <= mark) || r.received {
			caughtUp = false
		}
		transit = transit || r.transit
	}
	return caughtUp, transit
}

// dueBy reports whether some upstream wait in progress is due to end by
// at: its answer belongs to the instant at or before, as in the
// simulator, where an answer landing at an instant comes before a read
// of that instant.
func (p *progress) dueBy(at time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.req {
		if r.waits > 0 && !r.done && !r.due.After(at) {
			return true
		}
	}
	return false
}

// awaitDue polls until no upstream wait due by at is still in progress
// (bounded by quietBound): on a loaded machine the upstream's timer can
// fire after the read's own, though both end at the same instant.
func (p *progress) awaitDue(at time.Time) {
	start := time.Now()
	for p.dueBy(at) && time.Since(start) < quietBound {
		time.Sleep(time.Millisecond)
	}
}

// quietBound bounds the wait for the gateway to catch up: its own work
// only, so reached only by a stalled machine.
const quietBound = 10 * time.Second

// awaitCaughtUp polls until the gateway took the step after every upstream
// wait that has ended so far (bounded by quietBound), and no attempt is in
// transit (bounded by transitBound: an attempt the gateway's admission
// queued waits on a timer of the gateway's). Waits ending meanwhile are
// not waited for: what the upstream did after the read began belongs to a
// later instant. An attempt answered at once is part of the instant, as in
// the simulator.
func (p *progress) awaitCaughtUp(transitBound time.Duration) {
	p.mu.Lock()
	mark := p.seq
	p.mu.Unlock()
	start := time.Now()
	for {
		caughtUp, transit := p.behind(mark)
		waited := time.Since(start)
		if (caughtUp || waited > quietBound) && (!transit || waited > transitBound) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
