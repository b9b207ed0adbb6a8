package model

import (
	"reflect"
	"strings"
	"testing"
)

// drive runs a flow to its answer, answering every attempt with the
// outcome respond returns for its connection; attempts take 10 ms.
func drive(t *testing.T, e *Engine, now Time, name string, respond func(a *Attempt, n int) (Outcome, bool)) (Step, []string, Time) {
	t.Helper()
	st, trail, end, _ := driveFlow(t, e, now, name, nil, respond)
	return st, trail, end
}

// driveFlow is drive for a shell whose wire adapter cannot express the
// request for the providers in unfit: those attempts are reported with
// a ReportUnsupported and never reach respond. It also returns the flow's
// attempt count.
func driveFlow(t *testing.T, e *Engine, now Time, name string, unfit map[string]bool, respond func(a *Attempt, n int) (Outcome, bool)) (Step, []string, Time, int) {
	t.Helper()
	f := e.StartFlow(now, route(t, e, name), "", nil)
	var sel Selection
	var trail []string
	for i := 0; i < 100; i++ {
		st := f.Next(now, e, &sel)
		switch st.Kind {
		case StepAnswer:
			return st, trail, now, f.Attempts()
		case StepWait:
			trail = append(trail, "wait")
			now = now.Add(st.WaitMs)
		case StepAttempt:
			if unfit[st.Attempt.Provider] {
				trail = append(trail, "unfit:"+st.Attempt.Provider)
				f.Record(now, e, &st.Attempt, Report{Kind: ReportUnsupported, Err: &Error{Code: CodeUnsupportedByProviderType, Provider: st.Attempt.Provider, Message: "cannot express"}})
				continue
			}
			trail = append(trail, st.Attempt.Provider+"/"+st.Attempt.Connection)
			o, committed := respond(&st.Attempt, len(trail))
			now = now.Add(10)
			if _, ans := f.Record(now, e, &st.Attempt, Report{Outcome: o, Committed: committed}); ans != nil {
				return *ans, trail, now, f.Attempts()
			}
		}
	}
	t.Fatal("flow did not end")
	return Step{}, nil, now, 0
}

func TestFlowFailsOverAcrossConnectionsAndTargets(t *testing.T) {
	a := oneProvider("a", ProfileAPIKey, 2)
	b := oneProvider("b", ProfileAPIKey, 1)
	tp := topo(a, b)
	tp.Combos = []ComboConfig{{ID: "c", Targets: []ComboTarget{{Provider: "a", Model: "m1"}, {Provider: "b", Model: "m1"}}}}
	e := mustEngine(t, tp, nil)
	st, trail, _ := drive(t, e, at(0), "c", func(a *Attempt, n int) (Outcome, bool) {
		if a.Provider == "a" {
			return status(503), false
		}
		return status(200), false
	})
	if st.Result != ResultFallback || st.Status != 200 || len(trail) != 3 || trail[2] != "b/k1" {
		t.Fatalf("docs/classification.md#verdicts next connection, then next target: %+v %v", st, trail)
	}
}

func TestFlowNotFoundSkipsTheTarget(t *testing.T) {
	// docs/classification.md#verdicts: 404 → next target, not the provider's next connection.
	a := oneProvider("a", ProfileAPIKey, 3)
	b := oneProvider("b", ProfileAPIKey, 1)
	tp := topo(a, b)
	tp.Combos = []ComboConfig{{ID: "c", Targets: []ComboTarget{{Provider: "a", Model: "m1"}, {Provider: "b", Model: "m1"}}}}
	e := mustEngine(t, tp, nil)
	_, trail, _ := drive(t, e, at(0), "c", func(a *Attempt, n int) (Outcome, bool) {
		if a.Provider == "a" {
			return status(404), false
		}
		return status(200), false
	})
	if len(trail) != 2 || trail[1] != "b/k1" {
		t.Fatalf("trail %v", trail)
	}
}

func TestFlowRequestScopedStops(t *testing.T) {
	// docs/classification.md#verdicts: a context-length 400 is not retried.
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 3)), nil)
	st, trail, _ := drive(t, e, at(0), "a/m1", func(*Attempt, int) (Outcome, bool) {
		return withBody(400, "maximum context length exceeded"), false
	})
	if st.Result != ResultUpstream || st.Status != 400 || len(trail) != 1 {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestFlowAttemptBudget(t *testing.T) {
	// docs/errors.md request_budget_exhausted: no retry storms.
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 5)), func(s *Settings) { s.RequestBudget.MaxAttempts = 2 })
	st, trail, _ := drive(t, e, at(0), "a/m1", func(*Attempt, int) (Outcome, bool) { return status(502), false })
	if st.Err == nil || st.Err.Code != CodeBudgetExhausted || st.Status != 503 || len(trail) != 2 {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestFlowWaitsForShortCooldown(t *testing.T) {
	// docs/selection.md#waiting-for-a-cooldown waitForCooldown: every connection in a short cooldown → wait
	// for the earliest and select again instead of failing.
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 1)), nil)
	st, trail, end := drive(t, e, at(0), "a/m1", func(a *Attempt, n int) (Outcome, bool) {
		if n == 1 {
			return withHeader(429, "retry-after", "2"), false
		}
		return status(200), false
	})
	if st.Result != ResultFallback || len(trail) != 3 || trail[1] != "wait" || end != at(10+2000+10) {
		t.Fatalf("%+v %v end %d", st, trail, end-t0)
	}
	// Disabled: the client gets the upstream 429 with Retry-After.
	e = mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 1)), func(s *Settings) { s.WaitForCooldown.Enabled = false })
	st, _, _ = drive(t, e, at(0), "a/m1", func(*Attempt, int) (Outcome, bool) { return withHeader(429, "retry-after", "2"), false })
	if st.Status != 429 || st.Result != ResultUpstream || st.RetryAfterMs != 2000 {
		t.Fatalf("%+v", st)
	}
}

func TestFlowNoWaitWithTheAttemptBudgetSpent(t *testing.T) {
	// docs/selection.md#waiting-for-a-cooldown, docs/errors.md: a wait is for the attempt after it. With
	// requestBudget.maxAttempts spent, both connections cooling for 20 s
	// answer the last upstream 429 with Retry-After at once; the flow
	// slept 20 s and then answered 503 request_budget_exhausted without one.
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 2)), func(s *Settings) { s.RequestBudget.MaxAttempts = 2 })
	st, trail, end := drive(t, e, at(0), "a/m1", func(*Attempt, int) (Outcome, bool) {
		return withHeader(429, "retry-after", "20"), false
	})
	if len(trail) != 2 || st.Status != 429 || st.Result != ResultUpstream || st.RetryAfterMs < 19000 || end != at(20) {
		t.Fatalf("%+v %v end %d", st, trail, end-t0)
	}
}

func TestFlowNeverWaitsOnQuota(t *testing.T) {
	// docs/selection.md#waiting-for-a-cooldown: never wait on quota_exhausted.
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 1)), nil)
	st, trail, _ := drive(t, e, at(0), "a/m1", func(*Attempt, int) (Outcome, bool) {
		return withBody(429, "You exceeded your daily quota"), false
	})
	if len(trail) != 1 || st.Status != 429 {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestFlowCommittedStreamIsNotReplayed(t *testing.T) {
	// docs/streams.md: after the first byte reached the client a failure ends the
	// stream with an error event; it is never replayed elsewhere.
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 3)), nil)
	st, trail, _ := drive(t, e, at(0), "a/m1", func(*Attempt, int) (Outcome, bool) {
		return Outcome{Kind: OutcomeTransport, Transport: TransportEarlyEOF}, true
	})
	if st.Result != ResultStreamError || len(trail) != 1 {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestFlowStallNeverGoesBackToTheStalledConnection(t *testing.T) {
	// Rule (slow first token moves on): a watchdog abort before commit
	// sends the next attempt to another connection or target, never back
	// to the one that just stalled.
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 2)), nil)
	for _, kind := range []OutcomeKind{OutcomeStall, OutcomeThroughput} {
		_, trail, _ := drive(t, e, at(0), "a/m1", func(a *Attempt, n int) (Outcome, bool) {
			if a.Connection == "k1" {
				return Outcome{Kind: kind}, false
			}
			return status(200), false
		})
		if len(trail) != 2 || trail[0] != "a/k1" || trail[1] != "a/k2" {
			t.Fatalf("%v: trail %v", kind, trail)
		}
	}
	// With no other connection the client gets the stall's 502, not a
	// second wait on the same account.
	e = mustEngine(t, topo(oneProvider("b", ProfileAPIKey, 1)), nil)
	st, trail, _ := drive(t, e, at(0), "b/m1", func(*Attempt, int) (Outcome, bool) { return Outcome{Kind: OutcomeStall}, false })
	if len(trail) != 1 || st.Status != 502 {
		t.Fatalf("one connection: %+v %v", st, trail)
	}
}

func TestFlowDeadline(t *testing.T) {
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 3)), func(s *Settings) { s.RequestBudget.DeadlineMs = 15 })
	st, trail, _ := drive(t, e, at(0), "a/m1", func(*Attempt, int) (Outcome, bool) { return status(503), false })
	if st.Err == nil || st.Err.Code != CodeBudgetExhausted || len(trail) != 2 {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestFlowEmergencyFallback(t *testing.T) {
	// docs/api.md#operator-actions: when every target is excluded, route to the emergency
	// target instead of failing.
	a := oneProvider("a", ProfileAPIKey, 1)
	b := oneProvider("b", ProfileAPIKey, 1)
	e := mustEngine(t, topo(a, b), func(s *Settings) {
		s.EmergencyFallback = EmergencyFallback{Enabled: true, Target: "b/m1"}
		s.WaitForCooldown.Enabled = false
	})
	hit(t, e, at(0), "a", "k1", "m1", withBody(402, "insufficient credits"))
	st, trail, _ := drive(t, e, at(1), "a/m1", func(*Attempt, int) (Outcome, bool) { return status(200), false })
	if st.Status != 200 || len(trail) != 1 || trail[0] != "b/k1" {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestFlowNoRetryAfterOnAPassedThrough404(t *testing.T) {
	// docs/api.md / docs/selection.md#waiting-for-a-cooldown: Retry-After goes with 429 and 503. A local
	// provider's 404 locks the model (docs/classification.md#provider-types); the client gets the 404,
	// without the lockout's time as Retry-After.
	p := oneProvider("l", ProfileLocal, 1)
	p.Type = "local"
	e := mustEngine(t, topo(p), nil)
	st, trail, _ := drive(t, e, at(0), "l/m1", func(*Attempt, int) (Outcome, bool) { return status(404), false })
	if st.Status != 404 || st.Result != ResultUpstream || st.RetryAfterMs != 0 || len(trail) != 1 {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestFlowTypedAnswerWithoutAttempts(t *testing.T) {
	// docs/errors.md: nothing dispatchable → the model's typed answer.
	e := mustEngine(t, topo(oneProvider("a", ProfileLocal, 1)), nil)
	hit(t, e, at(0), "a", "k1", "m1", status(503))
	hit(t, e, at(0), "a", "k1", "m1", status(503))
	st, trail, _ := drive(t, e, at(1), "a/m1", func(*Attempt, int) (Outcome, bool) { return status(200), false })
	if len(trail) != 0 || st.Err == nil || st.Err.Code != CodeCircuitOpen || st.Status != 503 || st.RetryAfterMs <= 0 {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestFlowDeadlineCutIsBudgetExhausted(t *testing.T) {
	// docs/errors.md: an attempt the shell cuts at the request deadline answers
	// 503 request_budget_exhausted, not a client-abort 499.
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 1)), func(s *Settings) { s.RequestBudget.DeadlineMs = 100 })
	f := e.StartFlow(at(0), route(t, e, "a/m1"), "", nil)
	var sel Selection
	st := f.Next(at(0), e, &sel)
	_, ans := f.Record(f.Deadline(), e, &st.Attempt, Report{Outcome: Outcome{Kind: OutcomeClientAbort}})
	if ans == nil || ans.Err == nil || ans.Err.Code != CodeBudgetExhausted || ans.Status != 503 {
		t.Fatalf("%+v", ans)
	}
	// A real client abort before the deadline is a 499.
	f.Reset(e, at(200), route(t, e, "a/m1"), "", nil)
	st = f.Next(at(200), e, &sel)
	_, ans = f.Record(at(210), e, &st.Attempt, Report{Outcome: Outcome{Kind: OutcomeClientAbort}})
	if ans == nil || ans.Status != 499 {
		t.Fatalf("%+v", ans)
	}
}

// driveUnfit is driveFlow with a respond that ignores the attempt count.
func driveUnfit(t *testing.T, e *Engine, now Time, name string, unfit map[string]bool, respond func(a *Attempt) Outcome) (Step, []string, int) {
	t.Helper()
	st, trail, _, n := driveFlow(t, e, now, name, unfit, func(a *Attempt, _ int) (Outcome, bool) { return respond(a), false })
	return st, trail, n
}

func TestFlowUnsupportedTargetIsSkipped(t *testing.T) {
	// A combo target whose provider type cannot express the request is
	// passed over (not an attempt, neutral for health); the next target
	// serves it. With no target able to, the client gets 400
	// unsupported_by_provider_type; with a real upstream failure on the way,
	// that failure (not a 400 blaming the request).
	a := oneProvider("an", ProfileAPIKey, 2)
	b := oneProvider("oa", ProfileAPIKey, 1)
	tp := topo(a, b)
	tp.Combos = []ComboConfig{
		{ID: "an-first", Targets: []ComboTarget{{Provider: "an", Model: "m1"}, {Provider: "oa", Model: "m1"}}},
		{ID: "oa-first", Targets: []ComboTarget{{Provider: "oa", Model: "m1"}, {Provider: "an", Model: "m1"}}},
	}
	e := mustEngine(t, tp, func(s *Settings) { s.ComboCooldownWait.Enabled = false })
	unfit := map[string]bool{"an": true}

	st, trail, attempts := driveUnfit(t, e, at(0), "an-first", unfit, func(*Attempt) Outcome { return status(200) })
	if st.Status != 200 || attempts != 1 || len(trail) != 2 || trail[0] != "unfit:an" || trail[1] != "oa/k1" {
		t.Fatalf("served by the next target: %+v %v attempts %d", st, trail, attempts)
	}
	if c := connOf(e, "an", "k1"); c.Status != StatusActive || c.BackoffLevel != 0 || breakerOf(e, "an").FailureCount != 0 {
		t.Fatalf("an unsupported target is no health signal: %+v", c)
	}

	st, trail, _ = driveUnfit(t, e, at(100), "oa-first", unfit, func(*Attempt) Outcome { return status(503) })
	if st.Result != ResultUpstream || st.Status != 503 || st.Err != nil || trail[len(trail)-1] != "unfit:an" {
		t.Fatalf("the upstream's 503 is the answer, not the 400: %+v %v", st, trail)
	}

	st, trail, attempts = driveUnfit(t, e, at(200), "an/m1", unfit, func(*Attempt) Outcome { return status(200) })
	if st.Err == nil || st.Err.Code != CodeUnsupportedByProviderType || st.Status != 400 || attempts != 0 || len(trail) != 1 {
		t.Fatalf("one unsupported target, no other: 400 after one refusal (not one per connection): %+v %v", st, trail)
	}
}

func TestFlowRecordCutAnswersItsError(t *testing.T) {
	// A cut of the shell's own that ends the request (the gateway shutting
	// down) is neutral for health like a client abort, but the client gets
	// the typed error (not a 499): a 503, or the committed stream's error
	// event.
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 1)), nil)
	cut := &Error{Code: CodeShuttingDown, Message: "shutting down", RetryAfterMs: 1000}
	for _, committed := range []bool{false, true} {
		f := e.StartFlow(at(0), route(t, e, "a/m1"), "", nil)
		var sel Selection
		st := f.Next(at(0), e, &sel)
		_, ans := f.Record(at(10), e, &st.Attempt, Report{Kind: ReportCut, Err: cut, Committed: committed})
		want, res := 503, ResultRejected
		if committed {
			want, res = 200, ResultStreamError
		}
		if ans == nil || ans.Err != cut || ans.Status != want || ans.Result != res {
			t.Fatalf("committed %v: %+v", committed, ans)
		}
		if c := connOf(e, "a", "k1"); c.Status != StatusActive || c.BackoffLevel != 0 || breakerOf(e, "a").FailureCount != 0 {
			t.Fatalf("a cut is no health signal: %+v", c)
		}
	}
}

func TestStreamErrorCodeNamesWhoEndedIt(t *testing.T) {
	// docs/streams.md / docs/classification.md#restatement: the committed stream's error event names
	// its cause. A stream the gateway's own attemptMs cut is not one "the
	// upstream cut" (stream_interrupted); a stall names both stall timers
	// (it named streamIdleMs when firstContentMs had fired).
	if c, msg := StreamErrorCode(Outcome{Kind: OutcomeTransport, Transport: TransportAttemptTimeout}); c != CodeStreamTimeout || !strings.Contains(msg, "attemptMs") {
		t.Errorf("attempt timeout: %s %q", c, msg)
	}
	if c, _ := StreamErrorCode(Outcome{Kind: OutcomeTransport, Transport: TransportReset}); c != CodeStreamInterrupted {
		t.Errorf("reset: %s", c)
	}
	if c, msg := StreamErrorCode(Outcome{Kind: OutcomeStall}); c != CodeStreamStall || !strings.Contains(msg, "firstContentMs") || !strings.Contains(msg, "streamIdleMs") {
		t.Errorf("stall: %s %q", c, msg)
	}
}

func TestFlowRecordLocalIsNoUse(t *testing.T) {
	// An attempt the admission stage refused never reached the upstream:
	// it is no use of the connection (least-used and p2c read uses; a busy
	// key's refusals made it look the most used).
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 1)), nil)
	f := e.StartFlow(at(0), route(t, e, "a/m1"), "", nil)
	var sel Selection
	st := f.Next(at(0), e, &sel)
	if u := connOf(e, "a", "k1").Uses; u != 1 {
		t.Fatalf("Begin counts a use: %d", u)
	}
	f.Record(at(1), e, &st.Attempt, Report{Kind: ReportLocal, Err: &Error{Code: CodeSemaphoreTimeout}})
	if u := connOf(e, "a", "k1").Uses; u != 0 {
		t.Fatalf("a refused attempt is no use: %d", u)
	}
}

func TestFlowEmergencyFallbackAfterTheBudget(t *testing.T) {
	// docs/api.md#operator-actions: the emergency target is tried instead of failing — also
	// when cooldown waits and retries spent the attempt budget (the client
	// got request_budget_exhausted and the healthy fallback was never
	// called). It gets one attempt past the budget; the deadline holds.
	a := oneProvider("a", ProfileAPIKey, 1)
	b := oneProvider("b", ProfileAPIKey, 1)
	e := mustEngine(t, topo(a, b), func(s *Settings) {
		s.EmergencyFallback = EmergencyFallback{Enabled: true, Target: "b/m1"}
		s.RequestBudget.MaxAttempts = 2
	})
	st, trail, _ := drive(t, e, at(0), "a/m1", func(at *Attempt, _ int) (Outcome, bool) {
		if at.Provider == "a" {
			return status(503), false
		}
		return status(200), false
	})
	if st.Status != 200 || trail[len(trail)-1] != "b/k1" {
		t.Fatalf("the fallback serves after the budget: %+v %v", st, trail)
	}
}

func TestFlowUnsupportedAnswerNamesTheFirst(t *testing.T) {
	// docs/gateway.md Headers: a request no target can express names the
	// first target passed over (it named the last, with the first's error).
	tp := topo(oneProvider("an", ProfileAPIKey, 1), oneProvider("ge", ProfileAPIKey, 1))
	tp.Combos = []ComboConfig{{ID: "c", Targets: []ComboTarget{{Provider: "an", Model: "m1"}, {Provider: "ge", Model: "m1"}}}}
	e := mustEngine(t, tp, func(s *Settings) { s.ComboCooldownWait.Enabled = false })
	st, _, _ := driveUnfit(t, e, at(0), "c", map[string]bool{"an": true, "ge": true}, func(*Attempt) Outcome { return status(200) })
	if st.Err == nil || st.Err.Provider != "an" || st.LastConnection.Provider != "an" {
		t.Fatalf("the first passed over: %+v", st)
	}
	if u := connOf(e, "an", "k1").Uses + connOf(e, "ge", "k1").Uses; u != 0 {
		t.Fatalf("passing a target over is no use: %d", u)
	}
}

// TestStartFlowInIsStartFlow: starting a flow in place over a used one
// gives what StartFlow returns.
func TestStartFlowInIsStartFlow(t *testing.T) {
	e := mustEngine(t, topo(oneProvider("a", ProfileAPIKey, 1)), nil)
	r := route(t, e, "a/m1")
	allowed := []ConnRef{{Provider: "a", Connection: "x"}}
	want := e.StartFlow(at(100), r, "s", allowed)
	f := e.StartFlow(at(5), r, "", nil)
	f.Next(at(5), e, &Selection{})
	e.StartFlowIn(&f, at(100), r, "s", allowed)
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("StartFlowIn gave %+v, want %+v", f, want)
	}
}
