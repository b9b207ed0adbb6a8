package model

import (
	"encoding/json"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// docs/admission.md body-declared retry: pacing vs lockout is a pure function of the
// hint's kind, the limiter's scope and maxWaitMs.
func TestBodyRetry(t *testing.T) {
	const wait = 30_000
	cases := []struct {
		name  string
		h     Hint
		scope LimiterScope
		want  RetryPlan
	}{
		{"no hint: nothing", Hint{}, LimiterModel, RetryPlan{}},
		{"header hints are not body-declared", Hint{Ms: 5000, Source: HintHeader}, LimiterConnection, RetryPlan{}},
		{"rule cooldowns are not body-declared", Hint{Ms: 5000, Source: HintRule}, LimiterConnection, RetryPlan{}},
		{"typed hint within maxWaitMs pauses (model scope)", Hint{Ms: 20_000, Source: HintRetryInfo}, LimiterModel, RetryPlan{PauseMs: 20_000}},
		{"prose hint within maxWaitMs pauses", Hint{Ms: 20_000, Source: HintBody}, LimiterConnection, RetryPlan{PauseMs: 20_000}},
		{"exactly maxWaitMs still pauses", Hint{Ms: wait, Source: HintRetryInfo}, LimiterModel, RetryPlan{PauseMs: wait}},
		{"long typed hint on a model limiter: lockout, no pause", Hint{Ms: 86_399_000, Source: HintRetryInfo}, LimiterModel, RetryPlan{LockoutMs: 86_399_000}},
		{"long typed hint capped at 24 h", Hint{Ms: 200_000_000, Source: HintRetryInfo}, LimiterModel, RetryPlan{LockoutMs: 86_400_000}},
		{"long typed hint on a connection-wide limiter keeps the pause", Hint{Ms: 86_399_000, Source: HintRetryInfo}, LimiterConnection, RetryPlan{PauseMs: 86_399_000}},
		{"long prose hint keeps the pause (model scope)", Hint{Ms: 120_000, Source: HintBody}, LimiterModel, RetryPlan{PauseMs: 120_000}},
	}
	for _, c := range cases {
		if got := BodyRetry(c.h, c.scope, wait); got != c.want {
			t.Errorf("%s: BodyRetry = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// docs/admission.md: learning from x-ratelimit-* (the simple form): zero remaining
// requests with a reset pauses until the reset.
func TestLearnedPause(t *testing.T) {
	cases := []struct {
		name string
		h    HeaderMap
		want int64
	}{
		{"nil headers", nil, 0},
		{"remaining > 0", HeaderMap{"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "20s"}, 0},
		{"remaining 0 with a duration reset", HeaderMap{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}, 360_000},
		{"remaining 0 with seconds", HeaderMap{"x-ratelimit-remaining-requests": " 0 ", "x-ratelimit-reset-requests": "12"}, 12_000},
		{"remaining 0 without a reset: nothing learned", HeaderMap{"x-ratelimit-remaining-requests": "0"}, 0},
		{"remaining 0, junk reset", HeaderMap{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"}, 0},
	}
	for _, c := range cases {
		var h Headers
		if c.h != nil {
			h = c.h
		}
		if got := learnedPause(h, at(0)); got != c.want {
			t.Errorf("%s: learnedPause = %d, want %d", c.name, got, c.want)
		}
	}
}

// docs/admission.md: a limiter that really pauses rejects at once a caller whose
// remaining queue time ends before the pause does; queued calls run when it
// refills. Explicit virtual times.
func TestLimiterPause(t *testing.T) {
	var l Limiter
	now := int64(at(0))
	if d := l.Reserve(now, "m1", ConnLimits{}, 0, 30_000); d.Code != "" || d.AtMs != now {
		t.Fatalf("unpaused, no limits: go at once, got %+v", d)
	}
	l.Pause("", now+20_000)
	// fits the budget: waits until the pause ends
	if d := l.Reserve(now+1000, "m1", ConnLimits{}, 0, 30_000); d.Code != "" || d.AtMs != now+20_000 {
		t.Fatalf("paused 19 s, budget 30 s: want AtMs pause end, got %+v", d)
	}
	// does not fit: refused at once with the queue-timeout code, nothing
	// booked (the limiter may forget the past dispatch no decision reads)
	n := len(l.Hits)
	d := l.Reserve(now+1000, "m1", ConnLimits{}, 0, 5000)
	if d.Code != CodeRateLimitQueueTimeout || d.AtMs != now+20_000 || len(l.Hits) > n || l.Hits[len(l.Hits)-1] != now+20_000 {
		t.Fatalf("paused 19 s, budget 5 s: want RATE_LIMIT_QUEUE_TIMEOUT at once, got %+v (hits %d→%d)", d, n, len(l.Hits))
	}
	// a pause never shortens
	l.Pause("", now+5000)
	if got := l.PausedUntilFor(now+1000, "m1"); got != now+20_000 {
		t.Fatalf("a shorter pause shortened the running one: %d", got)
	}
	// model-scoped pause: only that model waits
	var m Limiter
	m.Pause("m1", now+10_000)
	if d := m.Reserve(now, "m2", ConnLimits{}, 0, 1); d.Code != "" || d.AtMs != now {
		t.Fatalf("m2 must not wait for m1's pause: %+v", d)
	}
	if d := m.Reserve(now, "m1", ConnLimits{}, 0, 1); d.Code != CodeRateLimitQueueTimeout {
		t.Fatalf("m1 paused 10 s with 1 ms budget: want timeout, got %+v", d)
	}
	// a pause that began while a call was queued holds it (recheck)
	var q Limiter
	d = q.Reserve(now, "m1", ConnLimits{MinTimeMs: 0, RPM: 0}, 0, 30_000)
	q.Pause("", now+8000)
	if r := q.recheck(now, "m1", 30_000, d.AtMs); r.Code != "" || r.AtMs != now+8000 {
		t.Fatalf("recheck within budget: wait for the pause end, got %+v", r)
	}
	if r := q.recheck(now+8000, "m1", 1, d.AtMs); r.Code != "" || r.AtMs != now+8000 {
		t.Fatalf("pause over: go, got %+v", r)
	}
	if !q.Idle(now+8000+PaceWindowMs) || q.Idle(now) {
		t.Fatalf("Idle: wrong")
	}
	// docs/admission.md: refused beyond its budget, a queued call gives its booked
	// slot back (it never dispatches: no phantom use of the rpm window).
	var r2 Limiter
	b := r2.Reserve(now, "m1", ConnLimits{RPM: 4}, 0, 30_000)
	r2.Pause("", now+8000)
	if r := r2.recheck(now, "m1", 2000, b.AtMs); r.Code != CodeRateLimitQueueTimeout {
		t.Fatalf("recheck beyond budget: refuse at once, got %+v", r)
	}
	if len(r2.Hits) != 0 {
		t.Fatalf("the refused call still holds a slot: %v", r2.Hits)
	}
}

// docs/admission.md docs/admission.md#pacing: rpm and minTimeMs are per connection, with FIFO
// reservations; Cancel gives a slot back.
func TestLimiterRPMPerConnection(t *testing.T) {
	now := int64(at(0))
	var a, b Limiter
	lim := ConnLimits{RPM: 2}
	for i := 0; i < 2; i++ {
		if d := a.Reserve(now, "", lim, 0, 0); d.Code != "" || d.AtMs != now {
			t.Fatalf("hit %d: %+v", i, d)
		}
	}
	if d := a.Reserve(now, "", lim, 0, 60_000); d.Code != "" || d.AtMs != now+PaceWindowMs {
		t.Fatalf("3rd within the minute waits for the window: %+v", d)
	}
	if d := b.Reserve(now, "", lim, 0, 0); d.Code != "" || d.AtMs != now {
		t.Fatalf("another connection is not limited by a's hits: %+v", d)
	}
	a.Cancel(now + PaceWindowMs)
	if d := a.Reserve(now, "", lim, 0, 60_000); d.AtMs != now+PaceWindowMs {
		t.Fatalf("cancelled slot is free again: %+v", d)
	}
}

// docs/admission.md: LimiterFeedback on the engine — the long typed retry delay on a
// model-scoped limiter (gemini) becomes a model lockout (capped 24 h) and no
// pause; on a connection-wide limiter (openai) it keeps the pause; prose
// within maxWaitMs pauses the model; a connection outside the admission
// queue gets nothing.
func TestLimiterFeedback(t *testing.T) {
	gem := oneProvider("gem", ProfileAPIKey, 1)
	gem.Type = "gemini"
	oa := oneProvider("oa", ProfileAPIKey, 1)
	oauth := oneProvider("oauth", ProfileOAuth, 1)
	e := mustEngine(t, topo(gem, oa, oauth), nil)
	daily := `{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"86399s"}]}}`
	run := func(p, m string, o Outcome, now Time) (LimiterFeedback, Verdict) {
		t.Helper()
		a := beginOn(t, e, now, p, "k1", m)
		v := e.Record(now, &a, o)
		return e.LimiterFeedback(now, &a, &o, &v, 30_000), v
	}
	fb, _ := run("gem", "m1", withBody(429, daily), at(0))
	if fb.ConnPauseUntil != 0 || fb.ModelPauseUntil != 0 || fb.LockoutMs != 86_399_000 {
		t.Fatalf("gemini daily RetryInfo: want lockout and no pause, got %+v", fb)
	}
	ls := e.Lockouts(at(1))
	if len(ls) == 0 || ls[0].ExpiresAt < at(86_399_000) || ls[0].ExpiresAt > at(86_400_000) {
		t.Fatalf("model lockout must last the typed delay (≤ 24 h): %+v", ls)
	}
	fb, _ = run("oa", "m1", withBody(429, daily), at(0))
	if fb.ConnPauseUntil != at(86_399_000) || fb.LockoutMs != 0 {
		t.Fatalf("connection-wide limiter keeps the pause: %+v", fb)
	}
	fb, _ = run("gem", "m2", withBody(429, "rate limited, please retry after 20s"), at(1000))
	if fb.Model != "m2" || fb.ModelPauseUntil != at(21_000) || fb.ConnPauseUntil != 0 {
		t.Fatalf("prose within maxWaitMs on a model limiter pauses that model: %+v", fb)
	}
	fb, _ = run("oauth", "m1", withBody(429, daily), at(0))
	if fb != (LimiterFeedback{}) {
		t.Fatalf("oauth without rateLimitProtection is not queued: %+v", fb)
	}
	fb, _ = run("oa", "m2", withHeader(200, "x-ratelimit-remaining-requests", "0"), at(5000))
	if fb != (LimiterFeedback{}) {
		t.Fatalf("remaining 0 without reset: nothing learned: %+v", fb)
	}
	o := Outcome{Kind: OutcomeResponse, Status: 200, Headers: HeaderMap{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "7s"}}
	fb, _ = run("oa", "m2", o, at(5000))
	if fb.ConnPauseUntil != at(12_000) {
		t.Fatalf("learned window pauses the connection until the reset: %+v", fb)
	}
}

// docs/admission.md: POST /api/rate-limits' choice lives in the connection's state:
// it beats the config file, and survives a snapshot/restore (restart).
func TestRateLimitProtectionToggle(t *testing.T) {
	oauth := oneProvider("o", ProfileOAuth, 1)
	e := mustEngine(t, topo(oauth), nil)
	ref := ConnRef{"o", "k1"}
	if p, q, _ := e.RateLimitProtection(ref); p || q {
		t.Fatalf("oauth default: not protected, not queued")
	}
	if err := e.SetRateLimitProtection(at(0), ref, true); err != nil {
		t.Fatal(err)
	}
	a := beginOn(t, e, at(1), "o", "k1", "m1")
	if !a.Limited {
		t.Fatalf("explicit protection: the attempt goes through the limiter")
	}
	e.Record(at(2), &a, status(200))
	if err := e.SetRateLimitProtection(at(0), ConnRef{"o", "nope"}, true); err == nil {
		t.Fatalf("unknown connection must fail")
	}
	b, _ := json.Marshal(e.Snapshot(at(2)))
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	e2 := mustEngine(t, topo(oauth), nil)
	if err := e2.Restore(st); err != nil {
		t.Fatal(err)
	}
	if p, q, _ := e2.RateLimitProtection(ref); !p || !q {
		t.Fatalf("the toggle must survive a restart")
	}
	_ = e2.SetRateLimitProtection(at(3), ref, false)
	if p, q, _ := e2.RateLimitProtection(ref); p || q {
		t.Fatalf("enabled:false turns it off")
	}
}

// docs/admission.md, docs/errors.md: a local admission refusal is neutral and, when nothing else
// serves, the client gets the typed error (503 RATE_LIMIT_QUEUE_TIMEOUT).
func TestFlowRecordLocal(t *testing.T) {
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), func(s *Settings) { s.WaitForCooldown.Enabled = false })
	f := e.StartFlow(at(0), route(t, e, "p/m1"), "", nil)
	var sel Selection
	st := f.Next(at(0), e, &sel)
	if st.Kind != StepAttempt {
		t.Fatalf("want an attempt, got %v", st.Kind)
	}
	_, ans := f.Record(at(0), e, &st.Attempt, Report{Kind: ReportLocal, Err: &Error{Code: CodeRateLimitQueueTimeout, RetryAfterMs: 4000}})
	if ans == nil {
		st = f.Next(at(0), e, &sel)
		ans = &st
	}
	if ans.Kind != StepAnswer || ans.Err == nil || ans.Err.Code != CodeRateLimitQueueTimeout || ans.Status != 503 || ans.RetryAfterMs != 4000 {
		t.Fatalf("want 503 RATE_LIMIT_QUEUE_TIMEOUT with Retry-After, got %+v", ans)
	}
	if v := e.Connections(at(0), "p"); v[0].Status != StatusActive || v[0].CooldownRemainingMs != 0 {
		t.Fatalf("a local refusal never cools the connection: %+v", v[0])
	}
	// docs/admission.md#concurrency-gates: a saturated gate never disables a provider or creates a lockout
	if st := stateAt(e, at(0), "p"); st != Closed || len(e.Lockouts(at(0))) != 0 {
		t.Fatalf("a local refusal must be neutral: breaker %v, lockouts %v", st, e.Lockouts(at(0)))
	}
}

// The limiter check on the decision path (docs/admission.md performance target: ≤ 1
// µs): one Reserve per dispatch on a connection with rpm 600 and minTimeMs
// 0, in steady state (hits leave the window as new ones arrive).
func BenchmarkPaceLimiterReserve(b *testing.B) {
	var l Limiter
	lim := ConnLimits{RPM: 600}
	now := int64(at(0))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now += 100 // 600 per minute: always admitted at once
		if d := l.Reserve(now, "m1", lim, 0, 30_000); d.Code != "" {
			b.Fatal(d)
		}
	}
}

// BenchmarkPaceBodyRetry: the pacing-vs-lockout decision.
func BenchmarkPaceBodyRetry(b *testing.B) {
	h := Hint{Ms: 86_399_000, Source: HintRetryInfo}
	b.ReportAllocs()
	var sink RetryPlan
	for i := 0; i < b.N; i++ {
		sink = BodyRetry(h, LimiterScope(i&1), 30_000)
	}
	_ = sink
}

// docs/admission.md / docs/admission.md#pacing, as a property: whatever the arrivals, pauses
// and budgets, a connection's limiter never books more than rpm dispatches
// in any 60 s window, never two closer than minTimeMs, never one inside a
// pause, and never one past the caller's queue budget (it refuses instead).
func TestRapidLimiterInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lim := ConnLimits{RPM: rapid.IntRange(0, 5).Draw(t, "rpm"), MinTimeMs: rapid.Int64Range(0, 3000).Draw(t, "minTime")}
		var l Limiter
		now := int64(at(0))
		var booked []int64
		type pause struct{ from, until int64 }
		var pauses []pause
		for i, n := 0, rapid.IntRange(1, 40).Draw(t, "n"); i < n; i++ {
			now += rapid.Int64Range(0, 20_000).Draw(t, "gap")
			if rapid.IntRange(0, 5).Draw(t, "pause?") == 0 {
				u := now + rapid.Int64Range(1, 90_000).Draw(t, "pauseMs")
				l.Pause("", u)
				pauses = append(pauses, pause{now, u})
			}
			left := rapid.Int64Range(0, 120_000).Draw(t, "queueLeft")
			d := l.Reserve(now, "m", lim, 0, left)
			if d.Code != "" {
				if d.Code != CodeRateLimitQueueTimeout || d.AtMs-now <= left {
					t.Fatalf("refused without cause: %+v (left %d)", d, left)
				}
				continue
			}
			if d.AtMs < now || d.AtMs-now > left {
				t.Fatalf("booked %d outside [now %d, now+left %d]", d.AtMs, now, now+left)
			}
			for _, p := range pauses {
				if p.from <= now && d.AtMs < p.until && d.AtMs >= p.from {
					t.Fatalf("booked %d inside the pause [%d, %d)", d.AtMs, p.from, p.until)
				}
			}
			if k := len(booked); k > 0 && lim.MinTimeMs > 0 && d.AtMs-booked[k-1] < lim.MinTimeMs {
				t.Fatalf("minTimeMs %d violated: %d after %d", lim.MinTimeMs, d.AtMs, booked[k-1])
			}
			booked = append(booked, d.AtMs)
			if lim.RPM > 0 {
				in := 0
				for _, b := range booked {
					if b > d.AtMs-PaceWindowMs && b <= d.AtMs {
						in++
					}
				}
				if in > lim.RPM {
					t.Fatalf("%d dispatches in the 60 s window ending %d, rpm %d", in, d.AtMs, lim.RPM)
				}
			}
		}
	})
}

// docs/admission.md#pacing: the pacing step both shells take. Enter books
// the slot and says to wait for it; a pause that begins meanwhile holds the
// request at Wake, and refuses it at once (giving the slot back) when the
// pause outlasts the queue budget; a request that leaves gives its slot back.
func TestLimiterEnterWakeLeave(t *testing.T) {
	var l Limiter
	lim := ConnLimits{MinTimeMs: 100}
	if _, st := l.Enter(0, "m", lim, 0, 1000); !st.Go {
		t.Fatalf("first request goes at once: %+v", st)
	}
	w, st := l.Enter(10, "m", lim, 0, 1000)
	if st.Go || st.Code != "" || st.WakeAtMs != 100 || w.QueueEndMs != 1010 {
		t.Fatalf("second waits for minTimeMs: %+v %+v", st, w)
	}
	l.Pause("", 500)
	if st := l.Wake(100, "m", w); st.Go || st.WakeAtMs != 500 {
		t.Fatalf("a pause holds the woken request: %+v", st)
	}
	if st := l.Wake(500, "m", w); !st.Go {
		t.Fatalf("the pause ended: %+v", st)
	}
	w, _ = l.Enter(500, "m", lim, 0, 1000)
	l.Pause("", 5000)
	if st := l.Wake(600, "m", w); st.Code != CodeRateLimitQueueTimeout || st.RetryAfterMs != 4400 {
		t.Fatalf("a pause past the queue budget refuses at once: %+v", st)
	}
	if slices.Contains(l.Hits, w.Booked) {
		t.Fatal("a refused request must give its slot back")
	}
	var l2 Limiter
	l2.Enter(0, "m", lim, 0, 1000)
	w2, _ := l2.Enter(0, "m", lim, 0, 1000)
	l2.Leave(w2)
	if len(l2.Hits) != 1 {
		t.Fatalf("a request that left keeps no slot: %v", l2.Hits)
	}
	if _, st := l2.Enter(0, "m", ConnLimits{MinTimeMs: 100}, 1, 1000); st.Go {
		t.Fatalf("unexpected go: %+v", st)
	}
	if _, st := l2.Enter(0, "m", ConnLimits{MinTimeMs: 100}, 1, 1000); st.Code != CodeRateLimitQueueFull || st.RetryAfterMs != 0 {
		t.Fatalf("a full queue refuses RATE_LIMIT_QUEUE_FULL without a hint: %+v", st)
	}
	l2.Leave(PaceWait{}) // never booked: nothing to give back
	if len(l2.Hits) != 2 {
		t.Fatalf("leaving an unbooked wait changed the limiter: %v", l2.Hits)
	}
}

// fullLimiter is the limiter's decisions over the whole 60 s history, with
// no bound on what it keeps: the reference TestRapidLimiterBoundedHistory
// holds the bounded Limiter to.
type fullLimiter struct {
	hits        []int64
	pausedUntil int64
}

func (f *fullLimiter) cancel(at int64) {
	if i := slices.Index(f.hits, at); i >= 0 {
		f.hits = slices.Delete(f.hits, i, i+1)
	}
}

func (f *fullLimiter) enter(now int64, lim ConnLimits, depth int, left int64) (PaceWait, PaceStep) {
	for len(f.hits) > 0 && f.hits[0] <= now-PaceWindowMs {
		f.hits = f.hits[1:]
	}
	waiting := 0
	for _, h := range f.hits {
		if h > now {
			waiting++
		}
	}
	d := Pace(PaceInput{NowMs: now, Hits: f.hits, RPM: lim.RPM, MinTimeMs: lim.MinTimeMs, Waiting: waiting,
		MaxQueueDepth: depth, QueueLeftMs: left, PausedUntilMs: f.pausedUntil})
	w := PaceWait{QueueEndMs: now + left}
	if d.Code == "" {
		f.hits = append(f.hits, d.AtMs)
		w.Booked, w.booked = d.AtMs, true
	}
	return w, paceStep(now, d)
}

func (f *fullLimiter) wake(now int64, w PaceWait) PaceStep {
	d := PaceDecision{AtMs: now}
	if p := f.pausedUntil; p > now {
		d.AtMs = p
		if p-now > w.QueueEndMs-now {
			f.cancel(w.Booked)
			d.Code = CodeRateLimitQueueTimeout
		}
	}
	return paceStep(now, d)
}

// docs/admission.md#pacing: a limiter keeps only the dispatches a decision
// can still read (the last rpm, one per waiting request, the reservations),
// and every decision is still the one the whole 60 s history gives, through
// arrivals, waits, pauses, refusals at wake-up and requests that leave.
func TestRapidLimiterBoundedHistory(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lim := ConnLimits{RPM: rapid.IntRange(0, 6).Draw(t, "rpm"), MinTimeMs: rapid.Int64Range(0, 2000).Draw(t, "minTime")}
		depth := rapid.IntRange(0, 3).Draw(t, "depth")
		var l Limiter
		var ref fullLimiter
		now := int64(at(0))
		type waiter struct {
			w      PaceWait
			wakeAt int64
		}
		var waiters []waiter
		for i, n := 0, rapid.IntRange(1, 80).Draw(t, "n"); i < n; i++ {
			now += rapid.Int64Range(0, 8_000).Draw(t, "gap")
			op := rapid.IntRange(0, 9).Draw(t, "op")
			switch {
			case op == 0:
				u := now + rapid.Int64Range(1, 30_000).Draw(t, "pauseMs")
				l.Pause("", u)
				ref.pausedUntil = max(ref.pausedUntil, u)
			case op <= 3 && len(waiters) > 0:
				k := rapid.IntRange(0, len(waiters)-1).Draw(t, "who")
				wt := waiters[k]
				if op == 3 {
					l.Leave(wt.w)
					ref.cancel(wt.w.Booked)
					waiters = slices.Delete(waiters, k, k+1)
					continue
				}
				now = max(now, wt.wakeAt)
				got, want := l.Wake(now, "m", wt.w), ref.wake(now, wt.w)
				if got != want {
					t.Fatalf("wake at %d: bounded %+v, full history %+v", now, got, want)
				}
				if got.Go || got.Code != "" {
					waiters = slices.Delete(waiters, k, k+1)
				} else {
					waiters[k].wakeAt = got.WakeAtMs
				}
			default:
				left := rapid.Int64Range(0, 90_000).Draw(t, "queueLeft")
				w, got := l.Enter(now, "m", lim, depth, left)
				rw, want := ref.enter(now, lim, depth, left)
				if got != want || w != rw {
					t.Fatalf("enter at %d: bounded %+v %+v, full history %+v %+v", now, got, w, want, rw)
				}
				if !got.Go && got.Code == "" {
					waiters = append(waiters, waiter{w, got.WakeAtMs})
				}
			}
		}
	})
}

// docs/admission.md#pacing: what a limiter keeps does not grow with the
// traffic: a connection with no rpm keeps its last dispatch (and the one it
// just booked), however many went out in the last minute.
func TestLimiterHistoryBoundedWithoutRPM(t *testing.T) {
	var l Limiter
	for i := range int64(100_000) { // 2 requests per ms for 50 s
		if _, st := l.Enter(int64(at(0))+i/2, "m", ConnLimits{}, 0, 1000); !st.Go {
			t.Fatalf("no limits: request %d waits: %+v", i, st)
		}
		if len(l.Hits) > 2 {
			t.Fatalf("%d hits kept after %d requests, want at most 2", len(l.Hits), i+1)
		}
	}
}
