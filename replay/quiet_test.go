package replay

import (
	"slices"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/proxy"
)

// docs/replay.md, "The gateway's deadlines" and "Instants in order": a
// gateway deadline due by an instant holds a read of that instant and the
// dispatch of the next one until it fires; a cut it made holds them until
// the gateway's next step; the clock does not pass an upstream wait or a
// gateway deadline due and not yet over; and the gateway is busy (its
// clock stands) from a request's arrival to its first decision, from an
// upstream answer or a cut to the step after it, and while an attempt is
// on its way to the upstream, unless the gateway waits on purpose.
func TestProgressWaitsForGatewayDeadlines(t *testing.T) {
	p := newProgress()
	var busy []bool
	p.onBusy = func(b bool) { busy = append(busy, b) }
	var bound int64
	p.onBound = func(ns int64) { bound = ns }
	wantBound := func(want time.Time) {
		t.Helper()
		if (want.IsZero() && bound != 0) || (!want.IsZero() && bound != want.UnixNano()) {
			t.Fatalf("the clock's bound is %v, want %v", time.Unix(0, bound), want)
		}
	}
	t0 := time.Unix(1000, 0)
	at := t0.Add(30 * time.Second)
	wantBusy := func(want bool) {
		t.Helper()
		if p.busy != want {
			t.Fatalf("busy %v, want %v", p.busy, want)
		}
	}

	p.sentReq(1)
	wantBusy(true) // its first decision is the gateway's work
	p.step(1, true)
	wantBusy(true) // an attempt on its way
	p.gatewayWaiting(1)
	wantBusy(false) // admission may hold it
	p.gatewayWaiting(-1)
	p.receivedCall(1)
	p.upstream(1, 1, t0.Add(3*time.Minute))
	wantBusy(false) // the upstream waits on purpose
	wantBound(t0.Add(3 * time.Minute))
	if !p.settledBefore(at) || p.dueBy(at) {
		t.Fatal("a wait due after the instant holds it")
	}

	p.deadline(1, at, proxy.DeadlineArmed) // the first-content watchdog, due at the instant
	wantBound(at)                          // the clock does not pass it before it fired
	if !p.dueBy(at) {
		t.Fatal("a deadline due at the instant does not hold its read")
	}
	if !p.settledBefore(at) || p.settledBefore(at.Add(time.Millisecond)) {
		t.Fatal("a deadline holds the dispatch of the instants after it, only")
	}
	p.deadline(1, at, proxy.DeadlineFired)
	wantBound(t0.Add(3 * time.Minute))
	if p.dueBy(at) {
		t.Fatal("a fired deadline still holds the read")
	}
	wantBusy(true) // the step after the cut is owed, though the upstream still waits
	p.mu.Lock()
	mark := p.seq
	p.mu.Unlock()
	if caughtUp, _ := p.behind(mark); caughtUp {
		t.Fatal("caught up before the step after the cut")
	}
	p.upstream(1, -1, time.Time{}) // the upstream sees the cut
	p.step(1, true)                // the next attempt
	if caughtUp, _ := p.behind(mark); caughtUp {
		t.Fatal("caught up while the next attempt is on its way, the gateway waiting on nothing")
	}
	p.receivedCall(1)
	p.upstream(1, 1, at.Add(time.Second))
	if caughtUp, _ := p.behind(mark); !caughtUp {
		t.Fatal("not caught up once the next attempt waits at the upstream")
	}
	p.deadline(1, at.Add(30*time.Second), proxy.DeadlineArmed)
	p.deadline(1, at.Add(30*time.Second), proxy.DeadlineDisarmed)
	p.finished(1)
	wantBusy(false)
	wantBound(time.Time{})
	if !p.settledBefore(at.Add(time.Hour)) {
		t.Fatal("a finished request holds the dispatch")
	}
	if want := []bool{true, false, true, false, true, false}; !slices.Equal(busy, want) {
		t.Fatalf("onBusy told %v, want %v", busy, want)
	}
}

// docs/replay.md, "`at:` reads": a read waits for the gateway's first
// decision on every request sent by then, and an upstream wait of an
// attempt a deadline cut, which the upstream has not seen end yet, does
// not hide the next attempt: its way to the upstream, and the step after
// its answer, are the gateway's work, as in the simulator's instant.
func TestProgressStaleWaitDoesNotHideNextAttempt(t *testing.T) {
	p := newProgress()
	t0 := time.Unix(1000, 0)
	caughtUp := func() bool {
		p.mu.Lock()
		mark := p.seq
		p.mu.Unlock()
		c, _ := p.behind(mark)
		return c
	}
	p.sentReq(1)
	if caughtUp() {
		t.Fatal("caught up before the first decision on a request sent")
	}
	p.step(1, true)
	p.receivedCall(1)
	p.upstream(1, 1, t0.Add(5*time.Second)) // k1 never answers
	p.deadline(1, t0.Add(5*time.Second), proxy.DeadlineArmed)
	p.deadline(1, t0.Add(5*time.Second), proxy.DeadlineFired)
	p.step(1, true) // the next attempt; k1's wait still runs
	if caughtUp() || !p.busy {
		t.Fatal("the cut attempt's wait hides the next attempt on its way")
	}
	p.receivedCall(1)              // answered at once: no wait
	p.upstream(1, -1, time.Time{}) // k1 sees the cut now
	if caughtUp() || !p.busy {
		t.Fatal("the end of the cut attempt's wait hides the step owed after the next answer")
	}
	p.step(1, false) // the answer
	if !caughtUp() || p.busy {
		t.Fatal("not caught up after the answer's step")
	}
}
