package proxy

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"
)

// deadlines records the deadlines a request's clientWrites sets on the
// client connection (what http.ResponseController calls).
type deadlines struct {
	*httptest.ResponseRecorder
	read, write []time.Time
}

func (d *deadlines) SetReadDeadline(t time.Time) error  { d.read = append(d.read, t); return nil }
func (d *deadlines) SetWriteDeadline(t time.Time) error { d.write = append(d.write, t); return nil }

func newDeadlines() *deadlines { return &deadlines{ResponseRecorder: httptest.NewRecorder()} }

// watchedReading is a request's clientWrites watching its context, with
// the body being read; cancel ends the request.
func watchedReading() (*deadlines, *clientWrites, context.CancelFunc) {
	d := newDeadlines()
	ctx, cancel := context.WithCancel(context.Background())
	c := &clientWrites{}
	c.watch(ctx, d, time.Second)
	c.setReading(true)
	return d, c, cancel
}

// A cut gives the client grace only while an attempt runs, once per
// attempt; a client that took what was written has the deadline cleared
// when the attempt ends, so the next attempt streams unbounded.
func TestClientWritesGraceOnlyWhileAnAttemptRuns(t *testing.T) {
	d := newDeadlines()
	c := clientWrites{w: d, grace: 5 * time.Second}
	c.cut() // between attempts: nothing is pending a client could hold
	if len(d.write) != 0 {
		t.Fatalf("a cut outside an attempt set %d write deadlines", len(d.write))
	}
	c.begin(nil)
	before := time.Now()
	c.cut()
	c.cut() // the clock and a watchdog may both cut: one deadline
	if len(d.write) != 1 || d.write[0].Before(before.Add(5*time.Second)) {
		t.Fatalf("write deadlines %v, want one at the grace", d.write)
	}
	c.end(true, false)
	if len(d.write) != 2 || !d.write[1].IsZero() {
		t.Fatalf("write deadlines %v, want the grace cleared once the client took the bytes", d.write)
	}
	c.begin(nil)
	c.end(true, false)
	if len(d.write) != 2 {
		t.Fatalf("an attempt nobody cut set a deadline: %v", d.write)
	}
	c.begin(nil)
	c.cut()
	c.end(true, true) // the client went away: the deadline stays
	if len(d.write) != 3 || d.write[2].IsZero() {
		t.Fatalf("write deadlines %v, want the grace kept for a client that is gone", d.write)
	}
}

// The request's context ending (the client gone, the shutdown's cut)
// reaches the connection through the request's one hook: a body read in
// progress is cut at once, a running attempt gets the grace, and an
// attempt begun after the end is cut as it begins.
func TestClientWritesRequestEndCutsReadAndAttempts(t *testing.T) {
	d, c, cancel := watchedReading()
	cancel()
	eventually(t, "the body read cut", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(d.read) == 1
	})
	c.setReading(false)
	if len(d.write) != 0 {
		t.Fatalf("no attempt ran, yet write deadlines %v", d.write)
	}
	c.begin(nil)
	if len(d.write) != 1 || d.write[0].IsZero() {
		t.Fatalf("an attempt begun after the request ended: write deadlines %v, want the grace at once", d.write)
	}
	c.end(false, false)
	c.release()
}

// Once the handler returned the connection may carry the next request:
// a request-end hook that runs late leaves it alone.
func TestClientWritesLeaveTheConnectionAfterRelease(t *testing.T) {
	d, c, cancel := watchedReading()
	c.begin(nil)
	c.release()
	cancel()
	c.requestEnded() // as a hook that had already started would run
	if len(d.read)+len(d.write) != 0 {
		t.Fatalf("deadlines set after the handler returned: read %v write %v", d.read, d.write)
	}
}

// An attempt's context does not register with the request's (clockCtx):
// the request's end reaches it through the request's one hook, which
// cancels it with the request's cause, as a context under the request's
// would be; one begun after the end is cancelled as it begins.
func TestClientWritesRequestEndCancelsTheAttempt(t *testing.T) {
	d := newDeadlines()
	rctx, end := context.WithCancelCause(context.Background())
	c := &clientWrites{}
	c.watch(rctx, d, time.Second)
	run := &attemptRun{}
	run.clockCtx = clockCtx{Context: rctx, clock: &run.clock, detached: c.watching()}
	actx, cancel := context.WithCancelCause(&run.clockCtx)
	defer cancel(nil)
	c.begin(cancel)
	end(errShutdown)
	<-actx.Done() // the request's end cancels the attempt
	if context.Cause(actx) != errShutdown {
		t.Fatalf("the attempt's cause %v, want the request's (%v)", context.Cause(actx), errShutdown)
	}
	c.end(false, false)

	next, cancelNext := context.WithCancelCause(&clockCtx{Context: rctx, detached: true})
	defer cancelNext(nil)
	c.begin(cancelNext)
	if context.Cause(next) != errShutdown {
		t.Fatalf("an attempt begun after the request ended: cause %v, want the request's", context.Cause(next))
	}
	c.end(false, false)
	c.release()
}
