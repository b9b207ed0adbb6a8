package replay

import (
	"sync"
	"time"
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
	maxQ    time.Duration // the quantum's bound (maxQuantum)
	wallClk bool          // plain wall clock (Options.WallClock)
	t0      time.Time
	last    time.Duration // the latest offset read: the clock never goes back
	// Waiting time: while the fault upstream waits on purpose (a latency,
	// a chunk interval, a stall; faults.Options.Waiting) or the gateway
	// does (a cooldown wait, an admission queue, a paced slot;
	// proxy.Options.Waiting), time passes in the simulator too; the
	// gateway's own work, and the upstream's, take none. Within the
	// quantum the clock moves by the time some such wait was in progress
	// since the dispatch.
	calls     int
	callSince time.Time
	callAcc   time.Duration
}

// waiting marks a deliberate wait of the fault upstream or the gateway
// beginning (+1) or ending (-1).
func (c *schedClock) waiting(d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.calls > 0 {
		c.callAcc += now.Sub(c.callSince)
	}
	c.calls += d
	c.callSince = now
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
	if c.frozen {
		return c.epoch.Add(c.at) // an `at:` read sees the instant itself
	}
	off := c.at
	{
		if el := time.Since(c.wall); el >= c.quantum {
			off += el
		} else {
			busy := c.callAcc
			if c.calls > 0 {
				busy += time.Since(c.callSince)
			}
			off += min(busy, el)
		}
	}
	if c.next >= 0 && off > c.next {
		off = c.next
	}
	off = max(off, c.last)
	c.last = off
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
	now := time.Now()
	if at > c.at || c.calls == 0 {
		// A new instant: upstream time counts from here. (Arrivals of the
		// same instant re-dispatch it while calls may be running.)
		c.callAcc, c.callSince = 0, now
	}
	c.at, c.wall, c.next = max(at, c.at), now, next
	c.quantum = min(c.maxQ, gap/2)
}

func (c *schedClock) freeze(f bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = f
	if !f {
		c.wall = time.Now() // time resumes from the instant
		c.callAcc, c.callSince = 0, c.wall
	}
}

// maxQuantum bounds how long after a dispatch the clock moves by waiting
// time only: the gateway's work on an instant (several attempts in a row,
// under the race detector on a busy machine) is no time at all in the
// simulator, and a cooldown it sets must end where the simulator's ends.
// The first request of a run is the costliest (fresh connections to the
// upstream and the gateway's first allocations): 250 ms was too short for
// it under the race detector on a loaded 2-core machine. Past it the clock follows the wall again, because not every timer that
// decides an outcome is a deliberate wait: the gateway's stream watchdogs
// and attempt deadlines run on real timers while the upstream holds an
// answer without sending.
const maxQuantum = 500 * time.Millisecond
