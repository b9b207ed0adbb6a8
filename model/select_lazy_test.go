package model

import (
	"reflect"
	"testing"
)

// lazyCombo is a priority combo over a (3 connections, k1 cooling), b and
// c (2 connections each).
func lazyCombo(t *testing.T, bStrategy Strategy) *Engine {
	a, b, c := oneProvider("a", ProfileAPIKey, 3), oneProvider("b", ProfileAPIKey, 2), oneProvider("c", ProfileAPIKey, 2)
	b.Strategy = bStrategy
	tp := topo(a, b, c)
	tp.Combos = []ComboConfig{{ID: "x", Strategy: Priority, Targets: []ComboTarget{
		{Provider: "a", Model: "m1"}, {Provider: "b", Model: "m1"}, {Provider: "c", Model: "m1"}}}}
	e := mustEngine(t, tp, func(s *Settings) { s.SessionAffinityTTLMs = 60_000 })
	hit(t, e, at(0), "a", "k1", "m1", withHeader(429, "retry-after", "60"))
	e.Changes()
	return e
}

func TestSelectStopsAtFirstCandidate(t *testing.T) {
	// docs/model.md#lazy-selection: a combo's Select stops at the first
	// eligible connection; what it lists is a prefix of SelectAll's
	// listing, and SelectRest completes it to exactly that listing.
	e := lazyCombo(t, FillFirst)
	req := Request{Route: route(t, e, "x")}
	var lazy, full Selection
	e.Select(at(sec(1)), &req, &lazy)
	if got := candidates(&lazy); !lazy.Partial() || !reflect.DeepEqual(got, []string{"a/k2"}) || len(lazy.Excluded) != 1 {
		t.Fatalf("lazy: partial=%v candidates %v excluded %+v, want a/k2 after a/k1's cooldown", lazy.Partial(), got, lazy.Excluded)
	}
	e.SelectRest(at(sec(1)), &req, &lazy)
	e.SelectAll(at(sec(1)), &req, &full)
	if lazy.Partial() || !reflect.DeepEqual(lazy.Candidates, full.Candidates) || !reflect.DeepEqual(lazy.Excluded, full.Excluded) ||
		lazy.Earliest != full.Earliest || lazy.EarliestTransient != full.EarliestTransient {
		t.Fatalf("completed %v %+v, full %v %+v", candidates(&lazy), lazy.Excluded, candidates(&full), full.Excluded)
	}
	if want := []string{"a/k2", "a/k3", "b/k1", "b/k2", "c/k1", "c/k2"}; !reflect.DeepEqual(candidates(&full), want) {
		t.Fatalf("full listing %v, want %v", candidates(&full), want)
	}
	full.Full = true
	e.Select(at(sec(1)), &req, &full)
	if full.Partial() || len(full.Candidates) != 6 {
		t.Fatalf("Full: partial=%v, %d candidates", full.Partial(), len(full.Candidates))
	}
}

func TestSelectListsStirringTargetsAtOnce(t *testing.T) {
	// docs/model.md#lazy-selection: a later target whose listing moves a
	// round-robin cursor or draws from the random source (random, weighted,
	// p2c) is listed at once, so the cursor moves and its change record
	// comes out, and the draws are taken in the order of a full listing.
	for _, st := range []Strategy{RoundRobin, Random, Weighted, P2C} {
		t.Run(st.String(), func(t *testing.T) {
			e, twin := lazyCombo(t, st), lazyCombo(t, st)
			req := Request{Route: route(t, e, "x")}
			var sel, full Selection
			e.Select(at(sec(1)), &req, &sel)
			twin.SelectAll(at(sec(1)), &req, &full)
			if got := candidates(&sel); !sel.Partial() || len(got) != 4 || !reflect.DeepEqual(got, candidates(&full)[:4]) {
				t.Fatalf("candidates %v partial=%v, want a's and b's listed as in %v, c's left", got, sel.Partial(), candidates(&full))
			}
			if e.rng.Uint64() != twin.rng.Uint64() {
				t.Fatal("the lazy selection drew from the random source otherwise than the full listing")
			}
			ch := e.Changes()
			if st == RoundRobin && (len(ch) != 1 || ch[0].Kind != ChangeCursor || ch[0].Provider != "b" || ch[0].Cursor != 1) {
				t.Fatalf("changes %+v, want b's cursor moved to 1", ch)
			}
		})
	}
}

func TestSelectRefreshesLaterBreakersInOrder(t *testing.T) {
	// docs/model.md#lazy-selection: a target left to SelectRest still gets
	// its breaker's lazy transition (OPEN → HALF_OPEN) at Select.
	e := lazyCombo(t, FillFirst)
	for i := range 100 {
		if breakerOf(e, "c").State == Open {
			break
		}
		hit(t, e, at(int64(i)), "c", "k1", "m1", status(503))
	}
	if st := stateAt(e, at(0), "c"); st != Open {
		t.Fatalf("c is %v, want OPEN", st)
	}
	e.Changes()
	req := Request{Route: route(t, e, "x")}
	var sel Selection
	e.Select(at(hour), &req, &sel)
	if !sel.Partial() {
		t.Fatal("selection listed every target")
	}
	if breakerOf(e, "c").State != HalfOpen {
		t.Fatalf("c's breaker is %v after Select, want HALF_OPEN", breakerOf(e, "c").State)
	}
	var sawC bool
	for _, c := range e.Changes() {
		sawC = sawC || (c.Kind == ChangeBreaker && c.Provider == "c")
	}
	if !sawC {
		t.Fatal("no breaker change record for c")
	}
}

func TestSelectWithSessionListsTargetWhole(t *testing.T) {
	// docs/selection.md#session-affinity: with a session, the first target
	// with a candidate is listed whole, so a pin on its second connection
	// moves that connection to the front.
	e := lazyCombo(t, FillFirst)
	beginOn(t, e, at(0), "a", "k3", "m1") // no pin: begun without a session
	req := Request{Route: route(t, e, "x"), Session: "s"}
	var sel Selection
	e.Select(at(sec(1)), &req, &sel)
	a, err := e.Begin(at(sec(1)), sel.Candidates[1]) // a/k3: pins the session
	if err != nil {
		t.Fatal(err)
	}
	e.Record(at(sec(1)), &a, status(200))
	e.Select(at(sec(2)), &req, &sel)
	if got := candidates(&sel); len(got) < 2 || got[0] != "a/k3" || got[1] != "a/k2" {
		t.Fatalf("candidates %v, want the pinned a/k3 first, then a/k2", got)
	}
}

func TestFlowListsTheRestPastASkippedTarget(t *testing.T) {
	// docs/selection.md#context-length: a context-length refusal skips the
	// model; the flow lists the rest of a lazy selection (which stops at
	// a's m1) and goes on to the next target's model.
	a, b := oneProvider("a", ProfileAPIKey, 3), oneProvider("b", ProfileAPIKey, 2)
	tp := topo(a, b)
	tp.Combos = []ComboConfig{{ID: "x", Strategy: Priority, Targets: []ComboTarget{
		{Provider: "a", Model: "m1"}, {Provider: "a", Model: "m2"}, {Provider: "b", Model: "m2"}}}}
	e := mustEngine(t, tp, nil)
	f := e.StartFlow(at(sec(1)), route(t, e, "x"), "", nil)
	var sel Selection
	st := f.Next(at(sec(1)), e, &sel)
	if st.Kind != StepAttempt || st.Attempt.Provider != "a" {
		t.Fatalf("first step %+v", st)
	}
	_, done := f.Record(at(sec(1)), e, &st.Attempt, Report{Outcome: withBody(400, "maximum context length exceeded")})
	if done != nil {
		t.Fatalf("answered %+v", done)
	}
	st = f.Next(at(sec(1)), e, &sel)
	if st.Kind != StepAttempt || st.Attempt.Model != "m2" || st.Attempt.Provider != "a" || sel.Partial() {
		t.Fatalf("second step %+v (partial=%v), want an attempt on a's m2", st, sel.Partial())
	}
}
