package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// priorityPair is a priority combo c over a/m1 (first) and b/m2, one
// connection each.
func priorityPair(t *testing.T, strategy Strategy, edit func(*Settings)) *Engine {
	t.Helper()
	a := oneProvider("a", ProfileAPIKey, 1)
	b := oneProvider("b", ProfileAPIKey, 1)
	tp := topo(a, b)
	tp.Combos = []ComboConfig{{ID: "c", Strategy: strategy, Targets: []ComboTarget{{Provider: "a", Model: "m1"}, {Provider: "b", Model: "m2"}}}}
	return mustEngine(t, tp, func(s *Settings) {
		s.ComboCooldownWait.Enabled = false // only the rule under test waits
		if edit != nil {
			edit(s)
		}
	})
}

func TestPriorityWaitPrefersTheFirstTarget(t *testing.T) {
	// Rule (priorityWait): a priority combo waits once, up to maxWaitMs,
	// for its first target's stated Retry-After or a one-off 500's short
	// cooldown, and retries it there instead of downgrading; an outage's
	// 502/503/504 or a transport failure downgrades at once; off for
	// strategies whose targets are equals; inside deadline and budget.
	ra := func(s string) Outcome { return withHeader(429, "retry-after", s) }
	cases := []struct {
		name     string
		strategy Strategy
		edit     func(*Settings)
		first    []Outcome // a's answers in turn (then 200)
		trail    string
		took     int64 // ms from start to the answer, checked when > 0
	}{
		{name: "429 Retry-After 2 s: wait 2 s, the first target serves", strategy: Priority, first: []Outcome{ra("2")},
			trail: "a/k1 wait a/k1", took: 2000 + 20},
		{name: "a single 500: wait its 3 s cooldown, the first target serves", strategy: Priority, first: []Outcome{status(500)},
			trail: "a/k1 wait a/k1", took: 3000 + 20},
		{name: "503 Retry-After 1 s is a stated hint", strategy: Priority, first: []Outcome{withHeader(503, "retry-after", "1")},
			trail: "a/k1 wait a/k1"},
		{name: "503 without a hint: an outage, downgrade at once", strategy: Priority, first: []Outcome{status(503)},
			trail: "a/k1 b/k1"},
		{name: "502: downgrade at once", strategy: Priority, first: []Outcome{status(502)}, trail: "a/k1 b/k1"},
		{name: "transport reset: downgrade at once", strategy: Priority,
			first: []Outcome{{Kind: OutcomeTransport, Transport: TransportReset}}, trail: "a/k1 b/k1"},
		{name: "429 without a hint: downgrade at once", strategy: Priority, first: []Outcome{status(429)}, trail: "a/k1 b/k1"},
		{name: "Retry-After beyond maxWaitMs: downgrade", strategy: Priority, first: []Outcome{ra("6")}, trail: "a/k1 b/k1"},
		{name: "quota exhausted is not transient: downgrade", strategy: Priority,
			first: []Outcome{{Kind: OutcomeResponse, Status: 429, Body: "You exceeded your current quota", Headers: HeaderMap{"retry-after": "2"}}},
			trail: "a/k1 b/k1"},
		{name: "one attempt per hint: a second 429 downgrades", strategy: Priority, first: []Outcome{ra("2"), ra("2")},
			trail: "a/k1 wait a/k1 b/k1"},
		{name: "off for round-robin (targets are equals)", strategy: RoundRobin, first: []Outcome{ra("2")}, trail: "a/k1 b/k1"},
		{name: "off for fill-first", strategy: FillFirst, first: []Outcome{ra("2")}, trail: "a/k1 b/k1"},
		{name: "switched off", strategy: Priority, edit: func(s *Settings) { s.PriorityWait.Enabled = false },
			first: []Outcome{ra("2")}, trail: "a/k1 b/k1"},
		{name: "the wait must end before the deadline", strategy: Priority, edit: func(s *Settings) { s.RequestBudget.DeadlineMs = 2000 },
			first: []Outcome{ra("2")}, trail: "a/k1 b/k1"},
		{name: "no wait without an attempt left", strategy: Priority, edit: func(s *Settings) { s.RequestBudget.MaxAttempts = 1 },
			first: []Outcome{ra("2")}, trail: "a/k1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := priorityPair(t, tc.strategy, tc.edit)
			n := 0
			st, trail, end := drive(t, e, at(0), "c", func(a *Attempt, _ int) (Outcome, bool) {
				if a.Provider != "a" {
					return status(200), false
				}
				n++
				if n <= len(tc.first) {
					return tc.first[n-1], false
				}
				return status(200), false
			})
			if got := strings.Join(trail, " "); got != tc.trail {
				t.Fatalf("trail %q, want %q (answer %+v)", got, tc.trail, st)
			}
			if tc.took > 0 && end.Sub(at(0)) != tc.took {
				t.Fatalf("took %d ms, want %d", end.Sub(at(0)), tc.took)
			}
		})
	}
}

func TestContextLengthGoesToAnotherModel(t *testing.T) {
	// Rule (context length → another model): a 400 context-length refusal
	// never retries that model in the request (at most one attempt on it);
	// the next target with another model is tried, the largest known
	// contextWindow first; with none left the client gets the 400.
	tooLong := withBody(400, `{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}`)
	mk := func(windows map[string]map[string]int, targets ...string) *Engine {
		var ps []ProviderConfig
		for _, id := range []string{"a", "b", "d"} {
			p := oneProvider(id, ProfileAPIKey, 1)
			p.Models = []string{"small", "medium", "large"}
			p.ContextWindows = windows[id]
			ps = append(ps, p)
		}
		tp := topo(ps...)
		var ts []ComboTarget
		for _, s := range targets {
			pv, m, _ := strings.Cut(s, "/")
			ts = append(ts, ComboTarget{Provider: pv, Model: m})
		}
		tp.Combos = []ComboConfig{{ID: "c", Strategy: Priority, Targets: ts}}
		return mustEngine(t, tp, nil)
	}
	cases := []struct {
		name    string
		windows map[string]map[string]int
		targets []string
		refuse  []string // models that refuse for length
		trail   string
		status  int
	}{
		{name: "the same model on another provider is never tried", targets: []string{"a/small", "b/small", "d/large"},
			refuse: []string{"small"}, trail: "a/k1:small d/k1:large", status: 200},
		{name: "the larger known window first", windows: map[string]map[string]int{"a": {"small": 8000}, "b": {"medium": 32000}, "d": {"large": 200000}},
			targets: []string{"a/small", "b/medium", "d/large"}, refuse: []string{"small"}, trail: "a/k1:small d/k1:large", status: 200},
		{name: "unknown windows keep the combo's order", targets: []string{"a/small", "b/medium", "d/large"},
			refuse: []string{"small"}, trail: "a/k1:small b/k1:medium", status: 200},
		{name: "a smaller known window is no preference", windows: map[string]map[string]int{"a": {"small": 8000}, "d": {"large": 4000}},
			targets: []string{"a/small", "b/medium", "d/large"}, refuse: []string{"small"}, trail: "a/k1:small b/k1:medium", status: 200},
		{name: "the refusing connection serves its other models", targets: []string{"a/small", "a/medium"},
			refuse: []string{"small"}, trail: "a/k1:small a/k1:medium", status: 200},
		{name: "no other model: the client gets the 400 after one attempt", targets: []string{"a/small", "b/small"},
			refuse: []string{"small"}, trail: "a/k1:small", status: 400},
		{name: "every model refuses: one attempt each, then the 400", targets: []string{"a/small", "b/medium", "d/large"},
			refuse: []string{"small", "medium", "large"}, trail: "a/k1:small b/k1:medium d/k1:large", status: 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := mk(tc.windows, tc.targets...)
			var trail []string
			st, _, _ := drive(t, e, at(0), "c", func(a *Attempt, _ int) (Outcome, bool) {
				trail = append(trail, a.Provider+"/"+a.Connection+":"+a.Model)
				if slices.Contains(tc.refuse, a.Model) {
					return tooLong, false
				}
				return status(200), false
			})
			if got := strings.Join(trail, " "); got != tc.trail || st.Status != tc.status {
				t.Fatalf("trail %q status %d, want %q %d", got, st.Status, tc.trail, tc.status)
			}
		})
	}
}

func TestTransientCooldownIsBounded(t *testing.T) {
	// Rule (bounded recovery): a transient failure's cooldown escalates
	// across requests but never past connectionCooldown.
	// transientMaxCooldownMs (20 s) without a stated hint; a stated hint
	// is still a floor; a 429's escalation is not capped by it.
	cases := []struct {
		name string
		o    Outcome
		want []int64 // seconds, per failure after the previous cooldown ended
	}{
		{"503", status(503), []int64{3, 6, 12, 20, 20, 20}},
		{"transport reset", Outcome{Kind: OutcomeTransport, Transport: TransportReset}, []int64{3, 6, 12, 20, 20}},
		{"504 timeout", status(504), []int64{3, 6, 12, 20}},
		{"529 overloaded", status(529), []int64{3, 6, 12, 20}},
		{"503 stating Retry-After 60 s", withHeader(503, "retry-after", "60"), []int64{60, 60}},
		{"429 without a hint is not transient", status(429), []int64{3, 6, 12, 24, 48}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), func(s *Settings) {
				s.ProviderBreaker.APIKey.FailureThreshold = 1000
				s.ProviderBreaker.APIKey.DegradationThreshold = 999
			})
			now := at(0)
			for i, w := range tc.want {
				hit(t, e, now, "p", "k1", "m1", tc.o)
				c := connOf(e, "p", "k1")
				if got := c.RateLimitedUntil.Sub(now); got != sec(w) {
					t.Fatalf("failure %d: cooldown %d ms, want %d s", i+1, got, w)
				}
				now = c.RateLimitedUntil
			}
		})
	}
}

func TestOutageLockoutEndsWithTheProbe(t *testing.T) {
	// Rule (bounded recovery, lockouts): on a per-model-quota provider a
	// 5xx lockout lasts at most transientMaxCooldownMs; while the breaker
	// is half-open it does not keep the probe out, and a successful probe
	// ends every outage lockout of the provider; a failed probe keeps them.
	for _, probeOK := range []bool{true, false} {
		t.Run(fmt.Sprintf("probe ok %v", probeOK), func(t *testing.T) {
			p := oneProvider("l", ProfileLocal, 1)
			p.Type = "local"
			e := mustEngine(t, topo(p), nil)
			hit(t, e, at(0), "l", "k1", "m1", status(503))
			hit(t, e, at(sec(6)), "l", "k1", "m2", status(503)) // second counted failure: OPEN for 15 s
			ls := locksOf(e, "l", "k1")
			if len(ls) != 2 || ls[1].Until.Sub(at(sec(6))) != sec(20) {
				t.Fatalf("lockouts %+v, want two, m2 for 20 s", ls)
			}
			if st := stateAt(e, at(sec(22)), "l"); st != HalfOpen {
				t.Fatalf("breaker %v at 22 s", st)
			}
			if got := candidates(selectAt(t, e, at(sec(22)), "l/m2")); len(got) != 1 {
				t.Fatalf("the half-open probe must pass the outage lockout of m2: candidates %v", got)
			}
			o := status(200)
			if !probeOK {
				o = status(503)
			}
			a := beginOn(t, e, at(sec(22)), "l", "k1", "m2")
			if !a.Probe() {
				t.Fatal("the attempt must be the probe")
			}
			e.Record(at(sec(22)), &a, o)
			left := 0
			for _, l := range locksOf(e, "l", "k1") {
				if l.Active(at(sec(22))) {
					left++
				}
			}
			if probeOK && left != 0 {
				t.Fatalf("a successful probe must end the outage lockouts, %d left", left)
			}
			if !probeOK && left == 0 {
				t.Fatal("a failed probe must keep the lockouts")
			}
		})
	}
}

func TestPerModelQuotaFollowsTheType(t *testing.T) {
	// Rule: per-model quota follows the provider's type (gemini, local) or
	// perModelQuota, never its profile.
	yes, no := true, false
	cases := []struct {
		typ      string
		prof     Profile
		override *bool
		want     bool
	}{
		{"openai", ProfileLocal, nil, false},
		{"openai", ProfileAPIKey, nil, false},
		{"local", ProfileLocal, nil, true},
		{"local", ProfileAPIKey, nil, true},
		{"gemini", ProfileOAuth, nil, true},
		{"openai", ProfileLocal, &yes, true},
		{"gemini", ProfileAPIKey, &no, false},
	}
	for _, tc := range cases {
		p := oneProvider("p", tc.prof, 1)
		p.Type, p.PerModelQuota = tc.typ, tc.override
		e := mustEngine(t, topo(p), nil)
		v := hit(t, e, at(0), "p", "k1", "m1", status(503))
		perModel := v.Conn == ConnRecordOnly
		if perModel != tc.want {
			t.Errorf("type %s profile %v override %v: per-model %v, want %v (verdict %+v)", tc.typ, tc.prof, tc.override, perModel, tc.want, v)
		}
	}
}

// TestRescueRulesProperty drives a priority combo's flow with random
// outcomes and checks the rescue rules on every request: a connection that
// stalled is never tried again in the request, a model that refused for
// length is never tried again, the priorityWait waits at most once, and
// the answer comes inside the deadline and the attempt budget.
func TestRescueRulesProperty(t *testing.T) {
	outs := []Outcome{
		status(200), status(500), status(503), withHeader(429, "retry-after", "2"), status(429),
		withHeader(429, "retry-after", "9"), {Kind: OutcomeStall}, {Kind: OutcomeThroughput},
		{Kind: OutcomeTransport, Transport: TransportReset},
		withBody(400, "This model's maximum context length is 8192 tokens"),
	}
	rapid.Check(t, func(rt *rapid.T) {
		a := oneProvider("a", ProfileAPIKey, rapid.IntRange(1, 2).Draw(rt, "aConns"))
		b := oneProvider("b", ProfileAPIKey, rapid.IntRange(1, 2).Draw(rt, "bConns"))
		tp := topo(a, b)
		tp.Combos = []ComboConfig{{ID: "c", Strategy: Priority, Targets: []ComboTarget{
			{Provider: "a", Model: "m1"}, {Provider: "b", Model: "m1"}, {Provider: "b", Model: "m2"}}}}
		s := DefaultSettings()
		s.ComboCooldownWait.Enabled = false
		s.RequestBudget.DeadlineMs = Millis(rapid.Int64Range(1000, 20000).Draw(rt, "deadline"))
		ns, err := Normalize(s)
		if err != nil {
			rt.Fatal(err)
		}
		e, err := NewEngine(tp, ns, nil)
		if err != nil {
			rt.Fatal(err)
		}
		now := at(0)
		for req := range rapid.IntRange(1, 6).Draw(rt, "requests") {
			r, _ := e.Resolve("c")
			f := e.StartFlow(now, r, "", nil)
			var sel Selection
			var stalled []ConnRef
			var refused []string
			waits := 0
			for step := 0; ; step++ {
				if step > 50 {
					rt.Fatalf("request %d: the flow did not end", req)
				}
				st := f.Next(now, e, &sel)
				if st.Kind == StepAnswer {
					break
				}
				if st.Kind == StepWait {
					waits++
					if waits > 1 {
						rt.Fatalf("request %d: more than one priorityWait", req)
					}
					if now.Add(st.WaitMs) >= f.Deadline() {
						rt.Fatalf("request %d: a wait of %d ms past the deadline", req, st.WaitMs)
					}
					now = now.Add(st.WaitMs)
					continue
				}
				att := st.Attempt
				ref := ConnRef{att.Provider, att.Connection}
				if slices.Contains(stalled, ref) {
					rt.Fatalf("request %d: %v stalled and was tried again", req, ref)
				}
				if slices.Contains(refused, att.Model) {
					rt.Fatalf("request %d: model %s refused for length and was tried again", req, att.Model)
				}
				o := outs[rapid.IntRange(0, len(outs)-1).Draw(rt, "outcome")]
				now = now.Add(rapid.Int64Range(1, 500).Draw(rt, "latency"))
				v, ans := f.Record(now, e, &att, Report{Outcome: o})
				switch v.Next {
				case NextRetry:
					stalled = append(stalled, ref)
				case NextModel:
					refused = append(refused, att.Model)
				}
				if ans != nil {
					break
				}
			}
			if f.Attempts() > e.settings.RequestBudget.MaxAttempts {
				rt.Fatalf("request %d: %d attempts", req, f.Attempts())
			}
			now = now.Add(rapid.Int64Range(0, 10000).Draw(rt, "gap"))
		}
	})
}

// BenchmarkFlowRescue: one pooled request flow over the catalogue's
// priority pair, per case: served at once (the baseline), a 429 with
// Retry-After 2 s answered by priorityWait, a context-length refusal sent
// to the other model. Each op starts a fresh engine state by advancing the
// clock past every cooldown.
func BenchmarkFlowRescue(b *testing.B) {
	tooLong := withBody(400, `{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}`)
	for _, bc := range []struct {
		name  string
		first Outcome
	}{
		{"served", status(200)},
		{"priority_wait", withHeader(429, "retry-after", "2")},
		{"context_length", tooLong},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a, c := oneProvider("a", ProfileAPIKey, 1), oneProvider("b", ProfileAPIKey, 1)
			tp := topo(a, c)
			tp.Combos = []ComboConfig{{ID: "c", Strategy: Priority, Targets: []ComboTarget{{Provider: "a", Model: "m1"}, {Provider: "b", Model: "m2"}}}}
			e := mustEngine(b, tp, nil)
			r, err := e.Resolve("c")
			if err != nil {
				b.Fatal(err)
			}
			var f Flow
			var sel Selection
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(600_000) // every cooldown of the last op is over
				f.Reset(e, now, r, "", nil)
				for n := 0; ; n++ {
					st := f.Next(now, e, &sel)
					if st.Kind == StepAnswer {
						break
					}
					if st.Kind == StepWait {
						now = now.Add(st.WaitMs)
						continue
					}
					o := status(200)
					if n == 0 {
						o = bc.first
					}
					if _, ans := f.Record(now, e, &st.Attempt, Report{Outcome: o}); ans != nil {
						break
					}
				}
				e.changes = e.changes[:0]
			}
		})
	}
}
