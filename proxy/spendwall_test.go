package proxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// Spend wall end to end (docs/spendwall.md, docs/spendwall.md#wire-names): the gateway against the fault
// catalog's upstream behind a faults.SpendWall.

const spendWallConfig = `
providers:
  - id: an
    profile: oauth
    baseURL: {{BASE}}/an/v1
    models: [claude]
    connections:
      - {id: k1, apiKey: k1, spendWall: {slowLane: true, limitReset: LIMITRESET, orgId: org-1}}
      - {id: k2, apiKey: k2}
` + testBase

// headerTap records the lane header of every chat request that reaches the
// upstream, behind the wall.
type headerTap struct {
	mu    sync.Mutex
	lanes []string
	next  http.Handler
}

func (h *headerTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/chat/completions") {
		h.mu.Lock()
		h.lanes = append(h.lanes, connectionOfTest(r)+":"+r.Header.Get(model.HeaderUsageLimit))
		h.mu.Unlock()
	}
	h.next.ServeHTTP(w, r)
}

func connectionOfTest(r *http.Request) string {
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

func (h *headerTap) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.lanes...)
}

func newSpendWallGW(t *testing.T, wall faults.SpendWallOptions, limitReset bool) (*gw, *faults.SpendWall, *headerTap) {
	t.Helper()
	inner := faults.NewServer(nil, faults.Options{})
	sw := faults.NewSpendWall(inner, wall)
	tap := &headerTap{next: sw}
	up := httptest.NewServer(tap)
	t.Cleanup(up.Close)
	y := strings.ReplaceAll(spendWallConfig, "{{BASE}}", up.URL)
	y = strings.ReplaceAll(y, "LIMITRESET", map[bool]string{true: "true", false: "false"}[limitReset])
	cfg, _, err := ParseConfig("test.yaml", []byte(y), nil)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Seed: 1})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := serveGW(t, g)
	t.Cleanup(func() {
		srv.Close()
		g.Close(context.Background())
	})
	return &gw{t: t, g: g, srv: srv}, sw, tap
}

func (g *gw) connState(provider, conn string) model.ConnectionView {
	g.t.Helper()
	g.g.lock()
	defer g.g.unlock()
	for _, v := range g.g.eng.Connections(g.g.modelNow(), provider) {
		if v.Connection == conn {
			return v
		}
	}
	g.t.Fatalf("no connection %s/%s", provider, conn)
	return model.ConnectionView{}
}

func TestSpendWallLaneEndToEnd(t *testing.T) {
	// docs/spendwall.md: the walled 429 is absorbed, the same connection is retried
	// with `anthropic-usage-limit: slow`, later requests carry it too, and
	// the 429 never reaches the client nor the cooldown path.
	g, sw, tap := newSpendWallGW(t, faults.SpendWallOptions{Walled: []string{"k1"}, Offer: true,
		Reset: time.Now().Add(time.Hour)}, false)
	r := g.chat("an/claude")
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k1" || r.h.Get("X-Breakwater-Attempts") != "2" {
		t.Fatalf("want 200 from k1 after the lane retry: %d %v %s", r.code, r.h, r.body)
	}
	if got := strings.Join(tap.seen(), ","); got != "k1:,k1:slow" {
		t.Fatalf("upstream saw %s, want the wall then the lane header on k1 (never k2)", got)
	}
	v := g.connState("an", "k1")
	if v.Status != model.StatusActive || v.CooldownRemainingMs != 0 || v.BackoffLevel != 0 || v.LastErrorType != model.ReasonNone {
		t.Fatalf("the intercepted 429 must not reach the cooldown path: %+v", v)
	}
	// Every later request in the window carries the lane header.
	for i := 0; i < 2; i++ {
		if r := g.chat("an/claude"); r.code != 200 || r.h.Get("X-Breakwater-Attempts") != "1" {
			t.Fatalf("lane request: %d %v", r.code, r.h)
		}
	}
	if got := strings.Join(tap.seen(), ","); got != "k1:,k1:slow,k1:slow,k1:slow" {
		t.Fatalf("upstream saw %s", got)
	}
	if st := sw.Stats(); st.Walled != 1 || st.Lane != 3 || st.UsageCalls != 0 {
		t.Fatalf("wall stats %+v", st)
	}
}

func TestSpendWallLimitResetEndToEnd(t *testing.T) {
	// docs/spendwall.md / docs/spendwall.md#wire-names: usage says a reset is available → POST reset with
	// {"program":"juniper_tide"} → result reset → the same connection at
	// full speed (no lane header).
	g, sw, tap := newSpendWallGW(t, faults.SpendWallOptions{Walled: []string{"k1"}, Offer: true,
		UsageArm: "reset", UsageAvailable: true, ResetResult: "reset", NextAvailableAt: time.Now().Add(7 * 24 * time.Hour)}, true)
	r := g.chat("an/claude")
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k1" {
		t.Fatalf("want 200 from k1: %d %v %s", r.code, r.h, r.body)
	}
	if got := strings.Join(tap.seen(), ","); got != "k1:,k1:" {
		t.Fatalf("upstream saw %s, want the wall then a full-speed retry", got)
	}
	if st := sw.Stats(); st.UsageCalls != 1 || st.ResetCalls != 1 || st.BadResetBodies != 0 {
		t.Fatalf("usage/reset calls %+v", st)
	}
	g.g.lock()
	l, _ := g.g.eng.SpendWall(g.g.modelNow(), model.ConnRef{Provider: "an", Connection: "k1"})
	g.g.unlock()
	if l.Active || l.ResetMemoUntil == 0 {
		t.Fatalf("no lane, reset memoised until next_available_at: %+v", l)
	}
	if v := g.connState("an", "k1"); v.CooldownRemainingMs != 0 || v.BackoffLevel != 0 {
		t.Fatalf("no cooldown: %+v", v)
	}
}

func TestSpendWallLimitResetRefusedFallsToLane(t *testing.T) {
	// docs/spendwall.md: already used → memo, then the lane.
	g, sw, tap := newSpendWallGW(t, faults.SpendWallOptions{Walled: []string{"k1"}, Offer: true,
		UsageArm: "reset", UsageAvailable: false}, true)
	if r := g.chat("an/claude"); r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k1" {
		t.Fatalf("want 200 from k1 on the lane: %d %s", r.code, r.body)
	}
	if got := strings.Join(tap.seen(), ","); got != "k1:,k1:slow" {
		t.Fatalf("upstream saw %s", got)
	}
	if st := sw.Stats(); st.UsageCalls != 1 || st.ResetCalls != 0 {
		t.Fatalf("usage only: %+v", st)
	}
}

func TestCallLimitResetFailuresAreTyped(t *testing.T) {
	// docs/spendwall.md: any failure of the calls is LimitResetFailed (→ 15 min pause).
	cases := map[string]http.HandlerFunc{
		"500":        func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) },
		"not json":   func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>") },
		"no block":   func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) },
		"bad result": resetAnswer(`{"result":"maybe"}`),
	}
	for name, h := range cases {
		srv := httptest.NewServer(h)
		res := callLimitReset(context.Background(), srv.Client(), srv.URL, "org", "key")
		srv.Close()
		if res.Outcome != model.LimitResetFailed {
			t.Errorf("%s: %v, want failed", name, res.Outcome)
		}
	}
	srv := httptest.NewServer(resetAnswer(`{"result":"already_used","next_available_at":1767229200}`))
	defer srv.Close()
	if res := callLimitReset(context.Background(), srv.Client(), srv.URL, "org", "key"); res.Outcome != model.LimitResetAlreadyUsed || res.NextAvailableAt != model.Time(1767229200000) {
		t.Errorf("already_used: %+v", res)
	}
}

// resetAnswer offers a reset on usage and answers the POST with body.
func resetAnswer(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			json.NewEncoder(w).Encode(map[string]any{"juniper_tide": map[string]any{"arm": "reset", "available": true}})
			return
		}
		io.WriteString(w, body)
	}
}

func TestSpendWallConfigValidation(t *testing.T) {
	// A limit reset needs the organisation id of the reset URL.
	y := strings.ReplaceAll(strings.ReplaceAll(spendWallConfig, "{{BASE}}", "http://127.0.0.1:1"), "LIMITRESET", "true")
	y = strings.ReplaceAll(y, ", orgId: org-1", "")
	_, _, err := ParseConfig("test.yaml", []byte(y), nil)
	if err == nil || !strings.Contains(err.Error(), "spendWall.orgId") {
		t.Fatalf("want an error naming spendWall.orgId, got %v", err)
	}
}
