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
	waits   int    // upstream waits in progress
	upEnd   uint64 // seq of the last upstream wait's end
	stepped uint64 // seq of the last flow step
	done    bool
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

// upstream notes an upstream wait of request n beginning (+1) or ending (-1).
func (p *progress) upstream(n, d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.of(n)
	r.waits += d
	if d < 0 {
		p.seq++
		r.upEnd = p.seq
	}
}

// step notes a flow step of request n.
func (p *progress) step(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	p.of(n).stepped = p.seq
}

// finished notes that request n's client has its answer.
func (p *progress) finished(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.of(n).done = true
}

// behind reports whether some request's last upstream wait ended by
// mark (a seq) and the gateway has not taken the step after it yet.
func (p *progress) behind(mark uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.req {
		if !r.done && r.waits == 0 && r.upEnd > r.stepped && r.upEnd <= mark {
			return true
		}
	}
	return false
}

// quietBound bounds the wait for the gateway to catch up: its own work
// only, so reached only by a stalled machine.
const quietBound = 10 * time.Second

// awaitCaughtUp polls until the gateway took the step after every upstream
// wait that has ended so far, bounded by quietBound. Waits ending
// meanwhile are not waited for: what the upstream did after the read began
// belongs to a later instant.
func (p *progress) awaitCaughtUp() {
	p.mu.Lock()
	mark := p.seq
	p.mu.Unlock()
	deadline := time.Now().Add(quietBound)
	for p.behind(mark) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}
