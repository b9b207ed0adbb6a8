package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/store"
)

const twoConns = `
providers:
  - id: glm
    type: glm
    baseURL: {{UP}}
    models: [glm-5]
    connections:
      - {id: k1, apiKey: glm-k1}
      - {id: k2, apiKey: glm-k2}
  - id: oa
    baseURL: {{UP}}
    models: [gpt-5]
    connections:
      - {id: o1, apiKey: oa-o1}
combos:
  - id: coding
    strategy: priority
    targets: [glm/glm-5, oa/gpt-5]
aliases: {fast: glm/glm-5}
` + testBase

func TestJSONPassThroughAndHeaders(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	// (lease headers from a key that may not hold leases are refused with a
	// typed 403; their stripping is pinned by TestLeaseAcquireRoutesAndExcludes)
	r := g.chat("glm/glm-5", "X-Session-Id", "sess-1", "Authorization", "Bearer client")
	if r.code != 200 || !strings.Contains(r.body, `"hello"`) {
		t.Fatalf("got %d %s", r.code, r.body)
	}
	if r.h.Get("X-Breakwater-Provider") != "glm" || r.h.Get("X-Breakwater-Connection") != "k1" || r.h.Get("X-Breakwater-Attempts") != "1" {
		t.Fatalf("headers %v", r.h)
	}
	if up.models[0] != "glm-5" {
		t.Fatalf("upstream got model %q, want the upstream id glm-5", up.models[0])
	}
	h := up.hdrs[0]
	if h.Get("X-Session-Id") != "" || h.Get("X-Breakwater-Lease-Owner") != "" || h.Get("Authorization") != "Bearer glm-k1" {
		t.Fatalf("upstream saw headers %v: session/lease headers must not be forwarded and the client key must be replaced", h)
	}
	// aliases, bare models and combos resolve through the model
	for model, conn := range map[string]string{"fast": "k1", "gpt-5": "o1", "coding": "k1"} {
		if r := g.chat(model); r.code != 200 || r.h.Get("X-Breakwater-Connection") != conn {
			t.Errorf("%s: %d %s conn %s", model, r.code, r.body, r.h.Get("X-Breakwater-Connection"))
		}
	}
	if r := g.chat("nope/none"); r.code != 404 || r.errCode() != "model_not_found" || !strings.Contains(r.body, "fast") {
		t.Fatalf("unknown model (the candidates name the aliases too): %d %s", r.code, r.body)
	}
	if r := g.chat("codng"); r.code != 404 || !strings.Contains(r.body, `did you mean \"coding\"`) {
		t.Fatalf("a near miss names the nearest route: %d %s", r.code, r.body)
	}
	if r := g.do("GET", "/v1/models", ""); r.code != 200 || !strings.Contains(r.body, `"glm/glm-5"`) || !strings.Contains(r.body, `"coding"`) {
		t.Fatalf("models: %d %s", r.code, r.body)
	}
}

// oneConn is one provider with one connection.
const oneConn = `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: c}]}
` + testBase

// smallBodyConfig is one provider behind a 200-byte body limit.
const smallBodyConfig = `
server: {maxBodyBytes: 200}
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: k}]}
` + testBase

func TestBadRequests(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, smallBodyConfig)
	cases := []struct {
		body string
		code int
	}{
		{``, 400}, {`nope`, 400}, {`[1]`, 400}, {`{"model":5}`, 400}, {`{}`, 400},
		{`{"model":"p/m","stream":"yes"}`, 400}, {`{"model":"p/m"` + strings.Repeat(" ", 300) + `}`, 413},
	}
	for _, c := range cases {
		if r := g.do("POST", "/v1/chat/completions", c.body); r.code != c.code || r.errCode() == "" {
			t.Errorf("body %.30q: %d %s, want %d with a typed error", c.body, r.code, r.body, c.code)
		}
	}
	if up.total() != 0 {
		t.Fatal("bad requests reached the upstream")
	}
	if r := g.do("GET", "/v1/chat/completions", ""); r.code != 405 {
		t.Fatalf("GET chat: %d, want 405", r.code)
	}
	if r := g.do("GET", "/v1/nope", ""); r.code != 404 || r.errCode() != "not_found" {
		t.Fatalf("unknown path: %d %s", r.code, r.body)
	}
	if r := g.do("POST", "/v1/chat/completions/", `{"model":"p/m"}`); r.code != 404 {
		t.Fatalf("trailing slash must not redirect (no StrictSlash): %d", r.code)
	}
}

// A chat body of undeclared length (chunked) is bounded by maxBodyBytes
// as a declared one is: past the limit a 413, within it served.
func TestChunkedChatBodyIsBounded(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, smallBodyConfig)
	post := func(body string) (int, string) {
		// A MultiReader has no known length: the client sends it chunked.
		req, _ := http.NewRequest("POST", g.srv.URL+"/v1/chat/completions", io.MultiReader(strings.NewReader(body)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := post(`{"model":"p/m"` + strings.Repeat(" ", 300) + `}`); code != 413 || !strings.Contains(body, "request_too_large") {
		t.Fatalf("chunked body past the limit: %d %s, want 413 request_too_large", code, body)
	}
	if up.total() != 0 {
		t.Fatal("a body past the limit reached the upstream")
	}
	if code, body := post(`{"model":"p/m","messages":[]}`); code != 200 {
		t.Fatalf("chunked body within the limit: %d %s", code, body)
	}
}

// docs/cooldowns.md: one bad key fails over to its sibling; a dead provider fails over
// to the next combo target.
func TestFallbackOrder(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	up.set("glm-k1", status(503, `{"error":{"message":"overloaded"}}`))
	r := g.chat("glm/glm-5")
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k2" || r.h.Get("X-Breakwater-Attempts") != "2" {
		t.Fatalf("got %d conn=%s attempts=%s %s", r.code, r.h.Get("X-Breakwater-Connection"), r.h.Get("X-Breakwater-Attempts"), r.body)
	}
	if c := g.conn("glm", "k1"); c["status"] != "cooldown" {
		t.Fatalf("k1 should be cooling: %v", c)
	}
	// the cooling key is skipped without an upstream call
	n := up.count("glm-k1")
	if r := g.chat("glm/glm-5"); r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k2" || up.count("glm-k1") != n {
		t.Fatalf("cooling k1 was tried again")
	}
	// a dead provider: the combo moves to its next target
	up.set("glm-k2", status(502, `{"error":{"message":"bad gateway"}}`))
	r = g.chat("coding")
	if r.code != 200 || r.h.Get("X-Breakwater-Provider") != "oa" {
		t.Fatalf("combo: %d %v %s", r.code, r.h, r.body)
	}
}

// docs/classification.md#verdicts: a request-scoped 400 (content filter) stops; the client gets
// the upstream error. A context-length 400 is request-scoped too, but goes
// to the next target with another model: never the same model again.
func TestRequestScopedStops(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	body := `{"error":{"message":"The response was filtered due to the prompt triggering content management policy","type":"invalid_request_error","code":"content_filter"}}`
	up.set("glm-k1", status(400, body))
	r := g.chat("coding")
	if r.code != 400 || !strings.Contains(r.body, "content_filter") {
		t.Fatalf("got %d %s", r.code, r.body)
	}
	if up.total() != 1 {
		t.Fatalf("a request-scoped error must not fall back: %d upstream calls", up.total())
	}
	if g.conn("glm", "k1")["status"] != "active" {
		t.Fatal("a request-scoped error must not cool the connection")
	}
	tooLong := `{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}`
	up.set("glm-k1", status(400, tooLong))
	up.set("glm-k2", status(400, tooLong))
	r = g.chat("coding")
	if r.code != 200 || r.h.Get("X-Breakwater-Provider") != "oa" || r.h.Get("X-Breakwater-Attempts") != "2" {
		t.Fatalf("context length: %d %v %s", r.code, r.h, r.body)
	}
	if up.count("glm-k2") != 0 || g.conn("glm", "k1")["status"] != "active" {
		t.Fatal("context length: the same model is never tried again, and nothing cools")
	}
}

// docs/selection.md#waiting-for-a-cooldown, docs/errors.md: every connection cooling → 429 with Retry-After, no
// upstream call; a credential leak in an upstream body is redacted.
func TestRateLimitAnswers(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: sk-secretkey123456}]}
`+testBase)
	up.set("sk-secretkey123456", status(429, `{"error":{"message":"Rate limit reached for sk-secretkey123456","type":"rate_limit_error"}}`, "Retry-After", "20"))
	r := g.chat("p/m")
	if r.code != 429 || r.h.Get("Retry-After") == "" {
		t.Fatalf("first: %d %v %s", r.code, r.h, r.body)
	}
	if strings.Contains(r.body, "sk-secretkey123456") {
		t.Fatalf("credential leaked to the client: %s", r.body)
	}
	r = g.chat("p/m")
	if r.code != 429 || r.errCode() != "rate_limit_error" || r.h.Get("Retry-After") == "" {
		t.Fatalf("second: %d %v %s", r.code, r.h, r.body)
	}
	if up.total() != 1 {
		t.Fatalf("the cooling connection was called again: %d", up.total())
	}
	if c := g.conn("p", "c"); c["status"] != "cooldown" || c["cooldownRemainingMs"].(float64) < 15000 {
		t.Fatalf("Retry-After 20 should set a ~20 s cooldown: %v", c)
	}
}

// docs/breaker.md, docs/errors.md: a single-model request to an OPEN breaker gets 503
// provider_circuit_open with Retry-After.
func TestCircuitOpen(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - {id: loc, type: local, profile: local, baseURL: {{UP}}, models: [m], connections: [{id: a, apiKey: a}, {id: b, apiKey: b}]}
`+testBase+`
  providerBreaker: {local: {failureThreshold: 2, degradationThreshold: 1}, dedup: {connectionMs: 0, transportMs: 0}}
`)
	up.set("a", status(500, `{"error":{"message":"boom"}}`))
	up.set("b", status(500, `{"error":{"message":"boom"}}`))
	r := g.chat("loc/m")
	if r.code != 500 {
		t.Fatalf("first: %d %s", r.code, r.body)
	}
	prov := g.health()["providers"].(map[string]any)["loc"].(map[string]any)
	if prov["state"] != "OPEN" {
		t.Fatalf("breaker: %v", prov)
	}
	r = g.chat("loc/m")
	if r.code != 503 || r.errCode() != "provider_circuit_open" || r.h.Get("Retry-After") == "" {
		t.Fatalf("open: %d %v %s", r.code, r.h, r.body)
	}
	// The refusal counts under the route's provider (it was under empty
	// labels, though the error body names the provider).
	if m := g.do("GET", "/metrics", "").body; !strings.Contains(m, `breakwater_requests_total{connection="",provider="loc",status="503"} 1`) {
		t.Fatalf("the refusal is not counted under its provider:\n%s", grepLines(m, "breakwater_requests_total"))
	}
	// the reset endpoint closes it
	if r := g.do("POST", "/api/resilience/reset", `{"provider":"loc"}`); r.code != 200 {
		t.Fatalf("reset: %d %s", r.code, r.body)
	}
	if st := g.health()["providers"].(map[string]any)["loc"].(map[string]any)["state"]; st != "CLOSED" {
		t.Fatalf("after reset: %v", st)
	}
}

// docs/selection.md#waiting-for-a-cooldown: weighted combos whose targets are all excluded by timers answer
// 503 all_targets_cooling_down with Retry-After and diagnostics.excluded.
func TestAllTargetsCoolingDown(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - {id: a, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: a}]}
  - {id: b, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: b}]}
combos:
  - {id: both, strategy: weighted, targets: [a/m, b/m]}
`+testBase)
	up.set("a", status(429, `{"error":{"message":"daily quota exhausted, try again tomorrow","type":"rate_limit_error"}}`))
	up.set("b", status(429, `{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}`, "Retry-After", "30"))
	g.chat("both")
	g.chat("both")
	calls := up.total()
	r := g.chat("both")
	if r.code != 503 || r.errCode() != "all_targets_cooling_down" || r.h.Get("Retry-After") == "" {
		t.Fatalf("got %d %v %s", r.code, r.h, r.body)
	}
	d := r.json(t)["diagnostics"].(map[string]any)
	if ex := d["excluded"].([]any); len(ex) != 2 {
		t.Fatalf("diagnostics.excluded = %v", ex)
	}
	if up.total() != calls {
		t.Fatal("no upstream call may be made")
	}
}

// docs/selection.md#waiting-for-a-cooldown: waitForCooldown waits for a short cooldown and re-selects; a
// client that leaves during the wait ends it (499).
func TestWaitForCooldown(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: k}]}
resilience:
  waitForCooldown: {enabled: true, maxRetries: 3, maxRetryWaitSec: 5}
`)
	up.set("k", seq(status(429, `{"error":{"message":"slow down"}}`, "Retry-After", "1"), okJSON("after wait")))
	r := g.chat("p/m")
	if r.code != 200 || !strings.Contains(r.body, "after wait") || r.h.Get("X-Breakwater-Attempts") != "2" {
		t.Fatalf("got %d %v %s", r.code, r.h, r.body)
	}

	// the client leaves during the wait: no further upstream call, 499
	up.set("k", status(429, `{"error":{"message":"slow down"}}`, "Retry-After", "3"))
	g.do("POST", "/api/resilience/cooldowns", `{"all":true}`)
	before := up.count("k")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan resp, 1)
	go func() { done <- g.doCtx(ctx, "POST", "/v1/chat/completions", `{"model":"p/m"}`) }()
	eventually(t, "the first attempt", func() bool { return up.count("k") == before+1 })
	cancel()
	<-done
	eventually(t, "a 499 in the metrics", func() bool {
		return strings.Contains(g.do("GET", "/metrics", "").body, `breakwater_requests_total{connection="c",provider="p",status="499"} 1`)
	})
	if up.count("k") != before+1 {
		t.Fatal("the upstream was called again after the client left")
	}
}

// docs/api.md#operator-actions: the emergency fallback routes to its target when every target
// of a request is excluded.
func TestEmergencyFallback(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns+`
  emergencyFallback: {enabled: true, target: oa/gpt-5}
`)
	up.set("glm-k1", status(429, `{"error":{"message":"slow"}}`, "Retry-After", "60"))
	up.set("glm-k2", status(429, `{"error":{"message":"slow"}}`, "Retry-After", "60"))
	r := g.chat("glm/glm-5")
	if r.code != 200 || r.h.Get("X-Breakwater-Provider") != "oa" {
		t.Fatalf("got %d %v %s", r.code, r.h, r.body)
	}
}

// requestBudget.maxAttempts bounds the attempts of one request.
func TestRequestBudget(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: a, apiKey: a}, {id: b, apiKey: b}, {id: c, apiKey: c}]}
`+testBase+`
  requestBudget: {maxAttempts: 2}
`)
	for _, k := range []string{"a", "b", "c"} {
		up.set(k, status(503, `{"error":{"message":"down"}}`))
	}
	r := g.chat("p/m")
	if r.code != 503 || r.errCode() != "request_budget_exhausted" || up.total() != 2 {
		t.Fatalf("got %d %s after %d calls", r.code, r.body, up.total())
	}
}

// docs/admission.md#concurrency-gates, docs/admission.md: composite gate admission errors; a local refusal never
// counts against upstream health.
func TestAdmissionErrors(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - id: p
    baseURL: {{UP}}
    models: [m]
    connections:
      - {id: c, apiKey: k, maxConcurrent: 1, rateLimitOverrides: {maxWaitMs: 150}}
`+testBase+`
  requestQueue: {maxQueueDepth: 1}
`)
	release := make(chan struct{})
	up.set("k", func(w http.ResponseWriter, r *http.Request, n int) {
		<-release
		okJSON("done")(w, r, n)
	})
	first := make(chan resp, 1)
	go func() { first <- g.chat("p/m") }()
	eventually(t, "the first request upstream", func() bool { return up.count("k") == 1 })
	// second queues (depth 1), third is refused at once: queue full
	second := make(chan resp, 1)
	go func() { second <- g.chat("p/m") }()
	eventually(t, "the second request queued", func() bool {
		q := g.health()["queues"].([]any)[0].(map[string]any)
		return q["queued"].(float64) == 1
	})
	r := g.chat("p/m")
	if r.code != 429 || r.errCode() != "RATE_LIMIT_QUEUE_FULL" {
		t.Fatalf("third: %d %s", r.code, r.body)
	}
	r = <-second
	if r.code != 503 || r.errCode() != "SEMAPHORE_TIMEOUT" || r.h.Get("Retry-After") == "" {
		t.Fatalf("second: %d %v %s", r.code, r.h, r.body)
	}
	close(release)
	if r := <-first; r.code != 200 {
		t.Fatalf("first: %d %s", r.code, r.body)
	}
	if up.total() != 1 {
		t.Fatalf("refused requests reached the upstream: %d", up.total())
	}
	if c := g.conn("p", "c"); c["status"] != "active" {
		t.Fatalf("a local refusal cooled the connection: %v", c)
	}
	if st := g.health()["providers"].(map[string]any)["p"].(map[string]any); st["failureCount"].(float64) != 0 {
		t.Fatalf("a local refusal counted in the breaker: %v", st)
	}
}

// The model cap and the fallback: a saturated model gate sends the request
// to the next eligible connection.
func TestModelCapFallsBack(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - id: p
    baseURL: {{UP}}
    models: [m]
    connections:
      - {id: a, apiKey: a, rateLimitOverrides: {modelConcurrency: {m: 1}, maxWaitMs: 50}}
      - {id: b, apiKey: b}
`+testBase)
	release := make(chan struct{})
	up.set("a", func(w http.ResponseWriter, r *http.Request, n int) { <-release; okJSON("a")(w, r, n) })
	first := make(chan resp, 1)
	go func() { first <- g.chat("p/m") }()
	eventually(t, "a busy", func() bool { return up.count("a") == 1 })
	r := g.chat("p/m")
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "b" {
		t.Fatalf("got %d %v %s", r.code, r.h, r.body)
	}
	close(release)
	<-first
}

// docs/selection.md#session-affinity: a session stays on its connection.
func TestSessionAffinity(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: a, apiKey: a}, {id: b, apiKey: b}]}
`+testBase+`
  sessionAffinityTtlMs: 60s
`)
	up.set("a", seq(status(503, `{"error":{"message":"down"}}`), okJSON("a")))
	r := g.chat("p/m", "X-Session-Id", "agent-42")
	if r.h.Get("X-Breakwater-Connection") != "b" {
		t.Fatalf("first: %v", r.h)
	}
	g.do("POST", "/api/resilience/cooldowns", `{"all":true}`)
	// a is healthy again: a new session starts on a, the pinned one stays on b
	if r := g.chat("p/m"); r.h.Get("X-Breakwater-Connection") != "a" {
		t.Fatalf("no session: %v", r.h)
	}
	for i := 0; i < 3; i++ {
		if r := g.chat("p/m", "X-Breakwater-Session", "agent-42"); r.h.Get("X-Breakwater-Connection") != "b" {
			t.Fatalf("pinned session moved: %v", r.h)
		}
	}
	// TTL 0 turns it off
	if r := g.do("PATCH", "/api/resilience", `{"sessionAffinityTtlMs":0}`); r.code != 200 {
		t.Fatalf("patch: %d %s", r.code, r.body)
	}
	if r := g.chat("p/m", "X-Session-Id", "agent-42"); r.h.Get("X-Breakwater-Connection") != "a" {
		t.Fatalf("affinity off: %v", r.h)
	}
}

func TestStreamingPassThrough(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	up.set("glm-k1", sse(streamOpt{chunks: 5}))
	r := g.stream("glm/glm-5")
	ev := sseEvents(r.body)
	if r.code != 200 || r.h.Get("Content-Type") != "text/event-stream" || len(ev) != 8 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("got %d %v\n%s", r.code, r.h, r.body)
	}
	if r.h.Get("X-Breakwater-Connection") != "k1" {
		t.Fatal(r.h)
	}
}

// Events reach the client as they come (flushed chunk by chunk), not at the
// end of the stream.
func TestStreamingFlushesEachChunk(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	gate := make(chan struct{})
	up.set("glm-k1", func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		io := w.(http.Flusher)
		w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"first\"}}]}\n\n"))
		io.Flush()
		<-gate
		w.Write([]byte("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	})
	req, _ := http.NewRequest("POST", g.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"glm/glm-5","stream":true}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, 4096)
	n, _ := res.Body.Read(buf)
	if !strings.Contains(string(buf[:n]), "first") {
		t.Fatalf("first chunk not flushed: %q", buf[:n])
	}
	close(gate)
}

// docs/streams.md: after commit a failure ends the stream with an explicit error
// event, never a truncated success.
func TestPostCommitFailureSendsErrorEvent(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	up.set("glm-k1", sse(streamOpt{chunks: 5, cutAfter: 2}))
	r := g.stream("glm/glm-5")
	ev := sseEvents(r.body)
	last := ev[len(ev)-1]
	if r.code != 200 || !strings.Contains(last, `"error"`) || strings.Contains(r.body, "[DONE]") {
		t.Fatalf("want an SSE error event at the end and no [DONE]:\n%s", r.body)
	}
	if up.total() != 1 {
		t.Fatal("a committed stream must never be replayed")
	}
	// a stall after commit: the stall watchdog ends it the same way
	g2 := newGW(t, up, twoConns+`
  upstreamTimeouts: {streamIdleMs: 200}
`)
	up.set("glm-k1", sse(streamOpt{chunks: 5, stallAfter: 2}))
	r = g2.stream("glm/glm-5")
	ev = sseEvents(r.body)
	if !strings.Contains(ev[len(ev)-1], "stream_stall") {
		t.Fatalf("stall: %s", r.body)
	}
}

// docs/api.md, docs/gateway.md "Headers": an upstream error event after
// the stream was committed reaches the client as the stream's last event,
// redacted like every other copy of an upstream error (it may quote the
// connection's key).
func TestPostCommitUpstreamErrorEventRedacted(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: sk-secretkey123456}]}
`+testBase)
	up.set("sk-secretkey123456", sse(streamOpt{chunks: 4, errAfter: 2,
		errEvent: `{"error":{"code":503,"message":"upstream overloaded for key sk-secretkey123456 (Bearer sk-secretkey123456)"}}`}))
	r := g.stream("p/m")
	if r.code != 200 || !strings.Contains(r.body, "tok1") || !strings.Contains(r.body, "upstream overloaded") {
		t.Fatalf("want the committed stream with its error event: %d\n%s", r.code, r.body)
	}
	if strings.Contains(r.body, "secretkey123456") {
		t.Fatalf("the connection's key reached the client:\n%s", r.body)
	}
	if strings.Contains(r.body, "[DONE]") {
		t.Fatalf("a failed stream must not end with [DONE]:\n%s", r.body)
	}
}

// docs/lockouts.md output validation after commit: a stream of reasoning only ends
// with the empty-answer error event. The finish chunk the upstream sent
// before [DONE] is not passed on first: the client was told the turn ended
// normally ("stop", with usage) and then got the error.
func TestReasoningOnlyStreamEndsWithTheErrorNotAFinish(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, oneConn)
	up.set("c", sse(streamOpt{reasoning: 2, chunks: 0}))
	r := g.stream("p/m")
	if r.code != 200 || !strings.Contains(r.body, "reasoning_content") || !strings.Contains(r.body, "empty_response") {
		t.Fatalf("want the reasoning, then the empty-answer error: %d\n%s", r.code, r.body)
	}
	if strings.Contains(r.body, `"finish_reason":"stop"`) || strings.Contains(r.body, "[DONE]") {
		t.Fatalf("a finish or [DONE] before the error:\n%s", r.body)
	}
	// An ordinary stream still gets its finish and [DONE].
	up.set("c", sse(streamOpt{reasoning: 1, chunks: 2}))
	if r := g.stream("p/m"); !strings.Contains(r.body, `"finish_reason":"stop"`) || !strings.Contains(r.body, "[DONE]") {
		t.Fatalf("an ordinary stream lost its end:\n%s", r.body)
	}
}

// docs/classification.md#restatement, docs/streams.md: an error event or a stall before the first
// byte reached the client is retried elsewhere.
func TestPreCommitStreamFailuresFallBack(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns+`
  upstreamTimeouts: {firstContentMs: 200}
`)
	up.set("glm-k1", sse(streamOpt{errAfter: -1, errEvent: `{"error":{"code":503,"message":"upstream overloaded"}}`}))
	r := g.stream("glm/glm-5")
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k2" || strings.Contains(r.body, "overloaded") {
		t.Fatalf("error event: %d %v\n%s", r.code, r.h, r.body)
	}
	if g.conn("glm", "k1")["status"] != "cooldown" {
		t.Fatal("the in-stream 503 should cool k1 like a 503 status")
	}
	g.do("POST", "/api/resilience/cooldowns", `{"all":true}`)
	// role chunk, then silence: the first-content watchdog moves the
	// request to k2, never back to the k1 that stalled
	up.set("glm-k1", sse(streamOpt{chunks: 3, stallAfter: 0, noRole: false, reasoning: 0, interval: 0, stallFor: 0, cutAfter: 0, errAfter: 0, noDone: false, errEvent: ""}))
	up.set("glm-k1", func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.Write([]byte("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n: keep-alive\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	up.set("glm-k2", sse(streamOpt{chunks: 2}))
	r = g.stream("glm/glm-5")
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k2" {
		t.Fatalf("stall: %d %v\n%s", r.code, r.h, r.body)
	}
	if up.count("glm-k1") != 2 { // 1 error event + 1 stall
		t.Fatalf("k1 calls = %d, want 2", up.count("glm-k1"))
	}
	if c := g.conn("glm", "k1"); c["status"] != "active" || c["lastErrorType"] != "stream_stall" {
		t.Fatalf("a stall records the error but sets no cooldown: %v", c)
	}
}

// Reasoning frames restart the stall budget; heartbeats do not. The
// frames run twice the budget in all, 100 ms apart against a 600 ms
// budget, so only the restart keeps the stream alive and a loaded machine
// has half a second of slack per frame.
func TestReasoningKeepsStreamAlive(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns+`
  upstreamTimeouts: {firstContentMs: 600, streamIdleMs: 600}
`)
	up.set("glm-k1", sse(streamOpt{reasoning: 12, interval: 100 * time.Millisecond, chunks: 1}))
	r := g.stream("glm/glm-5")
	if r.code != 200 || !strings.Contains(r.body, "[DONE]") || r.h.Get("X-Breakwater-Connection") != "k1" {
		t.Fatalf("got %d %v\n%s", r.code, r.h, r.body)
	}
}

// docs/streams.md: the opt-in throughput watchdog aborts a stream that sends chunks
// below the useful rate; it runs on a timer.
func TestThroughputWatchdogAborts(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns+`
  streamRecovery: {throughputWatchdog: {enabled: true, warmupMs: 0, windowMs: 1000, minUsefulBytesPerSecond: 1000, minUsefulBytes: 1}}
`)
	up.set("glm-k1", sse(streamOpt{chunks: 100, interval: 100 * time.Millisecond}))
	r := g.stream("glm/glm-5")
	ev := sseEvents(r.body)
	if !strings.Contains(ev[len(ev)-1], "stream_throughput_too_low") {
		t.Fatalf("got %s", r.body)
	}
}

// An empty stream (no content, no legitimate empty finish) is the model's
// quality failure: retried elsewhere before commit.
func TestEmptyStreamIsRetried(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	up.set("glm-k1", sse(streamOpt{chunks: 0}))
	r := g.stream("glm/glm-5")
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k2" {
		t.Fatalf("got %d %v\n%s", r.code, r.h, r.body)
	}
}

// Client keys: constant-time bearer check and allowedConnections.
func TestClientKeys(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
clientKeys:
  - {id: team-a, key: "${TEAM_A}", allowedConnections: [p/b]}
  - {id: team-b, key: other}
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: a, apiKey: a}, {id: b, apiKey: b}]}
`+testBase, "TEAM_A=secret-a")
	if r := g.chat("p/m"); r.code != 401 || r.errCode() != "invalid_api_key" {
		t.Fatalf("no key: %d %s", r.code, r.body)
	}
	if r := g.chat("p/m", "Authorization", "Bearer wrong"); r.code != 401 || r.h.Get("X-Breakwater-Attempts") != "0" || r.h.Get("X-Request-Id") == "" {
		t.Fatalf("wrong key: %d %v (X-Breakwater-Attempts: 0 as on every chat answer)", r.code, r.h)
	}
	if r := g.chat("p/m", "Authorization", "Bearer secret-a"); r.code != 200 || r.h.Get("X-Breakwater-Connection") != "b" {
		t.Fatalf("team-a is limited to p/b: %d %v", r.code, r.h)
	}
	if r := g.chat("p/m", "Authorization", "Bearer other"); r.code != 200 || r.h.Get("X-Breakwater-Connection") != "a" {
		t.Fatalf("team-b: %d %v", r.code, r.h)
	}
	if r := g.do("GET", "/v1/models", ""); r.code != 401 {
		t.Fatalf("models without a key: %d", r.code)
	}
}

// Concurrency under the race detector: many requests, some failing, with
// the engine behind its mutex and the change pump running.
func TestConcurrentRequests(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	up.set("glm-k1", seq(status(503, `{}`), okJSON("x")))
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if i%2 == 0 {
				g.chat("coding")
			} else {
				g.stream("glm/glm-5")
			}
		}(i)
	}
	wg.Wait()
	if up.total() < 40 {
		t.Fatalf("calls = %d", up.total())
	}
}

// countingStore counts the change records the pump hands to the store.
type countingStore struct {
	*store.Memory
	n atomic.Int64
}

func (c *countingStore) Apply(ch []model.Change) {
	c.n.Add(int64(len(ch)))
	c.Memory.Apply(ch)
}

// The pump hands change records over pumpEvery after the first arrived and
// sleeps while nothing changes: a record made after a quiet spell, with no
// batch pending and the pump's wait not started, still reaches the store.
func TestPumpHandsOverAfterAQuietSpell(t *testing.T) {
	up := newFakeUp(t)
	st := &countingStore{Memory: store.NewMemory(store.MemoryOptions{})}
	g := newGWStore(t, up, twoConns, st)
	up.set("glm-k1", status(503, `{}`))
	up.set("glm-k2", status(503, `{}`))
	g.chat("glm/glm-5") // failures: the connections' windows change
	handedOver := func() bool {
		g.g.mu.Lock()
		defer g.g.mu.Unlock()
		return len(g.g.pending) == 0 && st.n.Load() > 0
	}
	eventually(t, "the first records reach the store", handedOver)
	first := st.n.Load()
	up.set("oa-o1", status(503, `{}`))
	g.chat("oa/gpt-5") // a connection the first request did not touch
	eventually(t, "the records after the quiet spell reach the store", func() bool { return st.n.Load() > first })
}

// docs/admission.md: a paced connection queues a request for its slot; a slot that
// comes after the queue budget is refused at once, before any upstream call.
func TestPacing(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - id: p
    baseURL: {{UP}}
    models: [m]
    connections:
      - {id: c, apiKey: k, rateLimitProtection: true, rateLimitOverrides: {minTimeMs: 400, maxWaitMs: 100}}
  - id: q
    baseURL: {{UP}}
    models: [m]
    connections:
      - {id: c, apiKey: q, rateLimitOverrides: {minTimeMs: 300, maxWaitMs: 5000}}
`+testBase)
	if r := g.chat("p/m"); r.code != 200 {
		t.Fatalf("first: %d %s", r.code, r.body)
	}
	r := g.chat("p/m")
	if r.code != 503 || r.errCode() != "RATE_LIMIT_QUEUE_TIMEOUT" || r.h.Get("Retry-After") == "" {
		t.Fatalf("second: %d %v %s", r.code, r.h, r.body)
	}
	if up.count("k") != 1 {
		t.Fatalf("the refused request reached the upstream")
	}
	// q is apikey: the safety net paces it; the second request waits its turn
	for i := 0; i < 2; i++ {
		if r := g.chat("q/m"); r.code != 200 {
			t.Fatalf("q %d: %d %s", i, r.code, r.body)
		}
	}
}

// server.streamCommit: first-event forwards the role chunk at once, so a
// later error is post-commit (an SSE error event), not a fallback.
func TestStreamCommitFirstEvent(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, "server: {streamCommit: first-event}\n"+twoConns)
	up.set("glm-k1", sse(streamOpt{errAfter: -1, errEvent: `{"error":{"code":503,"message":"overloaded"}}`}))
	r := g.stream("glm/glm-5")
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k1" || !strings.Contains(r.body, "overloaded") || up.count("glm-k2") != 0 {
		t.Fatalf("got %d %v\n%s", r.code, r.h, r.body)
	}
}

// docs/settings.md#defaults: the per-phase timeouts map to the transport outcomes the model
// classifies; the execution bound is a local 504 that never counts against
// the upstream.
func TestUpstreamTimeoutsAndTransportErrors(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: k}]}
  - {id: dead, baseURL: "http://127.0.0.1:1/v1", models: [m], connections: [{id: c, apiKey: d}]}
`+testBase+`
  upstreamTimeouts: {responseHeaderMs: 100}
`)
	up.set("k", slow(5*time.Second, okJSON("late")))
	r := g.chat("p/m")
	if r.code != 504 || up.count("k") != 1 {
		t.Fatalf("header timeout: %d %s", r.code, r.body)
	}
	if c := g.conn("p", "c"); c["status"] != "cooldown" {
		t.Fatalf("a header timeout is a provider-level failure that cools the connection: %v", c)
	}
	if r := g.chat("dead/m"); r.code != 502 {
		t.Fatalf("connection refused: %d %s", r.code, r.body)
	}
	if c := g.conn("dead", "c"); c["lastError"] == nil || !strings.Contains(c["lastError"].(string), "refused") {
		t.Fatalf("refused: %v", c)
	}

	g2 := newGW(t, up, `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: k2}]}
`+testBase+`
  upstreamTimeouts: {responseHeaderMs: 50}
  requestQueue: {executionMaxWaitMs: 150}
`)
	up.set("k2", func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	r = g2.chat("p/m")
	if r.code != 504 || r.errCode() != "RATE_LIMIT_EXECUTION_TIMEOUT" {
		t.Fatalf("execution bound: %d %s", r.code, r.body)
	}
	if c := g2.conn("p", "c"); c["status"] != "active" {
		t.Fatalf("the execution bound must not cool the connection: %v", c)
	}
}

// docs/settings.md#defaults firstContentMs and streamIdleMs hold for a JSON body too: an
// upstream that sends its headers and then nothing, or part of the body and
// then nothing, is cut as a stall (by time, not by an arriving byte) and
// the request is served by the next connection.
func TestJSONBodyStallFailsOver(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns+`
  upstreamTimeouts: {firstContentMs: 80, streamIdleMs: 80}
`)
	for _, tc := range []struct {
		name    string
		partial string
	}{{"first content", ""}, {"idle between reads", `{"id":"x","choices":[`}} {
		up.set("glm-k1", func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			w.Write([]byte(tc.partial))
			w.(http.Flusher).Flush()
			select { // until the gateway cuts it: only the watchdog can
			case <-time.After(time.Minute):
			case <-r.Context().Done():
			}
		})
		up.set("glm-k2", okJSON("from k2"))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r := g.doCtx(ctx, "POST", "/v1/chat/completions", `{"model":"glm/glm-5","messages":[]}`)
		cancel()
		if r.code != 200 || !strings.Contains(r.body, "from k2") || r.h.Get("X-Breakwater-Connection") != "k2" {
			t.Fatalf("%s: a stalled JSON body must fail over: %d %v %s", tc.name, r.code, r.h, r.body)
		}
		g.do("POST", "/api/resilience/cooldowns", `{"all":true}`)
	}
}

// docs/breaker.md#half-open: a half-open probe whose client goes away frees its
// permit (every Begin gets exactly one Record), so the provider is never
// locked out by a dangling probe.
func TestAbortedProbeFreesPermit(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - {id: loc, type: local, profile: local, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: c}]}
`+testBase+`
  providerBreaker: {local: {failureThreshold: 1, degradationThreshold: 1, resetTimeoutMs: 1000}}
`)
	up.set("c", status(503, `{}`))
	g.chat("loc/m")
	state := func() string {
		return g.health()["providers"].(map[string]any)["loc"].(map[string]any)["state"].(string)
	}
	if state() != "OPEN" {
		t.Fatal("want OPEN")
	}
	g.do("POST", "/api/resilience/cooldowns", `{"all":true}`)
	eventually(t, "HALF_OPEN", func() bool { return state() == "HALF_OPEN" })
	blocked := make(chan struct{})
	up.set("c", func(w http.ResponseWriter, r *http.Request, n int) { close(blocked); <-r.Context().Done() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan resp, 1)
	go func() { done <- g.doCtx(ctx, "POST", "/v1/chat/completions", `{"model":"loc/m"}`) }()
	<-blocked
	cancel()
	<-done
	up.set("c", okJSON("probe ok"))
	eventually(t, "the probe permit to be free again", func() bool {
		r := g.chat("loc/m")
		return r.code == 200 && strings.Contains(r.body, "probe ok")
	})
	if state() != "CLOSED" {
		t.Fatalf("a successful probe closes the breaker: %s", state())
	}
}

func TestStreamMissingDoneIsCompleted(t *testing.T) {
	// docs/streams.md / docs/api.md: an upstream that finishes (finish_reason) but
	// never sends [DONE] is served, and the client still gets [DONE], so a
	// finished stream is never mistaken for a cut one.
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	up.set("glm-k1", sse(streamOpt{chunks: 3, noDone: true}))
	r := g.stream("glm/glm-5")
	ev := sseEvents(r.body)
	if r.code != 200 || len(ev) == 0 || ev[len(ev)-1] != "[DONE]" || strings.Count(r.body, "[DONE]") != 1 {
		t.Fatalf("got %d\n%s", r.code, r.body)
	}
}

func TestBrokenJSONSuccessIsNotDelivered(t *testing.T) {
	// docs/lockouts.md / docs/classification.md#verdicts: a 200 whose JSON body is cut short is a quality
	// failure (the gateway's synthetic 502): retried on the next connection,
	// never handed to the client as a success.
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	up.set("glm-k1", func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"message":{"content":"hal`))
	})
	up.set("glm-k2", okJSON("whole"))
	r := g.chat("glm/glm-5")
	if r.code != 200 || !strings.Contains(r.body, "whole") || r.h.Get("X-Breakwater-Connection") != "k2" {
		t.Fatalf("got %d %v\n%s", r.code, r.h, r.body)
	}
}

// The request-path series are looked up once per connection (metrics.go)
// but still appear only when they count something: a request served by k2
// after k1 failed adds requests{status="200"} and upstream{result="200"}
// for k2 only, and k1 (tried, failed) gets its 503 and latency but no
// zero-valued "200" series.
func TestCachedSeriesAppearWhenUsed(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	up.set("glm-k1", status(503, `{"error":{"message":"down"}}`))
	up.set("glm-k2", okJSON("two"))
	if r := g.chat("glm/glm-5"); r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k2" {
		t.Fatalf("got %d via %s", r.code, r.h.Get("X-Breakwater-Connection"))
	}
	m := g.do("GET", "/metrics", "").body
	for _, want := range []string{
		`breakwater_requests_total{connection="k2",provider="glm",status="200"} 1`,
		`breakwater_upstream_attempts_total{connection="k2",provider="glm",result="200"} 1`,
		`breakwater_upstream_attempts_total{connection="k1",provider="glm",result="503"} 1`,
		`breakwater_upstream_latency_seconds_count{connection="k1",provider="glm"} 1`,
		`breakwater_upstream_latency_seconds_count{connection="k2",provider="glm"} 1`,
		`breakwater_http_responses_total{code="200",surface="client"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("missing %s", want)
		}
	}
	for _, unwanted := range []string{
		`breakwater_requests_total{connection="k1",provider="glm",status="200"}`,
		`breakwater_upstream_attempts_total{connection="k1",provider="glm",result="200"}`,
	} {
		if strings.Contains(m, unwanted) {
			t.Errorf("a series that counted nothing: %s", unwanted)
		}
	}
}

// Rule (RFC 9110 docs/streams.md.1, and what net/http did before the cache): every
// chat answer — JSON, stream and error — carries exactly one Date, the
// current second in IMF-fixdate form.
func TestChatAnswersCarryACurrentDate(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	for name, r := range map[string]resp{
		"json":   g.chat("glm/glm-5"),
		"stream": g.stream("glm/glm-5"),
		"error":  g.chat("nope/none"),
	} {
		if len(r.h.Values("Date")) != 1 {
			t.Fatalf("%s: Date %q, want exactly one", name, r.h.Values("Date"))
		}
		d, err := http.ParseTime(r.h.Get("Date"))
		if err != nil || r.h.Get("Date") != d.UTC().Format(http.TimeFormat) {
			t.Fatalf("%s: Date %q is not an IMF-fixdate (%v)", name, r.h.Get("Date"), err)
		}
		if age := time.Since(d); age < -time.Second || age > 5*time.Second {
			t.Fatalf("%s: Date %q is %v away from now", name, r.h.Get("Date"), age)
		}
	}
}

// Rule: the cached Date value follows the second it was asked for.
func TestHTTPDateFollowsTheSecond(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 100, time.UTC)
	a := httpDate(t0)
	if b := httpDate(t0.Add(500 * time.Millisecond)); &a[0] != &b[0] {
		t.Errorf("same second: a new value was made")
	}
	c := httpDate(t0.Add(time.Second).In(time.FixedZone("X", 3600)))
	if a[0] != "Mon, 30 Nov 2026 08:00:00 GMT" || c[0] != "Mon, 30 Nov 2026 08:00:01 GMT" {
		t.Errorf("got %q then %q", a[0], c[0])
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// docs/api.md, docs/api.md#cooldown-manager: no management answer shows a credential. An
// upstream error that quotes the connection's key (here one with a dot,
// which a shape rule alone cuts in two) becomes the connection's
// lastError: health and the cooldown list show it redacted, as the client's
// copy is.
func TestLastErrorNeverShowsTheConnectionKey(t *testing.T) {
	const key = "c3f7a2b94e1d4f0c8a6b5e2d7f9a1c3e.Xk9mPqR2sT4uV6wY"
	up := newFakeUp(t)
	g := newGW(t, up, `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: "`+key+`"}]}
`+testBase)
	up.set(key, status(401, `{"error":{"message":"Incorrect API key provided: `+key+`"}}`))
	if r := g.do("POST", "/v1/chat/completions", `{"model":"p/m","messages":[{"role":"user","content":"hi"}]}`); r.code != 401 || strings.Contains(r.body, "Xk9mPqR2") {
		t.Fatalf("client copy: %d %s", r.code, r.body)
	}
	c := g.conn("p", "c")
	if le, _ := c["lastError"].(string); !strings.Contains(le, "Incorrect API key") || strings.Contains(le, "Xk9mPqR2") || strings.Contains(le, "c3f7a2b9") {
		t.Fatalf("health lastError: %q", le)
	}
	for _, path := range []string{"/api/monitoring/health", "/api/resilience/cooldowns"} {
		if r := g.do("GET", path, "", "Authorization", "Bearer "+g.admin); r.code != 200 || strings.Contains(r.body, "Xk9mPqR2") || strings.Contains(r.body, "c3f7a2b9") {
			t.Fatalf("%s shows the key: %d %s", path, r.code, r.body)
		}
	}
}

// docs/gateway.md "Headers": the upstream's own request id reaches the
// client as X-Upstream-Request-Id on a JSON answer and on a stream alike
// (a stream had none), so a support ticket can name the upstream's id.
func TestUpstreamRequestIDOnJSONAndStream(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, oneConn)
	withID := func(b behaviour) behaviour {
		return func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("X-Request-Id", "up-req-7")
			b(w, r, n)
		}
	}
	up.set("c", withID(okJSON("hi")))
	if r := g.do("POST", "/v1/chat/completions", `{"model":"p/m","messages":[{"role":"user","content":"hi"}]}`); r.code != 200 || r.h.Get("X-Upstream-Request-Id") != "up-req-7" {
		t.Fatalf("JSON: %d %v", r.code, r.h)
	}
	up.set("c", withID(sse(streamOpt{chunks: 2})))
	if r := g.stream("p/m"); r.code != 200 || r.h.Get("X-Upstream-Request-Id") != "up-req-7" {
		t.Fatalf("stream: %d %v", r.code, r.h)
	}
}

// Rule (docs/performance.md): the head a stream's handler sets, with the
// upstream's request id passed on, fits the eight entries a Go map holds
// in its small form; net/http adds the Date. A ninth header would build
// the handler's map, and net/http's copy of it at WriteHeader, as full
// tables on every stream.
func TestStreamHeadFitsASmallMap(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, oneConn)
	sseWithID := sse(streamOpt{chunks: 2})
	up.set("c", func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("X-Request-Id", "up-req-8")
		sseWithID(w, r, n)
	})
	var set int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.g.Handler().ServeHTTP(&headCounter{ResponseWriter: w, n: &set}, r)
	}))
	defer srv.Close()
	res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"p/m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("X-Upstream-Request-Id") != "up-req-8" || res.Header.Get("Date") == "" {
		t.Fatalf("stream: %d %v", res.StatusCode, res.Header)
	}
	if set == 0 || set > 8 {
		t.Errorf("the stream's handler set %d headers, more than a small map holds: %v", set, res.Header)
	}
}

// headCounter counts the headers a handler set when it writes its head.
type headCounter struct {
	http.ResponseWriter
	n *int
}

func (h *headCounter) WriteHeader(code int) {
	*h.n = len(h.Header())
	h.ResponseWriter.WriteHeader(code)
}

func (h *headCounter) Flush() { h.ResponseWriter.(http.Flusher).Flush() }

func (h *headCounter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// GET /v1/models lists only what the key can use (a model outside its
// allowedConnections would answer 404 no_executable_targets), as an array
// even when empty; GET /v1/models/{id} retrieves one entry (OpenAI SDKs'
// models.retrieve), 404 model_not_found for an id the list does not hold.
func TestModelsListFollowsTheKey(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
clientKeys:
  - {id: team-a, key: key-a, allowedConnections: [p/a, p2/a]}
  - {id: team-b, key: key-b}
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: a, apiKey: a}]}
  - {id: q, baseURL: {{UP}}, models: [n], connections: [{id: b, apiKey: b}]}
  - {id: empty, baseURL: {{UP}}, connections: [{id: c, apiKey: c}]}
  - {id: p2, baseURL: {{UP}}, models: [m], connections: [{id: a, apiKey: a}, {id: b, apiKey: b}]}
combos:
  - {id: pq, targets: [p/m, q/n]}
  - {id: qonly, targets: [q/n]}
  - {id: pinned, targets: [{target: p2/m, connection: b}]}
aliases: {fast: p/m, slow: q/n, both: pq}
`+testBase)
	ids := func(key string) []string {
		r := g.do("GET", "/v1/models", "", "Authorization", "Bearer "+key)
		var v struct {
			Object string
			Data   []struct{ ID, Object string }
		}
		if r.code != 200 || json.Unmarshal([]byte(r.body), &v) != nil || v.Object != "list" || v.Data == nil {
			t.Fatalf("list: %d %s", r.code, r.body)
		}
		var out []string
		for _, d := range v.Data {
			out = append(out, d.ID)
		}
		return out
	}
	if got := strings.Join(ids("key-a"), ","); got != "pq,p/m,p2/m,both,fast" {
		t.Fatalf("team-a reaches p and p2/a only (not the combo pinned to p2/b): %s", got)
	}
	if got := strings.Join(ids("key-b"), ","); got != "pq,qonly,pinned,p/m,q/n,p2/m,both,fast,slow" {
		t.Fatalf("team-b reaches all: %s", got)
	}
	if r := g.do("GET", "/v1/models/p/m", "", "Authorization", "Bearer key-a"); r.code != 200 || !strings.Contains(r.body, `"id":"p/m"`) || !strings.Contains(r.body, `"object":"model"`) {
		t.Fatalf("retrieve: %d %s", r.code, r.body)
	}
	if r := g.do("GET", "/v1/models/q/n", "", "Authorization", "Bearer key-a"); r.code != 404 || r.errCode() != "model_not_found" {
		t.Fatalf("retrieve outside the key: %d %s", r.code, r.body)
	}
	// A bare model a chat request accepts (n: listed by q only).
	if r := g.do("GET", "/v1/models/n", "", "Authorization", "Bearer key-b"); r.code != 200 || !strings.Contains(r.body, `"owned_by":"q"`) {
		t.Fatalf("retrieve a bare model: %d %s", r.code, r.body)
	}
	if r := g.do("GET", "/v1/models/n", "", "Authorization", "Bearer key-a"); r.code != 404 {
		t.Fatalf("a bare model outside the key: %d %s", r.code, r.body)
	}
	if r := g.do("GET", "/v1/models/fast", ""); r.code != 401 {
		t.Fatalf("retrieve without a key: %d", r.code)
	}
}

// docs/gateway.md phase timers: an error answer whose body stalls is cut by
// the idle budget (streamIdleMs), not the whole attempt's bound, and is
// classified as the status the upstream sent (here a 503: the next
// connection serves, k1 cools as for a 503), not as an attempt timeout.
func TestStalledErrorBodyIsItsStatus(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
resilience:
  waitForCooldown: {enabled: false}
  upstreamTimeouts: {streamIdleMs: 300ms, attemptMs: 5s}
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: k1, apiKey: k1}, {id: k2, apiKey: k2}]}
`)
	up.set("k1", func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(503)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the body never comes
	})
	up.set("k2", okJSON("hi"))
	r := g.chat("p/m")
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k2" {
		t.Fatalf("k2 serves after k1's stalled 503: %d %v %s", r.code, r.h, r.body)
	}
	c := g.conn("p", "k1")
	if le, _ := c["lastError"].(string); !strings.Contains(le, "503") || strings.Contains(le, "timeout") {
		t.Fatalf("k1 is recorded as the 503 it sent, not a timeout: %v", c)
	}
}

// docs/selection.md#session-affinity: a session pin belongs to the client key that made it. Two
// tenants sending the same session id ("agent-1") have a pin each: one
// moving its pin (its key may use only k2) no longer moves the other's.
func TestSessionPinsAreScopedToTheClientKey(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
clientKeys:
  - {id: team-a, key: key-a}
  - {id: team-b, key: key-b, allowedConnections: [p/k2]}
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: k1, apiKey: k1}, {id: k2, apiKey: k2}]}
resilience:
  sessionAffinityTtlMs: 60s
  waitForCooldown: {enabled: false}
`)
	conn := func(key string) string {
		r := g.chat("p/m", "Authorization", "Bearer "+key, "X-Session-Id", "agent-1")
		if r.code != 200 {
			t.Fatalf("%s: %d %s", key, r.code, r.body)
		}
		return r.h.Get("X-Breakwater-Connection")
	}
	if c := conn("key-a"); c != "k1" {
		t.Fatalf("team-a pins k1: %s", c)
	}
	if c := conn("key-b"); c != "k2" {
		t.Fatalf("team-b: %s", c)
	}
	if c := conn("key-a"); c != "k1" {
		t.Fatalf("team-a's pin was moved by team-b's session of the same id: %s", c)
	}
}

// Options.Waiting (proxy/gateway.go): a cooldown wait is a deliberate wait,
// reported +1 as it starts and -1 as it ends, so a shell that drives the
// clock (the replay) lets time run through it; an answer with no wait
// reports nothing.
func TestWaitingHookReportsCooldownWait(t *testing.T) {
	up := newFakeUp(t)
	var mu sync.Mutex
	var events []int
	g := newGWOpts(t, up, `
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: c, apiKey: k}]}
resilience:
  waitForCooldown: {enabled: true, maxRetries: 3, maxRetryWaitSec: 5}
`, Options{Waiting: func(d int) { mu.Lock(); events = append(events, d); mu.Unlock() }})
	// the upstream's n-th call answers seq's n-th behaviour
	up.set("k", seq(okJSON("at once"), status(429, `{"error":{"message":"slow down"}}`, "Retry-After", "1"), okJSON("after wait")))
	if r := g.chat("p/m"); r.code != 200 {
		t.Fatalf("status %d", r.code)
	}
	mu.Lock()
	if len(events) != 0 {
		t.Fatalf("an answer without a wait reported %v", events)
	}
	mu.Unlock()
	if r := g.chat("p/m"); r.code != 200 || r.h.Get("X-Breakwater-Attempts") != "2" {
		t.Fatalf("status %d attempts %q", r.code, r.h.Get("X-Breakwater-Attempts"))
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(events, []int{1, -1}) {
		t.Fatalf("cooldown wait reported %v, want [1 -1]", events)
	}
}
