package proxy

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
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
// the settings, the rate limits, the providers' config and the session
// leases. The gateway's clock stands still, so a read shows nothing but
// state. The only upstream is the test's own: connection tests and chat
// requests to oa reach it, chat requests naming glm are skipped.
func FuzzManagement(f *testing.F) {
	h := fuzzGateway(f)
	snapshot := func(t testing.TB) string {
		var b strings.Builder
		for _, p := range []string{"/api/monitoring/health", "/api/resilience", "/api/resilience/cooldowns",
			"/api/resilience/model-cooldowns", "/api/rate-limits", "/api/providers", "/api/providers/glm", "/api/leases"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", p, rec.Code, rec.Body)
			}
			b.WriteString(p + " " + rec.Body.String() + "\n")
		}
		return b.String()
	}
	// The snapshot sees a change: an accepted PATCH and an acquired lease
	// show in it.
	for _, c := range []struct{ m, p, body string }{
		{http.MethodPatch, "/api/resilience", `{"requestQueue":{"maxWaitMs":1234}}`},
		{http.MethodPost, "/api/v1/session-leases", `{"action":"acquire","model":"glm/glm-5"}`},
	} {
		s0 := snapshot(f)
		req := httptest.NewRequest(c.m, c.p, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer fuzz-lessee")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || snapshot(f) == s0 {
			f.Fatalf("an accepted %s %s (%d %s) must change the snapshot", c.m, c.p, rec.Code, rec.Body)
		}
	}
	// The fuzzed routes that need a setup can succeed: the config has a
	// file to reload, the connection test an upstream to reach.
	for _, p := range []string{"/api/config/reload", "/api/providers/glm/test", "/api/resilience/connections/glm/k1/reset"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, p, strings.NewReader(`{}`)))
		if rec.Code != http.StatusOK {
			f.Fatalf("POST %s {}: %d %s", p, rec.Code, rec.Body)
		}
	}
	routes := []struct{ m, p string }{
		{"PATCH", "/api/resilience"}, {"POST", "/api/resilience/cooldowns"}, {"DELETE", "/api/resilience/model-cooldowns"},
		{"POST", "/api/rate-limits"}, {"PUT", "/api/providers/glm"}, {"POST", "/api/resilience/reset"},
		{"POST", "/v1/chat/completions"}, {"POST", "/api/v1/session-leases"}, {"GET", "/api/request-log"},
		{"GET", "/api/rate-limits"}, {"POST", "/api/resilience/connections/glm/k1/reset"},
		{"POST", "/api/providers/glm/test"}, {"POST", "/api/config/reload"},
	}
	for _, s := range []string{`{"requestQueue":{"maxWaitMs":"1s"}}`, `{"connectionIds":["glm/k1"]}`, `{"all":true}`,
		`{"provider":"glm","connection":"k1","model":"glm-5"}`, `{"connectionId":"glm/k1","enabled":true}`,
		`{"connections":[{"id":"k1","maxConcurrent":2}]}`, `{"providerBreaker":{"apikey":{"failureThreshold":-1}}}`, `null`, `{"a":`,
		`{}`, `{"action":"acquire","model":"glm/glm-5","ttlMs":60000}`, `{"action":"release"}`, `{"action":"renew","ttlMs":-1}`} {
		for i := range routes {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		rt := routes[int(route)%len(routes)]
		if rt.p == "/v1/chat/completions" && strings.Contains(body, "glm") {
			return // no upstream traffic from the fuzzer beyond the test's upstream
		}
		target := rt.p
		if rt.m == http.MethodGet { // the input is the query string
			target += "?since=" + url.QueryEscape(body) + "&limit=" + url.QueryEscape(body) + "&format=" + url.QueryEscape(body)
		}
		req := httptest.NewRequest(rt.m, target, strings.NewReader(body))
		switch rt.p {
		case "/api/v1/session-leases":
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer fuzz-lessee")
		case "/v1/chat/completions":
			req.Header.Set("Authorization", "Bearer fuzz-plain")
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

// fuzzConfig is FuzzManagement's gateway: twoConns with a plain client key
// and one that may lease glm's connections.
const fuzzConfig = twoConns + `clientKeys:
  - {id: plain, key: fuzz-plain}
  - {id: lessee, key: fuzz-lessee, scopes: [lease:exclusive], allowedConnections: [glm/k1, glm/k2]}
`

// fuzzGateway serves fuzzConfig from a file (POST /api/config/reload
// reads it again) in front of an upstream that answers every call, with
// the store serve uses without store.url (it keeps a request log) and a
// clock that stands still.
func fuzzGateway(f *testing.F) http.Handler {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"object":"list","data":[]}`))
	}))
	f.Cleanup(up.Close)
	path := filepath.Join(f.TempDir(), "f.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(fuzzConfig, "{{UP}}", up.URL+"/v1")), 0o600); err != nil {
		f.Fatal(err)
	}
	cfg, _, err := LoadConfig(path, nil)
	if err != nil {
		f.Fatal(err)
	}
	frozen := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	g, err := New(f.Context(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Store: store.NewMemory(store.MemoryOptions{}),
		Now: func() time.Time { return frozen }})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { g.Close(f.Context()) })
	return g.Handler()
}
