package faults

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSpendWallFaultUpstream pins the fake spend wall's wire behaviour
// (docs/spendwall.md#wire-names): the wall, the lane pass-through, the usage block and the
// reset call that lifts the wall.
func TestSpendWallFaultUpstream(t *testing.T) {
	reset := time.Unix(1767229200, 0)
	sw := NewSpendWall(NewServer(nil, Options{}), SpendWallOptions{Walled: []string{"k1"}, Offer: true, Reset: reset,
		UsageArm: "reset", UsageAvailable: true, ResetResult: "reset"})
	srv := httptest.NewServer(sw)
	defer srv.Close()
	call := func(method, path, body string, h ...string) (*http.Response, string) {
		return send(t, method, srv.URL+path, body, append([]string{"Authorization", "Bearer k1"}, h...)...)
	}
	chat := `{"model":"m","messages":[]}`
	res, _ := call("POST", "/an/v1/chat/completions", chat)
	if res.StatusCode != 429 || res.Header.Get("anthropic-ratelimit-unified-status") != "rejected" ||
		res.Header.Get("anthropic-ratelimit-unified-slow-offer") != "treatment" || res.Header.Get("anthropic-ratelimit-unified-reset") != "1767229200" {
		t.Fatalf("wall: %d %v", res.StatusCode, res.Header)
	}
	res, _ = call("POST", "/an/v1/chat/completions", chat, "anthropic-usage-limit", "slow")
	if res.StatusCode != 200 || res.Header.Get("anthropic-ratelimit-unified-slow-status") != "active" {
		t.Fatalf("lane: %d %v", res.StatusCode, res.Header)
	}
	if _, body := call("GET", "/an/api/oauth/usage?at_wall=1&skip_spend=1", ""); !strings.Contains(body, `"juniper_tide":{"arm":"reset","available":true}`) {
		t.Fatalf("usage: %s", body)
	}
	if res, _ := call("POST", "/an/api/organizations/o1/reset_rate_limits", `{}`); res.StatusCode != 400 {
		t.Fatalf("a reset without the program is refused: %d", res.StatusCode)
	}
	if _, body := call("POST", "/an/api/organizations/o1/reset_rate_limits", `{"program":"juniper_tide"}`); !strings.Contains(body, `"result":"reset"`) {
		t.Fatalf("reset: %s", body)
	}
	if res, _ := call("POST", "/an/v1/chat/completions", chat); res.StatusCode != 200 {
		t.Fatalf("the reset lifts the wall: %d", res.StatusCode)
	}
	if st := sw.Stats(); st.Walled != 1 || st.Lane != 1 || st.UsageCalls != 1 || st.ResetCalls != 2 || st.BadResetBodies != 1 {
		t.Fatalf("stats %+v", st)
	}
}
