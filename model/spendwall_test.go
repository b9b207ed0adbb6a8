package model

import (
	"strconv"
	"strings"
	"testing"
)

// Spend wall tests (docs/spendwall.md, wire names docs/spendwall.md#wire-names). Every case runs on
// explicit virtual times from t0.

func swProvider(cfg SpendWallConfig, n int) ProviderConfig {
	p := oneProvider("an", ProfileOAuth, n)
	p.Type = "anthropic"
	for i := range p.Connections {
		p.Connections[i].SpendWall = cfg
	}
	return p
}

var bothOn = SpendWallConfig{SlowLane: true, LimitReset: true}
var laneOnly = SpendWallConfig{SlowLane: true}

// wall is the spend-wall 429: rejected, with the slow-lane offer when offer,
// announcing the window reset at reset (0 = not stated).
func wall(offer bool, reset Time) Outcome {
	h := HeaderMap{headerUnifiedStatus: "rejected"}
	if offer {
		h[headerSlowOffer] = "treatment"
	}
	if reset != 0 {
		h[headerUnifiedReset] = strconv.FormatInt(int64(reset)/1000, 10)
	}
	return Outcome{Kind: OutcomeResponse, Status: 429, Headers: h, Body: `{"error":{"type":"rate_limit_error"}}`}
}

// lane is a response to a lane attempt with extra headers as k, v pairs.
func lane(status int, kv ...string) Outcome {
	h := HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return Outcome{Kind: OutcomeResponse, Status: status, Headers: h}
}

// swDrive runs one request's flow; each step lands in the trail:
// "an/k1" (plain attempt), "an/k1+slow" (lane header), "wait:MS",
// "reset:an/k1" (limit-reset calls). Attempts take 10 ms.
func swDrive(t *testing.T, e *Engine, now Time, respond func(a *Attempt, n int) Outcome,
	reset func(ref ConnRef) LimitResetResult) (Step, []string, Time) {
	t.Helper()
	f := e.StartFlow(now, route(t, e, "an/m1"), "", nil)
	var sel Selection
	var trail []string
	for i := 0; i < 200; i++ {
		st := f.Next(now, e, &sel)
		switch st.Kind {
		case StepAnswer:
			return st, trail, now
		case StepWait:
			trail = append(trail, "wait:"+strconv.FormatInt(st.WaitMs, 10))
			now = now.Add(st.WaitMs)
		case StepLimitReset:
			trail = append(trail, "reset:"+st.LastConnection.String())
			if reset == nil {
				t.Fatal("limit reset asked for without a reset answer")
			}
			if _, ans := f.LimitResetDone(now, e, reset(st.LastConnection)); ans != nil {
				return *ans, trail, now
			}
		case StepAttempt:
			s := st.Attempt.Provider + "/" + st.Attempt.Connection
			if st.Attempt.SlowLane {
				s += "+slow"
			}
			trail = append(trail, s)
			o := respond(&st.Attempt, len(trail))
			now = now.Add(10)
			if _, ans := f.Record(now, e, &st.Attempt, Report{Outcome: o}); ans != nil {
				return *ans, trail, now
			}
		}
	}
	t.Fatal("flow did not end")
	return Step{}, nil, now
}

// answers answers the n-th attempt of a request with outs[n-1] (the last repeats).
func answers(outs ...Outcome) func(a *Attempt, n int) Outcome {
	i := 0
	return func(a *Attempt, n int) Outcome {
		o := outs[min(i, len(outs)-1)]
		i++
		return o
	}
}

func laneOf(t *testing.T, e *Engine, now Time, conn string) LaneState {
	t.Helper()
	l, err := e.SpendWall(now, ConnRef{"an", conn})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestSpendWallLaneAcceptRetriesSameConnectionWithoutCooldown(t *testing.T) {
	// docs/spendwall.md: accept the offer, retry the SAME connection at once with the
	// lane header; the intercepted 429 never reaches the cooldown path.
	e := mustEngine(t, topo(swProvider(laneOnly, 2)), nil)
	reset := at(sec(3600))
	st, trail, _ := swDrive(t, e, at(0), answers(wall(true, reset), lane(200, headerSlowStatus, "active")), nil)
	if st.Status != 200 || strings.Join(trail, ",") != "an/k1,an/k1+slow" {
		t.Fatalf("want the same connection retried on the lane and served: %+v %v", st, trail)
	}
	c := connOf(e, "an", "k1")
	if c.RateLimitedUntil != 0 || c.BackoffLevel != 0 || c.LastErrorType != ReasonNone {
		t.Fatalf("the intercepted 429 must not cool the connection: %+v", c)
	}
	if b := breakerOf(e, "an"); b.FailureCount != 0 || b.State != Closed {
		t.Fatalf("breaker must stay neutral: %+v", b)
	}
	l := laneOf(t, e, at(100), "k1")
	if !l.Active || l.Reset != reset || l.Until != reset.Add(slowLaneGraceMs) {
		t.Fatalf("lane until reset + 60 s grace: %+v", l)
	}
	// Every later request to the connection in the window carries the header.
	_, trail, _ = swDrive(t, e, reset.Add(slowLaneGraceMs-1), answers(lane(200, headerSlowStatus, "active")), nil)
	if trail[0] != "an/k1+slow" {
		t.Fatalf("a request inside reset+grace carries the lane header: %v", trail)
	}
	_, trail, _ = swDrive(t, e, reset.Add(slowLaneGraceMs), answers(status(200)), nil)
	if trail[0] != "an/k1" {
		t.Fatalf("the lane never outlives reset + grace: %v", trail)
	}
	if laneOf(t, e, reset.Add(slowLaneGraceMs), "k1").Active {
		t.Fatal("lane still active at reset + grace")
	}
}

func TestSpendWallTriggerNeedsOptInRejectedAndOffer(t *testing.T) {
	// docs/spendwall.md / docs/spendwall.md#wire-names: only a 429 `rejected` on an opted-in connection
	// with a `treatment` offer opens the lane; anything else takes the
	// normal cooldown path (and fails over to k2).
	cases := []struct {
		name string
		cfg  SpendWallConfig
		out  Outcome
	}{
		{"not opted in", SpendWallConfig{}, wall(true, at(sec(3600)))},
		{"no offer", laneOnly, wall(false, at(sec(3600)))},
		{"status not rejected", laneOnly, lane(429, headerUnifiedStatus, "allowed_warning", headerSlowOffer, "treatment")},
		{"overage already in use", laneOnly, lane(429, headerUnifiedStatus, "rejected", headerSlowOffer, "treatment", headerOverageInUse, "true")},
		{"reset already passed", laneOnly, wall(true, at(-sec(10)))},
		{"limit reset only, no lane", SpendWallConfig{LimitReset: true}, wall(true, at(sec(3600)))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := mustEngine(t, topo(swProvider(tc.cfg, 2)), nil)
			st, trail, _ := swDrive(t, e, at(0), func(a *Attempt, n int) Outcome {
				if a.Connection == "k1" {
					return tc.out
				}
				return status(200)
			}, func(ConnRef) LimitResetResult { return LimitResetResult{Outcome: LimitResetNotOffered} })
			if st.Status != 200 || trail[len(trail)-1] != "an/k2" {
				t.Fatalf("want fail-over to k2: %+v %v", st, trail)
			}
			if c := connOf(e, "an", "k1"); c.RateLimitedUntil <= at(0) {
				t.Fatalf("the 429 must cool k1 normally: %+v", c)
			}
			if laneOf(t, e, at(20), "k1").Active {
				t.Fatal("no lane expected")
			}
		})
	}
}

func TestSpendWallLaneResponses(t *testing.T) {
	// docs/spendwall.md: how a lane response keeps or ends the lane. Ending ones take
	// the normal path (the connection cools); keeping ones leave it alone.
	reset := at(sec(3600))
	cases := []struct {
		name      string
		out       Outcome
		keep      bool
		cooled    bool
		budgetTil Time // want LaneState.BudgetUntil
	}{
		{"active serves", lane(200, headerSlowStatus, "active"), true, false, 0},
		{"not_needed keeps the lane", lane(200, headerSlowStatus, "not_needed"), true, false, 0},
		{"no status keeps the lane", status(200), true, false, 0},
		{"weekly_limit ends it", lane(429, headerSlowStatus, "weekly_limit"), false, true, 0},
		{"off ends it", lane(429, headerSlowStatus, "off"), false, true, 0},
		{"ineligible ends it", lane(429, headerSlowStatus, "ineligible"), false, true, 0},
		{"overage in use ends it (even on a 200)", lane(200, headerSlowStatus, "active", headerOverageInUse, "true"), false, false, 0},
		{"a new 5-hour window ends it", lane(200, headerSlowStatus, "active", headerUnifiedReset, strconv.FormatInt(int64(reset.Add(5*hour))/1000, 10)), false, false, 0},
		{"budget_exhausted remembered until the announced budget reset",
			lane(429, headerSlowStatus, "budget_exhausted", headerSlowBudgetReset, strconv.FormatInt(int64(at(3*24*hour))/1000, 10)), false, true, at(3 * 24 * hour)},
		{"budget_exhausted memo clamped to 8 days",
			lane(429, headerSlowStatus, "budget_exhausted", headerSlowBudgetReset, strconv.FormatInt(int64(at(30*24*hour))/1000, 10)), false, true, at(10 + 8*24*hour)},
		{"budget_exhausted without a budget reset uses the window reset",
			lane(429, headerSlowStatus, "budget_exhausted", headerUnifiedReset, strconv.FormatInt(int64(reset)/1000, 10)), false, true, reset},
		{"budget_exhausted with nothing announced: 24 h",
			lane(429, headerSlowStatus, "budget_exhausted"), false, true, at(10 + 24*hour)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := mustEngine(t, topo(swProvider(laneOnly, 1)), nil)
			// Request 1 opens the lane at t0.
			if st, _, _ := swDrive(t, e, at(0), answers(wall(true, reset), lane(200, headerSlowStatus, "active")), nil); st.Status != 200 {
				t.Fatalf("lane accept: %+v", st)
			}
			// Request 2, a lane attempt at t0+0 ends at t0+10.
			_, trail, _ := swDrive(t, e, at(0), answers(tc.out), nil)
			if trail[0] != "an/k1+slow" {
				t.Fatalf("lane attempt expected: %v", trail)
			}
			l := laneOf(t, e, at(10), "k1")
			if l.Active != tc.keep {
				t.Fatalf("lane active = %v, want %v (%+v)", l.Active, tc.keep, l)
			}
			if c := connOf(e, "an", "k1"); (c.RateLimitedUntil > at(10)) != tc.cooled {
				t.Fatalf("cooled = %v, want %v: %+v", c.RateLimitedUntil > at(10), tc.cooled, c)
			}
			if l.BudgetUntil != tc.budgetTil {
				t.Fatalf("budget memo until %d, want %d", l.BudgetUntil-t0, tc.budgetTil-t0)
			}
		})
	}
}

func TestSpendWallBudgetMemoBlocksReaccept(t *testing.T) {
	// docs/spendwall.md: while budget_exhausted is remembered no lane is accepted;
	// after it, the next offer is.
	e := mustEngine(t, topo(swProvider(laneOnly, 1)), func(s *Settings) { s.WaitForCooldown.Enabled = false })
	reset := at(sec(3600))
	swDrive(t, e, at(0), answers(wall(true, reset), lane(429, headerSlowStatus, "budget_exhausted",
		headerSlowBudgetReset, strconv.FormatInt(int64(at(2*hour))/1000, 10))), nil)
	l := laneOf(t, e, at(20), "k1")
	if l.Active || l.BudgetUntil != at(2*hour) {
		t.Fatalf("budget memo: %+v", l)
	}
	later := at(hour) // k1's cooldown from the budget_exhausted 429 is over by then
	st, trail, _ := swDrive(t, e, later, answers(wall(true, at(3*hour))), nil)
	if st.Status != 429 || len(trail) != 1 {
		t.Fatalf("no lane accept while the budget memo holds: %+v %v", st, trail)
	}
	e.provs[0].conns[0].st = Conn{} // the refused wall cooled k1 to its stated reset; isolate the memo
	_, trail, _ = swDrive(t, e, at(2*hour), answers(wall(true, at(3*hour)), status(200)), nil)
	if strings.Join(trail, ",") != "an/k1,an/k1+slow" {
		t.Fatalf("accepted again after the budget reset: %v", trail)
	}
}

func TestSlowRetryWaitClampAndJitter(t *testing.T) {
	// docs/spendwall.md: slow retry-after default 20 s, clamped 5–600 s, ±30 % jitter.
	cases := []struct {
		stated int64
		u      float64
		want   int64
	}{
		{0, 0.5, 20_000},
		{0, 0, 14_000},
		{0, 0.999999, 25_999},
		{1_000, 0.5, 5_000},
		{1_000, 0, 3_500},
		{900_000, 0.5, 600_000},
		{900_000, 0.999999, 779_999},
		{30_000, 0.25, 25_500},
	}
	for _, tc := range cases {
		if got := slowRetryWait(tc.stated, tc.u); got != tc.want {
			t.Errorf("slowRetryWait(%d, %v) = %d, want %d", tc.stated, tc.u, got, tc.want)
		}
	}
	// max-wait: default 20 min, clamped 1 min – 6 h.
	for _, tc := range [][2]int64{{0, 20 * minute}, {1000, minute}, {2 * hour, 2 * hour}, {24 * hour, 6 * hour}} {
		if got := clampMs(tc[0], slowMaxWaitDefaultMs, slowMaxWaitMinMs, slowMaxWaitMaxMs); got != tc[1] {
			t.Errorf("max-wait %d → %d, want %d", tc[0], got, tc[1])
		}
	}
}

func TestSpendWallSlotBusyWaitsAndRetries(t *testing.T) {
	// docs/spendwall.md: slot_busy (429) or 529 on the lane: wait the slow
	// retry-after (jittered) and retry the same connection on the lane;
	// nothing cools, the breaker stays neutral.
	for _, busy := range []Outcome{
		lane(429, headerSlowStatus, "slot_busy", headerSlowRetryAfter, "30"),
		lane(529, headerSlowRetryAfter, "30"),
	} {
		e := mustEngine(t, topo(swProvider(laneOnly, 2)), nil)
		st, trail, end := swDrive(t, e, at(0), answers(wall(true, at(hour)), busy, lane(200, headerSlowStatus, "active")), nil)
		if st.Status != 200 || len(trail) != 4 || trail[1] != "an/k1+slow" || trail[3] != "an/k1+slow" || !strings.HasPrefix(trail[2], "wait:") {
			t.Fatalf("want lane, wait, lane: %+v %v", st, trail)
		}
		w, _ := strconv.ParseInt(strings.TrimPrefix(trail[2], "wait:"), 10, 64)
		if w < 21_000 || w > 39_000 {
			t.Fatalf("wait %d ms outside 30 s ± 30 %%", w)
		}
		if end != at(30+w) {
			t.Fatalf("ended at %d, want %d", end-t0, 30+w)
		}
		if c := connOf(e, "an", "k1"); c.RateLimitedUntil != 0 || c.LastErrorType != ReasonNone {
			t.Fatalf("slot_busy must not cool: %+v", c)
		}
		if b := breakerOf(e, "an"); b.FailureCount != 0 {
			t.Fatalf("breaker neutral: %+v", b)
		}
	}
}

func TestSpendWallSlotBusyBoundedByMaxWaitThenBlocks(t *testing.T) {
	// docs/spendwall.md: waiting is bounded by the server's max-wait (clamp min
	// 1 min); then the lane ends, the response takes the normal path and
	// re-accepting is blocked for 10 min.
	e := mustEngine(t, topo(swProvider(laneOnly, 2)), nil)
	busy := lane(429, headerSlowStatus, "slot_busy", headerSlowRetryAfter, "30", headerSlowMaxWait, "10")
	st, trail, end := swDrive(t, e, at(0), func(a *Attempt, n int) Outcome {
		if a.Connection == "k2" {
			return status(200)
		}
		if n == 1 {
			return wall(true, at(hour))
		}
		return busy
	}, nil)
	if st.Status != 200 || trail[len(trail)-1] != "an/k2" {
		t.Fatalf("after max-wait the request fails over: %+v %v", st, trail)
	}
	waited := int64(0)
	for _, s := range trail {
		if w, ok := strings.CutPrefix(s, "wait:"); ok {
			x, _ := strconv.ParseInt(w, 10, 64)
			waited += x
		}
	}
	if waited > minute || waited < minute-39_000 {
		t.Fatalf("total lane waiting %d ms, want ≤ max-wait (clamped to 1 min) and within one retry of it", waited)
	}
	k1End := end.Add(-10) // k2's attempt took the last 10 ms
	l := laneOf(t, e, k1End, "k1")
	if l.Active || l.BlockedUntil != k1End.Add(slowLaneReacceptBlockMs) {
		t.Fatalf("lane ends with a 10 min re-accept block: %+v (k1 ended at %d)", l, k1End-t0)
	}
	if c := connOf(e, "an", "k1"); c.RateLimitedUntil <= k1End {
		t.Fatalf("the last slot_busy takes the normal cooldown path: %+v", c)
	}
	// Inside the block an offer is refused; after it, accepted.
	e2 := l.BlockedUntil
	p := &e.provs[0]
	p.conns[0].st = Conn{} // isolate the block from k1's cooldown
	_, trail, _ = swDrive(t, e, e2.Add(-20), func(a *Attempt, n int) Outcome {
		if a.Connection == "k1" {
			return wall(true, at(2*hour))
		}
		return status(200)
	}, nil)
	if strings.Join(trail, ",") != "an/k1,an/k2" {
		t.Fatalf("re-accept blocked for 10 min: %v", trail)
	}
	p.conns[0].st = Conn{}
	_, trail, _ = swDrive(t, e, e2, answers(wall(true, at(2*hour)), status(200)), nil)
	if strings.Join(trail, ",") != "an/k1,an/k1+slow" {
		t.Fatalf("accepted after the block: %v", trail)
	}
}

func TestSpendWallSlotBusyBoundedByRequestDeadline(t *testing.T) {
	// docs/spendwall.md: a wait must end 5 s before the request's own deadline.
	e := mustEngine(t, topo(swProvider(laneOnly, 1)), func(s *Settings) {
		s.RequestBudget.DeadlineMs = Millis(20 * second)
		s.WaitForCooldown.Enabled = false
	})
	st, trail, _ := swDrive(t, e, at(0), answers(wall(true, at(hour)), lane(429, headerSlowStatus, "slot_busy", headerSlowRetryAfter, "30")), nil)
	// 30 s ± 30 % ≥ 21 s > 20 s − 5 s: no wait; the lane ends, the client
	// gets the 429.
	if st.Status != 429 || strings.Join(trail, ",") != "an/k1,an/k1+slow" {
		t.Fatalf("no wait past the deadline: %+v %v", st, trail)
	}
	if l := laneOf(t, e, at(20), "k1"); l.Active || l.BlockedUntil != at(20+slowLaneReacceptBlockMs) {
		t.Fatalf("lane ended with a block: %+v", l)
	}
}

func TestSpendWallLimitReset(t *testing.T) {
	// docs/spendwall.md: the session limit reset is asked for first; `reset` retries
	// the same connection at full speed; already_used / not_offered are
	// memoised until next_available_at (default one week); any failure
	// pauses 15 min. Without a reset the lane decision follows.
	week := int64(7 * 24 * hour)
	cases := []struct {
		name       string
		res        LimitResetResult
		wantTrail  string
		memoUntil  Time
		pauseUntil Time
	}{
		{"reset retries at full speed", LimitResetResult{Outcome: LimitResetDone}, "an/k1,reset:an/k1,an/k1", 0, 0},
		{"reset memoises next_available_at", LimitResetResult{Outcome: LimitResetDone, NextAvailableAt: at(48 * hour)}, "an/k1,reset:an/k1,an/k1", at(48 * hour), 0},
		{"not_limited retries at full speed", LimitResetResult{Outcome: LimitResetNotLimited}, "an/k1,reset:an/k1,an/k1", 0, 0},
		{"already_used memo then lane", LimitResetResult{Outcome: LimitResetAlreadyUsed, NextAvailableAt: at(48 * hour)}, "an/k1,reset:an/k1,an/k1+slow", at(48 * hour), 0},
		{"not_offered default one week", LimitResetResult{Outcome: LimitResetNotOffered}, "an/k1,reset:an/k1,an/k1+slow", at(10 + week), 0},
		{"next_available_at capped at 30 days", LimitResetResult{Outcome: LimitResetAlreadyUsed, NextAvailableAt: at(90 * 24 * hour)}, "an/k1,reset:an/k1,an/k1+slow", at(10 + 30*24*hour), 0},
		{"failure pauses 15 min", LimitResetResult{Outcome: LimitResetFailed}, "an/k1,reset:an/k1,an/k1+slow", 0, at(10 + 15*minute)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := mustEngine(t, topo(swProvider(bothOn, 2)), nil)
			st, trail, _ := swDrive(t, e, at(0), answers(wall(true, at(hour)), status(200)),
				func(ConnRef) LimitResetResult { return tc.res })
			if st.Status != 200 || strings.Join(trail, ",") != tc.wantTrail {
				t.Fatalf("got %+v %v, want %s", st, trail, tc.wantTrail)
			}
			l := laneOf(t, e, at(10), "k1")
			if l.ResetMemoUntil != tc.memoUntil || l.ResetPausedUntil != tc.pauseUntil {
				t.Fatalf("memo %d pause %d, want %d %d", l.ResetMemoUntil-t0, l.ResetPausedUntil-t0, tc.memoUntil-t0, tc.pauseUntil-t0)
			}
			if c := connOf(e, "an", "k1"); c.RateLimitedUntil != 0 || c.BackoffLevel != 0 {
				t.Fatalf("no cooldown: %+v", c)
			}
		})
	}
}

func TestSpendWallLimitResetMemoAndPauseSkipTheCall(t *testing.T) {
	// docs/spendwall.md: while memoised or paused, no usage call; the lane decides.
	e := mustEngine(t, topo(swProvider(bothOn, 1)), nil)
	calls := 0
	fail := func(ConnRef) LimitResetResult { calls++; return LimitResetResult{Outcome: LimitResetFailed} }
	swDrive(t, e, at(0), answers(wall(true, at(hour)), lane(200, headerSlowStatus, "active", headerOverageInUse, "true")), fail)
	if calls != 1 {
		t.Fatalf("first wall asks once: %d", calls)
	}
	// The lane ended (overage); at 14 min a new wall goes straight to the lane.
	_, trail, _ := swDrive(t, e, at(14*minute), answers(wall(true, at(hour)), status(200)), fail)
	if calls != 1 || strings.Join(trail, ",") != "an/k1,an/k1+slow" {
		t.Fatalf("paused: no call, lane instead: calls=%d %v", calls, trail)
	}
	e2 := mustEngine(t, topo(swProvider(bothOn, 1)), nil)
	swDrive(t, e2, at(0), answers(wall(true, at(hour)), lane(200, headerOverageInUse, "true")), fail)
	_, trail, _ = swDrive(t, e2, at(15*minute+10), answers(wall(true, at(hour)), status(200)), fail)
	if calls != 3 || trail[1] != "reset:an/k1" {
		t.Fatalf("asks again after the 15 min pause: calls=%d %v", calls, trail)
	}
}

func TestSpendWallNoResetNoLaneTakesNormalPath(t *testing.T) {
	// docs/spendwall.md: the reset failed and no lane offer: the held 429 is
	// classified normally (cooldown with the stated hint) and the request
	// fails over.
	e := mustEngine(t, topo(swProvider(bothOn, 2)), nil)
	o := wall(false, at(hour))
	o.Headers.(HeaderMap)["retry-after"] = "120"
	st, trail, _ := swDrive(t, e, at(0), func(a *Attempt, n int) Outcome {
		if a.Connection == "k1" {
			return o
		}
		return status(200)
	}, func(ConnRef) LimitResetResult { return LimitResetResult{Outcome: LimitResetNotOffered} })
	if st.Status != 200 || strings.Join(trail, ",") != "an/k1,reset:an/k1,an/k2" {
		t.Fatalf("fail over after the reset was refused: %+v %v", st, trail)
	}
	if c := connOf(e, "an", "k1"); c.RateLimitedUntil < at(120_000) || c.LastErrorType != ReasonRateLimitExceeded {
		t.Fatalf("k1 cooled by the held 429: %+v", c)
	}
	if n := e.provs[0].conns[0].inflight; n != 0 {
		t.Fatalf("in-flight count leaked: %d", n)
	}
}

func TestSpendWallOneLimitResetRoundPerRequest(t *testing.T) {
	// A reset that did not help (the retry hits the wall again) is not asked
	// twice in one request: the lane decides.
	e := mustEngine(t, topo(swProvider(bothOn, 1)), nil)
	calls := 0
	_, trail, _ := swDrive(t, e, at(0), answers(wall(true, at(hour)), wall(true, at(hour)), status(200)),
		func(ConnRef) LimitResetResult { calls++; return LimitResetResult{Outcome: LimitResetNotLimited} })
	if calls != 1 || strings.Join(trail, ",") != "an/k1,reset:an/k1,an/k1,an/k1+slow" {
		t.Fatalf("calls=%d %v", calls, trail)
	}
}

func TestReadSpendSignal(t *testing.T) {
	// docs/spendwall.md#wire-names wire names; garbled values count as absent.
	now := at(0)
	cases := []struct {
		name string
		h    HeaderMap
		want SpendSignal
	}{
		{"nil", nil, SpendSignal{}},
		{"wall with offer", HeaderMap{headerUnifiedStatus: "Rejected", headerSlowOffer: " treatment ", headerUnifiedReset: "1767229200"},
			SpendSignal{Rejected: true, Offer: true, Reset: Time(1767229200000)}},
		{"rfc3339 reset", HeaderMap{headerUnifiedReset: "2026-01-01T01:00:00Z"}, SpendSignal{Reset: Time(1767229200000)}},
		{"lane statuses", HeaderMap{headerSlowStatus: "slot_busy", headerSlowRetryAfter: "12.5", headerSlowMaxWait: "600"},
			SpendSignal{Status: SlowSlotBusy, RetryAfterMs: 12_500, MaxWaitMs: 600_000}},
		{"unknown status kept distinct", HeaderMap{headerSlowStatus: "new_thing"}, SpendSignal{Status: SlowUnknown}},
		{"garbled numbers", HeaderMap{headerSlowRetryAfter: "-5", headerSlowMaxWait: "NaN", headerUnifiedReset: "soon"}, SpendSignal{}},
		{"overage", HeaderMap{headerOverageInUse: "TRUE"}, SpendSignal{Overage: true}},
		{"oversized value ignored", HeaderMap{headerUnifiedStatus: strings.Repeat("x", 200)}, SpendSignal{}},
	}
	for _, tc := range cases {
		var h Headers
		if tc.h != nil {
			h = tc.h
		}
		if got := ReadSpendSignal(h, now); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if ParseLimitResetResult("reset") != LimitResetDone || ParseLimitResetResult("bogus") != LimitResetFailed ||
		ParseLimitResetResult("failed") != LimitResetFailed || ParseLimitResetResult(" Already_Used") != LimitResetAlreadyUsed {
		t.Error("ParseLimitResetResult")
	}
}
