package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// benchEngine builds 20 providers × 50 connections × 5 models and puts state
// in it: every 5th connection cooling, every 7th with a lockout, breakers
// with failures, so selection walks realistic state.
func benchEngine(b *testing.B) (*Engine, Time) {
	var tp Topology
	models := []string{"m0", "m1", "m2", "m3", "m4"}
	for i := 0; i < 20; i++ {
		p := ProviderConfig{ID: fmt.Sprintf("p%02d", i), Profile: ProfileAPIKey, Models: models}
		for j := 0; j < 50; j++ {
			p.Connections = append(p.Connections, ConnectionConfig{ID: fmt.Sprintf("k%02d", j)})
		}
		tp.Providers = append(tp.Providers, p)
	}
	// c20: one target per provider, the models in turn; c100: every
	// provider × model.
	c20 := ComboConfig{ID: "c20", Strategy: Priority}
	c100 := ComboConfig{ID: "c100", Strategy: Priority}
	for i := range tp.Providers {
		c20.Targets = append(c20.Targets, ComboTarget{Provider: tp.Providers[i].ID, Model: models[i%5]})
		for _, m := range models {
			c100.Targets = append(c100.Targets, ComboTarget{Provider: tp.Providers[i].ID, Model: m})
		}
	}
	tp.Combos = []ComboConfig{c20, c100}
	s := DefaultSettings()
	s.ModelLockout.Enabled = true
	s, err := Normalize(s)
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewEngine(tp, s, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	for i := range tp.Providers {
		p := tp.Providers[i].ID
		for j := 0; j < 50; j++ {
			c := fmt.Sprintf("k%02d", j)
			switch {
			case j%5 == 0:
				hit(b, e, now, p, c, "m1", withHeader(429, "retry-after", "600"))
			case j%7 == 0:
				hit(b, e, now, p, c, models[j%5], status(503))
				e.provs[i].conns[j].st.RateLimitedUntil = 0
			}
		}
	}
	e.Changes()
	return e, now.Add(1000)
}

// BenchmarkSelect: selection for one request to a combo across 20
// providers × 50 connections × 5 models in state (c20: one target per
// provider, cooling and locked connections included), as the request path
// makes it: a lazy Select that stops at the first eligible connection
// (docs/model.md#lazy-selection). Target ≤ 1 µs/op, 0 allocs/op.
func BenchmarkSelect(b *testing.B) { benchSelect(b, "c20", false) }

// BenchmarkSelectAll: the same combo listed in full (every target's 50
// connections: 1000 checks), as a fallback past the first target, the
// unavailable answer, a trace or the route preview needs it.
func BenchmarkSelectAll(b *testing.B) { benchSelect(b, "c20", true) }

// BenchmarkSelectComboAllTargets: the same state, a combo of every
// provider × model (100 targets), lazy.
func BenchmarkSelectComboAllTargets(b *testing.B) { benchSelect(b, "c100", false) }

// BenchmarkSelectComboAllTargetsAll: that combo listed in full (5000
// connection checks).
func BenchmarkSelectComboAllTargetsAll(b *testing.B) { benchSelect(b, "c100", true) }

// BenchmarkSelectOneProvider: a single-model route on one provider of the
// same engine (50 connections).
func BenchmarkSelectOneProvider(b *testing.B) { benchSelect(b, "p07/m1", false) }

// BenchmarkSelectFailoverOpenBreakers: BenchmarkSelect with the providers
// of the combo's first 10 targets OPEN (docs/breaker.md#open): a request
// passes over ten open breakers to the first target that serves, as every
// request does while half the combo's providers are down. Target ≤ 1 µs/op,
// 0 allocs/op.
func BenchmarkSelectFailoverOpenBreakers(b *testing.B) {
	e, now := benchEngine(b)
	for i := range 10 {
		p := fmt.Sprintf("p%02d", i)
		for j := 1; breakerOf(e, p).State != Open; j++ {
			if j == 50 {
				b.Fatalf("%s: breaker still %v after 49 failures", p, breakerOf(e, p).State)
			}
			hit(b, e, now, p, fmt.Sprintf("k%02d", j), fmt.Sprintf("m%d", i%5), status(503))
		}
	}
	e.Changes()
	sel := benchSelectOn(b, e, now, "c20", false)
	benchFailoverCheck(b, sel, 10, func(x Excluded) bool { return x.Reason == ExclCircuitOpen && x.Connection == "" })
}

// BenchmarkSelectFailoverCoolingConnections: BenchmarkSelect with every
// connection of the combo's first 10 targets cooling down or locked out for
// the target's model (a 429 with Retry-After on each), their breakers
// closed: a request checks and lists 500 excluded connections before the
// first one that serves.
func BenchmarkSelectFailoverCoolingConnections(b *testing.B) {
	e, now := benchEngine(b)
	for i := range 10 {
		p := fmt.Sprintf("p%02d", i)
		for j := range 50 {
			hit(b, e, now, p, fmt.Sprintf("k%02d", j), fmt.Sprintf("m%d", i%5), withHeader(429, "retry-after", "600"))
		}
		if st := breakerOf(e, p).State; st != Closed {
			b.Fatalf("%s: breaker %v after 429s, want CLOSED", p, st)
		}
	}
	e.Changes()
	sel := benchSelectOn(b, e, now, "c20", false)
	benchFailoverCheck(b, sel, 500, func(x Excluded) bool {
		return x.Connection != "" && (x.Reason == ExclConnectionCooldown || x.Reason == ExclModelLockout)
	})
}

// benchFailoverCheck: the lazy selection passed over the combo's first 10
// targets, excluding exactly n entries of theirs, each matching want, and
// its first candidate is on the 11th.
func benchFailoverCheck(b *testing.B, sel *Selection, n int, want func(Excluded) bool) {
	b.Helper()
	if len(sel.Candidates) == 0 || sel.Candidates[0].Target != 10 {
		b.Fatalf("first candidate %v, want one on target 10", sel.Candidates)
	}
	got := 0
	for _, x := range sel.Excluded {
		if x.Target >= 10 {
			continue
		}
		if !want(x) {
			b.Fatalf("unexpected exclusion %+v", x)
		}
		got++
	}
	if got != n {
		b.Fatalf("%d exclusions on the first 10 targets, want %d", got, n)
	}
}

func benchSelect(b *testing.B, route string, full bool) {
	e, now := benchEngine(b)
	benchSelectOn(b, e, now, route, full)
}

// benchSelectOn measures Select of route on e and returns the last
// selection it made.
func benchSelectOn(b *testing.B, e *Engine, now Time, route string, full bool) *Selection {
	r, err := e.Resolve(route)
	if err != nil {
		b.Fatal(err)
	}
	req := Request{Route: r}
	sel := Selection{Full: full}
	e.SelectAll(now, &req, &sel) // grow the buffers once
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e.Select(now, &req, &sel)
	}
	b.StopTimer()
	last := sel
	last.Candidates = slices.Clone(sel.Candidates)
	last.Excluded = slices.Clone(sel.Excluded)
	first := sel.Candidates[0]
	// The state is what the benchmark says: the full listing has
	// exclusions, starts where the lazy one does and, for a combo, spans
	// every provider from the first candidate's target on.
	e.SelectAll(now, &req, &sel)
	if len(sel.Candidates) == 0 || len(sel.Excluded) == 0 || sel.Candidates[0] != first {
		b.Fatalf("benchmark selection is degenerate: %d candidates, %d excluded, first %v then %v",
			len(sel.Candidates), len(sel.Excluded), first, sel.Candidates[0])
	}
	if providers := map[string]bool{}; r.Combo != "" {
		for _, c := range sel.Candidates {
			providers[c.Provider] = true
		}
		serving := map[string]bool{}
		for _, t := range e.combos[r.combo].cfg.Targets[first.Target:] {
			serving[t.Provider] = true
		}
		if len(providers) != len(serving) {
			b.Fatalf("the combo's candidates span %d providers, want %d", len(providers), len(serving))
		}
	}
	return &last
}

// BenchmarkRecordSuccess: ≤ 200 ns/op, 0 allocs/op.
func BenchmarkRecordSuccess(b *testing.B) {
	e, now := benchEngine(b)
	ok := status(200)
	a := beginOn(b, e, now, "p03", "k01", "m2")
	e.Changes()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		a.done = false
		e.Record(now, &a, ok)
		e.changes = e.changes[:0]
	}
}

// BenchmarkRecordFailureClassified: a 429 with a ~1 KB JSON body through
// classification and every layer, ≤ 20 µs/op.
func BenchmarkRecordFailureClassified(b *testing.B) {
	e, now := benchEngine(b)
	body := `{"error":{"message":"Rate limit reached for gpt-5 in organization org-abc on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"requests","param":null,"code":"rate_limit_exceeded"},"details":"` +
		string(make([]byte, 700)) + `"}`
	o := Outcome{Kind: OutcomeResponse, Status: 429, Body: body, Headers: HeaderMap{"x-ratelimit-reset-requests": "120ms"}}
	a := beginOn(b, e, now, "p03", "k01", "m2")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		a.done = false
		a.Started = now
		e.Record(now, &a, o)
		e.changes = e.changes[:0]
	}
}

// BenchmarkFlowServed: the model's whole part of one served request as the
// gateway makes it, on a one-provider, one-connection route (the bench
// gateway's): Resolve, StartFlow, the first Next (Select and Begin) and
// the Record of a 200 that answers it. 0 allocs/op.
func BenchmarkFlowServed(b *testing.B) {
	tp := Topology{Providers: []ProviderConfig{{ID: "mock", Profile: ProfileAPIKey, Models: []string{"gpt-4o-mini"},
		Connections: []ConnectionConfig{{ID: "k1"}}}}}
	s, err := Normalize(DefaultSettings())
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewEngine(tp, s, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		b.Fatal(err)
	}
	ok := status(200)
	var sel Selection
	var f Flow
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		now++
		route, err := e.Resolve("mock/gpt-4o-mini")
		if err != nil {
			b.Fatal(err)
		}
		f = e.StartFlow(now, route, "", nil)
		st := f.Next(now, e, &sel)
		if st.Kind != StepAttempt {
			b.Fatalf("step %v, want an attempt", st.Kind)
		}
		if _, ans := f.Record(now, e, &st.Attempt, Report{Outcome: ok}); ans == nil || ans.Result != ResultServed {
			b.Fatalf("answer %+v, want served", ans)
		}
		e.Changes()
	}
}
