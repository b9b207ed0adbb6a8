package replay

import (
	"slices"
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/proxy"
)

// progress follows each in-process replay request between the fault
// upstream and the gateway's model, so an `at:` read, and the dispatch of
// an instant, can wait until the gateway has taken in every upstream
// answer and every deadline of its own that came before. After an upstream
// wait ends (an answer, a cut) or a deadline cuts an attempt
// (proxy.Options.Deadlines), the gateway's next observable step, a "flow
// step" log line, comes from its own work alone: no timer of the gateway's
// runs before the model decides what comes next. So the wait for it is
// bounded generously (quietBound), and on a loaded machine the read no
// longer sees a state the gateway had not caught up with yet. The same
// knowledge tells the clock when the gateway is busy (onBusy): that time
// is no time in the simulator.
type progress struct {
	mu  sync.Mutex
	seq uint64
	req map[int]*reqProgress
	// gwWaiting counts the gateway's deliberate waits in progress
	// (proxy.Options.Waiting): an attempt in transit while one runs may be
	// queued by admission, on a timer of the gateway's.
	gwWaiting int
	// nWork, nTransit: requests whose next step is the gateway's own work
	// (reqProgress.work); busy: the last state onBusy was told.
	nWork, nTransit int
	busy            bool
	onBusy          func(busy bool) // the clock's (schedClock.setBusy); nil = none
	// active: the requests not done; bound: the earliest instant an
	// upstream wait or a gateway deadline of theirs is due (Unix ns, 0 =
	// none), told to onBound (schedClock.bound) as it changes.
	active  map[int]*reqProgress
	bound   int64
	onBound func(ns int64)
}

type reqProgress struct {
	waits int       // upstream waits in progress
	due   time.Time // on the replay's clock, when the latest wait ends
	// waitSeq: the seq of the latest wait's start. A wait that began
	// before the last flow step is stale: a deadline cut its attempt, and
	// the upstream has not seen the cut yet while the next attempt runs.
	waitSeq uint64
	upEnd   uint64 // seq of the last upstream wait's end
	stepped uint64 // seq of the last flow step
	// transit: the last flow step was an attempt that has not reached
	// an upstream wait yet (on its way, answered at once, or queued by
	// the gateway's admission, which no line shows); received: the
	// upstream has that attempt's call, so what is left until the next
	// step is work, no gateway timer.
	transit, received bool
	done              bool
	sent              bool // the client sent it; stepped stays 0 until the model's first decision
	// The gateway's deadlines on the request's attempts
	// (proxy.Options.Deadlines): the instants (Unix ns on the replay's
	// clock) of those armed, and the seq of the last one that fired and
	// cut an attempt. The step after a cut is the gateway's own work.
	deadlines []int64
	cut       uint64
}

func newProgress() *progress {
	return &progress{req: map[int]*reqProgress{}, active: map[int]*reqProgress{}}
}

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
	p.change(n, func(r *reqProgress) {
		stale := d < 0 && r.waitSeq < r.stepped
		r.waits += d
		if stale {
			// The end of a cut attempt's wait: the step after the cut
			// was taken; what the next attempt is doing stands.
			return
		}
		p.seq++
		if d > 0 {
			r.tookCutStep()
			r.due, r.waitSeq = due, p.seq
		} else {
			r.upEnd = p.seq
		}
		r.transit, r.received = false, false
	})
}

// upWaiting reports whether request r waits on the upstream: a wait of
// its current attempt is in progress (a stale one is not).
func (r *reqProgress) upWaiting() bool { return r.waits > 0 && r.waitSeq > r.stepped }

// step notes a flow step of request n; attempt says it was an attempt.
func (p *progress) step(n int, attempt bool) {
	p.change(n, func(r *reqProgress) {
		p.seq++
		r.stepped, r.transit, r.received = p.seq, attempt, false
	})
}

// deadline notes a gateway deadline of request n armed, disarmed or fired
// (proxy.Options.Deadlines) for instant at.
func (p *progress) deadline(n int, at time.Time, ev proxy.DeadlineEvent) {
	p.change(n, func(r *reqProgress) {
		ns := at.UnixNano()
		if ev == proxy.DeadlineArmed {
			r.deadlines = append(r.deadlines, ns)
			return
		}
		if i := slices.Index(r.deadlines, ns); i >= 0 {
			r.deadlines = slices.Delete(r.deadlines, i, i+1)
		}
		if ev == proxy.DeadlineFired {
			p.seq++
			r.cut = p.seq
		}
	})
}

// receivedCall notes that the fault upstream has a call of request n.
func (p *progress) receivedCall(n int) {
	p.change(n, func(r *reqProgress) {
		p.seq++
		if r.cut > r.stepped {
			r.tookCutStep()
			r.received = true // its answer's step is owed
		}
		if r.transit {
			r.received = true
		}
	})
}

// tookCutStep notes, at a new upstream call or wait of request r, that
// the gateway took its step after a cut (p.seq just moved on): a stream
// resumed after a watchdog's cut logs no flow step.
func (r *reqProgress) tookCutStep() {
	if r.cut > r.stepped {
		r.stepped = r.cut
	}
}

// sentReq notes that request n is on its way to the gateway.
func (p *progress) sentReq(n int) {
	p.change(n, func(r *reqProgress) { r.sent = true })
}

// gatewayWaiting notes a deliberate wait of the gateway beginning (+1) or
// ending (-1) (proxy.Options.Waiting).
func (p *progress) gatewayWaiting(d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gwWaiting += d
	p.notify()
}

// finished notes that request n's client has its answer.
func (p *progress) finished(n int) {
	p.change(n, func(r *reqProgress) { r.done = true })
}

// change applies f to request n and keeps the count of requests waiting
// on the gateway's own work.
func (p *progress) change(n int, f func(r *reqProgress)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.of(n)
	c0, t0 := r.work()
	f(r)
	c1, t1 := r.work()
	p.nWork += b2i(c1) - b2i(c0)
	p.nTransit += b2i(t1) - b2i(t0)
	p.notify()
	if r.done {
		delete(p.active, n)
	} else {
		p.active[n] = r
	}
	var bound int64
	for _, r := range p.active {
		if r.waits > 0 && (bound == 0 || r.due.UnixNano() < bound) {
			bound = r.due.UnixNano()
		}
		for _, d := range r.deadlines {
			if bound == 0 || d < bound {
				bound = d
			}
		}
	}
	if bound != p.bound {
		p.bound = bound
		if p.onBound != nil {
			p.onBound(bound)
		}
	}
}

// work reports whether what request r waits on is the gateway's own work:
// its first decision, the step after an upstream answer or a deadline's
// cut, or (transit) an attempt on its way to the upstream, unless the
// gateway's admission holds it.
func (r *reqProgress) work() (core, transit bool) {
	switch {
	case r.done:
		return false, false
	case (r.sent && r.stepped == 0) || r.cut > r.stepped:
		return true, false
	case r.upWaiting():
		return false, false
	case r.upEnd > r.stepped || r.received:
		return true, false
	}
	return false, r.transit
}

// notify tells the clock (onBusy) when the gateway starts or stops having
// work of its own in hand: no time passes while it has, as none passes in
// the simulator while the model decides.
func (p *progress) notify() {
	busy := p.nWork > 0 || (p.nTransit > 0 && p.gwWaiting == 0)
	if busy != p.busy {
		p.busy = busy
		if p.onBusy != nil {
			p.onBusy(busy)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// behind reports whether the gateway has caught up: no request's last
// upstream wait ended by mark (a seq), or deadline cut, without the step
// after it, no attempt the upstream received (answered at once) without
// it, and no attempt on its way while the gateway waits on nothing; and
// whether some attempt is in transit (admission may hold it, on a timer
// of the gateway's).
func (p *progress) behind(mark uint64) (caughtUp, transit bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	caughtUp = true
	for _, r := range p.req {
		if r.done {
			continue
		}
		if r.cut > r.stepped && r.cut <= mark {
			// A deadline cut the attempt; the upstream may not have
			// seen the cut yet (its wait still runs).
			caughtUp = false
		}
		if r.sent && r.stepped == 0 {
			// Sent at or before the read's instant: the simulator took
			// its first decision before the read.
			caughtUp = false
		}
		if r.upWaiting() {
			continue
		}
		if (r.upEnd > r.stepped && r.upEnd <= mark) || r.received {
			caughtUp = false
		}
		if r.transit && p.gwWaiting == 0 {
			// On its way to the upstream while the gateway waits on
			// nothing: its own work, no timer of its own.
			caughtUp = false
		}
		transit = transit || r.transit
	}
	return caughtUp, transit
}

// dueBy reports whether some upstream wait in progress is due to end by
// at, or some deadline of the gateway's is armed for at or before: an
// answer landing at an instant, and a timer running out at it, come before
// a read of that instant in the simulator.
func (p *progress) dueBy(at time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := at.UnixNano()
	for _, r := range p.req {
		if r.done {
			continue
		}
		if r.waits > 0 && !r.due.After(at) {
			return true
		}
		for _, d := range r.deadlines {
			if d <= ns {
				return true
			}
		}
	}
	return false
}

// lastDeadline is the latest gateway deadline armed in (at, by], or the
// zero time.
func (p *progress) lastDeadline(at, by time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var last int64
	a, b := at.UnixNano(), by.UnixNano()
	for _, r := range p.req {
		if r.done {
			continue
		}
		for _, d := range r.deadlines {
			if d > a && d <= b && d > last {
				last = d
			}
		}
	}
	if last == 0 {
		return time.Time{}
	}
	return time.Unix(0, last)
}

// awaitDue polls until no upstream wait due by at is still in progress and
// no gateway deadline due by at is still armed (bounded by quietBound): on
// a loaded machine the upstream's timer, or the gateway's (a real timer
// armed when the attempt's goroutine got to it), can fire after the read's
// own, though all end at the same instant.
func (p *progress) awaitDue(at time.Time) {
	start := time.Now()
	for p.dueBy(at) && time.Since(start) < quietBound {
		time.Sleep(time.Millisecond)
	}
}

// settledBefore reports whether nothing the gateway does is owed before
// instant at: no upstream wait or gateway deadline due before it still
// running, and no request waiting on the gateway's own work (sent and not
// yet decided, an answer or a cut not yet followed by its step, an
// attempt not yet at the upstream while the gateway waits on nothing).
func (p *progress) settledBefore(at time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := at.UnixNano()
	if p.busy {
		return false
	}
	for _, r := range p.req {
		if r.done {
			continue
		}
		for _, d := range r.deadlines {
			if d < ns {
				return false
			}
		}
		if r.waits > 0 && r.due.Before(at) {
			return false
		}
	}
	return true
}

// awaitSettled polls until the gateway has done everything due before
// instant at (settledBefore), bounded by quietBound: the simulator
// processes every event before an instant's arrivals and actions, and a
// loaded machine must not let the next instant's requests overtake the
// gateway's work on the last one (several attempts in a row, a breaker
// opening on the last of them).
func (p *progress) awaitSettled(at time.Time) {
	start := time.Now()
	for !p.settledBefore(at) && time.Since(start) < quietBound {
		time.Sleep(time.Millisecond)
	}
}

// quietBound bounds the wait for the gateway to catch up: its own work
// only, so reached only by a stalled machine.
const quietBound = 10 * time.Second

// awaitCaughtUp polls until the gateway took the step after every upstream
// wait that has ended so far, and every attempt on its way reached the
// upstream (bounded by quietBound), and no attempt is in transit while the
// gateway waits on purpose (bounded by transitBound: an attempt the
// gateway's admission queued waits on a timer of the gateway's). Waits
// ending meanwhile are not waited for: what the upstream did after the
// read began belongs to a later instant. An attempt answered at once is part of the instant, as in
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

// turnTaken reports whether request n no longer waits on the gateway's
// own work: it was answered, or it waits on purpose (an upstream wait, a
// gateway wait), as the simulator has it when the next arrival of the
// same instant comes.
func (p *progress) turnTaken(n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.req[n]
	if r == nil || r.done {
		return r != nil
	}
	core, transit := r.work()
	return !core && !(transit && p.gwWaiting == 0)
}

// awaitTurnTaken polls until request n took its turn (turnTaken) or its
// client has the answer (done), bounded by quietBound.
func (p *progress) awaitTurnTaken(n int, done <-chan struct{}) {
	start := time.Now()
	for !p.turnTaken(n) && time.Since(start) < quietBound {
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
		}
	}
}
