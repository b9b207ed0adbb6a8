package model

import (
	"testing"
)

func lockUntil(t *testing.T, e *Engine, provider, conn string, key LockKey) Time {
	t.Helper()
	ls := locksOf(e, provider, conn)
	i := ls.find(key)
	if i < 0 {
		t.Fatalf("no lockout %v on %s/%s (have %+v)", key, provider, conn, ls)
	}
	return ls[i].Until
}

func TestLockoutGenericPathNeedsEnabled(t *testing.T) {
	// docs/lockouts.md: `enabled` switches the generic path; off by default.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	if len(locksOf(e, "p", "k1")) != 0 {
		t.Fatal("generic lockout applied while modelLockout.enabled is false")
	}
	e = mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), func(s *Settings) { s.ModelLockout.Enabled = true })
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	// 5xx locks only the exact triple, base 120 s.
	if u := lockUntil(t, e, "p", "k1", LockKey{Name: "m1", Exact: true}); u != at(sec(120)) {
		t.Fatalf("exact lockout until %d", u-t0)
	}
	// 500 is not in the default errorCodes.
	e2 := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), func(s *Settings) { s.ModelLockout.Enabled = true })
	hit(t, e2, at(0), "p", "k1", "m1", status(500))
	if len(locksOf(e2, "p", "k1")) != 0 {
		t.Fatal("status outside errorCodes locked the model")
	}
}

func TestLockoutScopeByStatus(t *testing.T) {
	// docs/lockouts.md lock key by status: 429/403/402 → quota family; 404 → the
	// model itself; anything else → the exact triple.
	p := oneProvider("p", ProfileAPIKey, 1)
	p.Models = []string{"gpt-5", "gpt-5-mini", "o3"}
	p.QuotaFamilies = map[string][]string{"gpt5": {"gpt-5*"}}
	e := mustEngine(t, topo(p), func(s *Settings) { s.ModelLockout.Enabled = true })
	hit(t, e, at(0), "p", "k1", "gpt-5-mini", status(429))
	if len(locksOf(e, "p", "k1")) != 1 || locksOf(e, "p", "k1")[0].Key != (LockKey{Name: "family:gpt5"}) {
		t.Fatalf("429 must lock the quota family: %+v", locksOf(e, "p", "k1"))
	}
	e.ClearCooldowns(at(0), nil, true, "") // cooldown and lockouts off, to see selection
	hit(t, e, at(0), "p", "k1", "gpt-5-mini", status(429))
	now := at(sec(10))
	connOf(e, "p", "k1").RateLimitedUntil = 0 // isolate the lockout layer
	for _, m := range []string{"gpt-5", "gpt-5-mini"} {
		if s := selectAt(t, e, now, "p/"+m); len(s.Candidates) != 0 || s.Excluded[0].Reason != ExclModelLockout {
			t.Fatalf("family member %s must be locked: %+v", m, s.Excluded)
		}
	}
	if s := selectAt(t, e, now, "p/o3"); len(s.Candidates) != 1 {
		t.Fatal("a model outside the family must stay selectable")
	}
	hit(t, e, now, "p", "k1", "o3", status(404))
	if locksOf(e, "p", "k1").find(LockKey{Name: "o3"}) < 0 {
		t.Fatal("404 must lock the bare model")
	}
}

func TestLockoutSpecificRulesIgnoreEnabled(t *testing.T) {
	// docs/lockouts.md: 404 from a local provider and 429/5xx on a per-model-quota
	// provider lock whatever `enabled` says; the connection stays active.
	local := oneProvider("l", ProfileLocal, 1)
	local.Type = "local"
	gem := oneProvider("g", ProfileAPIKey, 1)
	gem.Type = "gemini"
	e := mustEngine(t, topo(local, gem), nil)
	hit(t, e, at(0), "l", "k1", "m1", status(404))
	if locksOf(e, "l", "k1").find(LockKey{Name: "m1"}) < 0 {
		t.Fatal("local 404 must lock the model")
	}
	v := hit(t, e, at(0), "g", "k1", "m1", status(429))
	if locksOf(e, "g", "k1").find(LockKey{Name: "m1"}) < 0 {
		t.Fatalf("per-model-quota 429 must lock the family: verdict %+v", v)
	}
	if c := connOf(e, "g", "k1"); c.statusAt(at(1)) != StatusActive {
		t.Fatalf("per-model-quota 429 must not cool the connection: %+v", *c)
	}
	if s := selectAt(t, e, at(1), "g/m2"); len(s.Candidates) != 1 {
		t.Fatal("the neighbouring model must stay selectable")
	}
	// Exactly 500 on a per-model-quota provider records the error only.
	hit(t, e, at(0), "g", "k1", "m2", status(500))
	if locksOf(e, "g", "k1").find(LockKey{Name: "m2", Exact: true}) >= 0 || connOf(e, "g", "k1").statusAt(at(1)) != StatusActive {
		t.Fatal("per-model-quota 500 must record only")
	}
}

func TestLockoutEscalationWindow(t *testing.T) {
	// docs/lockouts.md#escalation: failures inside modelLockout.escalationWindowMs
	// escalate base·2^(n-1) up to maxCooldownMs; outside it they start over.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), func(s *Settings) {
		s.ModelLockout.Enabled = true
		s.ModelLockout.BaseCooldownMs = 60000
		s.ModelLockout.MaxCooldownMs = 300000
	})
	key := LockKey{Name: "m1", Exact: true}
	now := at(0)
	for i, w := range []int64{60, 120, 240, 300, 300} {
		hit(t, e, now, "p", "k1", "m1", status(502))
		if u := lockUntil(t, e, "p", "k1", key); u.Sub(now) != sec(w) {
			t.Fatalf("failure %d: %d ms, want %d s", i+1, u.Sub(now), w)
		}
		now = lockUntil(t, e, "p", "k1", key).Add(1) // first instant it is free
	}
	// The window (30 min) plus the last cooldown passes: back to the base.
	now = now.Add(30*minute + 300000 + 1)
	hit(t, e, now, "p", "k1", "m1", status(502))
	if u := lockUntil(t, e, "p", "k1", key); u.Sub(now) != sec(60) {
		t.Fatalf("after the window: %d", u.Sub(now))
	}
}

func TestLockoutBoundaryInclusive(t *testing.T) {
	// docs/lockouts.md: locked while now <= until.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), func(s *Settings) { s.ModelLockout.Enabled = true })
	hit(t, e, at(0), "p", "k1", "m1", status(404))
	connOf(e, "p", "k1").RateLimitedUntil = 0
	until := lockUntil(t, e, "p", "k1", LockKey{Name: "m1"})
	if s := selectAt(t, e, until, "p/m1"); len(s.Candidates) != 0 || s.Excluded[0].RemainingMs != 1 {
		t.Fatalf("at until the model is still locked: %+v", s.Excluded)
	}
	if s := selectAt(t, e, until.Add(1), "p/m1"); len(s.Candidates) != 1 {
		t.Fatal("1 ms after until the model must be free")
	}
}

func TestLockoutSuccessDecay(t *testing.T) {
	// docs/lockouts.md and docs/lockouts.md#success-decay: a success halves failureCount and removes
	// the lockout when it reaches 0.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), func(s *Settings) {
		s.ModelLockout.Enabled = true
	})
	key := LockKey{Name: "m1", Exact: true}
	for i := int64(0); i < 5; i++ {
		hit(t, e, at(i), "p", "k1", "m1", status(503))
	}
	ls := locksOf(e, "p", "k1")
	if ls[ls.find(key)].FailureCount != 5 {
		t.Fatalf("setup failureCount %d", ls[ls.find(key)].FailureCount)
	}
	for _, want := range []int{2, 1} {
		hit(t, e, at(10), "p", "k1", "m1", status(200))
		ls = locksOf(e, "p", "k1")
		if i := ls.find(key); i < 0 || ls[i].FailureCount != want {
			t.Fatalf("after decay want %d: %+v", want, ls)
		}
	}
	hit(t, e, at(10), "p", "k1", "m1", status(200))
	if locksOf(e, "p", "k1").find(key) >= 0 {
		t.Fatal("decay to 0 must remove the lockout")
	}
}

func TestLockoutQuotaUntilDailyReset(t *testing.T) {
	// docs/lockouts.md#quota-reset for lockouts: quota without a hint locks until the
	// provider's daily reset, capped by maxCooldownMs unless stated.
	g := oneProvider("g", ProfileAPIKey, 1)
	g.Type = "gemini"
	g.DailyResetUTC = "00:10"
	e := mustEngine(t, topo(g), nil)
	hit(t, e, at(0), "g", "k1", "m1", withBody(429, `{"error":{"message":"You exceeded your daily quota"}}`))
	if u := lockUntil(t, e, "g", "k1", LockKey{Name: "m1"}); u != at(10*minute) {
		t.Fatalf("quota lockout until %d, want 00:10", u-t0)
	}
	// A typed RetryInfo of 86399 s is a stated reset: honoured beyond the cap.
	e2 := mustEngine(t, topo(g), nil)
	body := `{"error":{"code":429,"message":"Quota exceeded","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"86399s"}]}}`
	hit(t, e2, at(0), "g", "k1", "m1", withBody(429, body))
	if u := lockUntil(t, e2, "g", "k1", LockKey{Name: "m1"}); u != at(86399000) {
		t.Fatalf("stated retry info: until %d", u-t0)
	}
}

func TestClearLockoutHonoursConnection(t *testing.T) {
	// docs/api.md#model-cooldowns: DELETE model-cooldowns honours the connection.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), func(s *Settings) { s.ModelLockout.Enabled = true })
	hit(t, e, at(0), "p", "k1", "m1", status(404))
	hit(t, e, at(0), "p", "k2", "m1", status(404))
	if n, err := e.ClearLockout(at(1), ConnRef{"p", "k1"}, "m1"); n != 1 || err != nil {
		t.Fatalf("clear: %d %v", n, err)
	}
	if len(locksOf(e, "p", "k1")) != 0 || len(locksOf(e, "p", "k2")) != 1 {
		t.Fatal("clearing k1 must leave k2's lockout")
	}
	if _, err := e.ClearLockout(at(1), ConnRef{"p", "zz"}, "m1"); err == nil {
		t.Fatal("unknown connection must be an error")
	}
}
