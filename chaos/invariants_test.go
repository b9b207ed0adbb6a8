package chaos

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// The invariant checks must catch what they claim to: each test feeds a
// broken answer or a broken trace and expects the check to fail, and the
// healthy counterpart to pass.

// --- per-request checks: answers from a fake gateway -----------------------

func judgeVia(t *testing.T, stream bool, deadline time.Duration, h http.HandlerFunc) Outcome {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	q := &requester{client: newClient(4), base: func() string { return srv.URL }, deadline: deadline}
	defer closeIdle(q.client)
	return q.do(context.Background(), "p/m", stream, time.Now())
}

func sse(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, e := range events {
			io.WriteString(w, "data: "+e+"\n\n")
		}
	}
}

func jsonAnswer(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

const chunk = `{"choices":[{"index":0,"delta":{"content":"hi"}}]}`
const completion = `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`

func TestRequestOutcomes(t *testing.T) {
	cases := []struct {
		name      string
		stream    bool
		h         http.HandlerFunc
		kind      Kind
		violation string
		class     string
	}{
		{"complete JSON", false, jsonAnswer(200, completion), KindSuccess, "", "200"},
		{"complete stream", true, sse(chunk, chunk, "[DONE]"), KindSuccess, "", "200 stream"},
		{"stream error event", true, sse(chunk, `{"error":{"message":"stalled","type":"server_error","code":"stream_stall"}}`), KindStreamError, "", "stream_error:stream_stall"},
		{"typed 429", false, jsonAnswer(429, `{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limit_exceeded"}}`), KindTypedError, "", "429:rate_limit_exceeded"},
		{"typed 503 with Retry-After", false, jsonAnswer(503, `{"error":{"message":"open","type":"server_error","code":"provider_circuit_open"}}`, "Retry-After", "3"), KindTypedError, "", "503:provider_circuit_open"},

		{"truncated JSON success", false, jsonAnswer(200, completion[:40]), KindViolation, InvTruncated, "200"},
		{"200 with an error body", false, jsonAnswer(200, `{"error":{"message":"x","type":"server_error"}}`), KindViolation, InvTruncated, "200"},
		{"200 without content", false, jsonAnswer(200, `{"choices":[]}`), KindViolation, InvTruncated, "200"},
		{"stream without [DONE]", true, sse(chunk, chunk), KindViolation, InvTruncated, "stream_no_done"},
		{"stream with [DONE] but no content", true, sse("[DONE]"), KindViolation, InvTruncated, "stream_empty"},
		{"stream request answered JSON", true, jsonAnswer(200, completion), KindViolation, InvTruncated, "200"},
		{"untyped 503", false, jsonAnswer(503, "upstream connect error"), KindViolation, InvTyped, "503"},
		{"503 without a message", false, jsonAnswer(503, `{"error":{"type":"server_error"}}`), KindViolation, InvTyped, "503"},
		{"typed 503 circuit open without Retry-After", false, jsonAnswer(503, `{"error":{"message":"open","type":"server_error","code":"provider_circuit_open"}}`), KindTypedError, InvRetryAfter, "503:provider_circuit_open"},
		{"connection cut before headers", false, func(w http.ResponseWriter, r *http.Request) {
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
		}, KindViolation, InvTyped, "no_response"},
		{"stream cut mid-body", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(200)
			io.WriteString(w, "data: "+chunk+"\n\n")
			http.NewResponseController(w).Flush()
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
		}, KindViolation, InvTruncated, "stream_cut"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := judgeVia(t, tc.stream, 5*time.Second, tc.h)
			if o.Kind != tc.kind || o.Violation != tc.violation || o.Class != tc.class {
				t.Fatalf("got kind %s violation %q class %q (%s), want %s %q %q", o.Kind, o.Violation, o.Class, o.Detail, tc.kind, tc.violation, tc.class)
			}
		})
	}
}

// A gateway that never answers, or stops in the middle of a stream, hangs:
// the client deadline names it.
func TestRequestHangs(t *testing.T) {
	hold := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so the server notices the client leave
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	o := judgeVia(t, false, 150*time.Millisecond, hold)
	if o.Violation != InvDeadline {
		t.Fatalf("no headers: got %q (%s), want %s", o.Violation, o.Detail, InvDeadline)
	}
	o = judgeVia(t, true, 150*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: "+chunk+"\n\n")
		http.NewResponseController(w).Flush()
		hold(w, r)
	})
	if o.Violation != InvDeadline {
		t.Fatalf("silent stream: got %q (%s), want %s", o.Violation, o.Detail, InvDeadline)
	}
}

func TestPerRequestCheckCountsViolations(t *testing.T) {
	rec := newRecorder(time.Now(), time.Second, 10)
	now := time.Now()
	for _, o := range []Outcome{
		{Kind: KindSuccess, Class: "200", Start: now, End: now},
		{Kind: KindViolation, Violation: InvTruncated, Class: "stream_no_done", Detail: "cut", Start: now, End: now},
	} {
		rec.sentOne()
		rec.add(&o)
	}
	rec.sentOne() // a request that never finished
	tr := &Trace{Requests: rec.summary(), PerRequest: map[string][]Violation{}, GatewayCounted: -1}
	_, tr.PerRequest[InvTruncated] = rec.violations(InvTruncated)
	if r := perRequest(InvTruncated)(tr); r.Status != Fail || r.Count != 1 || len(r.Violations) != 1 {
		t.Errorf("truncated: %+v, want one failure", r)
	}
	if r := perRequest(InvDeadline)(tr); r.Status != Pass {
		t.Errorf("deadline: %+v, want pass", r)
	}
	if r := checkAccounted(tr); r.Status != Fail {
		t.Errorf("3 sent, 2 finished: %+v, want fail", r)
	}
	tr.Requests.Sent = tr.Requests.Finished
	if r := checkAccounted(tr); r.Status != Pass {
		t.Errorf("accounted: %+v, want pass", r)
	}
	tr.GatewayCounted = 5
	if r := checkAccounted(tr); r.Status != Fail {
		t.Errorf("the gateway counted more than was sent: %+v, want fail", r)
	}
}

// --- trace checks -----------------------------------------------------------

// traceTopo: alpha (2 connections, 2 models), beta (3 connections).
func traceTopo() *model.Topology {
	return &model.Topology{Providers: []model.ProviderConfig{
		{ID: "alpha", Profile: model.ProfileAPIKey, Models: []string{"m1", "m2"}, Connections: []model.ConnectionConfig{{ID: "a1"}, {ID: "a2"}}},
		{ID: "beta", Profile: model.ProfileAPIKey, Models: []string{"m1"}, Connections: []model.ConnectionConfig{{ID: "b1"}, {ID: "b2"}, {ID: "b3"}}},
	}}
}

func traceSettings() *model.Settings {
	s := model.DefaultSettings()
	s.ProviderBreaker.APIKey.FailureThreshold = 5
	s.ProviderBreaker.Dedup = model.BreakerDedup{}
	return &s
}

// newTrace builds a trace from a schedule and a sample function called every
// 100 ms over [0, endMs].
func newTrace(t *testing.T, src string, endMs int64, sample func(at int64, s *Sample)) *Trace {
	t.Helper()
	topo, st := traceTopo(), traceSettings()
	s, err := ParseSchedule("trace.yaml", []byte(src), topo)
	if err != nil {
		t.Fatal(err)
	}
	tr := &Trace{SampleEveryMs: 100, Topo: topo, Settings: st, GatewayCounted: -1}
	tr.Windows = windows(s, time.Duration(endMs)*time.Millisecond, topo, st)
	tr.FaultEndMs = lastFaultEnd(tr.Windows)
	for at := int64(0); at <= endMs; at += 100 {
		smp := Sample{AtMs: at, Providers: map[string]ProviderSample{"alpha": {State: "CLOSED"}, "beta": {State: "CLOSED"}},
			Conns: map[string]ConnSample{}, Upstream: map[string]map[string]int{"alpha": {}, "beta": {}}}
		for _, p := range topo.Providers {
			for _, c := range p.Connections {
				smp.Conns[p.ID+"/"+c.ID] = ConnSample{Status: "active"}
			}
		}
		sample(at, &smp)
		tr.Samples = append(tr.Samples, smp)
	}
	return tr
}

const outage = "duration: 10s\nfaults:\n  - {at: 1s, until: 5s, match: {provider: alpha}, respond: {status: 503}}\n"

func TestBreakerOpensCheck(t *testing.T) {
	// Two failures per 100 ms from 1 s: the threshold (5) is answered by 1.3 s.
	failures := func(at int64, s *Sample) {
		if at > 1000 {
			s.Upstream["alpha"]["503"] = int(min(at, 5000)-1000) / 50
		}
	}
	ok := newTrace(t, outage, 8000, func(at int64, s *Sample) {
		failures(at, s)
		if at >= 1500 && at < 4000 {
			s.Providers["alpha"] = ProviderSample{State: "OPEN", Failures: 5}
		}
	})
	if r := checkBreakerOpens(ok); r.Status != Pass {
		t.Errorf("opened in time: %+v", r)
	}
	never := newTrace(t, outage, 8000, func(at int64, s *Sample) {
		failures(at, s)
		s.Providers["alpha"] = ProviderSample{State: "DEGRADED", Failures: 4}
	})
	if r := checkBreakerOpens(never); r.Status != Fail {
		t.Errorf("never opened: %+v, want fail", r)
	}
	late := newTrace(t, outage, 8000, func(at int64, s *Sample) {
		failures(at, s)
		if at >= 4000 {
			s.Providers["alpha"] = ProviderSample{State: "OPEN"}
		}
	})
	if r := checkBreakerOpens(late); r.Status != Fail || !strings.Contains(r.Detail, "opened only at") {
		t.Errorf("opened long after the threshold: %+v, want fail", r)
	}
	quiet := newTrace(t, outage, 8000, func(at int64, s *Sample) {
		if at > 1000 {
			s.Upstream["alpha"]["503"] = 2 // below the threshold: no traffic
		}
	})
	if r := checkBreakerOpens(quiet); r.Status != Skip {
		t.Errorf("not exercised: %+v, want skip", r)
	}
	// 429s answered in the window do not count towards the threshold.
	wrongLabel := newTrace(t, outage, 8000, func(at int64, s *Sample) {
		if at > 1000 {
			s.Upstream["alpha"]["429"] = int(at-1000) / 50
		}
	})
	if r := checkBreakerOpens(wrongLabel); r.Status != Skip {
		t.Errorf("only 429s answered: %+v, want skip", r)
	}
}

func TestBreakerOpensAccountsForDedup(t *testing.T) {
	tr := newTrace(t, outage, 8000, func(at int64, s *Sample) {
		if at > 1000 {
			s.Upstream["alpha"]["503"] = int(at-1000) / 50
		}
		if at >= 3200 {
			s.Providers["alpha"] = ProviderSample{State: "OPEN"}
		}
	})
	if r := checkBreakerOpens(tr); r.Status != Fail {
		t.Fatalf("without dedup the breaker is late: %+v", r)
	}
	// With 1 s per-connection dedup and 2 connections, 5 counted failures
	// take at least 2 s: opening at 3.2 s is on time.
	tr.Settings.ProviderBreaker.Dedup.ConnectionMs = 1000
	if r := checkBreakerOpens(tr); r.Status != Pass {
		t.Fatalf("with dedup: %+v, want pass", r)
	}
	// docs/settings.md#defaults's default dedup (5 s per connection): 5 counted failures on
	// 2 connections need 10 s, longer than the 4 s window, so the breaker
	// cannot open from it: not exercised, not a violation.
	tr.Settings.ProviderBreaker.Dedup.ConnectionMs = 5000
	for at := range tr.Samples {
		tr.Samples[at].Providers["alpha"] = ProviderSample{State: "DEGRADED"}
	}
	if r := checkBreakerOpens(tr); r.Status != Skip || !strings.Contains(r.Detail, "not exercised") {
		t.Fatalf("window shorter than the dedup needs: %+v, want skip (not exercised)", r)
	}
}

// answering makes provider p's upstream answer label twice per 100 ms
// from 1 s to 5 s (the windows of the traces below), then runs f.
func answering(p, label string, f func(int64, *Sample)) func(int64, *Sample) {
	return func(at int64, s *Sample) {
		if at > 1000 {
			s.Upstream[p][label] = int(min(at, 5000)-1000) / 50
		}
		f(at, s)
	}
}

// TestSparedChecksNeedTheFaultAnswered pins "checks only count what a run
// exercised" (docs/chaos.md): a 429-storm, bad-key or bad-model window
// whose fault the upstream never answered (a -target upstream that could
// not tell the provider apart) is skipped, not a silent pass.
func TestSparedChecksNeedTheFaultAnswered(t *testing.T) {
	nothing := func(int64, *Sample) {}
	for _, c := range []struct {
		name  string
		src   string
		check func(*Trace) Result
	}{
		{"429 storm", storm, check429},
		{"bad key", badKey, checkBadKey},
		{"bad model", badModel, checkBadModel},
	} {
		tr := newTrace(t, c.src, 6000, answering("alpha", "200", nothing))
		if r := c.check(tr); r.Status != Skip || !strings.Contains(r.Detail, "not exercised") {
			t.Errorf("%s, fault never answered: %+v, want skip (not exercised)", c.name, r)
		}
	}
}

const storm = "duration: 10s\nfaults:\n  - {at: 1s, until: 5s, match: {provider: alpha}, respond: {status: 429}}\n"

func TestStorm429Check(t *testing.T) {
	calm := newTrace(t, storm, 6000, answering("alpha", "429", func(at int64, s *Sample) {
		if at > 1000 && at < 5000 {
			s.Conns["alpha/a1"] = ConnSample{Status: "cooldown", CooldownMs: 500}
		}
	}))
	if r := check429(calm); r.Status != Pass {
		t.Errorf("unmoved breaker: %+v", r)
	}
	opened := newTrace(t, storm, 6000, answering("alpha", "429", func(at int64, s *Sample) {
		if at >= 3000 {
			s.Providers["alpha"] = ProviderSample{State: "OPEN", Failures: 12}
		}
	}))
	if r := check429(opened); r.Status != Fail {
		t.Errorf("breaker opened in a 429 storm: %+v, want fail", r)
	}
	counted := newTrace(t, storm, 6000, answering("alpha", "429", func(at int64, s *Sample) {
		if at >= 3000 {
			s.Providers["alpha"] = ProviderSample{State: "CLOSED", Failures: int(at-3000) / 500}
		}
	}))
	if r := check429(counted); r.Status != Fail {
		t.Errorf("breaker counted 429s: %+v, want fail", r)
	}
	// A 503 on the same provider at the same time makes the storm's check
	// meaningless: skipped, not failed.
	mixed := newTrace(t, storm+"  - {at: 2s, until: 3s, match: {provider: alpha, connection: a2}, respond: {status: 503}}\n", 6000, answering("alpha", "429", func(at int64, s *Sample) {
		if at >= 3000 {
			s.Providers["alpha"] = ProviderSample{State: "OPEN"}
		}
	}))
	if r := check429(mixed); r.Status != Skip {
		t.Errorf("storm mixed with 503s: %+v, want skip", r)
	}
}

const badKey = "duration: 10s\nfaults:\n  - {at: 1s, until: 5s, match: {provider: beta, connection: b1}, respond: {status: 503}}\n"

func TestBadKeyCheck(t *testing.T) {
	ok := newTrace(t, badKey, 6000, answering("beta", "503", func(at int64, s *Sample) {
		if at > 1000 && at < 5000 {
			s.Conns["beta/b1"] = ConnSample{Status: "cooldown", CooldownMs: 800}
		}
	}))
	if r := checkBadKey(ok); r.Status != Pass {
		t.Errorf("siblings spared: %+v", r)
	}
	cooled := newTrace(t, badKey, 6000, answering("beta", "503", func(at int64, s *Sample) {
		if at > 1000 && at < 5000 {
			s.Conns["beta/b1"] = ConnSample{Status: "cooldown", CooldownMs: 800}
		}
		if at >= 3000 {
			s.Conns["beta/b3"] = ConnSample{Status: "cooldown", CooldownMs: 800}
		}
	}))
	if r := checkBadKey(cooled); r.Status != Fail || !strings.Contains(r.Detail, "beta/b3") {
		t.Errorf("a sibling cooled: %+v, want fail naming beta/b3", r)
	}
	terminal := newTrace(t, badKey, 6000, answering("beta", "503", func(at int64, s *Sample) {
		if at >= 3000 {
			s.Conns["beta/b2"] = ConnSample{Status: "banned"}
		}
	}))
	if r := checkBadKey(terminal); r.Status != Fail {
		t.Errorf("a sibling went terminal: %+v, want fail", r)
	}
}

const badModel = "duration: 10s\nfaults:\n  - {at: 1s, until: 5s, match: {provider: alpha, model: m2}, respond: {use: model-not-found-404}}\n"

func TestBadModelCheck(t *testing.T) {
	ok := newTrace(t, badModel, 6000, answering("alpha", "404", func(at int64, s *Sample) {}))
	if r := checkBadModel(ok); r.Status != Pass {
		t.Errorf("connections spared: %+v", r)
	}
	cooled := newTrace(t, badModel, 6000, answering("alpha", "404", func(at int64, s *Sample) {
		if at >= 2500 {
			s.Conns["alpha/a1"] = ConnSample{Status: "cooldown", CooldownMs: 3000}
		}
	}))
	if r := checkBadModel(cooled); r.Status != Fail {
		t.Errorf("a bad model cooled its connection: %+v, want fail", r)
	}
	// A 503 for one model cools the connection by design (docs/classification.md#verdicts): not
	// a bad-model window at all.
	tr := newTrace(t, "duration: 10s\nfaults:\n  - {at: 1s, until: 5s, match: {provider: alpha, model: m2}, respond: {status: 503}}\n", 6000, func(at int64, s *Sample) {})
	if tr.Windows[0].Class == ClassBadModel {
		t.Error("a 503 on one model was classified as a bad model")
	}
}

func TestLivenessCheck(t *testing.T) {
	mk := func(recoverAt int64, final int) *Trace {
		tr := newTrace(t, outage, 12000, func(at int64, s *Sample) {
			if at >= 1000 && at < recoverAt {
				s.Providers["alpha"] = ProviderSample{State: "OPEN"}
				s.Conns["alpha/a1"] = ConnSample{Status: "cooldown", CooldownMs: 100}
			}
		})
		tr.Liveness = Liveness{BoundMs: 3000, RecoveredAtMs: -1}
		for _, m := range []string{"alpha/m1", "beta/m1"} {
			tr.Liveness.Final = append(tr.Liveness.Final, Probe{Model: m, Status: final, Class: "x"})
		}
		return tr
	}
	if r := checkLiveness(mk(6000, 200)); r.Status != Pass {
		t.Errorf("recovered 1 s after the faults: %+v", r)
	}
	if at, _ := mk(6000, 200).Recovery(); at != 6000 {
		t.Errorf("Recovery() = %d, want 6000", at)
	}
	if at, ns := mk(99999, 200).Recovery(); at != -1 || len(ns) == 0 {
		t.Errorf("never recovered: Recovery() = %d %v, want -1 and what did not serve", at, ns)
	}
	if r := checkLiveness(mk(9000, 200)); r.Status != Fail {
		t.Errorf("recovered 4 s after the faults, bound 3 s: %+v, want fail", r)
	}
	if r := checkLiveness(mk(99999, 200)); r.Status != Fail || !strings.Contains(r.Detail, "breaker alpha OPEN") {
		t.Errorf("never recovered: %+v, want fail naming the breaker", r)
	}
	if r := checkLiveness(mk(6000, 503)); r.Status != Fail {
		t.Errorf("recovered but the models do not answer: %+v, want fail", r)
	}
	// A terminal state the faults could cause (a 401 on a1) is allowed; one
	// they could not cause is not.
	term := func(fault string) *Trace {
		tr := newTrace(t, "duration: 10s\nfaults:\n  - {at: 1s, until: 5s, match: {provider: alpha, connection: a1}, respond: {status: "+fault+"}}\n", 8000, func(at int64, s *Sample) {
			if at >= 3000 {
				s.Conns["alpha/a1"] = ConnSample{Status: "expired"}
			}
		})
		tr.Liveness = Liveness{BoundMs: 2000, RecoveredAtMs: -1}
		return tr
	}
	if r := checkLiveness(term("401")); r.Status != Pass {
		t.Errorf("terminal after 401s: %+v, want pass", r)
	}
	if r := checkLiveness(term("503")); r.Status != Fail {
		t.Errorf("terminal after 503s: %+v, want fail", r)
	}
}

func TestHealthAndLeakChecks(t *testing.T) {
	tr := newTrace(t, outage, 1000, func(at int64, s *Sample) {
		if at == 500 {
			s.HealthErr = "context deadline exceeded"
		}
	})
	if r := checkHealthAnswers(tr); r.Status != Fail || r.Count != 1 {
		t.Errorf("one health read failed: %+v", r)
	}
	tr.Leak = &Leak{GoroutinesBefore: 10, GoroutinesAfter: 10 + leakSlack + 1, FDsBefore: 8, FDsAfter: 8}
	if r := checkGoroutines(tr); r.Status != Fail {
		t.Errorf("goroutine leak: %+v", r)
	}
	if r := checkFDs(tr); r.Status != Pass {
		t.Errorf("no fd leak: %+v", r)
	}
	tr.Leak.FDsAfter = 20
	if r := checkFDs(tr); r.Status != Fail {
		t.Errorf("fd leak: %+v", r)
	}
	tr.Leak = nil
	if r := checkGoroutines(tr); r.Status != Skip {
		t.Errorf("target mode: %+v, want skip", r)
	}
}

func TestRestartCheck(t *testing.T) {
	tr := &Trace{Restarts: []RestartCheck{{Kind: "restart", AtMs: 100, DecisionsChecked: 2}}}
	if r := checkRestarts(tr); r.Status != Pass {
		t.Errorf("clean restart: %+v", r)
	}
	tr.Restarts[0].Decisions = []string{"not restarted: p/m → 200; restarted: p/m → 503"}
	if r := checkRestarts(tr); r.Status != Fail {
		t.Errorf("a decision changed: %+v, want fail", r)
	}
	tr.Restarts[0].Decisions = nil
	tr.Persist = &RestartCheck{Kind: "end", Diffs: []string{"breaker alpha OPEN → CLOSED"}}
	if r := checkRestarts(tr); r.Status != Fail {
		t.Errorf("state lost: %+v, want fail", r)
	}
}

func TestCompareState(t *testing.T) {
	a := &Sample{Providers: map[string]ProviderSample{"p": {State: "OPEN", Failures: 6, RetryMs: 5000}},
		Conns: map[string]ConnSample{"p/c": {Status: "cooldown", CooldownMs: 4000, Backoff: 2}, "p/d": {Status: "cooldown", CooldownMs: 100, Backoff: 1}}}
	b := &Sample{Providers: map[string]ProviderSample{"p": {State: "OPEN", Failures: 6, RetryMs: 4000}},
		Conns: map[string]ConnSample{"p/c": {Status: "cooldown", CooldownMs: 3000, Backoff: 2}, "p/d": {Status: "active", Backoff: 1}}}
	if d := compareState(a, b, 1000); len(d) != 0 {
		t.Errorf("the same state 1 s later: %v", d)
	}
	b.Providers["p"] = ProviderSample{State: "CLOSED"}
	b.Conns["p/c"] = ConnSample{Status: "active", Backoff: 0}
	d := compareState(a, b, 1000)
	if len(d) < 3 {
		t.Errorf("breaker and cooldown lost: %v, want them named", d)
	}
}

// --- the pieces the checks rely on ----------------------------------------

func TestWindowsClassify(t *testing.T) {
	src := `duration: 10s
faults:
  - {at: 0s, until: 1s, match: {provider: alpha}, respond: {status: 502}}
  - {at: 0s, until: 1s, match: {provider: alpha}, respond: {fault: reset}}
  - {at: 0s, until: 1s, match: {provider: alpha}, respond: {status: 429}}
  - {at: 0s, until: 1s, match: {provider: beta, connection: b2}, respond: {status: 401}}
  - {at: 0s, until: 1s, match: {provider: alpha, model: m1}, respond: {use: model-not-found-404}}
  - {at: 0s, until: 1s, match: {provider: alpha}, probability: 0.5, respond: {status: 503}}
  - {at: 0s, until: 1s, match: {provider: alpha}, respond: {latency: 200ms}}
  - {at: 0s, until: 1s, match: {provider: alpha}, action: down}
`
	topo, st := traceTopo(), traceSettings()
	s, err := ParseSchedule("w.yaml", []byte(src), topo)
	if err != nil {
		t.Fatal(err)
	}
	want := []WindowClass{ClassProviderTrip, ClassProviderTrip, ClassStorm429, ClassBadKey, ClassBadModel, ClassOther, ClassOther, ClassOther}
	ws := windows(s, 10*time.Second, topo, st)
	for i, w := range ws {
		if w.Class != want[i] {
			t.Errorf("faults[%d] %s: class %s, want %s", i, w.Label, w.Class, want[i])
		}
	}
	if !ws[3].Terminal || ws[0].Terminal {
		t.Error("a 401 may make a connection terminal; a 502 may not")
	}
	if ws[6].Failing {
		t.Error("latency alone is not a failure")
	}
}

func TestLivenessBoundFromSettings(t *testing.T) {
	topo, st := traceTopo(), traceSettings()
	st.ProviderBreaker.APIKey.ResetTimeoutMs = 2000
	st.ProviderBreaker.APIKey.MaxBackoffMultiplier = 3
	st.ConnectionCooldown.APIKey = model.CooldownProfile{BaseCooldownMs: 250, MaxBackoffSteps: 3}
	s, _ := ParseSchedule("b.yaml", []byte(outage), topo)
	ws := windows(s, 10*time.Second, topo, st)
	b, why := LivenessBound(st, topo, ws, nil, 100*time.Millisecond)
	// breaker hold 2 s × 3 = 6 s dominates the 2 s cooldown (250 ms << 3).
	if b < 6*time.Second || b > 10*time.Second || len(why) == 0 {
		t.Errorf("bound %v (%v), want the 6 s breaker hold plus slack", b, why)
	}
	hinted, _ := ParseSchedule("h.yaml", []byte("duration: 10s\nfaults:\n  - {at: 1s, until: 2s, match: {provider: alpha}, respond: {status: 429, headers: {Retry-After: \"20\"}}}\n"), topo)
	b2, _ := LivenessBound(st, topo, windows(hinted, 10*time.Second, topo, st), nil, 100*time.Millisecond)
	if b2 < 20*time.Second {
		t.Errorf("a stated Retry-After of 20 s: bound %v, want at least 20 s", b2)
	}
}

func TestHistogram(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Add(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.95, 950 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {1, time.Second}} {
		got := h.Quantile(c.q)
		if d := got - c.want; d < -c.want/100 || d > c.want/100 {
			t.Errorf("q%.2f = %v, want %v ±1%%", c.q, got, c.want)
		}
	}
	var small Histogram
	small.Add(37 * time.Microsecond)
	if got := small.Quantile(0.5); got != 37*time.Microsecond {
		t.Errorf("37 µs → %v", got)
	}
}

func TestLoopbackOnly(t *testing.T) {
	c := newClient(1)
	_, err := c.Get("http://192.0.2.1:9/")
	if err == nil || !strings.Contains(err.Error(), "non-loopback") {
		t.Fatalf("a non-loopback address was dialled: %v", err)
	}
	if _, err := checkLoopbackURL("x", "http://example.com/v1"); err == nil {
		t.Error("example.com accepted as loopback")
	}
	if _, err := checkLoopbackURL("x", "http://127.0.0.1:8080/v1"); err != nil {
		t.Error(err)
	}
	_ = faults.None
}
