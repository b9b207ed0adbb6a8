package incident

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/store"
	"go.yaml.in/yaml/v3"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// TestExportItemPerLoggedOutcome pins how each outcome the gateway logs
// (docs/store.md#request-log; proxy/replica.go) becomes a sequence item: the recorded
// status, classification headers, body and time to headers; transport
// failures as reset / timeout faults; watchdog and quality failures as the
// stream faults that make the simulator observe the same outcome kind.
func TestExportItemPerLoggedOutcome(t *testing.T) {
	cases := []struct {
		rec  store.LogRecord
		want faults.Response
	}{
		{store.LogRecord{Status: 200, LatencyMs: 900, FirstByteMs: 120}, faults.Response{Status: 200, Latency: 120 * time.Millisecond}},
		{store.LogRecord{Status: 429, ErrorType: "response", LatencyMs: 15, Headers: map[string]string{"retry-after": "20", "x-request-id": "up-1"}, ErrorBody: `{"error":{"message":"slow down"}}`},
			faults.Response{Status: 429, Latency: 15 * time.Millisecond, Headers: map[string]string{"Retry-After": "20"}, Body: `{"error":{"message":"slow down"}}`}},
		{store.LogRecord{ErrorType: "reset", LatencyMs: 3}, faults.Response{Fault: faults.Reset, Latency: 3 * time.Millisecond}},
		{store.LogRecord{ErrorType: "refused"}, faults.Response{Fault: faults.Reset}},
		{store.LogRecord{ErrorType: "connect_timeout", LatencyMs: 10000}, faults.Response{Fault: faults.Timeout}},
		{store.LogRecord{ErrorType: "header_timeout", LatencyMs: 120000}, faults.Response{Fault: faults.Timeout}},
		{store.LogRecord{ErrorType: "attempt_timeout", LatencyMs: 600000, FirstByteMs: 40}, faults.Response{Fault: faults.Timeout}},
		{store.LogRecord{ErrorType: "early_eof", LatencyMs: 700, FirstByteMs: 30}, faults.Response{Fault: faults.Cut, Latency: 30 * time.Millisecond}},
		{store.LogRecord{ErrorType: "stall", LatencyMs: 90000, FirstByteMs: 200}, faults.Response{Fault: faults.Stall, Latency: 200 * time.Millisecond}},
		{store.LogRecord{ErrorType: "throughput", LatencyMs: 30000, FirstByteMs: 50}, faults.Response{Fault: faults.SlowStream, Latency: 50 * time.Millisecond, Stream: faults.Stream{BytesPerSecond: 1}}},
		{store.LogRecord{ErrorType: "quality", LatencyMs: 80, FirstByteMs: 10}, faults.Response{Fault: faults.MalformedChunk, Latency: 10 * time.Millisecond, Stream: faults.Stream{Malformed: 1001}}},
		{store.LogRecord{ErrorType: "client_abort", LatencyMs: 5000}, faults.Response{Fault: faults.Timeout}},
		{store.LogRecord{ErrorType: "some_future_kind", LatencyMs: 7}, faults.Response{Fault: faults.Reset, Latency: 7 * time.Millisecond}},
	}
	for i, c := range cases {
		r := c.rec
		r.Time, r.Provider, r.Connection, r.Model = at(time.Second), "p", "k1", "m"
		out, _, err := Export([]store.LogRecord{r}, Options{From: t0, To: at(time.Hour)})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		sc, err := Check("x.yaml", out)
		if err != nil {
			t.Fatalf("case %d: %v\n%s", i, err, out)
		}
		if len(sc.Rules) != 1 || len(sc.Rules[0].Sequence) != 1 {
			t.Fatalf("case %d: want one rule with one item, got %+v", i, sc.Rules)
		}
		got := sc.Rules[0].Sequence[0]
		if got.Status != c.want.Status || got.Fault != c.want.Fault || got.Latency != c.want.Latency || got.Body != c.want.Body ||
			got.Stream.BytesPerSecond != c.want.Stream.BytesPerSecond || len(got.Headers) != len(c.want.Headers) {
			t.Errorf("case %d (%s %d): got %+v, want %+v", i, c.rec.ErrorType, c.rec.Status, got, c.want)
		}
		for k, v := range c.want.Headers {
			if got.Headers[k] != v {
				t.Errorf("case %d: header %s = %q, want %q", i, k, got.Headers[k], v)
			}
		}
		m := sc.Rules[0].Match
		if m.Provider != "p" || m.Connection != "k1" || m.Model != "m" || sc.Rules[0].Until != time.Hour {
			t.Errorf("case %d: rule %+v, want match p/k1/m until 1h", i, sc.Rules[0])
		}
	}
}

// TestExportGroupsAttemptsIntoRequests pins the traffic side: attempts of
// one request id are one request arriving at its first attempt; a fail-over
// across targets uses the config combo that holds them; a client abort
// becomes the client's timeout; records without a request id are requests
// of their own.
func TestExportGroupsAttemptsIntoRequests(t *testing.T) {
	recs := []store.LogRecord{
		{Time: at(2 * time.Second), RequestID: "b", Provider: "glm", Connection: "k1", Model: "glm-5", Status: 503, ErrorType: "response", LatencyMs: 10},
		{Time: at(1 * time.Second), RequestID: "a", Provider: "glm", Connection: "k1", Model: "glm-5", Status: 200},
		{Time: at(2*time.Second + 10*time.Millisecond), RequestID: "b", Provider: "openai", Connection: "o1", Model: "gpt-5", Status: 200},
		{Time: at(3 * time.Second), RequestID: "c", Provider: "openai", Connection: "o1", Model: "gpt-5", ErrorType: "client_abort", LatencyMs: 4500},
		{Time: at(4 * time.Second), Provider: "glm", Connection: "k2", Model: "glm-5", Status: 200},
		{Time: at(4 * time.Second), Provider: "glm", Connection: "k2", Model: "glm-5", Status: 200},
	}
	out, sum, err := Export(recs, Options{From: t0, To: at(time.Minute), Config: sourceTopology})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Check("x.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if sum.Requests != 5 || sum.Succeeded != 4 || sum.Records != 6 {
		t.Errorf("summary %+v, want 5 requests, 4 succeeded, 6 records", sum)
	}
	type tr struct {
		at      time.Duration
		model   string
		count   int
		timeout time.Duration
	}
	want := []tr{{time.Second, "glm/glm-5", 1, 0}, {2 * time.Second, "coding", 1, 0}, {3 * time.Second, "openai/gpt-5", 1, 4500 * time.Millisecond}, {4 * time.Second, "glm/glm-5", 2, 0}}
	if len(sc.Traffic) != len(want) {
		t.Fatalf("traffic %+v, want %+v\n%s", sc.Traffic, want, out)
	}
	for i, w := range want {
		g := sc.Traffic[i]
		if g.At != w.at || g.Model != w.model || g.Count != w.count || g.Timeout != w.timeout {
			t.Errorf("traffic[%d] = {%v %s %d %v}, want %+v", i, g.At, g.Model, g.Count, g.Timeout, w)
		}
	}
	// One window holds all five: four 2xx, six attempts.
	if len(sc.Expects) != 1 || sc.Expects[0].Statuses[200] != 4 || *sc.Expects[0].UpstreamCalls != 6 || *sc.Expects[0].Requests != 5 {
		t.Errorf("expects %+v", sc.Expects)
	}
	if !strings.Contains(string(out), "1×client_abort") {
		t.Errorf("the failed request is not listed as recorded:\n%s", out)
	}
}

// TestExportSynthesisesComboForUnknownFailover: without a config combo
// holding the targets a request tried, the export names one (priority, in
// the order tried) so the replayed request can fail over the same way.
func TestExportSynthesisesComboForUnknownFailover(t *testing.T) {
	recs := []store.LogRecord{
		{Time: at(time.Second), RequestID: "x", Provider: "b", Connection: "k", Model: "m2", Status: 500, ErrorType: "response"},
		{Time: at(time.Second), RequestID: "x", Provider: "a", Connection: "k", Model: "m1", Status: 200},
	}
	out, _, err := Export(recs, Options{From: t0, To: at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Check("x.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(sc.Topology.Combos) != 1 || sc.Traffic[0].Model != sc.Topology.Combos[0].ID {
		t.Fatalf("combos %+v, traffic %+v", sc.Topology.Combos, sc.Traffic)
	}
	c := sc.Topology.Combos[0]
	if c.Strategy != model.Priority || len(c.Targets) != 2 || c.Targets[0].Provider != "b" || c.Targets[1].Provider != "a" {
		t.Errorf("combo %+v: want priority b/m2 then a/m1", c)
	}
}

// TestExportReplaysTheRouteTheClientAsked pins that a request replays as
// the route the log recorded (the model the client asked for) when the
// exported topology resolves it to targets holding every target tried: a
// combo request its first target served stays a combo request (so it can
// fall back in the replay), an alias stays the alias. A route the topology
// cannot resolve, or one that does not hold the targets tried, and a record
// without a route, fall back to the targets.
func TestExportReplaysTheRouteTheClientAsked(t *testing.T) {
	topo := &Topology{
		Providers: []Provider{
			{ID: "glm", Models: []string{"glm-5"}, Connections: []Connection{{ID: "k1"}}},
			{ID: "openai", Models: []string{"gpt-5"}, Connections: []Connection{{ID: "o1"}}},
		},
		Combos:  []Combo{{ID: "coding", Strategy: "priority", Targets: []Target{{Target: "glm/glm-5"}, {Target: "openai/gpt-5"}}}},
		Aliases: map[string]string{"fast": "openai/gpt-5"},
	}
	cases := []struct{ route, provider, model, want string }{
		{"coding", "glm", "glm-5", "coding"},
		{"coding", "openai", "gpt-5", "coding"},
		{" fast ", "openai", "gpt-5", "fast"},
		{"gpt-5", "openai", "gpt-5", "gpt-5"},
		{"", "glm", "glm-5", "glm/glm-5"},
		{"fast", "glm", "glm-5", "glm/glm-5"},            // the alias does not reach glm
		{"unknown-combo", "glm", "glm-5", "glm/glm-5"},   // not in the topology
		{"openai/gpt-5", "glm", "glm-5", "glm/glm-5"},    // does not hold the target tried
		{"glm/nonexistent", "glm", "glm-5", "glm/glm-5"}, // the provider does not serve it
	}
	for _, c := range cases {
		recs := []store.LogRecord{{Time: at(time.Second), RequestID: "r", Provider: c.provider, Connection: map[string]string{"glm": "k1", "openai": "o1"}[c.provider],
			Model: c.model, Route: c.route, Status: 200}}
		out, _, err := Export(recs, Options{From: t0, To: at(time.Minute), Config: topo})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := Check("x.yaml", out)
		if err != nil {
			t.Fatalf("route %q: %v\n%s", c.route, err, out)
		}
		if got := sc.Traffic[0].Model; got != c.want {
			t.Errorf("route %q served by %s/%s replays as %q, want %q", c.route, c.provider, c.model, got, c.want)
		}
	}
	// Without the config the combo is unknown: the targets decide.
	recs := []store.LogRecord{{Time: at(time.Second), Provider: "glm", Connection: "k1", Model: "glm-5", Route: "coding", Status: 200}}
	out, _, err := Export(recs, Options{From: t0, To: at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if sc, err := Check("x.yaml", out); err != nil || sc.Traffic[0].Model != "glm/glm-5" {
		t.Errorf("without a config: %v %+v", err, sc)
	}
}

// TestExportTopologyFromConfig: the config gives types, profiles,
// strategies, combos and the resilience settings; connections and models the
// log names but the config lacks are added (and marked); nothing secret can
// be written because Topology has no field for it.
func TestExportTopologyFromConfig(t *testing.T) {
	topo := &Topology{
		File: "gw.yaml",
		Providers: []Provider{{ID: "glm", Type: "glm", Profile: "apikey", Strategy: "round-robin", Models: []string{"glm-5"},
			Connections: []Connection{{ID: "k1", Priority: 2, Weight: 3}}}},
		Resilience: map[string]any{"providerBreaker": map[string]any{"apikey": map[string]any{"failureThreshold": 5}}},
	}
	recs := []store.LogRecord{
		{Time: at(time.Second), Provider: "glm", Connection: "k9", Model: "glm-4.7", Status: 200},
		{Time: at(2 * time.Second), Provider: "glm", Connection: "k1", Model: "glm-5", Status: 200},
	}
	out, _, err := Export(recs, Options{From: t0, To: at(time.Minute), Config: topo})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Check("x.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p := sc.Topology.Providers[0]
	if p.Type != "glm" || p.Profile != model.ProfileAPIKey || p.Strategy != model.RoundRobin {
		t.Errorf("provider %+v", p)
	}
	if len(p.Connections) != 2 || p.Connections[0].ID != "k1" || p.Connections[0].Priority != 2 || p.Connections[0].Weight != 3 || p.Connections[1].ID != "k9" {
		t.Errorf("connections %+v", p.Connections)
	}
	if len(p.Models) != 2 || p.Models[1] != "glm-4.7" {
		t.Errorf("models %v", p.Models)
	}
	if got := sc.Settings.ProviderBreaker.APIKey.FailureThreshold; got != 5 {
		t.Errorf("failureThreshold %d, want the config's 5", got)
	}
	for _, s := range []string{"not in the config, seen in the log", "gw.yaml"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("output lacks %q", s)
		}
	}
}

// TestExportRedactsAgain: the store redacts before keeping (docs/store.md#request-log);
// the export redacts again, so a hand-made JSONL file cannot leak a key into
// a scenario that gets attached to a ticket.
func TestExportRedactsAgain(t *testing.T) {
	recs := []store.LogRecord{{Time: at(time.Second), Provider: "p", Connection: "k", Model: "m", Status: 401, ErrorType: "response",
		Headers:   map[string]string{"retry-after": "Bearer abcdefghijklmnop"},
		ErrorBody: `{"error":"bad key sk-live1234567890abcdef"}`}}
	out, _, err := Export(recs, Options{From: t0, To: at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"sk-live1234567890abcdef", "abcdefghijklmnop"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("output leaks %q:\n%s", secret, out)
		}
	}
}

// TestExportRefusesAnEmptyWindow: nothing to export is a clear error naming
// the window, and records that cannot be placed are counted and named.
func TestExportRefusesAnEmptyWindow(t *testing.T) {
	recs := []store.LogRecord{{Time: at(2 * time.Hour), Provider: "p", Connection: "k", Model: "m", Status: 200}}
	_, _, err := Export(recs, Options{From: t0, To: at(time.Hour)})
	if !errors.Is(err, ErrEmptyWindow) || !strings.Contains(err.Error(), "2026-03-01T10:00:00Z") {
		t.Errorf("err = %v, want ErrEmptyWindow naming the window", err)
	}
	recs = []store.LogRecord{{Time: at(time.Second), Provider: "p/x", Connection: "k", Model: "m", Status: 200}}
	_, sum, err := Export(recs, Options{From: t0, To: at(time.Hour)})
	if !errors.Is(err, ErrEmptyWindow) || sum.Skipped != 1 || !strings.Contains(err.Error(), "skipped") {
		t.Errorf("err = %v (skipped %d), want ErrEmptyWindow with the skipped record named", err, sum.Skipped)
	}
}

// TestExportWindowsTheExpects: one recorded-facts expect per window of
// requests sent, and never more than MaxExpectWindows.
func TestExportWindowsTheExpects(t *testing.T) {
	var recs []store.LogRecord
	for i := range 10 {
		recs = append(recs, store.LogRecord{Time: at(time.Duration(i) * 30 * time.Second), Provider: "p", Connection: "k", Model: "m", Status: 200})
	}
	out, _, err := Export(recs, Options{From: t0, To: at(5 * time.Minute), Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Check("x.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Expects) != 5 {
		t.Fatalf("%d expects, want 5 (one per minute)", len(sc.Expects))
	}
	for _, e := range sc.Expects {
		if *e.Requests != 2 || e.Statuses[200] != 2 {
			t.Errorf("window [%v, %v): %+v", e.From, e.Until, e)
		}
	}
	out, _, err = Export(recs, Options{From: t0, To: at(7 * 24 * time.Hour), Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if sc, err = Check("x.yaml", out); err != nil || len(sc.Expects) > MaxExpectWindows {
		t.Errorf("err %v, %d expects (max %d)", err, len(sc.Expects), MaxExpectWindows)
	}
}

// TestParseWindow pins the documented time forms and the errors of bad
// ones.
func TestParseWindow(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ok := []struct {
		from, to         string
		wantFrom, wantTo time.Time
	}{
		{"2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z", at(0), at(time.Hour)},
		{"2026-03-01T11:00:00+01:00", "", at(0), now},
		{"-1h", "now", now.Add(-time.Hour), now},
		{"-90m", "-30m", now.Add(-90 * time.Minute), now.Add(-30 * time.Minute)},
		{"2026-03-01T10:00:00.250Z", "-1h", at(250 * time.Millisecond), now.Add(-time.Hour)},
	}
	for _, c := range ok {
		f, to, err := ParseWindow(c.from, c.to, now)
		if err != nil || !f.Equal(c.wantFrom) || !to.Equal(c.wantTo) {
			t.Errorf("ParseWindow(%q, %q) = %v, %v, %v", c.from, c.to, f, to, err)
		}
	}
	bad := []struct{ from, to, want string }{
		{"", "", "-from: is required"},
		{"yesterday", "", "-from: want an RFC 3339 instant"},
		{"2026-03-01 10:00", "", "-from: want an RFC 3339"},
		{"+1h", "", "start with '-'"},
		{"-1x", "", "-from: want a relative time"},
		{"-1h", "-2h", "-to: must be after -from"},
		{"-1h", "-1h", "-to: must be after -from"},
		{"-800h", "", "longer than"},
	}
	for _, c := range bad {
		_, _, err := ParseWindow(c.from, c.to, now)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseWindow(%q, %q) = %v, want an InputError containing %q", c.from, c.to, err, c.want)
		}
	}
}

// docs/incident.md: an attempt logged with the client's 2xx and a stream
// error (content reached the client, then the stream failed) replays as
// that failure after a first chunk — committed, never retried — and the
// request counts under the status the client got.
func TestExportCommittedStreamFailure(t *testing.T) {
	x := &exporter{}
	item := x.item(&store.LogRecord{Status: 200, ErrorType: "early_eof", LatencyMs: 40, FirstByteMs: 5})
	out, err := yaml.Marshal(item)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); !strings.Contains(s, "fault: cut") || !strings.Contains(s, "stallAfter: 1") {
		t.Fatalf("replayed as %s", s)
	}
	before := x.item(&store.LogRecord{ErrorType: "early_eof", LatencyMs: 40, FirstByteMs: 5})
	if out, _ := yaml.Marshal(before); !strings.Contains(string(out), "stallAfter: 0") {
		t.Fatalf("a cut before content: %s", out)
	}
}

// TestExportRateLimitToggleAndReload pins two operator records: a
// rate-limit toggle (POST /api/rate-limits) becomes the scenario's
// rate-limit action on that connection with its on/off, and a config
// reload, which the scenario cannot run (one config throughout), is left
// out with a note saying so.
func TestExportRateLimitToggleAndReload(t *testing.T) {
	op := func(d time.Duration, reason, p, c, body string) store.LogRecord {
		return store.LogRecord{Time: at(d), ErrorType: store.OperatorAction, Reason: reason, Provider: p, Connection: c, ErrorBody: body}
	}
	recs := []store.LogRecord{
		{Time: at(time.Second), Provider: "p", Connection: "k1", Model: "m", Status: 200},
		op(2*time.Second, "rate-limit", "p", "k1", `{"enabled":false}`),
		op(3*time.Second, "config-reload", "", "", `{"added":[],"removed":[]}`),
		{Time: at(4 * time.Second), Provider: "p", Connection: "k1", Model: "m", Status: 200},
	}
	out, sum, err := Export(recs, Options{From: t0, To: at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Check("x.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(sc.Actions) != 1 {
		t.Fatalf("actions %+v, want the rate-limit toggle only\n%s", sc.Actions, out)
	}
	a := sc.Actions[0]
	if a.Kind.String() != "rate-limit" || a.At != 2*time.Second || len(a.Connections) != 1 || a.Connections[0].String() != "p/k1" || a.Enabled {
		t.Errorf("the toggle exports as %+v, want rate-limit p/k1 off at 2s", a)
	}
	if !slices.ContainsFunc(sum.Notes, func(n string) bool { return strings.Contains(n, "config reload") }) {
		t.Errorf("notes %q do not say the window holds a config reload", sum.Notes)
	}
}
