package model

import "testing"

// docs/budget.md#attempt-bound: one timer plan times an attempt in both
// shells. Due: the whole attempt's bound, then the running phase counted
// from its last progress; the bound wins a tie. Before: the first timer
// at or before an upstream event.
func TestTimerPlanDueAndBefore(t *testing.T) {
	p := HeaderPlan(600, CutAttempt, 120)
	if x, next := p.Due(0); x != TimerNone || next != 120 {
		t.Fatalf("at start: %v next %d, want the header deadline 120", x, next)
	}
	if x, at := p.Due(120); x != TimerHeader || at != 120 {
		t.Fatalf("header budget spent: %v at %d", x, at)
	}
	p.Last, p.Budget, p.Body = 100, 50, true // headers in, body idle budget
	if x, next := p.Due(120); x != TimerNone || next != 150 {
		t.Fatalf("progress moves the deadline: %v next %d", x, next)
	}
	if x, _ := p.Due(150); x != TimerBody {
		t.Fatalf("a silent body is a stall: %v", x)
	}
	p.Last = 590
	if x, at := p.Due(600); x != TimerBound || at != 600 {
		t.Fatalf("the bound ends the attempt: %v at %d", x, at)
	}
	tie := HeaderPlan(100, CutExecution, 100)
	if x, _ := tie.Due(100); x != TimerBound {
		t.Fatalf("the bound wins a tie with the header phase: %v", x)
	}
	if x, at := tie.Before(500); x != TimerBound || at != 100 {
		t.Fatalf("before an answer at 500: %v at %d", x, at)
	}
	if x, at := HeaderPlan(1000, CutAttempt, 100).Before(100); x != TimerHeader || at != 100 {
		t.Fatalf("a header deadline at the answer's instant fires first: %v at %d", x, at)
	}
	if x, at := HeaderPlan(1000, CutAttempt, 100).Before(99); x != TimerNone || at != 99 {
		t.Fatalf("an answer before every deadline: %v at %d", x, at)
	}
}

// The outcome of what ran out: upstream timeouts are transport failures,
// a stalled body OutcomeStall, the gateway's own bounds neutral.
func TestTimerOutcome(t *testing.T) {
	cases := []struct {
		cut  AttemptCut
		x    TimerExpiry
		kind OutcomeKind
		code Code
	}{
		{CutAttempt, TimerHeader, OutcomeTransport, ""},
		{CutAttempt, TimerBody, OutcomeStall, ""},
		{CutAttempt, TimerBound, OutcomeTransport, ""},
		{CutExecution, TimerBound, OutcomeLocalQueue, CodeExecutionTimeout},
		{CutDeadline, TimerBound, OutcomeClientAbort, CodeBudgetExhausted},
	}
	for _, c := range cases {
		o, err := TimerPlan{Cut: c.cut}.TimerOutcome(c.x)
		if o.Kind != c.kind || (err == nil) != (c.code == "") || (err != nil && err.Code != c.code) {
			t.Errorf("cut %v expiry %v: %+v %v", c.cut, c.x, o, err)
		}
	}
	if o, _ := (TimerPlan{}).TimerOutcome(TimerHeader); o.Transport != TransportHeaderTimeout {
		t.Errorf("header timeout transport: %v", o.Transport)
	}
	if o, _ := (TimerPlan{Cut: CutAttempt}).TimerOutcome(TimerBound); o.Transport != TransportAttemptTimeout {
		t.Errorf("attemptMs transport: %v", o.Transport)
	}
}
