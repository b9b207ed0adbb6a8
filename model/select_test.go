package model

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestResolveOrder(t *testing.T) {
	// docs/settings.md#defaults model resolution: combo id → alias → provider/model →
	// bare model listed by exactly one provider → 404 naming candidates.
	a := oneProvider("a", ProfileAPIKey, 1)
	a.Models = []string{"shared", "only-a", "org/model"}
	b := oneProvider("b", ProfileAPIKey, 1)
	b.Models = []string{"shared"}
	tp := topo(a, b)
	tp.Combos = []ComboConfig{{ID: "coding", Targets: []ComboTarget{{Provider: "a", Model: "only-a"}}}}
	tp.Aliases = map[string]string{"fast": "b/shared", "team": "coding"}
	e := mustEngine(t, tp, nil)
	cases := []struct{ in, combo, prov, model string }{
		{"coding", "coding", "", ""},
		{"fast", "", "b", "shared"},
		{"team", "coding", "", ""},
		{"a/shared", "", "a", "shared"},
		{"only-a", "", "a", "only-a"},
		{"org/model", "", "a", "org/model"}, // ids may contain '/'
	}
	for _, c := range cases {
		r, err := e.Resolve(c.in)
		if err != nil || r.Combo != c.combo || r.Provider != c.prov || r.Model != c.model {
			t.Errorf("resolve %q = %+v, %v", c.in, r, err)
		}
	}
	for _, bad := range []string{"shared", "nope", "a/nope", "", "a/"} {
		_, err := e.Resolve(bad)
		var te *Error
		if err == nil || !asError(err, &te) || (te.Code != CodeModelNotFound && te.Code != CodeInvalidModel) {
			t.Errorf("resolve %q: %v, want a typed not-found error", bad, err)
		}
	}
	_, err := e.Resolve("shared")
	if !strings.Contains(err.Error(), "a/shared") || !strings.Contains(err.Error(), "b/shared") {
		t.Errorf("ambiguous model must name the candidates: %v", err)
	}
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}

func TestSelectionStrategies(t *testing.T) {
	mk := func(s Strategy) *Engine {
		p := oneProvider("p", ProfileAPIKey, 3)
		p.Strategy = s
		p.Connections[0].Priority = 3
		p.Connections[1].Priority = 1
		p.Connections[2].Priority = 2
		return mustEngine(t, topo(p), nil)
	}
	t.Run("docs/settings.md#defaults fill-first is config order", func(t *testing.T) {
		e := mk(FillFirst)
		if got := candidates(selectAt(t, e, at(0), "p/m1")); !reflect.DeepEqual(got, []string{"p/k1", "p/k2", "p/k3"}) {
			t.Fatal(got)
		}
	})
	t.Run("docs/selection.md#strategies priority ascending", func(t *testing.T) {
		e := mk(Priority)
		if got := candidates(selectAt(t, e, at(0), "p/m1")); !reflect.DeepEqual(got, []string{"p/k2", "p/k3", "p/k1"}) {
			t.Fatal(got)
		}
	})
	t.Run("docs/selection.md#strategies round-robin rotates", func(t *testing.T) {
		e := mk(RoundRobin)
		var firsts []string
		for i := 0; i < 4; i++ {
			firsts = append(firsts, candidates(selectAt(t, e, at(0), "p/m1"))[0])
		}
		if !reflect.DeepEqual(firsts, []string{"p/k1", "p/k2", "p/k3", "p/k1"}) {
			t.Fatal(firsts)
		}
	})
	t.Run("docs/selection.md#strategies least-used prefers fewer uses", func(t *testing.T) {
		e := mk(LeastUsed)
		hit(t, e, at(0), "p", "k1", "m1", status(200))
		hit(t, e, at(1), "p", "k3", "m1", status(200))
		if got := candidates(selectAt(t, e, at(2), "p/m1")); got[0] != "p/k2" || got[1] != "p/k1" {
			t.Fatal(got)
		}
	})
	t.Run("docs/selection.md#strategies p2c prefers fewer in flight", func(t *testing.T) {
		e := mk(P2C)
		beginOn(t, e, at(0), "p", "k1", "m1")
		beginOn(t, e, at(0), "p", "k2", "m1")
		beginOn(t, e, at(0), "p", "k2", "m1")
		for i := 0; i < 20; i++ {
			got := candidates(selectAt(t, e, at(1), "p/m1"))
			if len(got) != 3 || got[0] == "p/k2" {
				t.Fatalf("p2c chose the busiest connection first: %v", got)
			}
		}
	})
	t.Run("docs/selection.md#strategies random uses only the injected source", func(t *testing.T) {
		run := func() []string {
			p := oneProvider("p", ProfileAPIKey, 3)
			p.Strategy = Random
			s, _ := Normalize(DefaultSettings())
			e, _ := NewEngine(topo(p), s, rand.New(rand.NewPCG(42, 1)))
			var out []string
			for i := 0; i < 10; i++ {
				out = append(out, strings.Join(candidates(selectAt(t, e, at(0), "p/m1")), ","))
			}
			return out
		}
		if a, b := run(), run(); !reflect.DeepEqual(a, b) {
			t.Fatalf("same seed, different orders:\n%v\n%v", a, b)
		}
	})
}

func TestSelectionExclusionsAndEarliest(t *testing.T) {
	// docs/names.md: every excluded connection names its layer with time left,
	// and the earliest recovery instant is reported for Retry-After.
	p := oneProvider("p", ProfileAPIKey, 4)
	e := mustEngine(t, topo(p), func(s *Settings) { s.ModelLockout.Enabled = true })
	hit(t, e, at(0), "p", "k1", "m1", withHeader(429, "retry-after", "20"))
	hit(t, e, at(0), "p", "k2", "m1", withBody(403, "account has been deactivated"))
	hit(t, e, at(0), "p", "k3", "m1", status(404))
	connOf(e, "p", "k3").RateLimitedUntil = 0
	var sel Selection
	req := Request{Route: route(t, e, "p/m1"), Allowed: []ConnRef{{"p", "k1"}, {"p", "k2"}, {"p", "k3"}}}
	e.Select(at(sec(5)), &req, &sel)
	want := map[string]Exclusion{"k1": ExclConnectionCooldown, "k2": ExclTerminal, "k3": ExclModelLockout, "k4": ExclNotAllowed}
	if len(sel.Candidates) != 0 || len(sel.Excluded) != 4 {
		t.Fatalf("%+v", sel)
	}
	for _, x := range sel.Excluded {
		if want[x.Connection] != x.Reason {
			t.Errorf("%s excluded by %v, want %v", x.Connection, x.Reason, want[x.Connection])
		}
	}
	if sel.Earliest != at(sec(20)) {
		t.Fatalf("earliest %d, want 20 s", sel.Earliest-t0)
	}
	err := Unavailable(at(sec(5)), &req.Route, &sel)
	if err == nil || err.Code.HTTPStatus() != 429 && err.Code.HTTPStatus() != 503 || err.RetryAfterSeconds() != 15 {
		t.Fatalf("unavailable: %+v", err)
	}
}

func TestUnavailableAnswers(t *testing.T) {
	// docs/selection.md#waiting-for-a-cooldown / docs/errors.md: the typed answer when nothing is eligible.
	a := oneProvider("a", ProfileLocal, 1)
	b := oneProvider("b", ProfileAPIKey, 1)
	tp := topo(a, b)
	tp.Combos = []ComboConfig{{ID: "c", Targets: []ComboTarget{{Provider: "a", Model: "m1"}, {Provider: "b", Model: "m1"}}}}
	t.Run("single model, breaker open → 503 provider_circuit_open + Retry-After", func(t *testing.T) {
		e := mustEngine(t, tp, nil)
		hit(t, e, at(0), "a", "k1", "m1", status(503))
		hit(t, e, at(0), "a", "k1", "m1", status(503))
		r := route(t, e, "a/m1")
		sel := selectAt(t, e, at(sec(5)), "a/m1")
		err := Unavailable(at(sec(5)), &r, sel)
		if err.Code != CodeCircuitOpen || err.Code.HTTPStatus() != 503 || err.RetryAfterSeconds() != 10 {
			t.Fatalf("%+v", err)
		}
	})
	t.Run("single model, all cooling → 429 rate_limit_error", func(t *testing.T) {
		e := mustEngine(t, tp, nil)
		hit(t, e, at(0), "b", "k1", "m1", withHeader(429, "retry-after", "2"))
		r := route(t, e, "b/m1")
		err := Unavailable(at(0), &r, selectAt(t, e, at(0), "b/m1"))
		if err.Code != CodeRateLimit || err.Code.HTTPStatus() != 429 || err.RetryAfterSeconds() != 2 {
			t.Fatalf("%+v", err)
		}
	})
	t.Run("single model, terminal only → 503 ALL_TARGETS_SKIPPED without Retry-After", func(t *testing.T) {
		e := mustEngine(t, tp, nil)
		hit(t, e, at(0), "b", "k1", "m1", withBody(402, "insufficient credits"))
		r := route(t, e, "b/m1")
		err := Unavailable(at(0), &r, selectAt(t, e, at(0), "b/m1"))
		if err.Code != CodeAllTargetsSkipped || err.RetryAfterSeconds() != 0 {
			t.Fatalf("%+v", err)
		}
	})
	t.Run("auth cooldowns → 503 ALL_TARGETS_SKIPPED, Retry-After only from a timer with a known end", func(t *testing.T) {
		// docs/selection.md#waiting-for-a-cooldown: auth_error / not_found → ALL_TARGETS_SKIPPED, no
		// Retry-After for them (the 401 ladder's 5 min is not a time the
		// request will succeed at).
		e := mustEngine(t, tp, nil)
		hit(t, e, at(0), "b", "k1", "m1", status(401))
		r := route(t, e, "b/m1")
		err := Unavailable(at(sec(1)), &r, selectAt(t, e, at(sec(1)), "b/m1"))
		if err.Code != CodeAllTargetsSkipped || err.Code.HTTPStatus() != 503 || err.RetryAfterSeconds() != 0 {
			t.Fatalf("single model: %+v", err)
		}
		hit(t, e, at(0), "a", "k1", "m1", status(401))
		r = route(t, e, "c")
		err = Unavailable(at(sec(1)), &r, selectAt(t, e, at(sec(1)), "c"))
		if err.Code != CodeAllTargetsSkipped || err.RetryAfterSeconds() != 0 || len(err.Excluded) != 2 {
			t.Fatalf("combo, both auth: %+v", err)
		}
		e = mustEngine(t, tp, nil)
		hit(t, e, at(0), "a", "k1", "m1", status(503))
		hit(t, e, at(0), "a", "k1", "m1", status(503))
		hit(t, e, at(0), "b", "k1", "m1", status(401))
		err = Unavailable(at(sec(1)), &r, selectAt(t, e, at(sec(1)), "c"))
		if err.Code != CodeAllTargetsCooling || err.RetryAfterSeconds() != 14 {
			t.Fatalf("combo, breaker + auth: %+v (want cooling with the breaker's 14 s, not the auth cooldown's)", err)
		}
	})
	t.Run("combo, breaker + quota cooldown → 503 all_targets_cooling_down with diagnostics", func(t *testing.T) {
		e := mustEngine(t, tp, nil)
		hit(t, e, at(0), "a", "k1", "m1", status(503))
		hit(t, e, at(0), "a", "k1", "m1", status(503))
		hit(t, e, at(0), "b", "k1", "m1", withBody(429, "monthly quota exceeded"))
		r := route(t, e, "c")
		err := Unavailable(at(sec(1)), &r, selectAt(t, e, at(sec(1)), "c"))
		if err.Code != CodeAllTargetsCooling || len(err.Excluded) != 2 || err.RetryAfterSeconds() != 14 {
			t.Fatalf("%+v", err)
		}
	})
	t.Run("combo wait decision: short transient cooldown", func(t *testing.T) {
		e := mustEngine(t, tp, nil)
		hit(t, e, at(0), "a", "k1", "m1", withHeader(429, "retry-after", "3"))
		hit(t, e, at(0), "b", "k1", "m1", withHeader(429, "retry-after", "5"))
		sel := selectAt(t, e, at(0), "c")
		// a is an openai-type provider with profile local: per-model quota
		// follows the type, never the profile, so its 429 cools the
		// connection for exactly the stated 3 s.
		if w, ok := WaitDecision(at(0), sel, true, 90000, 0, 5, 300000); !ok || w != 3000 {
			t.Fatalf("wait %d %v", w, ok)
		}
		if _, ok := WaitDecision(at(0), sel, true, 2000, 0, 5, 300000); ok {
			t.Fatal("must not wait beyond maxWaitMs")
		}
		if _, ok := WaitDecision(at(0), sel, true, 90000, 5, 5, 300000); ok {
			t.Fatal("must not wait beyond maxAttempts")
		}
		if _, ok := WaitDecision(at(0), sel, true, 90000, 0, 5, 2999); ok {
			t.Fatal("must not wait beyond the budget")
		}
	})
	t.Run("client key allowed on no connection of the route → 404 no_executable_targets", func(t *testing.T) {
		// docs/errors.md: nothing eligible and no timer involved, so not a 503 that
		// invites a retry.
		e := mustEngine(t, tp, nil)
		for _, name := range []string{"b/m1", "c"} {
			req := Request{Route: route(t, e, name), Allowed: []ConnRef{{"zz", "k1"}}}
			var sel Selection
			e.Select(at(0), &req, &sel)
			err := Unavailable(at(0), &req.Route, &sel)
			if err.Code != CodeNoExecutableTargets || err.Code.HTTPStatus() != 404 || err.RetryAfterSeconds() != 0 ||
				!strings.Contains(err.Message, "not allowed") {
				t.Fatalf("%s: %+v", name, err)
			}
		}
		// One terminal connection among the disallowed ones is still the
		// non-transient skip of docs/selection.md#waiting-for-a-cooldown.
		hit(t, e, at(0), "b", "k1", "m1", withBody(402, "insufficient credits"))
		req := Request{Route: route(t, e, "c"), Allowed: []ConnRef{{"b", "k1"}}}
		var sel Selection
		e.Select(at(0), &req, &sel)
		if err := Unavailable(at(0), &req.Route, &sel); err.Code != CodeAllTargetsSkipped {
			t.Fatalf("terminal + not allowed: %+v", err)
		}
	})
	t.Run("nothing eligible and no timer → 404 no_executable_targets", func(t *testing.T) {
		e := mustEngine(t, tp, nil)
		r := route(t, e, "c")
		var empty Selection
		if err := Unavailable(at(0), &r, &empty); err.Code != CodeNoExecutableTargets || err.Code.HTTPStatus() != 404 {
			t.Fatalf("%+v", err)
		}
	})
}

func TestComboSelectionOrderAndWindowGate(t *testing.T) {
	// docs/breaker.md#provider-cooldown: the window gate (off by default) skips a provider for combo
	// target resolution after N failures inside the window.
	a := oneProvider("a", ProfileLocal, 1)
	noPerModel := false
	a.PerModelQuota = &noPerModel // so the 503s cool the connection, not lock the model
	b := oneProvider("b", ProfileAPIKey, 1)
	tp := topo(a, b)
	tp.Combos = []ComboConfig{{ID: "c", Targets: []ComboTarget{{Provider: "a", Model: "m1"}, {Provider: "b", Model: "m1"}}}}
	e := mustEngine(t, tp, func(s *Settings) {
		s.ProviderCooldown.Enabled = true
		s.ProviderBreaker.Local.FailureThreshold = 100
		s.ProviderBreaker.Local.DegradationThreshold = 50
	})
	if got := candidates(selectAt(t, e, at(0), "c")); !reflect.DeepEqual(got, []string{"a/k1", "b/k1"}) {
		t.Fatal(got)
	}
	hit(t, e, at(0), "a", "k1", "m1", status(503))
	if w := e.windowCooling(at(1), &e.provs[0]); w != 0 {
		t.Fatal("below the threshold the provider is not cooling")
	}
	hit(t, e, at(sec(10)), "a", "k1", "m1", status(503)) // 2nd within 5 min → cools 1 min
	connOf(e, "a", "k1").RateLimitedUntil = 0
	sel := selectAt(t, e, at(sec(11)), "c")
	if got := candidates(sel); !reflect.DeepEqual(got, []string{"b/k1"}) || sel.Excluded[0].Reason != ExclProviderCooldown {
		t.Fatalf("%v %+v", got, sel.Excluded)
	}
	if s := selectAt(t, e, at(sec(11)), "a/m1"); len(s.Candidates) != 1 {
		t.Fatal("the window gate is consulted by combo resolution only")
	}
	if s := selectAt(t, e, at(sec(70)), "c"); len(s.Candidates) != 2 {
		t.Fatal("cooling ends providerCooldownMs after the tripping failure")
	}
}

func TestCooldownUnderALongerLockoutAnswersTheLockout(t *testing.T) {
	// docs/cooldowns.md#hints / docs/errors.md: Retry-After whenever a recovery time
	// is known — the true one. A plain 429 with model lockouts on cools the
	// connection 3 s and locks the model 120 s: while both run, the
	// connection serves the model again only after the lockout, so that is
	// the exclusion and the answer's Retry-After (it said 3 s, then after
	// 3 s said 117).
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), func(s *Settings) { s.ModelLockout.Enabled = true })
	hit(t, e, at(0), "p", "k1", "m1", status(429))
	c := connOf(e, "p", "k1")
	if c.RateLimitedUntil.Sub(at(0)) != 3000 {
		t.Fatalf("cooldown: %d", c.RateLimitedUntil.Sub(at(0)))
	}
	sel := selectAt(t, e, at(10), "p/m1")
	if len(sel.Excluded) != 1 || sel.Excluded[0].Reason != ExclModelLockout || sel.Excluded[0].RemainingMs < 100_000 {
		t.Fatalf("the longer lockout keeps it out: %+v", sel.Excluded)
	}
	r := route(t, e, "p/m1")
	if err := Unavailable(at(10), &r, sel); err == nil || err.Code != CodeModelCooldown || err.RetryAfterSeconds() < 100 {
		t.Fatalf("answer: %+v", err)
	}
}

func TestFullConnectionGoesAfterAFreeSibling(t *testing.T) {
	// docs/admission.md#concurrency-gates: a connection at its maxConcurrent cap queues requests; a
	// sibling with a free slot is tried first (fill-first sent every
	// request to k1's queue while k2 idled). With every connection full the
	// strategy's order stands: the request waits on the first.
	p := oneProvider("p", ProfileAPIKey, 2)
	p.Strategy = FillFirst
	for i := range p.Connections {
		p.Connections[i].MaxConcurrent = 1
	}
	e := mustEngine(t, topo(p), nil)
	a := beginOn(t, e, at(0), "p", "k1", "m1") // k1's one slot
	if got := candidates(selectAt(t, e, at(1), "p/m1")); len(got) != 2 || got[0] != "p/k2" {
		t.Fatalf("k1 full: k2 first, got %v", got)
	}
	b := beginOn(t, e, at(1), "p", "k2", "m1")
	if got := candidates(selectAt(t, e, at(2), "p/m1")); len(got) != 2 || got[0] != "p/k1" {
		t.Fatalf("both full: the strategy's order, got %v", got)
	}
	e.Record(at(3), &a, status(200))
	e.Record(at(3), &b, status(200))
	if got := candidates(selectAt(t, e, at(4), "p/m1")); got[0] != "p/k1" {
		t.Fatalf("both free: fill-first again, got %v", got)
	}
	// Both full, k1 with a request queued besides: the next one queues on
	// k2, the shorter queue, not behind k1's.
	a = beginOn(t, e, at(4), "p", "k1", "m1")
	b = beginOn(t, e, at(4), "p", "k2", "m1")
	q := beginOn(t, e, at(4), "p", "k1", "m1")
	if got := candidates(selectAt(t, e, at(5), "p/m1")); got[0] != "p/k2" {
		t.Fatalf("all full: the shorter queue first, got %v", got)
	}
	e.Record(at(5), &a, status(200))
	e.Record(at(5), &b, status(200))
	e.Record(at(5), &q, status(200))
	if err := e.SetCaps(ConnRef{"p", "k1"}, 0, nil); err != nil { // no cap: never full
		t.Fatal(err)
	}
	a = beginOn(t, e, at(5), "p", "k1", "m1")
	if got := candidates(selectAt(t, e, at(6), "p/m1")); got[0] != "p/k1" {
		t.Fatalf("uncapped k1 stays first: %v", got)
	}
}

func TestCapSetAtRunTimeHoldsAFullConnection(t *testing.T) {
	// docs/admission.md#concurrency-gates: a cap given to a connection of
	// a provider that had none (PUT /api/providers, SetCaps) or by a
	// config reload (UpdateTopology) holds the connection once it is full,
	// as a cap from the start does; taking the caps away again frees it.
	p := oneProvider("p", ProfileAPIKey, 2)
	p.Strategy = FillFirst
	e := mustEngine(t, topo(p), nil)
	if err := e.SetCaps(ConnRef{"p", "k1"}, 1, nil); err != nil {
		t.Fatal(err)
	}
	a := beginOn(t, e, at(0), "p", "k1", "m1")
	if got := candidates(selectAt(t, e, at(1), "p/m1")); got[0] != "p/k2" {
		t.Fatalf("k1 full after SetCaps: k2 first, got %v", got)
	}
	e.Record(at(1), &a, status(200))
	if err := e.SetCaps(ConnRef{"p", "k1"}, 0, map[string]int{"m1": 1}); err != nil {
		t.Fatal(err)
	}
	a = beginOn(t, e, at(1), "p", "k1", "m1")
	if got := candidates(selectAt(t, e, at(1), "p/m1")); got[0] != "p/k2" {
		t.Fatalf("k1's m1 cap taken after SetCaps: k2 first, got %v", got)
	}
	if err := e.SetCaps(ConnRef{"p", "k1"}, 0, nil); err != nil {
		t.Fatal(err)
	}
	if got := candidates(selectAt(t, e, at(1), "p/m1")); got[0] != "p/k1" {
		t.Fatalf("caps taken away: fill-first, got %v", got)
	}
	e.Record(at(2), &a, status(200))

	q := oneProvider("p", ProfileAPIKey, 2)
	q.Strategy = FillFirst
	q.Connections[0].MaxConcurrent = 1
	if err := e.UpdateTopology(topo(q)); err != nil {
		t.Fatal(err)
	}
	beginOn(t, e, at(3), "p", "k1", "m1")
	if got := candidates(selectAt(t, e, at(4), "p/m1")); got[0] != "p/k2" {
		t.Fatalf("k1 full after a reload gave it a cap: k2 first, got %v", got)
	}
}

func TestModelCapFullGoesAfterAFreeSibling(t *testing.T) {
	// docs/admission.md#concurrency-gates per-model caps: a connection whose modelConcurrency cap for
	// the model is taken goes after a sibling that can take it, as for
	// maxConcurrent (all ten requests went to k1 one after another while k2
	// was never called); another model on the same connection is not held.
	p := oneProvider("p", ProfileAPIKey, 2)
	p.Strategy = FillFirst
	for i := range p.Connections {
		p.Connections[i].ModelConcurrency = map[string]int{"m1": 1}
	}
	e := mustEngine(t, topo(p), nil)
	a := beginOn(t, e, at(0), "p", "k1", "m1")
	if got := candidates(selectAt(t, e, at(1), "p/m1")); got[0] != "p/k2" {
		t.Fatalf("k1's m1 cap taken: k2 first, got %v", got)
	}
	if got := candidates(selectAt(t, e, at(1), "p/m2")); got[0] != "p/k1" {
		t.Fatalf("m2 is not capped: fill-first, got %v", got)
	}
	e.Record(at(2), &a, status(200))
	if got := candidates(selectAt(t, e, at(3), "p/m1")); got[0] != "p/k1" {
		t.Fatalf("k1's m1 slot free again: got %v", got)
	}
}

func TestTriedConnectionIsNamedSo(t *testing.T) {
	// docs/README.md#troubleshooting: the debug log and traces say why each connection was left
	// out. One this request already tried is "tried", not "not_allowed"
	// (the key may well use it).
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), nil)
	var sel Selection
	req := Request{Route: route(t, e, "p/m1"), Skip: []ConnRef{{"p", "k1"}}}
	e.Select(at(0), &req, &sel)
	if len(sel.Excluded) != 1 || sel.Excluded[0].Reason != ExclTried || sel.Excluded[0].Reason.String() != "tried" {
		t.Fatalf("%+v", sel.Excluded)
	}
	req = Request{Route: route(t, e, "p/m1"), Allowed: []ConnRef{{"p", "k2"}}}
	e.Select(at(0), &req, &sel)
	if len(sel.Excluded) != 1 || sel.Excluded[0].Reason != ExclNotAllowed {
		t.Fatalf("%+v", sel.Excluded)
	}
}

// Rule (docs/settings.md#defaults model resolution): a name resolves against
// the topology in force. Resolve remembers the names that resolved, so a
// second Resolve must answer the same route, and after UpdateTopology the
// new topology's answer: a model the provider no longer lists is not
// found, an alias now pointing elsewhere follows it. A name with
// surrounding spaces resolves as its trimmed form and does not stand in
// for it; the memory stays within maxRoutes.
func TestResolveFollowsTopologyUpdates(t *testing.T) {
	a := oneProvider("a", ProfileAPIKey, 1)
	a.Models = []string{"m1", "m2"}
	tp := topo(a)
	tp.Aliases = map[string]string{"fast": "a/m1"}
	e := mustEngine(t, tp, nil)
	for range 2 {
		if r, err := e.Resolve("a/m2"); err != nil || r.Provider != "a" || r.Model != "m2" || r.Name != "a/m2" {
			t.Fatalf("resolve a/m2 = %+v, %v", r, err)
		}
		if r, err := e.Resolve("fast"); err != nil || r.Model != "m1" || r.Name != "fast" {
			t.Fatalf("resolve fast = %+v, %v", r, err)
		}
		if r, err := e.Resolve("  a/m2 "); err != nil || r.Model != "m2" || r.Name != "a/m2" {
			t.Fatalf("resolve with spaces = %+v, %v", r, err)
		}
	}
	next := oneProvider("a", ProfileAPIKey, 1)
	next.Models = []string{"m1"}
	tp2 := topo(next)
	tp2.Aliases = map[string]string{"a/m2": "a/m1"}
	if err := e.UpdateTopology(tp2); err != nil {
		t.Fatal(err)
	}
	if r, err := e.Resolve("a/m2"); err != nil || r.Model != "m1" {
		t.Fatalf("after the update a/m2 is an alias of a/m1: %+v, %v", r, err)
	}
	tp3 := topo(next)
	if err := e.UpdateTopology(tp3); err != nil {
		t.Fatal(err)
	}
	var te *Error
	if _, err := e.Resolve("a/m2"); err == nil || !asError(err, &te) || te.Code != CodeModelNotFound {
		t.Fatalf("a/m2 after the provider dropped m2: %v, want model not found", err)
	}
	if _, err := e.Resolve("fast"); err == nil {
		t.Fatalf("the alias fast is gone from the topology, yet it resolved")
	}
	any := oneProvider("any", ProfileAPIKey, 1)
	any.Models = nil // any model
	e = mustEngine(t, topo(any), nil)
	for i := range maxRoutes + 10 {
		if _, err := e.Resolve("any/m" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(e.routes) > maxRoutes {
		t.Fatalf("Resolve remembers %d names, more than maxRoutes %d", len(e.routes), maxRoutes)
	}
}
