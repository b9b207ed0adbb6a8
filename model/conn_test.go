package model

import (
	"testing"
)

func TestConnectionBackoffEscalatesAcrossRequests(t *testing.T) {
	// docs/cooldowns.md and docs/cooldowns.md#backoff: base·2^level capped by maxBackoffSteps;
	// the level survives an expired cooldown (fail → wait → fail escalates).
	// A transient failure's cooldown is capped by transientMaxCooldownMs
	// (bounded recovery), raised here to show the plain escalation.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), func(s *Settings) {
		s.ConnectionCooldown.TransientMaxCooldownMs = Millis(s.ConnectionCooldown.MaxCooldownMs)
	})
	now := at(0)
	want := []int64{3, 6, 12, 24, 48, 96, 96} // apikey base 3 s, 5 steps
	for i, w := range want {
		hit(t, e, now, "p", "k1", "m1", status(503))
		c := connOf(e, "p", "k1")
		if got := c.RateLimitedUntil.Sub(now); got != sec(w) {
			t.Fatalf("failure %d: cooldown %d ms, want %d s", i+1, got, w)
		}
		if c.BackoffLevel != min(i+1, 5) {
			t.Fatalf("failure %d: level %d", i+1, c.BackoffLevel)
		}
		now = c.RateLimitedUntil // wait it out, then fail again
	}
	// docs/cooldowns.md: a success clears every error field and backoffLevel.
	hit(t, e, now, "p", "k1", "m1", status(200))
	if c := connOf(e, "p", "k1"); !c.clean() || c.statusAt(now) != StatusActive {
		t.Fatalf("success must clear the connection: %+v", *c)
	}
}

func TestConnectionCooldownBoundary(t *testing.T) {
	// docs/cooldowns.md: eligible again as soon as rateLimitedUntil <= now.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	if s := selectAt(t, e, at(2999), "p/m1"); len(s.Candidates) != 0 || s.Excluded[0].Reason != ExclConnectionCooldown || s.Excluded[0].RemainingMs != 1 {
		t.Fatalf("1 ms before the end: %+v", s.Excluded)
	}
	if s := selectAt(t, e, at(3000), "p/m1"); len(s.Candidates) != 1 {
		t.Fatalf("at the end the connection must be eligible: %+v", s.Excluded)
	}
}

func TestConnectionBackoffDecay(t *testing.T) {
	// docs/cooldowns.md#backoff: a quiet period lowers the level by one per
	// backoffDecayMs (10 min), counted from the end of the cooldown.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
	now := at(0)
	for i := 0; i < 3; i++ {
		hit(t, e, now, "p", "k1", "m1", status(503))
		now = connOf(e, "p", "k1").RateLimitedUntil
	}
	c := connOf(e, "p", "k1")
	end := c.RateLimitedUntil
	if got := c.levelAt(end.Add(10*minute-1), 10*minute); got != 3 {
		t.Fatalf("before one quiet period: %d", got)
	}
	if got := c.levelAt(end.Add(10*minute), 10*minute); got != 2 {
		t.Fatalf("after one quiet period: %d", got)
	}
	if got := c.levelAt(end.Add(35*minute), 10*minute); got != 0 {
		t.Fatalf("after three quiet periods: %d", got)
	}
	// The next failure after 10 quiet minutes is priced at level 2: 12 s.
	next := end.Add(10 * minute)
	hit(t, e, next, "p", "k1", "m1", status(503))
	if got := connOf(e, "p", "k1").RateLimitedUntil.Sub(next); got != sec(12) {
		t.Fatalf("decayed level: cooldown %d ms, want 12 s", got)
	}
}

func TestThunderingHerdRaisesLevelOnce(t *testing.T) {
	// docs/cooldowns.md thundering-herd guard: N concurrent failures raise
	// backoffLevel once, not N times.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
	var as []Attempt
	for i := 0; i < 8; i++ {
		as = append(as, beginOn(t, e, at(0), "p", "k1", "m1"))
	}
	for i := range as {
		e.Record(at(int64(100+i)), &as[i], status(503))
	}
	c := connOf(e, "p", "k1")
	if c.BackoffLevel != 1 {
		t.Fatalf("level %d after 8 concurrent failures, want 1", c.BackoffLevel)
	}
	if got := c.RateLimitedUntil; got != at(100+3000) {
		t.Fatalf("cooldown until %d, want the first failure's 3 s", got-t0)
	}
	// A concurrent failure with a longer stated hint extends, without escalating.
	a := beginOn(t, e, at(0), "p", "k1", "m1")
	e.Record(at(200), &a, withHeader(429, "retry-after", "10"))
	if c.BackoffLevel != 1 || c.RateLimitedUntil != at(200+10000) {
		t.Fatalf("herd hint: level %d until %d", c.BackoffLevel, c.RateLimitedUntil-t0)
	}
}

func TestRetryAfterFloorCapAndExtendOnly(t *testing.T) {
	// docs/cooldowns.md#hints: a hint is a floor, capped by the operator
	// ceiling, and may only extend an active cooldown. For every profile.
	for _, prof := range []Profile{ProfileOAuth, ProfileAPIKey} {
		e := mustEngine(t, topo(oneProvider("p", prof, 1)), nil)
		hit(t, e, at(0), "p", "k1", "m1", withHeader(429, "retry-after", "20"))
		if got := connOf(e, "p", "k1").RateLimitedUntil; got != at(sec(20)) {
			t.Fatalf("%v: 429 Retry-After 20 → until %d ms", prof, got-t0)
		}
		// 5xx with a hint shorter than the backoff: backoff wins (floor).
		e2 := mustEngine(t, topo(oneProvider("p", prof, 1)), nil)
		hit(t, e2, at(0), "p", "k1", "m1", withHeader(503, "retry-after", "1"))
		base := int64(e2.settings.ConnectionCooldown.For(prof).BaseCooldownMs)
		if got := connOf(e2, "p", "k1").RateLimitedUntil; got != at(base) {
			t.Fatalf("%v: 503 hint 1 s under base: until %d, want base %d", prof, got-t0, base)
		}
	}
	// Header hints cap at maxStatedResetMs (24 h); prose at maxCooldownMs.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), nil)
	hit(t, e, at(0), "p", "k1", "m1", withHeader(429, "retry-after", "200000"))
	if got := connOf(e, "p", "k1").RateLimitedUntil; got != at(24*hour) {
		t.Fatalf("stated hint cap: %d", got-t0)
	}
	hit(t, e, at(0), "p", "k2", "m1", withBody(429, `{"error":{"message":"Rate limited. Please retry in 7200s."}}`))
	if got := connOf(e, "p", "k2").RateLimitedUntil; got != at(30*minute) {
		t.Fatalf("prose hint cap: %d", got-t0)
	}
	// A shorter later hint never shortens an active cooldown.
	hit(t, e, at(1000), "p", "k1", "m1", withHeader(429, "retry-after", "5"))
	if got := connOf(e, "p", "k1").RateLimitedUntil; got != at(24*hour) {
		t.Fatalf("cooldown shortened to %d", got-t0)
	}
}

func TestConcurrencyLimited429(t *testing.T) {
	// docs/cooldowns.md: a concurrency-limit 429 cools 1 s, keeps backoffLevel, does
	// not touch the breaker, and the request moves on at once.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), nil)
	hit(t, e, at(0), "p", "k1", "m1", status(503)) // level 1
	now := at(sec(10))
	v := hit(t, e, now, "p", "k1", "m1", withBody(429, `{"error":{"message":"Too many concurrent requests for this account"}}`))
	c := connOf(e, "p", "k1")
	if v.Reason != ReasonConcurrencyLimited || v.Next != NextConnection {
		t.Fatalf("verdict %+v", v)
	}
	if c.RateLimitedUntil != now.Add(1000) || c.BackoffLevel != 1 {
		t.Fatalf("cooldown %d level %d, want 1 s and level 1", c.RateLimitedUntil.Sub(now), c.BackoffLevel)
	}
	if fc := breakerOf(e, "p").FailureCount; fc != 1 {
		t.Fatalf("breaker moved: %d", fc)
	}
	// GLM's Chinese body too.
	hit(t, e, now, "p", "k2", "m1", withBody(429, `{"error":{"code":"1302","message":"您当前使用该API的并发数过高"}}`))
	if c2 := connOf(e, "p", "k2"); c2.RateLimitedUntil != now.Add(1000) || c2.BackoffLevel != 0 {
		t.Fatalf("GLM concurrency 429: %+v", *c2)
	}
}

func TestExpiredLadder(t *testing.T) {
	// docs/cooldowns.md / docs/classification.md#verdicts: 401 cools 5, 10, 20 min; after EXPIRED_RETRY_MAX (3)
	// failed retries the connection is terminal `expired`.
	e := mustEngine(t, topo(oneProvider("p", ProfileOAuth, 1)), nil)
	now := at(0)
	for i, w := range []int64{5, 10, 20} {
		hit(t, e, now, "p", "k1", "m1", status(401))
		c := connOf(e, "p", "k1")
		if c.Status.Terminal() || c.RateLimitedUntil.Sub(now) != w*minute {
			t.Fatalf("401 #%d: status %v cooldown %d, want %d min", i+1, c.Status, c.RateLimitedUntil.Sub(now), w)
		}
		// a concurrent 401 of the same episode is not counted
		hit(t, e, now.Add(1), "p", "k1", "m1", status(401))
		now = c.RateLimitedUntil
	}
	hit(t, e, now, "p", "k1", "m1", status(401))
	if c := connOf(e, "p", "k1"); c.statusAt(now) != StatusExpired {
		t.Fatalf("after 3 failed retries: %v, want expired", c.statusAt(now))
	}
	// Terminal is never selected and never overwritten by a transient state.
	hit(t, e, now, "p", "k1", "m1", withHeader(429, "retry-after", "5"))
	if c := connOf(e, "p", "k1"); c.Status != StatusExpired || c.RateLimitedUntil != 0 {
		t.Fatalf("terminal overwritten: %+v", *c)
	}
	if s := selectAt(t, e, now.Add(hour), "p/m1"); len(s.Candidates) != 0 || s.Excluded[0].Reason != ExclTerminal {
		t.Fatalf("terminal selected: %+v", s)
	}
	// A success of an attempt in flight does not clear a terminal state.
	hit(t, e, now, "p", "k1", "m1", status(200))
	if connOf(e, "p", "k1").Status != StatusExpired {
		t.Fatal("success cleared a terminal state")
	}
	// Only the operator reset clears it.
	if ok, err := e.ResetConnection(now, ConnRef{"p", "k1"}); !ok || err != nil {
		t.Fatalf("reset: %v %v", ok, err)
	}
	if s := selectAt(t, e, now, "p/m1"); len(s.Candidates) != 1 {
		t.Fatal("reset connection must be selectable")
	}
}

func TestExpiredLadderWindow(t *testing.T) {
	// The streak only continues within 24 h.
	e := mustEngine(t, topo(oneProvider("p", ProfileOAuth, 1)), nil)
	hit(t, e, at(0), "p", "k1", "m1", status(401))
	hit(t, e, at(sec(300)), "p", "k1", "m1", status(401))
	later := at(sec(300) + 24*hour)
	hit(t, e, later, "p", "k1", "m1", status(401))
	if c := connOf(e, "p", "k1"); c.Auth.Count != 1 || c.RateLimitedUntil != later.Add(5*minute) {
		t.Fatalf("a 401 after 24 h must restart the ladder: %+v", c.Auth)
	}
}

func TestRequestRejectedLadder(t *testing.T) {
	// docs/cooldowns.md#ladders / docs/cooldowns.md#ladders: an unrecognised 403 cools 5 min,
	// then 15 min; the 3rd within 24 h bans. Ban text bans at once.
	e := mustEngine(t, topo(oneProvider("p", ProfileOAuth, 2)), nil)
	now := at(0)
	for i, w := range []int64{5, 15} {
		hit(t, e, now, "p", "k1", "m1", withBody(403, `{"error":{"message":"Request not allowed"}}`))
		c := connOf(e, "p", "k1")
		if c.Status.Terminal() || c.RateLimitedUntil.Sub(now) != w*minute {
			t.Fatalf("403 #%d: %v cooldown %d, want %d min", i+1, c.Status, c.RateLimitedUntil.Sub(now), w)
		}
		hit(t, e, now.Add(10), "p", "k1", "m1", status(403)) // same episode, not counted
		now = c.RateLimitedUntil
	}
	hit(t, e, now, "p", "k1", "m1", status(403))
	if st := connOf(e, "p", "k1").Status; st != StatusBanned {
		t.Fatalf("3rd rejection within 24 h: %v, want banned", st)
	}
	hit(t, e, at(0), "p", "k2", "m1", withBody(403, `{"error":{"message":"Your account has been deactivated"}}`))
	if st := connOf(e, "p", "k2").Status; st != StatusBanned {
		t.Fatalf("ban text: %v, want banned at once", st)
	}
}

func TestCreditsExhaustedTerminal(t *testing.T) {
	// docs/classification.md#verdicts: credits exhausted (402) is terminal credits_exhausted.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
	hit(t, e, at(0), "p", "k1", "m1", withBody(402, `{"error":{"message":"Your credit balance is too low"}}`))
	if st := connOf(e, "p", "k1").statusAt(at(0)); st != StatusCreditsExhausted {
		t.Fatalf("got %v", st)
	}
}

func TestQuotaCooldownToDailyReset(t *testing.T) {
	// docs/lockouts.md#quota-reset: quota without a hint cools until the provider's
	// dailyResetUtc (never host midnight), capped by maxCooldownMs; a stated
	// reset is honoured up to maxStatedResetMs.
	p := oneProvider("p", ProfileAPIKey, 2)
	p.DailyResetUTC = "00:20"
	e := mustEngine(t, topo(p), nil)
	now := at(0) // 00:00 UTC
	hit(t, e, now, "p", "k1", "m1", withBody(429, `{"error":{"message":"You exceeded your daily quota. Try again tomorrow."}}`))
	if got := connOf(e, "p", "k1").RateLimitedUntil.Sub(now); got != 20*minute {
		t.Fatalf("until daily reset 00:20: %d", got)
	}
	now = at(hour) // 01:00: the next reset is 23 h away, capped at 30 min
	hit(t, e, now, "p", "k2", "m1", withBody(429, `{"error":{"message":"daily quota exceeded"}}`))
	if got := connOf(e, "p", "k2").RateLimitedUntil.Sub(now); got != 30*minute {
		t.Fatalf("capped by maxCooldownMs: %d", got)
	}
	e.ClearCooldowns(now, nil, true, "")
	hit(t, e, now, "p", "k2", "m1", Outcome{Kind: OutcomeResponse, Status: 429,
		Headers: HeaderMap{"retry-after": "7200"}, Body: `{"error":{"message":"daily quota exceeded"}}`})
	if got := connOf(e, "p", "k2").RateLimitedUntil.Sub(now); got != 2*hour {
		t.Fatalf("stated reset: %d", got)
	}
}

func TestStreamStallRecordsWithoutCooldown(t *testing.T) {
	// docs/cooldowns.md: a stall records the error but sets no cooldown, unless
	// streamStallCooldown.enabled.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
	v := hit(t, e, at(0), "p", "k1", "m1", Outcome{Kind: OutcomeStall})
	c := connOf(e, "p", "k1")
	if c.RateLimitedUntil != 0 || c.LastErrorType != ReasonStreamStall || v.Next != NextRetry {
		t.Fatalf("stall: %+v verdict %+v", *c, v)
	}
	e2 := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), func(s *Settings) { s.StreamStallCooldown.Enabled = true })
	hit(t, e2, at(0), "p", "k1", "m1", Outcome{Kind: OutcomeStall})
	if c := connOf(e2, "p", "k1"); c.RateLimitedUntil != at(3000) {
		t.Fatalf("stall with streamStallCooldown: until %d", c.RateLimitedUntil-t0)
	}
}

func TestDisableCooling(t *testing.T) {
	p := oneProvider("p", ProfileAPIKey, 1)
	p.Connections[0].DisableCooling = true
	e := mustEngine(t, topo(p), nil)
	hit(t, e, at(0), "p", "k1", "m1", status(429))
	if c := connOf(e, "p", "k1"); c.RateLimitedUntil != 0 || c.ErrorCode != 429 {
		t.Fatalf("disableCooling: %+v", *c)
	}
}

func TestRequestScopedTouchesNothing(t *testing.T) {
	// docs/classification.md#verdicts: context length / content filter are request-scoped: no
	// cooldown, no breaker, no lockout. A content filter stops (the client
	// gets the error); a context length goes to another model (NextModel).
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), func(s *Settings) { s.ModelLockout.Enabled = true })
	for body, next := range map[string]Next{
		`{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}`:                      NextModel,
		`{"error":{"message":"The response was filtered due to the prompt triggering content management policy","code":"content_filter"}}`: NextStop,
	} {
		v := hit(t, e, at(0), "p", "k1", "m1", withBody(400, body))
		if v.Next != next || v.Reason != ReasonRequestScoped {
			t.Fatalf("verdict %+v", v)
		}
	}
	if c := connOf(e, "p", "k1"); !c.clean() || len(locksOf(e, "p", "k1")) != 0 || breakerOf(e, "p").FailureCount != 0 {
		t.Fatalf("request-scoped error changed state: %+v", *c)
	}
}

func TestEgressBucketCoolsSiblings(t *testing.T) {
	// docs/cooldowns.md#egress-buckets: a 429 on an egress-bucketed provider cools every
	// sibling with the same fresh egress IP; terminal siblings, longer
	// cooldowns, other IPs and disableCooling are left alone; never terminal.
	p := oneProvider("o", ProfileAPIKey, 5)
	p.Type = "opencode"
	p.Connections[4].DisableCooling = true
	e := mustEngine(t, topo(p), nil)
	for i, ip := range []string{"10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.1"} {
		if err := e.SetEgressIP(at(0), ConnRef{"o", p.Connections[i].ID}, ip); err != nil {
			t.Fatal(err)
		}
	}
	hit(t, e, at(0), "o", "k2", "m1", withBody(402, "insufficient credits")) // k2 terminal
	hit(t, e, at(0), "o", "k1", "m1", withHeader(429, "retry-after", "60"))
	until := at(sec(60))
	if got := connOf(e, "o", "k4").RateLimitedUntil; got != until {
		t.Fatalf("same-IP sibling: until %d, want %d", got-t0, until-t0)
	}
	if connOf(e, "o", "k2").Status != StatusCreditsExhausted || connOf(e, "o", "k2").RateLimitedUntil != 0 {
		t.Fatal("terminal sibling overwritten")
	}
	if connOf(e, "o", "k3").RateLimitedUntil != 0 {
		t.Fatal("a sibling on another IP was cooled")
	}
	if connOf(e, "o", "k5").RateLimitedUntil != 0 {
		t.Fatal("disableCooling sibling was cooled")
	}
	// Not on other provider types, and not with a stale IP.
	q := oneProvider("q", ProfileAPIKey, 2)
	e2 := mustEngine(t, topo(q), nil)
	e2.SetEgressIP(at(0), ConnRef{"q", "k1"}, "1.1.1.1")
	e2.SetEgressIP(at(0), ConnRef{"q", "k2"}, "1.1.1.1")
	hit(t, e2, at(0), "q", "k1", "m1", status(429))
	if connOf(e2, "q", "k2").RateLimitedUntil != 0 {
		t.Fatal("egress bucket applied to a provider that is not bucketed")
	}
	e3 := mustEngine(t, topo(p), nil)
	e3.SetEgressIP(at(0), ConnRef{"o", "k1"}, "1.1.1.1")
	e3.SetEgressIP(at(0), ConnRef{"o", "k4"}, "1.1.1.1")
	hit(t, e3, at(25*hour), "o", "k1", "m1", status(429))
	if connOf(e3, "o", "k4").RateLimitedUntil != 0 {
		t.Fatal("a stale egress IP (older than 24 h) was trusted")
	}
}

func TestClearingCooldownsKeepsTheLadders(t *testing.T) {
	// docs/cooldowns.md, docs/api.md#cooldown-manager: the cooldown manager lifts a cooldown but never clears
	// a terminal state, so it must not wipe the 401 ladder's strikes
	// either: a key that keeps answering 401 still reaches expired after
	// clears (each clear restarted its ladder at 5 min: never terminal).
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), nil)
	now := at(0)
	var lasts []int64
	for i := 0; i < 6 && !connOf(e, "p", "k1").Status.Terminal(); i++ {
		hit(t, e, now, "p", "k1", "m1", withBody(401, `{"error":{"message":"invalid api key"}}`))
		lasts = append(lasts, connOf(e, "p", "k1").RateLimitedUntil.Sub(now))
		if _, err := e.ClearCooldowns(now, []ConnRef{{"p", "k1"}}, false, ""); err != nil {
			t.Fatal(err)
		}
		now = now.Add(sec(1))
	}
	if c := connOf(e, "p", "k1"); c.Status != StatusExpired {
		t.Fatalf("the 401 ladder under clears: %v, cooldowns %v", c.Status, lasts)
	}
	if lasts[1] <= lasts[0] {
		t.Fatalf("the second 401 after a clear is the ladder's second step: %v", lasts)
	}
}

func TestConnectionTestKeepsTheLadders(t *testing.T) {
	// docs/api.md#operator-actions / docs/cooldowns.md: a passed connection test clears a non-terminal
	// cooldown, but a /models that answers says nothing of the requests the
	// key had refused: the 403 ladder's strikes stay, so a key tested
	// between refusals still reaches banned (each test restarted it).
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), nil)
	ref := ConnRef{"p", "k1"}
	for i := 0; i < 4 && !connOf(e, "p", "k1").Status.Terminal(); i++ {
		now := at(int64(i) * sec(1))
		hit(t, e, now, "p", "k1", "m1", withBody(403, `{"error":{"message":"Request not allowed"}}`))
		if err := e.connectionTestPassed(now, ref); err != nil {
			t.Fatal(err)
		}
	}
	if c := connOf(e, "p", "k1"); c.Status != StatusBanned {
		t.Fatalf("the 403 ladder under connection tests: %+v", *c)
	}
}
