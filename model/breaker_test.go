package model

import (
	"errors"
	"testing"
)

// failN records n provider-level failures on k1, one per second from start.
func failN(t *testing.T, e *Engine, provider string, start Time, n int, code int) Time {
	t.Helper()
	now := start
	for i := 0; i < n; i++ {
		hit(t, e, now, provider, "k1", "m1", status(code))
		now = now.Add(1000)
	}
	return now
}

func TestBreakerProfileThresholds(t *testing.T) {
	// docs/breaker.md table: degraded at / open at per profile (consecutive
	// provider-level failures).
	cases := []struct {
		name          string
		prof          Profile
		degradeAt     int
		openAt        int
		resetTimeoutS int64
	}{
		{"docs/breaker.md oauth degrades at 5 opens at 8, reset 60 s", ProfileOAuth, 5, 8, 60},
		{"docs/breaker.md apikey degrades at 7 opens at 12, reset 30 s", ProfileAPIKey, 7, 12, 30},
		{"docs/breaker.md local degrades below open, opens at 2, reset 15 s", ProfileLocal, 1, 2, 15},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := mustEngine(t, topo(oneProvider("p", tc.prof, 1)), nil)
			now := failN(t, e, "p", at(0), tc.degradeAt-1, 503)
			if tc.degradeAt > 1 {
				if got := stateAt(e, now, "p"); got != Closed {
					t.Fatalf("after %d failures: %v, want CLOSED", tc.degradeAt-1, got)
				}
			}
			now = failN(t, e, "p", now, 1, 503)
			if got := stateAt(e, now, "p"); got != Degraded && tc.degradeAt < tc.openAt {
				t.Fatalf("after %d failures: %v, want DEGRADED", tc.degradeAt, got)
			}
			now = failN(t, e, "p", now, tc.openAt-tc.degradeAt-1, 503)
			if tc.openAt-tc.degradeAt-1 > 0 {
				if got := stateAt(e, now, "p"); got != Degraded {
					t.Fatalf("after %d failures: %v, want DEGRADED", tc.openAt-1, got)
				}
			}
			openedAt := now
			failN(t, e, "p", now, 1, 503)
			if got := stateAt(e, openedAt, "p"); got != Open {
				t.Fatalf("after %d failures: %v, want OPEN", tc.openAt, got)
			}
			// OPEN→HALF_OPEN at exactly resetTimeout (>=, docs/breaker.md refresh).
			if got := stateAt(e, openedAt.Add(sec(tc.resetTimeoutS)-1), "p"); got != Open {
				t.Fatalf("1 ms before reset timeout: %v, want OPEN", got)
			}
			if got := stateAt(e, openedAt.Add(sec(tc.resetTimeoutS)), "p"); got != HalfOpen {
				t.Fatalf("at reset timeout: %v, want HALF_OPEN", got)
			}
		})
	}
}

func TestBreakerTripStatuses(t *testing.T) {
	// docs/breaker.md#trip-statuses: only 408/500/502/503/504 and transport errors
	// count; 429 and other account-level errors are neutral.
	trips := []Outcome{status(408), status(500), status(502), status(503), status(504),
		{Kind: OutcomeTransport, Transport: TransportRefused}, {Kind: OutcomeTransport, Transport: TransportReset},
		{Kind: OutcomeTransport, Transport: TransportHeaderTimeout}}
	for _, o := range trips {
		e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
		hit(t, e, at(0), "p", "k1", "m1", o)
		if got := breakerOf(e, "p").FailureCount; got != 1 {
			t.Errorf("docs/breaker.md trip status %v/%v: failureCount %d, want 1", o.Status, o.Transport, got)
		}
	}
	neutral := []Outcome{status(429), status(401), status(403), status(404), status(400),
		withBody(429, "too many concurrent requests"), {Kind: OutcomeClientAbort}, {Kind: OutcomeLocalQueue}, {Kind: OutcomeStall}}
	for _, o := range neutral {
		e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
		for i := int64(0); i < 20; i++ {
			hit(t, e, at(sec(i)), "p", "k1", "m1", o)
		}
		if b := breakerOf(e, "p"); b.FailureCount != 0 || b.State != Closed {
			t.Errorf("docs/breaker.md neutral outcome %v %d: breaker %v fc=%d, want CLOSED 0", o.Kind, o.Status, b.State, b.FailureCount)
		}
	}
}

func TestBreakerProbeBudget(t *testing.T) {
	// docs/breaker.md#half-open: HALF_OPEN admits exactly halfOpenRequests probes
	// through the one try-acquire permit operation.
	e := mustEngine(t, topo(oneProvider("p", ProfileLocal, 3)), func(s *Settings) {
		s.ProviderBreaker.Local.HalfOpenRequests = 2
	})
	failN(t, e, "p", at(0), 2, 503) // opens at t=1s
	half := at(sec(1) + sec(15))
	if sel := selectAt(t, e, half.Add(-1), "p/m1"); len(sel.Candidates) != 0 || sel.Excluded[0].Reason != ExclCircuitOpen || sel.Excluded[0].RemainingMs != 1 {
		t.Fatalf("OPEN must admit nothing before its deadline: %+v", sel)
	}
	a1, err1 := e.tryBegin(half, "p", "k1", "m1")
	a2, err2 := e.tryBegin(half, "p", "k2", "m1")
	_, err3 := e.tryBegin(half, "p", "k3", "m1")
	if err1 != nil || err2 != nil || err3 == nil {
		t.Fatalf("probe budget 2: errs %v %v %v", err1, err2, err3)
	}
	if !a1.Probe() || !a2.Probe() {
		t.Fatal("half-open attempts must carry probe permits")
	}
	if sel := selectAt(t, e, half, "p/m1"); len(sel.Candidates) != 0 {
		t.Fatal("selection must exclude a half-open provider whose permits are taken")
	}
	// A neutral result (429) frees its permit without counting.
	e.Record(half, &a1, status(429))
	if b := breakerOf(e, "p"); b.State != HalfOpen || b.ProbesLeft != 1 {
		t.Fatalf("neutral probe result: %v probesLeft=%d, want HALF_OPEN 1", b.State, b.ProbesLeft)
	}
	// A probe success closes.
	e.Record(half, &a2, status(200))
	if b := breakerOf(e, "p"); b.State != Closed || b.FailureCount != 0 {
		t.Fatalf("probe success: %v fc=%d, want CLOSED 0", b.State, b.FailureCount)
	}
}

func TestBreakerProbeTimeoutFreesPermit(t *testing.T) {
	// docs/breaker.md#half-open: a probe whose result never comes frees its
	// permit after probeTimeoutMs.
	e := mustEngine(t, topo(oneProvider("p", ProfileLocal, 2)), func(s *Settings) {
		s.ProviderBreaker.Local.ProbeTimeoutMs = 5000
	})
	failN(t, e, "p", at(0), 2, 503)
	half := at(sec(16))
	lost := beginOn(t, e, half, "p", "k1", "m1") // never answered in time
	if _, err := e.tryBegin(half.Add(4999), "p", "k2", "m1"); err == nil {
		t.Fatal("permit must stay taken until the probe timeout")
	}
	a, err := e.tryBegin(half.Add(5000), "p", "k2", "m1")
	if err != nil {
		t.Fatalf("permit must free at the probe timeout: %v", err)
	}
	// The late answer of the timed-out probe changes nothing.
	e.Record(half.Add(6000), &lost, status(200))
	if b := breakerOf(e, "p"); b.State != HalfOpen {
		t.Fatalf("late result of a timed-out probe closed the breaker: %v", b.State)
	}
	e.Record(half.Add(6000), &a, status(503))
	if b := breakerOf(e, "p"); b.State != Open || b.OpenCycles != 1 {
		t.Fatalf("probe failure: %v cycles=%d, want OPEN 1", b.State, b.OpenCycles)
	}
}

func TestBreakerFailuresWhileOpenIgnored(t *testing.T) {
	// docs/breaker.md#open and the generation counter: failures while OPEN
	// (late results of attempts admitted before it opened) do not extend it.
	e := mustEngine(t, topo(oneProvider("p", ProfileLocal, 3)), nil)
	late := beginOn(t, e, at(0), "p", "k3", "m1")
	failN(t, e, "p", at(0), 2, 503) // opens at 1 s
	b := *breakerOf(e, "p")
	e.Record(at(sec(10)), &late, status(503))
	after := breakerOf(e, "p")
	if after.OpenedAt != b.OpenedAt || after.FailureCount != b.FailureCount || after.LastFailureAt != b.LastFailureAt {
		t.Fatalf("failure while OPEN moved the breaker: before %+v after %+v", b, *after)
	}
	if got := stateAt(e, at(sec(16)), "p"); got != HalfOpen {
		t.Fatalf("open period extended: %v at 16 s, want HALF_OPEN", got)
	}
}

func TestBreakerLateSuccessFromOldGeneration(t *testing.T) {
	// docs/breaker.md#generations: a success admitted before
	// the breaker re-opened cannot close the newer HALF_OPEN.
	e := mustEngine(t, topo(oneProvider("p", ProfileLocal, 3)), nil)
	old := beginOn(t, e, at(0), "p", "k3", "m1")
	failN(t, e, "p", at(0), 2, 503)
	e.Record(at(sec(16)), &old, status(200)) // breaker is HALF_OPEN by now
	if got := stateAt(e, at(sec(16)), "p"); got != HalfOpen {
		t.Fatalf("stale success changed state to %v", got)
	}
}

func TestBreakerOpenCycleEscalation(t *testing.T) {
	// docs/breaker.md effectiveResetTimeout: after backoffEscalationCount open
	// cycles the reset doubles per cycle, capped at maxBackoffMultiplier×.
	e := mustEngine(t, topo(oneProvider("p", ProfileLocal, 1)), func(s *Settings) {
		s.ProviderBreaker.Local.BackoffEscalationCount = 1
		s.ProviderBreaker.Local.MaxBackoffMultiplier = 4
	})
	now := failN(t, e, "p", at(0), 2, 503) - 1000 // opened at now
	want := []int64{15, 30, 60, 60, 60}           // cycles 1..5 after probe failures
	for i, w := range want {
		now = now.Add(sec(15)) // at least the base
		for stateAt(e, now, "p") != HalfOpen {
			now = now.Add(1000)
		}
		a := beginOn(t, e, now, "p", "k1", "m1")
		e.Record(now, &a, status(503))
		b := breakerOf(e, "p")
		if b.OpenCycles != i+1 {
			t.Fatalf("cycle %d: openCycles %d", i+1, b.OpenCycles)
		}
		if got := e.opts(&e.provs[0]).openDuration(b.LastFailureKind, b.OpenCycles); got != sec(w) {
			t.Fatalf("cycle %d: open for %d ms, want %d s", i+1, got, w)
		}
		if stateAt(e, now.Add(sec(w)-1), "p") != Open || stateAt(e, now.Add(sec(w)), "p") != HalfOpen {
			t.Fatalf("cycle %d: OPEN must last exactly %d s", i+1, w)
		}
		now = now.Add(sec(w)) - Time(sec(15))
	}
}

func TestBreakerCooldownByKind(t *testing.T) {
	// docs/breaker.md / docs/breaker.md#failure-kinds: failures carry their kind, so
	// cooldownByKind overrides resetTimeout on every path.
	e := mustEngine(t, topo(oneProvider("p", ProfileLocal, 1)), func(s *Settings) {
		s.ProviderBreaker.Local.CooldownByKind = map[string]Millis{"timeout": 2000}
	})
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	hit(t, e, at(1000), "p", "k1", "m1", Outcome{Kind: OutcomeTransport, Transport: TransportHeaderTimeout})
	if b := breakerOf(e, "p"); b.State != Open || b.LastFailureKind != KindTimeout {
		t.Fatalf("want OPEN by a timeout, got %v %v", b.State, b.LastFailureKind)
	}
	if stateAt(e, at(2999), "p") != Open || stateAt(e, at(3000), "p") != HalfOpen {
		t.Fatal("a timeout-kind open must last cooldownByKind.timeout = 2 s")
	}
	// docs/breaker.md#options: a changed cooldownByKind re-evaluates the
	// running OPEN at once, as a changed resetTimeout does.
	hit(t, e, at(3000), "p", "k1", "m1", Outcome{Kind: OutcomeTransport, Transport: TransportHeaderTimeout}) // the probe fails: OPEN again at 3 s
	s := e.Settings()
	s.ProviderBreaker.Local.CooldownByKind = map[string]Millis{"timeout": 4000}
	e.UpdateSettings(at(3500), s)
	if stateAt(e, at(6999), "p") != Open || stateAt(e, at(7000), "p") != HalfOpen {
		t.Fatal("after the change a timeout-kind open must last 4 s")
	}
}

func TestBreakerDegradedExits(t *testing.T) {
	// docs/breaker.md: DEGRADED returns to CLOSED after enough successes, a valid
	// connection test, or a quiet period = longest OPEN hold × multiplier.
	mk := func() *Engine {
		e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
		failN(t, e, "p", at(0), 7, 503) // last failure at 6 s
		if b := breakerOf(e, "p"); b.State != Degraded {
			t.Fatalf("setup: %v", b.State)
		}
		return e
	}
	t.Run("docs/breaker.md success recovery (fc <= degradation after decrement)", func(t *testing.T) {
		e := mk()
		hit(t, e, at(sec(7)), "p", "k1", "m1", status(200))
		if b := breakerOf(e, "p"); b.State != Closed || b.FailureCount != 6 {
			t.Fatalf("got %v fc=%d, want CLOSED 6", b.State, b.FailureCount)
		}
	})
	t.Run("docs/api.md#operator-actions connection test closes DEGRADED", func(t *testing.T) {
		e := mk()
		if err := e.connectionTestPassed(at(sec(7)), ConnRef{"p", "k1"}); err != nil {
			t.Fatal(err)
		}
		if b := breakerOf(e, "p"); b.State != Closed {
			t.Fatalf("got %v", b.State)
		}
	})
	t.Run("docs/breaker.md quiet period 30 s × 4 after the last failure, read lazily", func(t *testing.T) {
		e := mk()
		last := at(sec(6))
		if got := stateAt(e, last.Add(sec(120)-1), "p"); got != Degraded {
			t.Fatalf("before quiet period: %v", got)
		}
		if got := stateAt(e, last.Add(sec(120)), "p"); got != Closed {
			t.Fatalf("after quiet period: %v", got)
		}
		if fc := breakerOf(e, "p").FailureCount; fc != 0 {
			t.Fatalf("quiet period must forget failures, fc=%d", fc)
		}
	})
}

func TestBreakerDedup(t *testing.T) {
	// docs/breaker.md#dedup / docs/classification.md#verdicts: a failure on the same connection within
	// 5 s of the last counted one, or a transport failure on the provider
	// within 10 s, does not count again.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 3)), func(s *Settings) {
		s.ProviderBreaker.Dedup = BreakerDedup{ConnectionMs: 5000, TransportMs: 10000}
	})
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	hit(t, e, at(4999), "p", "k1", "m1", status(503))
	if fc := breakerOf(e, "p").FailureCount; fc != 1 {
		t.Fatalf("same connection within 5 s counted: fc=%d", fc)
	}
	hit(t, e, at(5000), "p", "k1", "m1", status(503))
	hit(t, e, at(5000), "p", "k2", "m1", status(503))
	if fc := breakerOf(e, "p").FailureCount; fc != 3 {
		t.Fatalf("at 5 s and on another connection: fc=%d, want 3", fc)
	}
	reset := Outcome{Kind: OutcomeTransport, Transport: TransportReset}
	hit(t, e, at(6000), "p", "k3", "m1", reset)
	hit(t, e, at(15999), "p", "k2", "m1", reset)
	if fc := breakerOf(e, "p").FailureCount; fc != 4 {
		t.Fatalf("transport within 10 s on the provider counted: fc=%d, want 4", fc)
	}
	hit(t, e, at(16000), "p", "k1", "m1", reset)
	if fc := breakerOf(e, "p").FailureCount; fc != 5 {
		t.Fatalf("transport after 10 s: fc=%d, want 5", fc)
	}
}

func TestBreakerResetAndSettingsChange(t *testing.T) {
	e := mustEngine(t, topo(oneProvider("p", ProfileLocal, 1)), nil)
	failN(t, e, "p", at(0), 2, 503)
	if n, err := e.ResetBreakers(at(sec(2)), "p"); err != nil || n != 1 {
		t.Fatalf("reset: %d %v", n, err)
	}
	if b := breakerOf(e, "p"); b.State != Closed || b.FailureCount != 0 || b.OpenCycles != 0 {
		t.Fatalf("docs/breaker.md reset: %+v", *b)
	}
	if _, err := e.ResetBreakers(at(0), "nope"); err == nil {
		t.Fatal("reset of an unknown provider must fail")
	}
	// docs/breaker.md#options: changing options re-evaluates an OPEN deadline.
	failN(t, e, "p", at(sec(3)), 2, 503) // opens at 4 s for 15 s
	s := e.Settings()
	s.ProviderBreaker.Local.ResetTimeoutMs = 5000
	e.UpdateSettings(at(sec(5)), s)
	if got := stateAt(e, at(sec(9)), "p"); got != HalfOpen {
		t.Fatalf("new resetTimeout must apply to the running OPEN: %v", got)
	}
}

func TestBreakerResetRestartsTheConnectionDedup(t *testing.T) {
	// docs/breaker.md dedup: one connection's failures count once per window. An
	// operator's reset starts the breaker over, the dedup with it: the
	// first failure after it counts (it was swallowed by a window opened
	// before the reset).
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	if fc := breakerOf(e, "p").FailureCount; fc != 1 {
		t.Fatalf("first failure: %d", fc)
	}
	if _, err := e.ResetBreakers(at(100), "p"); err != nil {
		t.Fatal(err)
	}
	e.ClearCooldowns(at(100), nil, true, "")
	hit(t, e, at(200), "p", "k1", "m1", status(503))
	if fc := breakerOf(e, "p").FailureCount; fc != 1 {
		t.Fatalf("the first failure after a reset counts: %d", fc)
	}
}

// TestProviderTestedClearsEveryPassedConnection pins the provider test
// rule both shells call: a test checks every connection of the provider,
// so on a DEGRADED provider each connection that passed loses its backoff
// and last error (not only one named connection) and the breaker closes; a
// connection that did not pass keeps its state; an unknown name records
// nothing.
func TestProviderTestedClearsEveryPassedConnection(t *testing.T) {
	mk := func() *Engine {
		e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 3)), func(s *Settings) {
			s.ProviderBreaker.Dedup.ConnectionMs = 0
			s.ProviderBreaker.APIKey.DegradationThreshold = 3
		})
		hit(t, e, at(0), "p", "k1", "m1", status(502))
		hit(t, e, at(1), "p", "k2", "m1", status(502))
		hit(t, e, at(2), "p", "k3", "m1", status(502))
		if b := breakerOf(e, "p"); b.State != Degraded {
			t.Fatalf("setup: breaker %v, want DEGRADED", b.State)
		}
		return e
	}
	e := mk()
	if err := e.ProviderTested(at(sec(1)), "p", []string{"k1", "k2"}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k2"} {
		if c := connOf(e, "p", k); c.BackoffLevel != 0 || c.LastErrorType != ReasonNone || c.Status != StatusActive {
			t.Errorf("%s after a passed test: %v backoff %d lastError %v, want active, 0, none", k, c.Status, c.BackoffLevel, c.LastErrorType)
		}
	}
	if c := connOf(e, "p", "k3"); c.BackoffLevel == 0 || c.LastErrorType == ReasonNone {
		t.Errorf("k3 did not pass the test, yet its backoff %d / last error %v were cleared", c.BackoffLevel, c.LastErrorType)
	}
	if b := breakerOf(e, "p"); b.State != Closed {
		t.Errorf("breaker after a passed test: %v, want CLOSED", b.State)
	}

	e = mk()
	var nf *NotFoundError
	if err := e.ProviderTested(at(sec(1)), "p", []string{"k1", "nope"}); !errors.As(err, &nf) {
		t.Fatalf("unknown connection: %v, want a NotFoundError", err)
	}
	if c := connOf(e, "p", "k1"); c.LastErrorType == ReasonNone || breakerOf(e, "p").State != Degraded {
		t.Error("a test naming an unknown connection must record nothing")
	}
	if err := e.ProviderTested(at(sec(1)), "nope", nil); !errors.As(err, &nf) {
		t.Errorf("unknown provider: %v, want a NotFoundError", err)
	}
}
