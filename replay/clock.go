package replay

import (
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/sim"
)

// schedClock is the in-process gateway's (and fault upstream's) clock: the
// scenario's virtual epoch plus the scaled offset of the last instant the
// replay dispatched, plus the real time since that dispatch. Real time
// flows between events, so upstream latencies and the gateway's timers are
// real; but a scheduler that runs late (a loaded machine) does not move the
// gateway's idea of when an arrival happened, and the first `quantum` of
// real time after a dispatch reads as the instant itself, so the few
// milliseconds the gateway needs to process an instant's events do not
// decide a boundary the simulator decides at one instant (a cooldown ending
// exactly when the next request arrives). While an `at:` expect is read the
// clock stands still at its instant. It never runs past the next scheduled
// instant before that instant is dispatched.
type schedClock struct {
	mu      sync.Mutex
	epoch   time.Time
	at      time.Duration // last dispatched instant (scaled)
	wall    time.Time     // when it was dispatched
	next    time.Duration // the next scheduled instant; -1 = none
	frozen  bool
	quantum time.Duration
	maxQ    time.Duration // the quantum's bound for this file (quantumFor)
	wallClk bool          // plain wall clock (Options.WallClock)
	t0      time.Time
}

func (c *schedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t0.IsZero() {
		return c.epoch
	}
	if c.wallClk {
		return c.epoch.Add(time.Since(c.t0))
	}
	off := c.at
	if !c.frozen {
		if el := time.Since(c.wall); el >= c.quantum {
			off += el
		}
	}
	if c.next >= 0 && off > c.next {
		off = c.next
	}
	return c.epoch.Add(off)
}

func (c *schedClock) start(t0 time.Time, next time.Duration) {
	c.mu.Lock()
	c.t0, c.wall, c.at, c.next = t0, t0, 0, next
	c.mu.Unlock()
}

// dispatch moves the clock to instant at (the next instant after it is
// next, -1 for none).
func (c *schedClock) dispatch(at, next time.Duration, gap time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.wall, c.next = max(at, c.at), time.Now(), next
	c.quantum = min(c.maxQ, gap/2)
}

func (c *schedClock) freeze(f bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = f
	if !f {
		c.wall = time.Now() // time resumes from the instant
	}
}

// maxQuantum bounds how long after a dispatch the clock reads the instant
// itself: the gateway's work on an instant (several attempts in a row,
// under the race detector on a busy machine) is no time at all in the
// simulator, and a cooldown it sets must end where the simulator's ends.
const maxQuantum = 100 * time.Millisecond

// quantumFor is the quantum of a (scaled) scenario: maxQuantum, or half
// the shortest duration the fault upstream schedules (a latency, jitter,
// chunk interval, stall, or a slow stream's chunk time), so that every
// scheduled wait moves the clock as it moves the simulator's.
func quantumFor(sc *sim.Scenario) time.Duration {
	q := maxQuantum
	consider := func(d time.Duration) {
		if d > 0 {
			q = min(q, d/2)
		}
	}
	visit := func(r *faults.Response) {
		consider(r.Latency)
		consider(r.Jitter)
		consider(r.Stream.Interval)
		consider(r.Stream.StallFor)
		if r.Stream.BytesPerSecond > 0 {
			consider(time.Duration(float64(faults.ChunkBytes) / float64(r.Stream.BytesPerSecond) * float64(time.Second)))
		}
	}
	for i := range sc.Rules {
		if r := sc.Rules[i].Respond; r != nil {
			visit(r)
		}
		for j := range sc.Rules[i].Sequence {
			visit(&sc.Rules[i].Sequence[j])
		}
	}
	return max(q, time.Millisecond)
}
