package proxy

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// Options.Deadlines (proxy/deadlines.go; docs/replay.md, "at: reads"): every
// deadline the gateway arms on an attempt is reported with its instant on
// the gateway's clock, and ended exactly once: DeadlineFired when it cut
// the attempt (reported before the flow's next attempt starts), else
// DeadlineDisarmed. The replay waits for every deadline due by an `at:`
// read's instant on the strength of this. A first token that never comes
// is cut by the stream's first-content watchdog, no earlier than its
// instant, and the request moves to the next connection.
func TestDeadlinesHookReportsArmAndFire(t *testing.T) {
	up := newFakeUp(t)
	type event struct {
		id string
		at time.Time
		ev DeadlineEvent
	}
	var mu sync.Mutex
	var events []event
	g := newGWOpts(t, up, `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: k1, apiKey: k1}, {id: k2, apiKey: k2}]}
resilience:
  waitForCooldown: {enabled: false}
  upstreamTimeouts: {firstContentMs: 300ms}
`, Options{Deadlines: func(id string, at time.Time, ev DeadlineEvent) {
		mu.Lock()
		events = append(events, event{id, at, ev})
		mu.Unlock()
	}})
	// k1 sends its headers and no first token; k2 streams.
	up.set("k1", func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	up.set("k2", sse(streamOpt{chunks: 2}))
	start := time.Now()
	r := g.stream("p/m", "X-Request-Id", "dl-1")
	end := time.Now()
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k2" || r.h.Get("X-Breakwater-Attempts") != "2" {
		t.Fatalf("status %d connection %q attempts %q", r.code, r.h.Get("X-Breakwater-Connection"), r.h.Get("X-Breakwater-Attempts"))
	}
	// The attempts' timers stop as their handler unwinds, which may
	// finish after the client read the end of the stream.
	balanced := func() bool {
		n := 0
		for _, e := range events {
			if e.ev == DeadlineArmed {
				n++
			} else {
				n--
			}
		}
		return n == 0
	}
	for wait := time.Now(); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		if balanced() || time.Since(wait) > 5*time.Second {
			break
		}
		mu.Unlock()
	}
	defer mu.Unlock()
	armed := map[time.Time]int{}
	fired, lastArm := -1, -1
	for i, e := range events {
		if e.id != "dl-1" {
			t.Fatalf("event of request %q", e.id)
		}
		switch e.ev {
		case DeadlineArmed:
			armed[e.at]++
			lastArm = i
		case DeadlineDisarmed, DeadlineFired:
			if armed[e.at] == 0 {
				t.Fatalf("event %d ends a deadline at %v that is not armed: %v", i, e.at, events)
			}
			armed[e.at]--
			if e.ev == DeadlineFired {
				if fired >= 0 {
					t.Fatalf("two deadlines fired: %v", events)
				}
				fired = i
			}
		}
	}
	for at, n := range armed {
		if n != 0 {
			t.Errorf("deadline at %v left armed (%d): %v", at, n, events)
		}
	}
	if fired < 0 {
		t.Fatalf("the first-content cut was not reported: %v", events)
	}
	if fired > lastArm {
		t.Errorf("the cut was reported after the next attempt armed its clock: %v", events)
	}
	// The watchdog's instant is the stream's open + firstContentMs on the
	// gateway's clock (millisecond precision), which ran out before the
	// answer came.
	if at := events[fired].at; at.Before(start.Add(300*time.Millisecond).Truncate(time.Millisecond)) || at.After(end) {
		t.Errorf("fired deadline at %v, want within [%v+300ms, %v]", at, start, end)
	}
}

// A deadline runs out on the reporting shell's clock (proxy/deadlines.go;
// docs/replay.md, "The gateway's deadlines"): the attempt's bound is due at
// the clock at the attempt's start plus the bound, however much real time
// the shell's clock stood still meanwhile (a dial), and it cuts with the
// bound's cause only once that clock has reached it. A bound due earlier
// on the shell's clock would cut the request's deadline (CutDeadline)
// before the model's clock reaches it, which the model reads as the
// client's abort.
func TestDeadlinesBoundRunsOutOnTheShellsClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	var mu sync.Mutex
	now := t0
	type event struct {
		at time.Time
		ev DeadlineEvent
	}
	var events []event
	rep := &deadlineReport{id: "r", now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	rep.fn = func(_ string, at time.Time, ev DeadlineEvent) { events = append(events, event{at, ev}) }
	var cause error
	var causeMu sync.Mutex
	c := &attemptClock{rep: rep}
	c.start(3*time.Second, errDeadline, 10*time.Second, func(err error) {
		causeMu.Lock()
		defer causeMu.Unlock()
		if cause == nil {
			cause = err
		}
	})
	defer c.stop()
	bound := t0.Add(3 * time.Second)
	// The header budget restarts after a dial that took 500 ms of real time
	// while the shell's clock stood at t0: the bound stays where it was.
	c.progressAt(500*time.Millisecond, c.suspend())
	rep.mu.Lock()
	armed := rep.armed
	rep.mu.Unlock()
	if !armed.Equal(bound) {
		t.Fatalf("after the dial the bound is reported at %v, want %v", armed, bound)
	}
	// The real bound has run out; the shell's clock is 1 ms short of it.
	c.base = c.base.Add(-4 * time.Second)
	mu.Lock()
	now = bound.Add(-time.Millisecond)
	mu.Unlock()
	c.fire()
	causeMu.Lock()
	early := cause
	causeMu.Unlock()
	if early != nil {
		t.Fatalf("cut with %v before the shell's clock reached the bound", early)
	}
	mu.Lock()
	now = bound
	mu.Unlock()
	c.fire()
	causeMu.Lock()
	defer causeMu.Unlock()
	if cause != errDeadline {
		t.Fatalf("cause %v, want %v", cause, errDeadline)
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if last := events[len(events)-1]; last.ev != DeadlineFired || !last.at.Equal(bound) {
		t.Errorf("last event %+v, want the bound fired at %v", last, bound)
	}
}
