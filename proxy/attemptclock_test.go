package proxy

import (
	"context"
	"testing"
	"time"
)

// clockCause waits (generously) for the attempt's context to end and
// returns its cause with the time it took.
func clockCause(t *testing.T, ctx context.Context, start time.Time) (error, time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx), time.Since(start)
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt was never cancelled")
		return nil, 0
	}
}

// docs/settings.md#defaults: the response-header phase runs out with the header timeout's
// cause (a transport header_timeout for the model), before the attempt's.
func TestAttemptClockHeaderTimeout(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	start := time.Now()
	c := startAttemptClock(time.Minute, errAttemptTimeout, 30*time.Millisecond, cancel)
	defer c.stop()
	cause, took := clockCause(t, ctx, start)
	if cause != errHeaderTimeout || took < 30*time.Millisecond {
		t.Fatalf("cause %v after %v, want the header timeout after ≥30ms", cause, took)
	}
}

// docs/settings.md#defaults firstContentMs / streamIdleMs for a JSON body: progress pushes
// the stall out, silence then ends the attempt as a stall, never earlier
// than the budget after the last progress.
func TestAttemptClockBodyStallCountsFromLastProgress(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	c := startAttemptClock(time.Minute, errAttemptTimeout, time.Minute, cancel)
	defer c.stop()
	c.headersIn(60 * time.Millisecond)
	for range 4 { // 4 × 30 ms of progress: past the 60 ms budget in all
		time.Sleep(30 * time.Millisecond)
		if ctx.Err() != nil {
			t.Fatalf("cancelled while the body was moving: %v", context.Cause(ctx))
		}
		c.progress(60 * time.Millisecond)
	}
	last := time.Now()
	cause, took := clockCause(t, ctx, last)
	if cause != errStall || took < 60*time.Millisecond {
		t.Fatalf("cause %v %v after the last progress, want a stall after ≥60ms", cause, took)
	}
}

// The whole-attempt bound (attemptMs, or the execution bound / request
// deadline with their own causes) holds even while the body keeps moving.
func TestAttemptClockWholeAttemptBound(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	start := time.Now()
	c := startAttemptClock(80*time.Millisecond, errExecTimeout, time.Minute, cancel)
	defer c.stop()
	c.headersIn(time.Minute)
	for ctx.Err() == nil && time.Since(start) < 10*time.Second {
		c.progress(time.Minute)
		time.Sleep(5 * time.Millisecond)
	}
	if cause := context.Cause(ctx); cause != errExecTimeout || time.Since(start) < 80*time.Millisecond {
		t.Fatalf("cause %v after %v, want the execution bound after ≥80ms", cause, time.Since(start))
	}
}

// A stream or an error body (headersIn(0)) runs under the whole-attempt
// bound only: the header budget no longer applies once headers are in.
func TestAttemptClockNoPhaseAfterHeaders(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	start := time.Now()
	c := startAttemptClock(150*time.Millisecond, errAttemptTimeout, 20*time.Millisecond, cancel)
	defer c.stop()
	c.headersIn(0)
	cause, took := clockCause(t, ctx, start)
	if cause != errAttemptTimeout || took < 150*time.Millisecond {
		t.Fatalf("cause %v after %v, want the attempt timeout after ≥150ms", cause, took)
	}
}

// A stopped clock never cancels.
func TestAttemptClockStop(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	c := startAttemptClock(20*time.Millisecond, errAttemptTimeout, 10*time.Millisecond, cancel)
	c.stop()
	time.Sleep(60 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("a stopped clock cancelled the attempt: %v", context.Cause(ctx))
	}
}

// docs/gateway.md phase table: connecting runs under connectMs alone, and
// the response-header budget starts once the connection is up. A dial
// longer than responseHeaderMs (here 200 ms against 60 ms) is not a header
// timeout; the header budget then runs from the dial's end. The dialer
// finds the clock through the attempt context's parent (clockCtx), which
// must not hide the request's cancellation.
func TestAttemptClockHeaderBudgetStartsAfterTheDial(t *testing.T) {
	req, cancelReq := context.WithCancel(context.Background())
	defer cancelReq()
	cc := &clockCtx{Context: req}
	ctx, cancel := context.WithCancelCause(cc)
	c := startAttemptClock(time.Minute, errAttemptTimeout, 60*time.Millisecond, cancel)
	cc.clock = c
	defer c.stop()
	if clockOf(ctx) != c {
		t.Fatal("the dialer cannot find the attempt clock")
	}
	b := c.suspend() // what dialUpstream does around the dial
	time.Sleep(200 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("cut during the dial: %v", context.Cause(ctx))
	}
	dialed := time.Now()
	c.progress(b)
	cause, took := clockCause(t, ctx, dialed)
	if cause != errHeaderTimeout || took < 60*time.Millisecond {
		t.Fatalf("cause %v %v after the dial, want the header timeout after ≥60ms", cause, took)
	}
	// The request's own cancellation still reaches an attempt context.
	req2, cancel2 := context.WithCancel(context.Background())
	ctx2, cancelAttempt := context.WithCancelCause(&clockCtx{Context: req2})
	defer cancelAttempt(nil)
	cancel2()
	select {
	case <-ctx2.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the request's cancellation did not reach the attempt")
	}
}
