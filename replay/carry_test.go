package replay

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/sim"
)

// TestGatewayConfigCarriesScenarioKeys pins docs/scenarios.md ("the same
// decisions"): every admission, egress, spend-wall and combo key the
// scenario loader accepts reaches the generated gateway config (docs/admission.md#concurrency-gates,
// docs/admission.md, docs/classification.md, docs/spendwall.md), and lease actions get a traffic key plus one managed key
// per leased connection and per named lease's connection list (docs/leases.md).
func TestGatewayConfigCarriesScenarioKeys(t *testing.T) {
	cg := gatewayConfig(load(t, "composite-gate-caps.yaml"), "127.0.0.1:1", "m", nil)
	p := cg.Providers[0]
	if p.MaxConcurrent != 2 || p.Connections[0].MaxConcurrent != 2 || p.Connections[0].RateLimitOverrides.ModelConcurrency["big"] != 1 ||
		p.Connections[0].RateLimitOverrides.MaxWaitMs != 500 {
		t.Errorf("composite gate caps not carried: %+v", p)
	}
	rl := gatewayConfig(load(t, "rate-limit-protection.yaml"), "127.0.0.1:1", "m", nil)
	if o := rl.Providers[0].Connections[0].RateLimitOverrides; o.RPM != 2 {
		t.Errorf("rpm not carried: %+v", o)
	}
	if c := rl.Providers[1].Connections[0]; !c.RateLimitProtection || c.RateLimitOverrides.MinTimeMs != 2000 {
		t.Errorf("rateLimitProtection / minTimeMs not carried: %+v", c)
	}
	if c := gatewayConfig(load(t, "egress-bucket-siblings.yaml"), "127.0.0.1:1", "m", nil).Providers[0].Connections[2]; c.EgressIP != "198.51.100.9" {
		t.Errorf("egressIp not carried: %+v", c)
	}
	if cb := gatewayConfig(load(t, "quota-share-fail-open.yaml"), "127.0.0.1:1", "m", nil).Combos[0]; cb.Mode != "quota-share" {
		t.Errorf("combo mode not carried: %+v", cb)
	}
	sw := gatewayConfig(load(t, "spendwall-limit-reset.yaml"), "127.0.0.1:1", "m", nil).Providers[0].Connections[0].SpendWall
	if !sw.SlowLane || !sw.LimitReset || sw.OrgID == "" {
		t.Errorf("spendWall not carried: %+v", sw)
	}
	ls := load(t, "lease-held-routed-around.yaml")
	lk := newLeaseKeys(ls)
	keys := gatewayConfig(ls, "127.0.0.1:1", "m", lk).ClientKeys
	if len(keys) != 3 || len(keys[0].Scopes) != 0 || keys[1].Scopes[0] != model.LeaseScope ||
		strings.Join(keys[1].AllowedConnections, ",") != "p/k1" || strings.Join(keys[2].AllowedConnections, ",") != "p/k2" {
		t.Errorf("lease client keys: %+v", keys)
	}
	// A named lease re-acquired on other connections gets a key per list
	// (a gateway key's allowedConnections are fixed by its config).
	ra := load(t, "lease-reacquire-other-connections.yaml")
	keys = gatewayConfig(ra, "127.0.0.1:1", "m", newLeaseKeys(ra)).ClientKeys
	if len(keys) != 3 || strings.Join(keys[1].AllowedConnections, ",") != "p/k1" || strings.Join(keys[2].AllowedConnections, ",") != "p/k2" {
		t.Errorf("re-acquired named lease keys: %+v", keys)
	}
}

// TestScaleCoversAdmissionAndSpendWallDurations pins `replay -speed N` for
// the keys added with admission and the spend wall: maxWaitMs / minTimeMs,
// resetAnswer.nextAvailableIn, seconds-valued spend-wall headers and Unix
// reset instants (moved towards the start); rpm is kept with a warning.
func TestScaleCoversAdmissionAndSpendWallDurations(t *testing.T) {
	rl, warns, err := Scale(load(t, "rate-limit-protection.yaml"), 4)
	if err != nil {
		t.Fatal(err)
	}
	if c := rl.Topology.Providers[1].Connections[0]; c.Limits.MinTimeMs != 500 {
		t.Errorf("minTimeMs: %d", c.Limits.MinTimeMs)
	}
	if c := rl.Topology.Providers[0].Connections[0]; c.Limits.RPM != 2 || !strings.Contains(strings.Join(warns, "\n"), "rpm 2") {
		t.Errorf("rpm: %d, warnings %q", c.Limits.RPM, warns)
	}
	cg, _, _ := Scale(load(t, "composite-gate-caps.yaml"), 4)
	if c := cg.Topology.Providers[0].Connections[0]; c.MaxWaitMs != 125 {
		t.Errorf("maxWaitMs: %d", c.MaxWaitMs)
	}
	lr, _, err := Scale(load(t, "spendwall-limit-reset.yaml"), 4)
	if err != nil {
		t.Fatal(err)
	}
	if a := lr.LimitResets["an/a1"]; a.NextAvailableIn != 42*time.Hour {
		t.Errorf("nextAvailableIn: %v", a.NextAvailableIn)
	}
	// 1767229200 is start + 1 h: start + 15 min at speed 4.
	if got := lr.Rules[0].Sequence[0].Headers[http.CanonicalHeaderKey("anthropic-ratelimit-unified-reset")]; got != "1767226500" {
		t.Errorf("unified reset: %q, want 1767226500", got)
	}
	sb, _, _ := Scale(load(t, "spendwall-slot-busy.yaml"), 4)
	if got := sb.Rules[0].Sequence[1].Headers[http.CanonicalHeaderKey("anthropic-ratelimit-unified-slow-max-wait")]; got != "150" {
		t.Errorf("slow max wait: %q, want 150", got)
	}
}

// TestLimitResetHandlerAnswers pins docs/spendwall.md / docs/spendwall.md#wire-names as the gateway reads
// it (proxy/spendwall.go callLimitReset): each resetAnswer result becomes
// the usage / reset answers that make the gateway see that outcome.
func TestLimitResetHandlerAnswers(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sc := &sim.Scenario{Topology: model.Topology{Providers: []model.ProviderConfig{{ID: "an", Connections: []model.ConnectionConfig{
		{ID: "a1", SpendWall: model.SpendWallConfig{LimitReset: true}},
		{ID: "a2", SpendWall: model.SpendWallConfig{LimitReset: true}},
		{ID: "a3", SpendWall: model.SpendWallConfig{LimitReset: true}}}}}},
		LimitResets: map[string]sim.LimitResetAnswer{
			"an/a1": {Outcome: model.LimitResetDone, NextAvailableIn: time.Hour},
			"an/a2": {Outcome: model.LimitResetAlreadyUsed, NextAvailableIn: time.Hour}}}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) })
	h := newLimitResetHandler(sc, inner, func() time.Time { return now })
	if h == nil {
		t.Fatal("no handler for limitReset connections")
	}
	call := func(method, path, key string) (int, map[string]any) {
		req := httptest.NewRequest(method, path, strings.NewReader(`{"program":"juniper_tide"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Body)
		var v map[string]any
		_ = json.Unmarshal(b, &v)
		return rec.Code, v
	}
	if code, v := call(http.MethodGet, "/an/api/oauth/usage", "a1"); code != 200 || v["juniper_tide"].(map[string]any)["arm"] != "reset" {
		t.Errorf("a1 usage: %d %v", code, v)
	}
	if code, v := call(http.MethodPost, "/an/api/organizations/x/reset_rate_limits", "a1"); code != 200 || v["result"] != "reset" ||
		v["next_available_at"] != "2026-01-01T01:00:00Z" {
		t.Errorf("a1 reset: %d %v", code, v)
	}
	if _, v := call(http.MethodGet, "/an/api/oauth/usage", "a2"); v["juniper_tide"].(map[string]any)["available"] != false {
		t.Errorf("a2 (already_used) usage: %v", v)
	}
	if code, _ := call(http.MethodGet, "/an/api/oauth/usage", "a3"); code != 500 {
		t.Errorf("a3 (no answer = failed) usage: %d", code)
	}
	if code, _ := call(http.MethodPost, "/an/v1/messages", "a1"); code != 299 {
		t.Errorf("chat request not passed to the fault upstream: %d", code)
	}
}
