package metrics

import "testing"

// TestLabelsStayBounded pins "no client can grow the series": a model,
// key or provider the config does not name is labelled "other", a missing
// one "none", and a configured one by itself.
func TestLabelsStayBounded(t *testing.T) {
	m := NewOps(&Labels{Models: map[string]bool{"m": true}, Keys: map[string]bool{"k": true}, Providers: map[string]bool{"p": true}}, BuildInfo{Version: "v"})
	for _, c := range []struct{ got, want string }{
		{m.ModelLabel("m"), "m"}, {m.ModelLabel("client-made-up"), "other"}, {m.ModelLabel(""), "none"},
		{m.KeyLabel("k"), "k"}, {m.KeyLabel("stranger"), "other"}, {m.KeyLabel(""), "none"},
		{m.ProviderLabel("p"), "p"}, {m.ProviderLabel("q"), "other"}, {m.ProviderLabel(""), "none"},
		{SurfaceOf("/v1/messages"), "messages"}, {SurfaceOf("/v1/anything"), "other"},
		{OutcomeOf(200), "ok"}, {OutcomeOf(499), "client_abort"}, {OutcomeOf(429), "rate_limited"},
		{OutcomeOf(503), "unavailable"}, {OutcomeOf(404), "client_error"}, {OutcomeOf(502), "upstream_error"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// A reload that drops the model drops its label and its cached series.
	before := m.Series(OpsKey{Model: m.ModelLabel("m")})
	m.SetLabels(&Labels{})
	if m.ModelLabel("m") != "other" || m.Series(OpsKey{Model: "m"}) == before {
		t.Error("SetLabels kept the old labels or series")
	}
}
