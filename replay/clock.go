package replay

import (
	"sync"
	"time"
)

// schedClock is the in-process gateway's (and fault upstream's) clock: the
// scenario's virtual epoch plus the scaled offset of the last instant the
// replay dispatched, plus the time since that dispatch. Real time flows
// between events, so upstream latencies and the gateway's timers are real;
// but a scheduler that runs late (a loaded machine) does not move the
// gateway's idea of when an arrival happened, the real time the gateway
// spends on work of its own does not count (setBusy), and the first
// `quantum` of the rest after a dispatch moves the clock only by waiting
// time, so the milliseconds the gateway needs to process an instant's
// events do not decide a boundary the simulator decides at one instant (a
// cooldown ending exactly when the next request arrives). While an `at:`
// expect is read the clock stands still at its instant. It never runs past
// the next scheduled instant before that instant is dispatched.
type schedClock struct {
	mu     sync.Mutex
	epoch  time.Time
	at     time.Duration // last dispatched instant (scaled)
	wall   time.Time     // when it was dispatched
	next   time.Duration // the next scheduled instant; -1 = none
	frozen bool
	// frozenAt: a read stands here instead, when a deadline of the
	// gateway's falls just after the instant (readAt).
	frozenAt time.Duration
	quantum  time.Duration
	maxQ     time.Duration // the quantum's bound (maxQuantum)
	wallClk  bool          // plain wall clock (Options.WallClock)
	t0       time.Time
	last     time.Duration // the latest offset read: the clock never goes back
	// Waiting time: while the fault upstream waits on purpose (a latency,
	// a chunk interval, a stall; faults.Options.Waiting) or the gateway
	// does (a cooldown wait, an admission queue, a paced slot;
	// proxy.Options.Waiting), time passes in the simulator too; the
	// gateway's own work, and the upstream's, take none. Within the
	// quantum the clock moves by the time some such wait was in progress
	// since the dispatch while the gateway had no work in hand (busy): the
	// simulator takes a decision at its instant, before any wait of
	// another request moves time on, and the waits end on this clock
	// (their due instants), so a wait that runs while the gateway works
	// only ends later in real time.
	calls     int
	callSince time.Time
	callAcc   time.Duration
	// Busy time: while the gateway has work of its own in hand for some
	// request (progress.notify: a decision to make after an arrival, an
	// answer or a deadline's cut; an attempt on its way to the upstream)
	// the simulator's clock stands; the real time it takes since the
	// dispatch does not count past the quantum either.
	busy      bool
	busySince time.Time
	busyAcc   time.Duration
	// bound: the earliest instant (Unix ns; 0 = none) an upstream wait or
	// a gateway deadline of a request in flight is due (progress): the
	// clock does not pass it until that wait ended or the deadline fired
	// and its step was taken, as the simulator processes an event before
	// time moves past it. A loaded machine fires the upstream's 20 ms
	// latency timer late; the extra is no time.
	bound int64
	// skew: the time since the dispatch the clock stood at a bound (less
	// from the time that counts).
	skew time.Duration
}

// setBound sets the bound (progress.onBound). The time the clock stood at
// the old bound while its wait or deadline was late is no time: it goes
// to the skew, so the clock moves on from the bound, not past it by the
// lateness.
func (c *schedClock) setBound(ns int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bound != 0 && !c.t0.IsZero() && !c.wallClk && !c.frozen {
		b := time.Duration(c.bound - c.epoch.UnixNano())
		if raw := c.raw(); raw > b && (c.next < 0 || b < c.next) {
			c.skew += raw - max(b, c.at)
		}
	}
	c.bound = ns
}

// setBusy marks the gateway's own work in hand beginning or ending.
func (c *schedClock) setBusy(b bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b == c.busy {
		return
	}
	now := time.Now()
	if c.busy {
		c.busyAcc += now.Sub(c.busySince)
	}
	c.flushWaited(now)
	c.busy, c.busySince = b, now
}

// flushWaited adds the waiting time that counts up to now to callAcc and
// starts counting it again from now (c.mu held).
func (c *schedClock) flushWaited(now time.Time) {
	if c.calls > 0 && !c.busy {
		c.callAcc += now.Sub(c.callSince)
	}
	c.callSince = now
}

// idleSince is the real time since the dispatch less the gateway's busy
// time (c.mu held).
func (c *schedClock) idleSince(el time.Duration) time.Duration {
	busy := c.busyAcc
	if c.busy {
		busy += time.Since(c.busySince)
	}
	return max(0, el-busy)
}

// resetBusy starts the busy time over at now (c.mu held).
func (c *schedClock) resetBusy(now time.Time) {
	c.busyAcc = 0
	if c.busy {
		c.busySince = now
	}
}

// waiting marks a deliberate wait of the fault upstream or the gateway
// beginning (+1) or ending (-1).
func (c *schedClock) waiting(d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushWaited(time.Now())
	c.calls += d
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
		return c.epoch.Add(max(c.at, c.frozenAt)) // an `at:` read sees the instant itself
	}
	off := c.raw()
	if c.next >= 0 && off > c.next {
		off = c.next
	}
	if c.bound != 0 {
		off = min(off, time.Duration(c.bound-c.epoch.UnixNano()))
	}
	off = max(off, c.last)
	c.last = off
	return c.epoch.Add(off)
}

// raw is the clock's offset before its bounds: the instant plus the time
// that counts since its dispatch, less the skew (c.mu held).
func (c *schedClock) raw() time.Duration {
	el := time.Since(c.wall)
	waited := c.callAcc
	if c.calls > 0 && !c.busy {
		waited += time.Since(c.callSince)
	}
	adv := min(waited, el)
	if idle := c.idleSince(el); idle >= c.quantum {
		adv = max(adv, idle)
	}
	return c.at + max(0, adv-c.skew)
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
		c.skew = 0
	}
	c.at, c.wall, c.next = max(at, c.at), now, next
	c.quantum = min(c.maxQ, gap/2)
	c.resetBusy(now)
}

// standAt moves a read's standing clock to instant at, later than its own.
func (c *schedClock) standAt(at time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozenAt = at
}

func (c *schedClock) freeze(f bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen, c.frozenAt = f, 0
	if !f {
		c.wall = time.Now() // time resumes from the instant
		c.callAcc, c.callSince = 0, c.wall
		c.skew = 0
		c.resetBusy(c.wall)
	}
}

// maxQuantum bounds how long after a dispatch the clock moves by waiting
// time only: the gateway's work on an instant is no time at all in the
// simulator, and a cooldown it sets must end where the simulator's ends.
// Most of that work is known and does not count at all (setBusy); the
// quantum covers what the replay does not see (a store write, a released
// permit, an answer on its way to the client). Past it the clock
// follows the real time outside the gateway's work again, because not
// every timer that decides an outcome is a deliberate wait: the gateway's
// stream watchdogs and attempt deadlines run on real timers while the
// upstream holds an answer without sending.
const maxQuantum = 500 * time.Millisecond
