package proxy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// shellClock is a reporting shell's clock (Options.Now) that stands until
// the test moves it, and the Options.Deadlines events it was told.
type shellClock struct {
	mu     sync.Mutex
	now    time.Time
	events []reportedDeadline
}

type reportedDeadline struct {
	at time.Time
	ev DeadlineEvent
}

func (c *shellClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *shellClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *shellClock) report(_ string, at time.Time, ev DeadlineEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, reportedDeadline{at, ev})
}

func (c *shellClock) told() []reportedDeadline {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]reportedDeadline(nil), c.events...)
}

// endsOnTheShellsClock runs wait (which reports to rep) with the shell's
// clock standing at t0 for longer than the wait's real timer, checks it
// has not ended, then moves the clock to due and returns once it has.
func endsOnTheShellsClock(t *testing.T, c *shellClock, due time.Time, wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); wait() }()
	// The real timer runs out meanwhile; the shell's clock has not moved.
	select {
	case <-done:
		t.Fatalf("the wait ended before the shell's clock reached its instant %v", due)
	case <-time.After(150 * time.Millisecond):
	}
	c.set(due)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end once the shell's clock reached its instant")
	}
}

// The gateway's deliberate waits are reported through Options.Deadlines
// (proxy/deadlines.go; docs/replay.md, "The gateway's waits") with their
// instant on the gateway's clock, and run out on that clock: a cooldown
// wait at the model's instant (the step's time plus the wait, fired: the
// flow step after it is owed), an admission queue's budget (fired: the
// refusal's step is owed), a paced slot (disarmed as the attempt goes on).
// A shell whose clock stood while the real timer ran (the replay, on a
// loaded machine) sees none of them end before its clock reaches the
// instant.
func TestDeadlinesWaitsRunOutOnTheShellsClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	newShell := func() (*shellClock, *Gateway) {
		c := &shellClock{now: t0}
		g := &Gateway{now: c.read, deadlines: c.report, waiting: func(int) {}, drainCh: make(chan struct{})}
		return c, g
	}
	want := func(t *testing.T, c *shellClock, due time.Time, last DeadlineEvent) {
		t.Helper()
		ev := c.told()
		if len(ev) != 2 || !ev[0].at.Equal(due) || ev[0].ev != DeadlineArmed || !ev[1].at.Equal(due) || ev[1].ev != last {
			t.Errorf("reported %+v, want armed then %v at %v", ev, last, due)
		}
	}
	t.Run("cooldown wait", func(t *testing.T) {
		c, g := newShell()
		rs := &reqState{g: g, ctx: context.Background(), logID: "r", stepAt: model.TimeOf(t0)}
		due := t0.Add(50 * time.Millisecond)
		endsOnTheShellsClock(t, c, due, func() {
			if how, _ := rs.wait(50 * time.Millisecond); how != waitDone {
				t.Errorf("wait ended with %d", how)
			}
		})
		want(t, c, due, DeadlineFired)
	})
	t.Run("admission queue budget", func(t *testing.T) {
		// Refused when it runs out (fired: the refusal's step is owed);
		// a quota-share bypass goes on to the upstream (disarmed).
		for _, failOpen := range []bool{false, true} {
			c, g := newShell()
			gt := newGate(func(int) {})
			gt.configure(0, []ProviderConfig{{ID: "p", Connections: []ConnectionConfig{{ID: "c", MaxConcurrent: 1}}}})
			if _, _, err := gt.acquire(context.Background(), "p", "c", "m", 0, time.Second, false, false, nil); err != nil {
				t.Fatal(err.err)
			}
			due := t0.Add(50 * time.Millisecond)
			var aerr *admitError
			endsOnTheShellsClock(t, c, due, func() {
				_, _, aerr = gt.acquire(context.Background(), "p", "c", "m", 0, 50*time.Millisecond, failOpen, false, g.newDeadlineReport("r"))
			})
			if failOpen {
				if aerr != nil {
					t.Fatalf("fail-open: %v", aerr.err)
				}
				want(t, c, due, DeadlineDisarmed)
				continue
			}
			if aerr == nil || aerr.err.Code != model.CodeSemaphoreTimeout {
				t.Fatalf("want SEMAPHORE_TIMEOUT, got %+v", aerr)
			}
			want(t, c, due, DeadlineFired)
		}
	})
	t.Run("paced slot", func(t *testing.T) {
		c, g := newShell()
		ps := newPacers(c.read, func(int) {})
		ref, o := model.ConnRef{Provider: "p", Connection: "c"}, RateLimitOverrides{MinTimeMs: 50}
		if _, err := ps.wait(context.Background(), ref, "m", o, 0, time.Second, nil); err != nil {
			t.Fatal(err)
		}
		due := t0.Add(50 * time.Millisecond)
		endsOnTheShellsClock(t, c, due, func() {
			if _, err := ps.wait(context.Background(), ref, "m", o, 0, time.Second, g.newDeadlineReport("r")); err != nil {
				t.Error(err)
			}
		})
		want(t, c, due, DeadlineDisarmed)
	})
}
