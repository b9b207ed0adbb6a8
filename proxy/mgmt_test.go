package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/store"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const mgmtConfig = `
server: {managementKey: "${ADMIN}"}
providers:
  - id: glm
    type: glm
    baseURL: {{UP}}
    models: [glm-5]
    connections:
      - {id: k1, apiKey: glm-k1, maxConcurrent: 2}
      - {id: k2, apiKey: glm-k2}
` + testBase

func admin(g *gw, method, path, body string) resp {
	return g.do(method, path, body, "Authorization", "Bearer s3cret")
}

func TestManagementAuth(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	paths := []struct{ m, p string }{
		{"GET", "/api/monitoring/health"}, {"POST", "/api/resilience/reset"}, {"GET", "/api/resilience"},
		{"PATCH", "/api/resilience"}, {"GET", "/api/resilience/cooldowns"}, {"POST", "/api/resilience/cooldowns"},
		{"GET", "/api/resilience/model-cooldowns"}, {"DELETE", "/api/resilience/model-cooldowns"},
		{"POST", "/api/rate-limits"}, {"PUT", "/api/providers/glm"}, {"POST", "/api/providers/glm/test"},
		{"POST", "/api/resilience/connections/glm/k1/reset"}, {"GET", "/metrics"},
	}
	for _, p := range paths {
		for _, hdr := range []string{"", "Bearer wrong", "Basic czNjcmV0", "Bearer s3cret2", "bearer"} {
			r := g.do(p.m, p.p, `{"all":true}`, "Authorization", hdr)
			if r.code != 401 || r.errCode() != "unauthorized" {
				t.Errorf("%s %s with %q: %d %s", p.m, p.p, hdr, r.code, r.body)
			}
		}
	}
	if r := admin(g, "GET", "/api/monitoring/health", ""); r.code != 200 {
		t.Fatalf("with the key: %d %s", r.code, r.body)
	}
	// 404 vs 405 (the whole router is wrapped: both answer JSON)
	// OpenAI types a wrong method as a malformed request, not a missing one.
	if r := admin(g, "DELETE", "/api/monitoring/health", ""); r.code != 405 || r.errCode() != "method_not_allowed" ||
		!strings.Contains(r.body, `"type":"invalid_request_error"`) {
		t.Fatalf("405: %d %s", r.code, r.body)
	}
	if r := admin(g, "GET", "/api/nothing", ""); r.code != 404 || r.errCode() != "not_found" {
		t.Fatalf("404: %d %s", r.code, r.body)
	}
	if r := g.do("GET", "/metrics", "", "Authorization", "Bearer s3cret"); !strings.Contains(r.body, `breakwater_http_responses_total{code="405",surface="management"}`) ||
		!strings.Contains(r.body, `code="404"`) {
		t.Fatalf("404/405 must be counted by the outer wrapper:\n%s", r.body)
	}
}

func TestHealthShowsBreakersAndCooldowns(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	up.set("glm-k1", status(429, `{"error":{"message":"rate limited"}}`, "Retry-After", "9"))
	g.chat("glm/glm-5")
	h := admin(g, "GET", "/api/monitoring/health", "").json(t)
	p := h["providers"].(map[string]any)["glm"].(map[string]any)
	if p["state"] != "CLOSED" || p["failureCount"].(float64) != 0 {
		t.Fatalf("a 429 is breaker-neutral: %v", p)
	}
	conns := h["connections"].([]any)
	k1 := conns[0].(map[string]any)
	if k1["connection"] != "k1" || k1["status"] != "cooldown" || k1["cooldownRemainingMs"].(float64) <= 0 || k1["lastErrorType"] != "rate_limit_exceeded" {
		t.Fatalf("k1: %v", k1)
	}
	if strings.Contains(admin(g, "GET", "/api/monitoring/health", "").body, "glm-k1") {
		t.Fatal("health leaks a credential")
	}
	r := admin(g, "GET", "/api/resilience/cooldowns?provider=glm", "")
	if r.code != 200 || !strings.Contains(r.body, `"lockouts":[]`) {
		t.Fatalf("cooldowns: %d %s", r.code, r.body)
	}
	if r := admin(g, "GET", "/api/resilience/cooldowns?provider=nope", ""); r.code != 404 {
		t.Fatalf("unknown provider: %d", r.code)
	}
	r = admin(g, "POST", "/api/resilience/cooldowns", `{"connectionIds":["glm/k1"]}`)
	if r.code != 200 || r.json(t)["cleared"].(float64) != 1 {
		t.Fatalf("clear: %d %s", r.code, r.body)
	}
	if c := g.conn("glm", "k1"); c["status"] != "active" {
		t.Fatalf("after clear: %v", c)
	}
}

func TestManagementBadInput(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	before := admin(g, "GET", "/api/resilience", "").body
	cases := []struct {
		m, p, body string
		code       int
	}{
		{"PATCH", "/api/resilience", ``, 400},
		{"PATCH", "/api/resilience", `nope`, 400},
		{"PATCH", "/api/resilience", `[1]`, 400},
		{"PATCH", "/api/resilience", `{"requestQueue":{"maxWaitMz":5}}`, 400},
		{"PATCH", "/api/resilience", `{"requestQueue":{"maxWaitMs":"soon"}}`, 400},
		{"POST", "/api/resilience/cooldowns", `{}`, 400},
		{"POST", "/api/resilience/cooldowns", `{"connectionIds":["nope"]}`, 400},
		{"POST", "/api/resilience/cooldowns", `{"connectionIds":["x/y"]}`, 404},
		{"POST", "/api/resilience/cooldowns", `{"connectionIds":["glm/k1"],"all":true}`, 400},
		{"POST", "/api/resilience/cooldowns", `{"bogus":1}`, 400},
		{"POST", "/api/resilience/cooldowns", `{"all":true}{"all":true}`, 400},
		{"DELETE", "/api/resilience/model-cooldowns", `{"provider":"glm"}`, 400},
		{"DELETE", "/api/resilience/model-cooldowns", `{"provider":"glm","connection":"zz","model":"m"}`, 404},
		{"POST", "/api/resilience/reset", `{"provider":"nope"}`, 404},
		{"POST", "/api/resilience/reset", `{"provider":5}`, 400},
		{"POST", "/api/resilience/reset", `{"provider":""}`, 400},                        // an unset variable, not "all"
		{"POST", "/api/resilience/reset", `{"provider":" "}`, 400},                       // the same
		{"PATCH", "/api/resilience", `{"upstreamTimeouts":{"streamIdleMs":0}}`, 400},     // docs/settings.md#layers: 0 would cut every stream
		{"PATCH", "/api/resilience", `{"requestQueue":{"globalMaxConcurrent":-5}}`, 400}, // negative: refused, never clamped to "no cap"
		{"POST", "/api/rate-limits", `{"connectionId":"glm/k1"}`, 400},
		{"POST", "/api/rate-limits", `{"connectionId":"glmk1","enabled":true}`, 400},
		{"POST", "/api/rate-limits", `{"connectionId":"glm/k9","enabled":true}`, 404},
		{"PUT", "/api/providers/nope", `{}`, 404},
		{"PUT", "/api/providers/glm", `{"connections":[{"id":"k9","apiKey":"x"}]}`, 400},
		{"PUT", "/api/providers/glm", `{"models":["other"]}`, 400},
		{"PUT", "/api/providers/glm", `{"maxConcurrent":-1}`, 400},
		{"PUT", "/api/providers/glm", `{"baseURL":"ftp://x"}`, 400},
		{"PUT", "/api/providers/glm", `{"weird":1}`, 400},
		{"POST", "/api/providers/nope/test", ``, 404},
		{"POST", "/api/resilience/connections/glm/k9/reset", ``, 404},
		{"POST", "/api/resilience/reset", strings.Repeat(" ", 2<<20), 413},
	}
	for _, c := range cases {
		r := admin(g, c.m, c.p, c.body)
		if r.code != c.code || r.errCode() == "" {
			t.Errorf("%s %s %.60q: %d %s, want %d with a typed error", c.m, c.p, c.body, r.code, r.body, c.code)
		}
	}
	if after := admin(g, "GET", "/api/resilience", "").body; after != before {
		t.Fatal("bad input changed the settings")
	}
	r := admin(g, "PATCH", "/api/resilience", `{"requestQueue":{"maxWaitMz":5}}`)
	if !strings.Contains(r.body, `"suggestion":"maxWaitMs"`) {
		t.Fatalf("the patch error should name the nearest key: %s", r.body)
	}
}

// docs/settings.md#layers: GET shows values and sources; PATCH persists; null deletes a
// saved key so the file value applies again.
func TestSettingsPatch(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig+`
  requestQueue: {maxWaitMs: 7s}
`, "ADMIN=s3cret")
	v := admin(g, "GET", "/api/resilience", "").json(t)
	if v["settings"].(map[string]any)["requestQueue"].(map[string]any)["maxWaitMs"].(float64) != 7000 ||
		v["sources"].(map[string]any)["requestQueue.maxWaitMs"] != "file" {
		t.Fatalf("GET: %v", v["sources"])
	}
	r := admin(g, "PATCH", "/api/resilience", `{"requestQueue":{"maxWaitMs":"2s","globalMaxConcurrent":3}}`)
	if r.code != 200 {
		t.Fatalf("PATCH: %d %s", r.code, r.body)
	}
	v = r.json(t)
	if v["sources"].(map[string]any)["requestQueue.maxWaitMs"] != "saved" || g.g.settings().RequestQueue.MaxWaitMs != 2000 || g.g.gate.m.GlobalCap() != 3 {
		t.Fatalf("after PATCH: %v", v["sources"])
	}
	saved, _ := g.g.store.LoadSettings(context.Background())
	if saved == nil {
		t.Fatal("PATCH not persisted")
	}
	// the API can re-submit what it returns
	full := admin(g, "GET", "/api/resilience", "").json(t)["settings"]
	if r := admin(g, "PATCH", "/api/resilience", mustJSON(t, full)); r.code != 200 {
		t.Fatalf("re-submitting GET's settings: %d %s", r.code, r.body)
	}
	r = admin(g, "PATCH", "/api/resilience", `{"requestQueue":{"maxWaitMs":null}}`)
	if r.code != 200 || g.g.settings().RequestQueue.MaxWaitMs != 7000 {
		t.Fatalf("null should restore the file value: %d %v", r.code, g.g.settings().RequestQueue.MaxWaitMs)
	}
}

// docs/api.md#operator-actions: new credentials clear a terminal state; rateLimitProtection is
// never touched by PUT; the connection test closes a DEGRADED breaker and
// clears cooldowns.
func TestProvidersAPI(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	up.set("glm-k1", status(402, `{"error":{"message":"Your credit balance is too low to access the API"}}`))
	g.chat("glm/glm-5")
	if c := g.conn("glm", "k1"); c["status"] != "credits_exhausted" {
		t.Fatalf("want terminal credits_exhausted: %v", c)
	}
	// the cooldown manager never clears a terminal state
	r := admin(g, "POST", "/api/resilience/cooldowns", `{"all":true}`)
	if r.json(t)["skippedTerminal"].(float64) != 1 {
		t.Fatalf("clear all: %s", r.body)
	}
	if r := admin(g, "POST", "/api/rate-limits", `{"connectionId":"glm/k1","enabled":true}`); r.code != 200 {
		t.Fatalf("rate-limits: %d %s", r.code, r.body)
	}
	r = admin(g, "PUT", "/api/providers/glm", `{"maxConcurrent":5,"connections":[{"id":"k1","apiKey":"new-key","maxConcurrent":1,"rateLimitProtection":false}]}`)
	if r.code != 200 || strings.Contains(r.body, "new-key") {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	out := r.json(t)
	c0 := out["connections"].([]any)[0].(map[string]any)
	if c0["rateLimitProtection"] != true || c0["credentialsChanged"] != true || c0["maxConcurrent"].(float64) != 1 {
		t.Fatalf("PUT must keep rateLimitProtection and report the credential change: %v", c0)
	}
	if c := g.conn("glm", "k1"); c["status"] != "active" {
		t.Fatalf("new credentials should clear the terminal state: %v", c)
	}
	up.set("new-key", okJSON("fresh"))
	if r := g.chat("glm/glm-5"); r.code != 200 || !strings.Contains(r.body, "fresh") {
		t.Fatalf("the new key is not used: %d %s", r.code, r.body)
	}
	// operator reset of a terminal state
	up.set("glm-k2", status(402, `{"error":{"message":"Your credit balance is too low"}}`))
	up.set("new-key", status(503, `{}`))
	g.chat("glm/glm-5")
	if c := g.conn("glm", "k2"); c["status"] != "credits_exhausted" {
		t.Fatalf("k2: %v", c)
	}
	if r := admin(g, "POST", "/api/resilience/connections/glm/k2/reset", ""); r.code != 200 || r.json(t)["changed"] != true {
		t.Fatalf("reset: %d %s", r.code, r.body)
	}
	if c := g.conn("glm", "k2"); c["status"] != "active" {
		t.Fatalf("after reset: %v", c)
	}
	// connection test: k1 is cooling (503); a valid /models clears it
	r = admin(g, "POST", "/api/providers/glm/test", "")
	if r.code != 200 || strings.Count(r.body, `"ok":true`) != 2 {
		t.Fatalf("test: %d %s", r.code, r.body)
	}
	if c := g.conn("glm", "k1"); c["status"] != "active" {
		t.Fatalf("a passed test clears the cooldown: %v", c)
	}
	if r := admin(g, "GET", "/api/providers", ""); strings.Contains(r.body, "new-key") || strings.Contains(r.body, "glm-k2") {
		t.Fatalf("provider list leaks credentials: %s", r.body)
	}
}

func TestModelCooldownsAPI(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
server: {managementKey: s3cret}
providers:
  - {id: loc, type: local, baseURL: {{UP}}, models: [m1, m2], connections: [{id: c, apiKey: c}]}
`+testBase, "ADMIN=s3cret")
	up.set("c", status(404, `{"error":{"message":"model m1 not found"}}`))
	g.chat("loc/m1")
	r := admin(g, "GET", "/api/resilience/model-cooldowns", "")
	if r.code != 200 || !strings.Contains(r.body, `"model":"m1"`) {
		t.Fatalf("lockouts: %s", r.body)
	}
	// ?provider= narrows the list, and an unknown provider is a 404, as on
	// GET /api/resilience/cooldowns.
	if r := admin(g, "GET", "/api/resilience/model-cooldowns?provider=loc", ""); r.code != 200 || !strings.Contains(r.body, `"model":"m1"`) {
		t.Fatalf("lockouts of loc: %d %s", r.code, r.body)
	}
	if r := admin(g, "GET", "/api/resilience/model-cooldowns?provider=nope", ""); r.code != 404 || r.errCode() != "not_found" {
		t.Fatalf("lockouts of an unknown provider: %d %s", r.code, r.body)
	}
	if r := g.chat("loc/m1"); r.code != 429 || r.errCode() != "model_cooldown" {
		t.Fatalf("a locked model: %d %s", r.code, r.body)
	}
	up.set("c", okJSON("m2 works"))
	if r := g.chat("loc/m2"); r.code != 200 {
		t.Fatalf("a neighbouring model is unaffected: %d %s", r.code, r.body)
	}
	r = admin(g, "DELETE", "/api/resilience/model-cooldowns", `{"provider":"loc","connection":"c","model":"m1"}`)
	if r.code != 200 || r.json(t)["removed"].(float64) != 1 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	if r := g.chat("loc/m1"); r.code != 200 {
		t.Fatalf("after delete: %d %s", r.code, r.body)
	}
}

// A real client: the official Go SDK, JSON and streaming.
func TestOpenAISDK(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	up.set("glm-k1", func(w http.ResponseWriter, r *http.Request, n int) {
		if strings.Contains(r.Header.Get("Accept"), "event-stream") {
			sse(streamOpt{chunks: 4})(w, r, n)
			return
		}
		okJSON("sdk hello")(w, r, n)
	})
	client := openai.NewClient(option.WithBaseURL(g.srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "coding", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	res, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil || res.Choices[0].Message.Content != "sdk hello" {
		t.Fatalf("JSON: %v %+v", err, res)
	}
	st := client.Chat.Completions.NewStreaming(context.Background(), params)
	var text strings.Builder
	for st.Next() {
		if c := st.Current(); len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
		}
	}
	if err := st.Err(); err != nil || text.String() != "tok0 tok1 tok2 tok3 " {
		t.Fatalf("stream: %v %q", err, text.String())
	}
	// a post-commit failure surfaces as an SDK error, not a silent truncation
	up.set("glm-k1", sse(streamOpt{chunks: 5, cutAfter: 2}))
	st = client.Chat.Completions.NewStreaming(context.Background(), params)
	for st.Next() {
	}
	if st.Err() == nil {
		t.Fatal("want an error from the SSE error event")
	}
	// a typed gateway error reaches the SDK as an API error with its status
	_, err = client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "nope/x", Messages: params.Messages})
	var apiErr *openai.Error
	if !asErr(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("want a 404 API error, got %v", err)
	}
}

// Graceful shutdown: in-flight requests (a slow JSON answer and a stream)
// finish; the store is flushed.
func TestGracefulShutdown(t *testing.T) {
	up := newFakeUp(t)
	y := strings.ReplaceAll(twoConns, "{{UP}}", up.url())
	cfg, _, err := ParseConfig("t.yaml", []byte(y), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := newMemStore()
	g, err := New(context.Background(), cfg, Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveLoopback(t, g)
	release := make(chan struct{})
	up.set("glm-k1", func(w http.ResponseWriter, r *http.Request, n int) { <-release; okJSON("late")(w, r, n) })
	up.set("glm-k2", sse(streamOpt{chunks: 20, interval: 20 * time.Millisecond}))
	base := "http://" + addr
	type result struct {
		code int
		body string
	}
	out := make(chan result, 2)
	post := func(body string) {
		res, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			out <- result{-1, err.Error()}
			return
		}
		defer res.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := res.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		out <- result{res.StatusCode, b.String()}
	}
	go post(`{"model":"glm/glm-5"}`)
	eventually(t, "the slow request upstream", func() bool { return up.count("glm-k1") == 1 })
	// The stream's upstream behaviour is set before the request is sent
	// (set after, the request could meet the default JSON answer first).
	up.set("oa-o1", sse(streamOpt{chunks: 20, interval: 20 * time.Millisecond}))
	go post(`{"model":"oa/gpt-5","stream":true}`)
	eventually(t, "the stream upstream", func() bool { return up.count("oa-o1") == 1 })
	done := make(chan error, 1)
	go func() { done <- g.Shutdown(context.Background()) }()
	eventually(t, "draining", func() bool { return g.draining.Load() })
	close(release)
	for i := 0; i < 2; i++ {
		r := <-out
		if r.code != 200 || !(strings.Contains(r.body, "late") || strings.Contains(r.body, "[DONE]")) {
			t.Fatalf("an in-flight request was lost: %d %s", r.code, r.body)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s, _ := st.Load(context.Background())
	if len(s.Connections) == 0 {
		t.Fatal("the store holds no state after shutdown")
	}
}

// State survives a restart through the store: a cooling connection is
// still cooling after New restores it.
func TestRestoreFromStore(t *testing.T) {
	up := newFakeUp(t)
	st := newMemStore()
	y := strings.ReplaceAll(twoConns, "{{UP}}", up.url())
	cfg, _, _ := ParseConfig("t.yaml", []byte(y), nil)
	g1, err := New(context.Background(), cfg, Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	up.set("glm-k1", status(429, `{}`, "Retry-After", "60"))
	srv := newTestServer(g1)
	http.Post(srv+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"glm/glm-5"}`))
	g1.Close(context.Background())
	cfg2, _, _ := ParseConfig("t.yaml", []byte(y), nil)
	g2, err := New(context.Background(), cfg2, Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close(context.Background())
	g2.lock()
	conns := g2.eng.Connections(g2.modelNow(), "glm")
	g2.unlock()
	if conns[0].Status.String() != "cooldown" {
		t.Fatalf("restored k1: %+v", conns[0])
	}
}

// flushWatchStore records, at the final flush, whether its context was
// still live and how many chat requests were still in their handler.
type flushWatchStore struct {
	*store.Memory
	g        *Gateway
	mu       sync.Mutex
	flushErr error
	active   int64
	flushes  int
	left     time.Duration // the flush context's time left when it began
}

func (s *flushWatchStore) Flush(ctx context.Context) error {
	s.mu.Lock()
	s.flushErr, s.active = ctx.Err(), s.g.active.Load()
	if dl, ok := ctx.Deadline(); ok {
		s.left = time.Until(dl)
	}
	s.flushes++
	s.mu.Unlock()
	return s.Memory.Flush(ctx)
}

// A drain that runs out of time (server.shutdownTimeoutMs) cuts what is
// still in flight, waits for those handlers to record their outcome, and
// only then flushes the store — with a context of its own, not the spent
// one, whose time starts after the drain (it started before: a drain of
// 10 s or more left the flush none): nothing the gateway learned is lost to
// the timeout.
func TestShutdownTimeoutStillFlushesEverything(t *testing.T) {
	up := newFakeUp(t)
	cfg, _, err := ParseConfig("t.yaml", []byte(strings.ReplaceAll(twoConns, "{{UP}}", up.url())), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := &flushWatchStore{Memory: newMemStore()}
	g, err := New(context.Background(), cfg, Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	st.g = g
	addr := serveLoopback(t, g)
	up.set("oa-o1", sse(streamOpt{chunks: 1000, interval: 50 * time.Millisecond}))
	go func() {
		res, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"oa/gpt-5","stream":true}`))
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}()
	eventually(t, "the stream in flight", func() bool { return g.active.Load() == 1 && up.count("oa-o1") == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = g.Shutdown(ctx)
	if !errors.Is(err, ErrDrainCut) {
		t.Fatalf("Shutdown = %v, want ErrDrainCut", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.flushes == 0 || st.flushErr != nil || st.active != 0 {
		t.Fatalf("final flush: %d calls, context error %v, %d requests still in their handler", st.flushes, st.flushErr, st.active)
	}
	if st.left < finalFlushTimeout-time.Second {
		t.Fatalf("the final flush had %v of its %v: the drain spent it", st.left, finalFlushTimeout)
	}
}

// downStore is a state store whose database is unreachable.
type downStore struct{ *store.Memory }

func (downStore) Health() store.Health {
	return store.Health{Kind: "postgres", Up: false, Pending: 3, LastError: "store unavailable: connection refused"}
}

// docs/README.md#troubleshooting "everything in one place": a state-store outage is fail-open for
// traffic, but GET /api/monitoring/health says so (status degraded, the
// store's own account); a memory store reports itself up.
func TestHealthShowsTheStore(t *testing.T) {
	up := newFakeUp(t)
	cfg, _, err := ParseConfig("t.yaml", []byte(strings.ReplaceAll(twoConns, "{{UP}}", up.url())), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		st     StateStore
		status string
		up     bool
	}{{newMemStore(), "ok", true}, {downStore{newMemStore()}, "degraded", false}} {
		g, err := New(context.Background(), cfg, Options{Store: c.st})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g.Handler())
		res, err := http.Get(srv.URL + "/api/monitoring/health")
		if err != nil {
			t.Fatal(err)
		}
		var h struct {
			Status string       `json:"status"`
			Store  store.Health `json:"store"`
		}
		json.NewDecoder(res.Body).Decode(&h)
		res.Body.Close()
		srv.Close()
		g.Close(context.Background())
		if res.StatusCode != 200 || h.Status != c.status || h.Store.Up != c.up {
			t.Fatalf("%T: %d status %q store %+v", c.st, res.StatusCode, h.Status, h.Store)
		}
	}
}

// When the drain runs out of time, what is still in flight is answered
// before the connections close, not reset: a JSON request gets 503
// gateway_shutting_down with Retry-After, a committed stream ends with that
// code as its SSE error event (no [DONE]), and a request sitting in a
// cooldown wait that would outlast the drain is answered at once instead of
// holding the shutdown. The cuts are neutral for health.
func TestShutdownCutAnswersWhatIsInFlight(t *testing.T) {
	up := newFakeUp(t)
	g, addr := newShutdownGW(t, up, `
resilience:
  waitForCooldown: {enabled: true, maxRetryWaitSec: 90}
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: slow, apiKey: slow}]}
  - {id: s, baseURL: {{UP}}, models: [m], connections: [{id: st, apiKey: st}]}
  - {id: w, baseURL: {{UP}}, models: [m], connections: [{id: lim, apiKey: lim}]}
`)
	up.set("slow", slow(3*time.Second, okJSON("late")))
	up.set("st", sse(streamOpt{chunks: 60, interval: 50 * time.Millisecond}))
	up.set("lim", status(429, `{"error":{"message":"slow down"}}`, "Retry-After", "30"))
	post := func(model string, stream bool) (int, http.Header, string) {
		body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, model, stream)
		res, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, nil, err.Error()
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return res.StatusCode, res.Header, string(b) + " READ ERROR " + err.Error()
		}
		return res.StatusCode, res.Header, string(b)
	}
	type result struct {
		code int
		h    http.Header
		body string
	}
	results := map[string]chan result{"json": make(chan result, 1), "stream": make(chan result, 1), "wait": make(chan result, 1)}
	go func() { c, h, b := post("p/m", false); results["json"] <- result{c, h, b} }()
	go func() { c, h, b := post("s/m", true); results["stream"] <- result{c, h, b} }()
	go func() { c, h, b := post("w/m", false); results["wait"] <- result{c, h, b} }()
	// w/m's only connection answers 429 with Retry-After 30: the request
	// then waits for the cooldown (waitForCooldown), longer than the drain.
	eventually(t, "three requests in flight", func() bool {
		return g.active.Load() == 3 && up.count("st") == 1 && up.count("slow") == 1 && up.count("lim") == 1
	})
	time.Sleep(100 * time.Millisecond) // the stream commits its first chunks
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := g.Shutdown(ctx); !errors.Is(err, ErrDrainCut) {
		t.Fatalf("Shutdown = %v, want ErrDrainCut", err)
	}
	for name, ch := range results {
		var r result
		select {
		case r = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer", name)
		}
		switch name {
		case "stream":
			if r.code != 200 || !strings.Contains(r.body, `"code":"gateway_shutting_down"`) || strings.Contains(r.body, "[DONE]") || strings.Contains(r.body, "READ ERROR") {
				t.Errorf("stream: %d, want its chunks then the gateway_shutting_down error event, cleanly ended:\n%.400s", r.code, r.body)
			}
		default:
			if r.code != 503 || !strings.Contains(r.body, "gateway_shutting_down") || r.h.Get("Retry-After") == "" {
				t.Errorf("%s: %d %v %s, want 503 gateway_shutting_down with Retry-After", name, r.code, r.h, r.body)
			}
		}
	}
	g.lock()
	conns := g.eng.Connections(g.modelNow(), "p")
	g.unlock()
	if conns[0].Status.String() != "active" || conns[0].BackoffLevel != 0 {
		t.Fatalf("a shutdown cut is no health signal: %+v", conns[0])
	}
}

// docs/api.md#operator-actions: new credentials clear a terminal state — for the new key. A
// key set with PUT /api/providers lives in this process only, while the
// state is stored: a restart on the config file's key, which was banned,
// showed it active (and sent it). The state remembers which credential it
// describes and which were retired while terminal.
func TestRestartOnARetiredKeyIsTerminalAgain(t *testing.T) {
	up := newFakeUp(t)
	st := newMemStore()
	cfg := `
server: {managementKey: "${ADMIN}"}
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: k1, apiKey: file-key}]}
` + testBase
	up.set("file-key", status(403, `{"error":{"message":"Your account has been deactivated"}}`))
	up.set("new-key", okJSON("hi"))
	g := newGWStore(t, up, cfg, st, "ADMIN=s3cret")
	g.admin = "s3cret"
	if r := g.chat("p/m"); r.code != 403 {
		t.Fatalf("the ban: %d %s", r.code, r.body)
	}
	if c := g.conn("p", "k1"); c["status"] != "banned" {
		t.Fatalf("banned: %v", c)
	}
	if r := admin(g, "PUT", "/api/providers/p", `{"connections":[{"id":"k1","apiKey":"new-key"}]}`); r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	if r := g.chat("p/m"); r.code != 200 {
		t.Fatalf("the new key serves: %d %s", r.code, r.body)
	}
	g.close()
	// The config file still has the banned key.
	g2 := newGWStore(t, up, cfg, st, "ADMIN=s3cret")
	g2.admin = "s3cret"
	if c := g2.conn("p", "k1"); c["status"] != "banned" {
		t.Fatalf("restarted on the retired key: %v, want banned", c)
	}
	if r := g2.chat("p/m"); r.code == 200 || up.count("file-key") != 1 {
		t.Fatalf("the banned key must not be sent again: %d, file-key calls %d", r.code, up.count("file-key"))
	}
	// And no fingerprint is shown.
	if r := admin(g2, "GET", "/api/monitoring/health", ""); strings.Contains(r.body, `"credential"`) || strings.Contains(r.body, `"retired"`) {
		t.Fatalf("health shows credential fingerprints: %s", r.body)
	}
}

// A request whose body is still arriving when the drain runs out is told
// so (503 gateway_shutting_down) instead of getting an empty reply and a
// logged 400: the cut ends the body read, which no context interrupts.
func TestShutdownCutAnswersAnUnfinishedUpload(t *testing.T) {
	up := newFakeUp(t)
	g, addr := newShutdownGW(t, up, twoConns)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60\r\n\r\n{\"model\":\"oa/gpt-5\",")
	eventually(t, "the upload in its handler", func() bool { return g.active.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := g.Shutdown(ctx); !errors.Is(err, ErrDrainCut) {
		t.Fatalf("Shutdown = %v, want ErrDrainCut", err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 503 || !strings.Contains(string(b), "gateway_shutting_down") {
		t.Fatalf("%d %s, want 503 gateway_shutting_down", res.StatusCode, b)
	}
}

// newShutdownGW serves cfgYAML on a loopback listener for a test that shuts
// the gateway down itself (no cleanup of its own).
func newShutdownGW(t *testing.T, up *fakeUp, cfgYAML string) (*Gateway, string) {
	t.Helper()
	cfg, _, err := ParseConfig("t.yaml", []byte(strings.ReplaceAll(cfgYAML, "{{UP}}", up.url())), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Store: newMemStore()})
	if err != nil {
		t.Fatal(err)
	}
	return g, serveLoopback(t, g)
}

// newMemStore is the in-process store a gateway gets by default.
func newMemStore() *store.Memory { return store.NewMemory(store.MemoryOptions{}) }
