package proxy

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// attemptClock cancels one upstream attempt at the first of its deadlines,
// with the cause its outcome is classified by. The plan (the whole
// attempt's bound, then the header, first-content and idle phases) and
// what ran out are model.TimerPlan's, the rule the simulator times
// attempts by (docs/budget.md#attempt-bound); the clock keeps the plan's
// moving parts in atomics (progress runs on the reading goroutine, fire on
// the timer's) and arms the timer. A stream's phases are the stream
// watchdogs' (streamWatch), which run on the same timer.
//
// One timer per attempt rather than one per deadline: every Go timer costs
// allocations and a timer-heap insertion, and adding one can wake an idle
// scheduler thread. Progress only records a time; when the timer fires
// before a phase has really run out it re-arms itself for the rest, so a
// silent upstream is caught by time, not only when bytes arrive (docs/streams.md#watchdogs-run-on-timers).
type attemptClock struct {
	t       *time.Timer
	cancel  context.CancelCauseFunc
	base    time.Time
	end     time.Duration // since base: the whole attempt
	endErr  error
	last    atomic.Int64 // ns since base: the phase's start or its last progress
	budget  atomic.Int64 // ns; 0 = no phase running
	stall   atomic.Bool  // the running phase is the body's (errStall), not the headers'
	stopped atomic.Bool
	cw      *clientWrites // told of a cut, when the clock is an attempt's (attemptRun)
	// The stream's watchdogs, once it streams: the timer is theirs too, and
	// once they are set every re-arm is made under their mutex.
	sw  atomic.Pointer[streamWatch]
	rep *deadlineReport // Options.Deadlines (proxy/deadlines.go); nil = unset
}

// startAttemptClock starts the clock of an attempt that may take end in
// all (endErr when it runs out) and header until its response headers.
func startAttemptClock(end time.Duration, endErr error, header time.Duration, cancel context.CancelCauseFunc) *attemptClock {
	c := &attemptClock{}
	c.start(end, endErr, header, cancel)
	return c
}

// start is startAttemptClock for a clock allocated with the attempt's
// context (attemptRun).
func (c *attemptClock) start(end time.Duration, endErr error, header time.Duration, cancel context.CancelCauseFunc) {
	c.cancel, c.base, c.end, c.endErr = cancel, time.Now(), end, endErr
	p := model.HeaderPlan(int64(end), model.CutAttempt, int64(header))
	c.budget.Store(p.Budget)
	_, first := p.Due(0)
	if c.rep != nil {
		c.rep.bound = c.rep.in(end) // before fire can read it
	}
	// fire re-arms c.t only after a progress call (at its first run a
	// deadline is always due: timers never fire early), and progress runs on
	// this goroutine after this store, publishing it through c.last.
	c.t = time.AfterFunc(time.Duration(first), c.fire)
	if c.rep != nil {
		c.rep.arm(c.rep.at(time.Duration(first), first >= int64(end)))
	}
}

// headersIn ends the header phase; a JSON body then runs under
// firstContent (0 = no phase: a stream, an error body).
func (c *attemptClock) headersIn(firstContent time.Duration) {
	c.headersInAt(time.Since(c.base), firstContent)
}

// headersInAt is headersIn with the head's arrival (since the clock's
// start) already read.
func (c *attemptClock) headersInAt(now, firstContent time.Duration) {
	c.stall.Store(true)
	c.progressAt(now, firstContent)
}

// progress records that the body moved and sets the budget until the
// next progress.
func (c *attemptClock) progress(budget time.Duration) { c.progressAt(time.Since(c.base), budget) }

func (c *attemptClock) progressAt(now, budget time.Duration) {
	c.last.Store(int64(now))
	if old := time.Duration(c.budget.Swap(int64(budget))); budget > 0 && (old <= 0 || budget < old) {
		// Due earlier than the timer may be armed for (the common
		// headers → first content → idle steps shorten it): re-arm now.
		// A later due is found by fire.
		c.t.Reset(max(0, min(budget, c.end-now)))
		if c.rep != nil {
			c.rep.arm(c.rep.at(max(0, budget), budget >= c.end-now))
		}
	}
}

func (c *attemptClock) fire() {
	if c.stopped.Load() {
		return
	}
	now := time.Since(c.base)
	p := c.plan()
	var cause error
	switch x, next := p.Due(int64(now)); x {
	case model.TimerBound:
		cause = c.endErr
	case model.TimerHeader:
		cause = errHeaderTimeout
	case model.TimerBody:
		cause = errStall
	default:
		if c.rep != nil {
			// The plan's own next deadline; the watchdogs report theirs.
			c.rep.arm(c.rep.at(time.Duration(next)-now, next >= int64(c.end)))
		}
		sw := c.sw.Load()
		if sw != nil && sw.fire(time.Duration(next)-now) {
			return
		}
		c.t.Reset(time.Duration(next) - now)
		if sw == nil && c.sw.Load() != nil {
			// The watchdogs started (and armed the timer) while this
			// ran: the re-arm above may be later than theirs.
			c.sw.Load().rearm()
		}
		return
	}
	if c.rep != nil {
		if cause == c.endErr {
			// The real timer may have been armed for a phase and fired
			// late: the bound runs out at its own instant.
			c.rep.arm(c.rep.bound)
		}
		if early := c.rep.early(); early > 0 {
			c.t.Reset(early) // the reporting shell's clock has not reached it yet
			return
		}
		if c.rep.pastBound() {
			cause = c.endErr
		}
		c.rep.end(true) // before the cut: the flow step after it comes later
	}
	c.cut(cause)
}

// plan is the clock's timer plan as it stands.
func (c *attemptClock) plan() model.TimerPlan {
	return model.TimerPlan{End: int64(c.end), Last: c.last.Load(), Budget: c.budget.Load(), Body: c.stall.Load()}
}

// next is how long until the next deadline of the clock's own plan, and
// whether that deadline is the attempt's bound; ok is false when one is
// due now (the timer then fires at once and cuts).
func (c *attemptClock) next() (in time.Duration, bound, ok bool) {
	now := time.Since(c.base)
	x, next := c.plan().Due(int64(now))
	return time.Duration(next) - now, next >= int64(c.end), x == model.TimerNone
}

// rest is how long until the next deadline of the clock's own plan (0
// when one is due).
func (c *attemptClock) rest() time.Duration {
	if in, _, ok := c.next(); ok {
		return in
	}
	return 0
}

// reportPlan reports (Options.Deadlines) the instant the clock's own plan
// is next due at, for when the stream watchdogs re-arm the shared timer
// away from the instant last reported. A deadline already due is left to
// fire, which reports it.
func (c *attemptClock) reportPlan() {
	if in, bound, ok := c.next(); ok {
		c.rep.arm(c.rep.at(in, bound))
	}
}

// cut cancels the attempt with cause: a timer of its plan ran out, or a
// stream watchdog aborted it (streamWatch). The client gets grace to take
// what is pending (clientWrites, request.go).
func (c *attemptClock) cut(cause error) {
	c.cancel(cause)
	if c.cw != nil {
		c.cw.cut()
	}
}

func (c *attemptClock) stop() {
	c.stopped.Store(true)
	c.t.Stop()
	if c.rep != nil {
		c.rep.end(false)
	}
}

// suspend stops the running phase's budget and returns it: a new
// connection is being dialled, which upstreamTimeouts.connectMs bounds on
// its own, so the response-header budget starts once it is connected
// (progress(budget) restarts it). The whole attempt's bound keeps running.
func (c *attemptClock) suspend() time.Duration { return time.Duration(c.budget.Swap(0)) }

// timerCause names the timer of the attempt's plan behind a cancel cause
// (model.TimerPlan.TimerOutcome gives its outcome); ok is false for any
// other cause. A stream watchdog's stall cancels with errStall too: a
// stalled body either way.
func timerCause(err error) (p model.TimerPlan, x model.TimerExpiry, ok bool) {
	switch err {
	case errHeaderTimeout:
		return p, model.TimerHeader, true
	case errStall:
		return p, model.TimerBody, true
	case errAttemptTimeout:
		return model.TimerPlan{Cut: model.CutAttempt}, model.TimerBound, true
	case errExecTimeout:
		return model.TimerPlan{Cut: model.CutExecution}, model.TimerBound, true
	case errDeadline:
		return model.TimerPlan{Cut: model.CutDeadline}, model.TimerBound, true
	}
	return p, model.TimerNone, false
}

// clockCtx is the parent of an attempt's context. It carries the attempt
// clock to the dialer and is otherwise the request's context. Under a
// request whose clientWrites watches its context (detached), it reports
// no Done: context.WithCancelCause under it then registers nowhere, and
// the request's one hook (clientWrites.requestEnded) cancels the running
// attempt instead, so an attempt adds no entry to the request context's
// children. Otherwise its Done and cancelCtx are the request's own, and
// the attempt's context registers with the request's (no goroutine
// either way).
type clockCtx struct {
	context.Context
	clock    *attemptClock
	detached bool
}

func (c *clockCtx) Done() <-chan struct{} {
	if c.detached {
		return nil
	}
	return c.Context.Done()
}

func (c *clockCtx) Err() error {
	if c.detached {
		return nil
	}
	return c.Context.Err()
}

type clockKey struct{}

func (c *clockCtx) Value(k any) any {
	if k == (clockKey{}) {
		return c.clock
	}
	return c.Context.Value(k)
}

// clockOf is the attempt clock of an upstream dial's context, or nil.
func clockOf(ctx context.Context) *attemptClock {
	c, _ := ctx.Value(clockKey{}).(*attemptClock)
	return c
}
