package proxy

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/store"
)

// FuzzChatRequest: decoding untrusted client bodies never panics, and the
// model splice always yields valid JSON with the new model.
func FuzzChatRequest(f *testing.F) {
	for _, s := range []string{`{"model":"a/b","messages":[]}`, `{"model":"x","stream":true}`, `{"model":"a","model":"b"}`,
		`{"messages":[{"content":"\"model\":"}],"model":"m"}`, `{"model":"\u00e9\"x"}`, `{}`, `[]`, `{"model":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseChatRequest([]byte(s))
		if err != nil {
			return
		}
		out := r.bodyFor("up/stream \"quoted\"")
		r2, err := parseChatRequest(out)
		if err != nil || r2.Model != "up/stream \"quoted\"" || r2.Stream != r.Stream {
			t.Fatalf("splice of %q gave %q (%v)", s, out, err)
		}
	})
}

// FuzzManagement: management handlers answer any body with a non-5xx
// status (a panic is recovered as a 500, so this catches panics too), and
// an answer that refuses the input (any 4xx) leaves the state an operator
// can read unchanged: health (breakers, connections, cooldowns, lockouts),
// the settings, the rate limits and the providers' config. The gateway's
// clock stands still, so a read shows nothing but state.
func FuzzManagement(f *testing.F) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"object":"list","data":[]}`))
	}))
	f.Cleanup(up.Close)
	cfg, _, err := ParseConfig("f.yaml", []byte(strings.ReplaceAll(twoConns, "{{UP}}", up.URL+"/v1")), nil)
	if err != nil {
		f.Fatal(err)
	}
	// The store serve uses without store.url (it keeps a request log).
	frozen := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	g, err := New(f.Context(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Store: store.NewMemory(store.MemoryOptions{}),
		Now: func() time.Time { return frozen }})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { g.Close(f.Context()) })
	h := g.Handler()
	snapshot := func(t testing.TB) string {
		var b strings.Builder
		for _, p := range []string{"/api/monitoring/health", "/api/resilience", "/api/resilience/cooldowns",
			"/api/resilience/model-cooldowns", "/api/rate-limits", "/api/providers", "/api/providers/glm"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", p, rec.Code, rec.Body)
			}
			b.WriteString(p + " " + rec.Body.String() + "\n")
		}
		return b.String()
	}
	// The snapshot sees a change: an accepted PATCH shows in it.
	s0 := snapshot(f)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPatch, "/api/resilience", strings.NewReader(`{"requestQueue":{"maxWaitMs":1234}}`)))
	if rec.Code != http.StatusOK || snapshot(f) == s0 {
		f.Fatalf("an accepted PATCH (%d %s) must change the snapshot", rec.Code, rec.Body)
	}
	routes := []struct{ m, p string }{
		{"PATCH", "/api/resilience"}, {"POST", "/api/resilience/cooldowns"}, {"DELETE", "/api/resilience/model-cooldowns"},
		{"POST", "/api/rate-limits"}, {"PUT", "/api/providers/glm"}, {"POST", "/api/resilience/reset"},
		{"POST", "/v1/chat/completions"}, {"POST", "/api/v1/session-leases"}, {"GET", "/api/request-log"},
		{"GET", "/api/rate-limits"},
	}
	for _, s := range []string{`{"requestQueue":{"maxWaitMs":"1s"}}`, `{"connectionIds":["glm/k1"]}`, `{"all":true}`,
		`{"provider":"glm","connection":"k1","model":"glm-5"}`, `{"connectionId":"glm/k1","enabled":true}`,
		`{"connections":[{"id":"k1","maxConcurrent":2}]}`, `{"providerBreaker":{"apikey":{"failureThreshold":-1}}}`, `null`, `{"a":`} {
		for i := range routes {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		rt := routes[int(route)%len(routes)]
		if rt.p == "/v1/chat/completions" && strings.Contains(body, "glm") {
			return // no upstream traffic from the fuzzer
		}
		target := rt.p
		if rt.m == http.MethodGet { // the input is the query string
			target += "?since=" + url.QueryEscape(body) + "&limit=" + url.QueryEscape(body) + "&format=" + url.QueryEscape(body)
		}
		req := httptest.NewRequest(rt.m, target, strings.NewReader(body))
		if rt.p == "/api/v1/session-leases" {
			req.Header.Set("Content-Type", "application/json")
		}
		before := snapshot(t)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", rt.m, rt.p, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			if after := snapshot(t); after != before {
				t.Fatalf("%s %s %q was refused (%d %s) yet changed the state:\nbefore: %s\nafter:  %s", rt.m, rt.p, body, rec.Code, rec.Body, before, after)
			}
		}
	})
}
