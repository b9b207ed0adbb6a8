package proxy

import (
	"context"
	"sync"
	"time"
)

// DeadlineEvent is what Options.Deadlines is told of one timer of an
// upstream attempt.
type DeadlineEvent int

const (
	// DeadlineArmed: the timer is armed for the instant given.
	DeadlineArmed DeadlineEvent = iota + 1
	// DeadlineDisarmed: the deadline armed for the instant given no longer
	// holds: the attempt ended first, or progress moved it (a new
	// DeadlineArmed follows).
	DeadlineDisarmed
	// DeadlineFired: the deadline armed for the instant given ran out and
	// cut the attempt; the gateway's next flow step for the request comes
	// from its own work.
	DeadlineFired
)

// deadlineReport tells Options.Deadlines of one timer of an attempt: the
// attempt's clock (attemptClock) or its stream watchdogs (streamWatch).
// It is nil when the option is unset, so the production path pays one nil
// check per arm.
type deadlineReport struct {
	fn     func(id string, at time.Time, ev DeadlineEvent)
	now    func() time.Time // the gateway's clock (Options.Now)
	id     string           // the request's log id
	mu     sync.Mutex
	armed  time.Time // zero = none
	closed bool      // the timer is done: a late re-arm (a fire racing stop) is not one
	// bound is the instant the attempt's whole bound runs out on the
	// gateway's clock (attemptClock; zero for the stream watchdogs), set
	// before the timer is armed. The attempt clock counts real time since
	// its start, which runs ahead of a shell's clock that stood while the
	// gateway worked: the bound's instant is the clock at the start plus the
	// bound, never the clock at a re-arm plus the real time left.
	bound time.Time
}

// newDeadlineReport returns the report of an attempt of request id, or of
// one of its deliberate waits (a cooldown wait, a place in an admission
// queue, a paced dispatch slot); nil when nobody listens. A wait's caller
// arms it for the model's instant (a cooldown's end, a queue budget's, a
// slot's), so a shell that drives Now (the replay) holds its clock there
// until the wait ended, and reads state at that instant only once it has,
// as the simulator processes its timer before time moves past it. A
// wait's real timer that fires before Now has reached the instant (early)
// goes on until it has.
func (g *Gateway) newDeadlineReport(id string) *deadlineReport {
	if g.deadlines == nil {
		return nil
	}
	return &deadlineReport{fn: g.deadlines, now: g.now, id: id}
}

// sibling is a report of another timer of the same attempt (its stream
// watchdogs beside its clock); nil when nobody listens.
func (d *deadlineReport) sibling() *deadlineReport {
	if d == nil {
		return nil
	}
	return &deadlineReport{fn: d.fn, now: d.now, id: d.id}
}

// in is the instant on the gateway's clock a real timer armed now for
// delay is due at. A shell that drives Now lets its clock stand while the
// gateway works (a dial the header budget waits for, say), so the instant
// counts from the clock as the timer is armed, not from the attempt's
// start. Whole milliseconds, as the model counts time, rounded up: the
// attempt's bound comes from the model's milliseconds (model.AttemptBound),
// and a shell that holds its clock at the instant must not hold it short
// of the deadline the model set.
func (d *deadlineReport) in(delay time.Duration) time.Time {
	t := d.now().Add(delay)
	if r := t.Truncate(time.Millisecond); r.Before(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

// arm reports the timer armed for at (disarming what it was armed for).
func (d *deadlineReport) arm(at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || at.Equal(d.armed) {
		return
	}
	if !d.armed.IsZero() {
		d.fn(d.id, d.armed, DeadlineDisarmed)
	}
	d.armed = at
	d.fn(d.id, at, DeadlineArmed)
}

// at is the instant to report for a timer armed now for delay, which is
// the attempt's bound when toBound: what runs out at the bound runs out at
// its instant, and no phase's instant passes it.
func (d *deadlineReport) at(delay time.Duration, toBound bool) time.Time {
	if toBound {
		return d.bound
	}
	if t := d.in(delay); t.Before(d.bound) {
		return t
	}
	return d.bound
}

// pastBound says the gateway's clock has reached the attempt's bound: a
// phase that ran out with it is cut as the bound (the bound wins a tie,
// model.TimerPlan.Due).
func (d *deadlineReport) pastBound() bool { return !d.now().Before(d.bound) }

// early is how long the gateway's clock still has to go to the armed
// instant when the attempt clock's real timer fires (0 = none). A shell
// that drives Now (the replay) lets its clock stand while the gateway
// works; the attempt's deadline runs out on that clock, as the stream
// watchdogs' do, not before the shell has reached its instant.
func (d *deadlineReport) early() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.armed.IsZero() {
		return 0
	}
	if w := d.armed.Sub(d.now()); w > 0 {
		return max(w, time.Millisecond)
	}
	return 0
}

// end reports the armed deadline gone, and the timer done: fired (it cut
// the attempt) or disarmed.
func (d *deadlineReport) end(fired bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.armed.IsZero() {
		return
	}
	ev := DeadlineDisarmed
	if fired {
		ev = DeadlineFired
	}
	d.fn(d.id, d.armed, ev)
	d.armed = time.Time{}
}

// sleepOn sleeps d and then, with rep (nil = Options.Deadlines unset),
// until the gateway's clock has reached the instant rep is armed for: a
// paced slot is booked, and the limiter lets it go when woken whatever
// the clock says, so its real sleep must not end it early on a shell's
// clock that stood meanwhile. It reports false when ctx ended first.
func sleepOn(ctx context.Context, d time.Duration, rep *deadlineReport) bool {
	if !sleepCtx(ctx, d) {
		return false
	}
	for rep != nil {
		early := rep.early()
		if early <= 0 {
			return true
		}
		if !sleepCtx(ctx, early) {
			return false
		}
	}
	return true
}
