package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/internal/wire"
)

// End-to-end tests of the wire adapters (docs/classification.md#provider-types): an OpenAI client
// through the gateway to anthropic- and gemini-type providers, served by
// the fault upstream speaking their native formats.

const wireConfig = `
server: {managementKey: "${ADMIN}"}
providers:
  - id: an
    type: anthropic
    baseURL: {{F}}/an/v1
    models: [claude]
    connections:
      - {id: k1, apiKey: ak1}
  - id: gm
    type: gemini
    baseURL: {{F}}/gm/v1
    models: [flash]
    connections:
      - {id: k1, apiKey: gk1}
  - id: oa
    baseURL: {{F}}/oa/v1
    models: [gpt]
    connections:
      - {id: o1, apiKey: o1}
combos:
  - {id: chain, strategy: priority, targets: [an/claude, oa/gpt]}
` + testBase

// newWireGW starts a gateway whose providers all point at one fault
// upstream.
func newWireGW(t *testing.T) (*gw, *faults.Server) {
	t.Helper()
	fs := faults.NewServer(nil, faults.Options{})
	ts := httptest.NewServer(fs)
	t.Cleanup(ts.Close)
	return newGW(t, newFakeUp(t), strings.ReplaceAll(wireConfig, "{{F}}", ts.URL), "ADMIN=s3cret"), fs
}

var wantText = strings.Repeat(faults.ChunkText, faults.DefaultChunks)

func checkCompletion(t *testing.T, r resp) {
	t.Helper()
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	var c wire.AdapterCompletion
	if err := json.Unmarshal([]byte(r.body), &c); err != nil || c.Object != "chat.completion" || len(c.Choices) != 1 {
		t.Fatalf("not a chat.completion: %v %s", err, r.body)
	}
	ch := c.Choices[0]
	if ch.Message.Content == nil || *ch.Message.Content != wantText || ch.FinishReason != "stop" || ch.Message.Role != "assistant" {
		t.Fatalf("choice: %s", r.body)
	}
	if c.Usage == nil || c.Usage.PromptTokens != 8 || c.Usage.TotalTokens != 8+4*faults.DefaultChunks {
		t.Fatalf("usage: %s", r.body)
	}
}

func checkStream(t *testing.T, r resp) {
	t.Helper()
	if r.code != 200 || !strings.HasPrefix(r.h.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %v: %s", r.code, r.h, r.body)
	}
	ev := sseEvents(r.body)
	if len(ev) == 0 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("a stream ends with data: [DONE]: %s", r.body)
	}
	text, finish, _ := deltas(t, ev)
	if text != wantText || finish != "stop" {
		t.Fatalf("text %q finish %q", text, finish)
	}
}

// docs/classification.md#provider-types: type anthropic speaks the Messages API (x-api-key) and the
// client gets OpenAI JSON and SSE.
func TestWireAnthropicE2E(t *testing.T) {
	g, fs := newWireGW(t)
	checkCompletion(t, g.chat("an/claude"))
	checkStream(t, g.stream("an/claude"))
	// the fault upstream counts attempts by the key it read from x-api-key
	if n := fs.Stats().ByConnection["an/ak1"]["200"]; n != 2 {
		t.Fatalf("upstream saw %v", fs.Stats().ByConnection)
	}
	// the connection test uses the adapter's models URL and auth headers
	if r := admin(g, "POST", "/api/providers/an/test", ""); r.code != 200 || !strings.Contains(r.body, `"ok":true`) {
		t.Fatalf("connection test: %d %s", r.code, r.body)
	}
}

func TestWireGeminiE2E(t *testing.T) {
	g, fs := newWireGW(t)
	checkCompletion(t, g.chat("gm/flash"))
	checkStream(t, g.stream("gm/flash"))
	if n := fs.Stats().ByConnection["gm/gk1"]["200"]; n != 2 {
		t.Fatalf("upstream saw %v", fs.Stats().ByConnection)
	}
	if r := admin(g, "POST", "/api/providers/gm/test", ""); r.code != 200 || !strings.Contains(r.body, `"ok":true`) {
		t.Fatalf("connection test: %d %s", r.code, r.body)
	}
}

// docs/classification.md#verdicts with the docs/classification.md#provider-types built-in anthropic rules: a native 529
// (overloaded) with Retry-After reaches classification untranslated — the
// connection cools for at least the stated 25 s — and the client gets the
// native error body.
func TestWireAnthropicNativeError(t *testing.T) {
	g, fs := newWireGW(t)
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "an"},
		Respond: &faults.Response{Status: 529, Headers: map[string]string{"retry-after": "25"}}}}, false)
	r := g.chat("an/claude")
	if r.code < 500 || !strings.Contains(r.body, "overloaded_error") {
		t.Fatalf("want the native 529 error: %d %s", r.code, r.body)
	}
	if c := g.conn("an", "k1"); c["status"] != "cooldown" || c["cooldownRemainingMs"].(float64) < 20000 {
		t.Fatalf("Retry-After 25 must be seen by classification: %v", c)
	}
	// a 429 with Retry-After: rate limited, cooldown = the hint
	g2, fs2 := newWireGW(t)
	fs2.SetRules([]faults.Rule{{Match: faults.Match{Provider: "an"},
		Respond: &faults.Response{Status: 429, Headers: map[string]string{"retry-after": "40"}}}}, false)
	r = g2.chat("an/claude")
	if r.code != 429 || r.h.Get("Retry-After") == "" || !strings.Contains(r.body, "rate_limit_error") {
		t.Fatalf("429: %d %v %s", r.code, r.h, r.body)
	}
	if c := g2.conn("an", "k1"); c["status"] != "cooldown" || c["cooldownRemainingMs"].(float64) < 35000 {
		t.Fatalf("429 Retry-After 40: %v", c)
	}
}

// docs/classification.md#provider-types gemini (RetryInfo, per-model quota): a native 429 whose body
// carries google.rpc.RetryInfo reaches the built-in gemini rules: a
// per-model (family) lockout, not a connection cooldown.
func TestWireGeminiRetryInfo(t *testing.T) {
	g, fs := newWireGW(t)
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "gm"}, Respond: &faults.Response{Status: 429,
		Body: `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"30s"}]}}`}}}, false)
	r := g.chat("gm/flash")
	// The client gets the 429 in the OpenAI shape (docs/api.md), with the
	// native message and status; the retry time is in Retry-After.
	if r.code != 429 || r.errCode() != "RESOURCE_EXHAUSTED" || !strings.Contains(r.body, `"message":"Resource has been exhausted`) ||
		!strings.Contains(r.body, `"type":"rate_limit_error"`) {
		t.Fatalf("want the 429 in the OpenAI shape: %d %s", r.code, r.body)
	}
	if ra := r.h.Get("Retry-After"); ra == "" || ra == "1" {
		t.Fatalf("RetryInfo 30s should set Retry-After: %v", r.h)
	}
	lk := admin(g, "GET", "/api/resilience/model-cooldowns", "")
	if lk.code != 200 || !strings.Contains(lk.body, `"flash"`) {
		t.Fatalf("want a gemini model lockout: %d %s", lk.code, lk.body)
	}
}

// docs/classification.md#verdicts "next connection, then next target": a failing anthropic
// connection falls over to an openai-type target in the same combo.
func TestWireFailoverAnthropicToOpenAI(t *testing.T) {
	g, fs := newWireGW(t)
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "an"}, Respond: &faults.Response{Status: 529}}}, false)
	for _, stream := range []bool{false, true} {
		var r resp
		if stream {
			r = g.stream("chain")
			checkStream(t, r)
		} else {
			r = g.chat("chain")
			checkCompletion(t, r)
		}
		if r.h.Get("X-Breakwater-Provider") != "oa" {
			t.Fatalf("served by %q", r.h.Get("X-Breakwater-Provider"))
		}
	}
	if fs.Stats().ByConnection["an/ak1"]["529"] == 0 {
		t.Fatalf("the anthropic connection was not tried: %v", fs.Stats().ByConnection)
	}
}

// capture is an upstream that records requests and answers with a fixed
// handler.
type capture struct {
	mu   sync.Mutex
	reqs []*http.Request
	body []string
	h    http.HandlerFunc
}

func (c *capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.body = append(c.body, string(b))
	c.mu.Unlock()
	c.h(w, r)
}

// get returns the i-th request and its body.
func (c *capture) get(i int) (*http.Request, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reqs[i], c.body[i]
}

func (c *capture) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs)
}

func newCaptureGW(t *testing.T, typ string, h http.HandlerFunc) (*gw, *capture) {
	c := &capture{h: h}
	ts := httptest.NewServer(c)
	t.Cleanup(ts.Close)
	y := fmt.Sprintf(`
providers:
  - id: p
    type: %s
    baseURL: %s/v1
    models: [m]
    connections:
      - {id: k1, apiKey: sk-secret-one}
  - id: oa
    baseURL: %s/oa
    models: [gpt]
    connections: [{id: o1}]
combos:
  - {id: chain, strategy: priority, targets: [p/m, oa/gpt]}
  - {id: chain-oa-first, strategy: priority, targets: [oa/gpt, p/m]}
`+testBase, typ, ts.URL, ts.URL)
	return newGW(t, newFakeUp(t), y), c
}

// The upstream request: URL, credential headers and native body.
func TestWireUpstreamRequest(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }
	g, c := newCaptureGW(t, "anthropic", ok)
	g.do("POST", "/v1/chat/completions", `{"model":"p/m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}]}`)
	r, body := c.get(0)
	if r.URL.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != "sk-secret-one" || r.Header.Get("Anthropic-Version") != "2023-06-01" || r.Header.Get("Authorization") != "" {
		t.Fatalf("anthropic request: %s %v", r.URL, r.Header)
	}
	jsonEq(t, "anthropic body", []byte(body), `{"model":"m","max_tokens":4096,"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)

	g, c = newCaptureGW(t, "gemini", ok)
	g.do("POST", "/v1/chat/completions", `{"model":"p/m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	r, body = c.get(0)
	if r.URL.Path != "/v1/models/m:streamGenerateContent" || r.URL.RawQuery != "alt=sse" || r.Header.Get("X-Goog-Api-Key") != "sk-secret-one" || r.Header.Get("Authorization") != "" {
		t.Fatalf("gemini request: %s %v", r.URL, r.Header)
	}
	jsonEq(t, "gemini body", []byte(body), `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`)
}

// A request the native format cannot express is a 400 without calling the
// upstream (request-scoped: it stops, no health effect).
func TestWireUnsupportedIs400(t *testing.T) {
	g, c := newCaptureGW(t, "anthropic", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	r := g.do("POST", "/v1/chat/completions", `{"model":"p/m","n":3,"messages":[{"role":"user","content":"hi"}]}`)
	if r.code != 400 || r.errCode() != "unsupported_by_provider_type" {
		t.Fatalf("want 400 unsupported_by_provider_type: %d %s", r.code, r.body)
	}
	if c.n() != 0 {
		t.Fatalf("the upstream was called")
	}
	if c := g.conn("p", "k1"); c["status"] != "active" {
		t.Fatalf("no health effect: %v", c)
	}
}

// A combo target whose provider type cannot express the request is passed
// over, not the end of the request: the next target (an openai type) serves
// it, and the upstream that cannot is never called or queued for. When the
// only other target failed, the client gets that failure, not a 400 blaming
// its request.
func TestWireUnsupportedComboTargetIsPassedOver(t *testing.T) {
	var fail atomic.Bool
	g, c := newCaptureGW(t, "anthropic", func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(503)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"gpt","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	})
	body := `{"model":"chain","logprobs":true,"messages":[{"role":"user","content":"hi"}]}`
	r := g.do("POST", "/v1/chat/completions", body)
	if r.code != 200 || r.h.Get("X-Breakwater-Provider") != "oa" || r.h.Get("X-Breakwater-Attempts") != "1" {
		t.Fatalf("served by the openai target in one attempt: %d %v %s", r.code, r.h, r.body)
	}
	if c.n() != 1 {
		t.Fatalf("only the openai upstream is called, got %d calls", c.n())
	}
	if req, _ := c.get(0); req.URL.Path != "/oa/chat/completions" {
		t.Fatalf("called %s", req.URL.Path)
	}
	if st := g.conn("p", "k1"); st["status"] != "active" {
		t.Fatalf("no health effect on the passed-over target: %v", st)
	}

	fail.Store(true)
	r = g.do("POST", "/v1/chat/completions", strings.Replace(body, `"chain"`, `"chain-oa-first"`, 1))
	if r.code != 503 || r.errCode() == "unsupported_by_provider_type" {
		t.Fatalf("the upstream's 503 is the answer: %d %s", r.code, r.body)
	}
}

// docs/classification.md#restatement through an adapter: an anthropic in-stream error
// event before any content is classified from its native body (overloaded
// → 529) and retried on the next target; after content it ends the
// client's stream with an error event, never a truncated success.
func TestWireInStreamError(t *testing.T) {
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"model\":\"m\",\"usage\":{\"input_tokens\":1}}}\n\n"
	errEv := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	delta := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"partial\"}}\n\n"
	var mode atomic.Value
	h := func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/oa") {
			if strings.Contains(r.Header.Get("Accept"), "event-stream") {
				sse(streamOpt{chunks: 2})(w, r, 1)
				return
			}
			okJSON("from openai")(w, r, 1)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, start)
		if mode.Load() == "after" {
			io.WriteString(w, delta)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, errEv)
	}
	g, _ := newCaptureGW(t, "anthropic", h)
	mode.Store("before")
	r := g.stream("chain")
	if r.code != 200 || r.h.Get("X-Breakwater-Provider") != "oa" || !strings.Contains(r.body, "tok0") {
		t.Fatalf("before commit: want fail-over to oa: %d %v %s", r.code, r.h, r.body)
	}
	if c := g.conn("p", "k1"); c["status"] != "cooldown" {
		t.Fatalf("the overloaded event counts as an upstream failure: %v", c)
	}
	g2, _ := newCaptureGW(t, "anthropic", h)
	mode.Store("after")
	r = g2.stream("p/m")
	ev := sseEvents(r.body)
	if r.code != 200 || !strings.Contains(r.body, "partial") || len(ev) == 0 || !isErrorEventT([]byte(ev[len(ev)-1])) || strings.Contains(r.body, "[DONE]") {
		t.Fatalf("after commit: want content then an error event: %s", r.body)
	}
	// In the OpenAI shape, as before commit and in a JSON answer (it went
	// out in anthropic's own {"type":"error",…}).
	if last := ev[len(ev)-1]; !strings.HasPrefix(last, `{"error":{`) || !strings.Contains(last, `"message":"Overloaded"`) || strings.Contains(r.body, "event: error") {
		t.Fatalf("after commit: the error event is not in the OpenAI shape: %q", last)
	}
}

// The official openai-go SDK against an anthropic-type provider: JSON and
// streaming, unchanged client code.
func TestWireOpenAISDKAnthropic(t *testing.T) {
	g, _ := newWireGW(t)
	client := openai.NewClient(option.WithBaseURL(g.srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "an/claude", Messages: []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage("be brief"), openai.UserMessage("hi")}, MaxTokens: openai.Int(100)}
	res, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil || res.Choices[0].Message.Content != wantText || res.Choices[0].FinishReason != "stop" || res.Usage.PromptTokens != 8 {
		t.Fatalf("JSON: %v %+v", err, res)
	}
	st := client.Chat.Completions.NewStreaming(context.Background(), params)
	var text strings.Builder
	finish := ""
	for st.Next() {
		for _, c := range st.Current().Choices {
			text.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if err := st.Err(); err != nil || text.String() != wantText || finish != "stop" {
		t.Fatalf("stream: %v %q %q", err, text.String(), finish)
	}
}

// An adapted stream from an upstream that names no id or model: every
// chunk carries the same id of the gateway's own and the model asked for
// (the text deltas had an empty id and model while the role and finish
// chunks had them).
func TestWireStreamChunksShareOneIdentity(t *testing.T) {
	g, _ := newCaptureGW(t, "gemini", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hel\"}]},\"index\":0}]}\n\n"+
			"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"lo\"}]},\"finishReason\":\"STOP\",\"index\":0}]}\n\n")
	})
	r := g.do("POST", "/v1/chat/completions", `{"model":"p/m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	ids, models := map[string]bool{}, map[string]bool{}
	n := 0
	for _, ev := range sseEvents(r.body) {
		if ev == "[DONE]" {
			continue
		}
		var c struct{ ID, Model string }
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		ids[c.ID], models[c.Model] = true, true
		n++
	}
	if r.code != 200 || n < 4 || len(ids) != 1 || ids[""] || len(models) != 1 || !models["m"] {
		t.Fatalf("want %d chunks with one id and model m, got ids %v models %v\n%s", n, ids, models, r.body)
	}
}
