package proxy

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

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
// status and never panic.
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
	g, err := New(f.Context(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Store: store.NewMemory(store.MemoryOptions{})})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { g.Close(f.Context()) })
	h := g.Handler()
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
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != 503 {
			t.Fatalf("%s %s %q: %d %s", rt.m, rt.p, body, rec.Code, rec.Body)
		}
	})
}
