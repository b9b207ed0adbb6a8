package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/breakwater-gw/breakwater/faults"
)

// End-to-end tests of POST /v1/messages (docs/surfaces.md) with the
// official Anthropic Go SDK as the client, against a real gateway and the
// fault upstream: every surface runs through the same flow as chat.

const msgConfig = `
server: {managementKey: "${ADMIN}"}
clientKeys:
  - {id: team, key: "${TEAM}"}
providers:
  - id: oa
    baseURL: {{F}}/oa/v1
    models: [gpt]
    connections:
      - {id: o1, apiKey: o1}
  - id: an
    type: anthropic
    baseURL: {{F}}/an/v1
    models: [claude]
    connections:
      - {id: k1, apiKey: ak1}
combos:
  - {id: claude-chain, strategy: priority, targets: [oa/gpt, an/claude]}
  - {id: claude-back, strategy: priority, targets: [an/claude, oa/gpt]}
` + testBase

func newMsgGW(t *testing.T) (*gw, *faults.Server) {
	t.Helper()
	fs := faults.NewServer(nil, faults.Options{})
	ts := httptest.NewServer(fs)
	t.Cleanup(ts.Close)
	return newGW(t, newFakeUp(t), strings.ReplaceAll(msgConfig, "{{F}}", ts.URL), "ADMIN=s3cret", "TEAM=team-key"), fs
}

func anthropicClient(g *gw, key string) anthropic.Client {
	return anthropic.NewClient(anthropicopt.WithBaseURL(g.srv.URL+"/"), anthropicopt.WithAPIKey(key), anthropicopt.WithMaxRetries(0))
}

func msgParams(model string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 256,
		System:   []anthropic.TextBlockParam{{Text: "be brief"}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
}

func textOfMessage(m *anthropic.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// The Messages surface fails over like chat: a 503 of the first target
// (OpenAI-compatible) moves the request to the anthropic-type target, JSON
// and stream, and the client gets Anthropic's shapes with x-api-key auth.
func TestMessagesSDKFailoverOn503(t *testing.T) {
	g, fs := newMsgGW(t)
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "oa"}, Respond: &faults.Response{Status: 503}}}, false)
	c := anthropicClient(g, "team-key")
	ctx := context.Background()
	var hr *http.Response
	m, err := c.Messages.New(ctx, msgParams("claude-chain"), anthropicopt.WithResponseInto(&hr))
	if err != nil {
		t.Fatal(err)
	}
	if textOfMessage(m) != wantText || m.StopReason != anthropic.StopReasonEndTurn || m.Role != "assistant" || m.Usage.OutputTokens == 0 {
		t.Fatalf("message: %+v", m)
	}
	if hr.Header.Get("X-Breakwater-Provider") != "an" || hr.Header.Get("X-Breakwater-Attempts") != "2" || hr.Header.Get("X-Request-Id") == "" {
		t.Fatalf("X-Breakwater-* headers: %v", hr.Header)
	}
	st := c.Messages.NewStreaming(ctx, msgParams("claude-chain"))
	var acc anthropic.Message
	kinds := map[string]int{}
	for st.Next() {
		ev := st.Current()
		kinds[ev.Type]++
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	// input_tokens: message_delta carries the whole count, which the
	// SDK's accumulation keeps (internal/wire/messages_stream.go).
	if textOfMessage(&acc) != wantText || acc.StopReason != anthropic.StopReasonEndTurn || acc.Usage.InputTokens == 0 || acc.Usage.OutputTokens == 0 {
		t.Fatalf("streamed message: %q %q %+v", textOfMessage(&acc), acc.StopReason, acc.Usage)
	}
	for _, k := range []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"} {
		if kinds[k] == 0 {
			t.Fatalf("no %s event: %v", k, kinds)
		}
	}
	if n := fs.Stats().ByConnection["oa/o1"]["503"]; n == 0 {
		t.Fatalf("the first target was not tried: %v", fs.Stats().ByConnection)
	}
}

// A stream cut before content is retried on the next target; a cut after
// content ends the client's stream with Anthropic's error event, never a
// truncated success.
func TestMessagesSDKStreamCut(t *testing.T) {
	g, fs := newMsgGW(t)
	c := anthropicClient(g, "team-key")
	ctx := context.Background()
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "an"}, Respond: &faults.Response{Fault: faults.Cut}}}, false)
	st := c.Messages.NewStreaming(ctx, msgParams("claude-back"))
	var acc anthropic.Message
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil || textOfMessage(&acc) != wantText {
		t.Fatalf("a cut before content fails over: %v %q", err, textOfMessage(&acc))
	}

	// A fresh gateway: the first cut put the anthropic connection in a
	// cooldown.
	g, fs = newMsgGW(t)
	c = anthropicClient(g, "team-key")
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "an"}, Respond: &faults.Response{Fault: faults.Cut, Stream: faults.Stream{StallAfter: 3}}}}, false)
	st = c.Messages.NewStreaming(ctx, msgParams("an/claude"))
	acc = anthropic.Message{}
	for st.Next() {
		_ = acc.Accumulate(st.Current())
	}
	err := st.Err()
	if err == nil {
		t.Fatalf("a cut after content must end with an error event, got a success: %q", textOfMessage(&acc))
	}
	if got := textOfMessage(&acc); got != strings.Repeat(faults.ChunkText, 3) {
		t.Fatalf("content before the cut: %q", got)
	}
	if !strings.Contains(err.Error(), `{"type":"error","error":{"type":"api_error","message":"stream_interrupted:`) {
		t.Fatalf("error event: %v", err)
	}
}

// toolUpstream is an OpenAI-compatible upstream that answers with a
// function call (JSON and stream) and records what it was sent.
type toolUpstream struct {
	mu     sync.Mutex
	bodies []map[string]any
	hdr    http.Header
}

func (u *toolUpstream) last() map[string]any {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bodies[len(u.bodies)-1]
}

func (u *toolUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	u.mu.Lock()
	u.bodies = append(u.bodies, m)
	u.hdr = r.Header.Clone()
	u.mu.Unlock()
	if m["stream"] == true {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"let me look"}}]}`,
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`,
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`,
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
			`{"id":"c1","model":"m","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`,
			`[DONE]`,
		} {
			io.WriteString(w, "data: "+ev+"\n\n")
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`)
}

func newToolGW(t *testing.T) (*gw, *toolUpstream) {
	t.Helper()
	u := &toolUpstream{}
	ts := httptest.NewServer(u)
	t.Cleanup(ts.Close)
	return newGW(t, newFakeUp(t), `
providers:
  - {id: p, baseURL: `+ts.URL+`/v1, models: [m], connections: [{id: a, apiKey: a}]}
  - {id: l, type: local, baseURL: `+ts.URL+`/v1, models: [m], connections: [{id: b, apiKey: b}]}
`+testBase), u
}

func weatherTool() []anthropic.ToolUnionParam {
	return []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("weather"),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}}
}

// Tools: a custom tool becomes a function tool, a function call answer a
// tool_use block (JSON and stream), and a tool_result a tool message.
func TestMessagesSDKTools(t *testing.T) {
	g, up := newToolGW(t)
	c := anthropicClient(g, "any")
	ctx := context.Background()
	p := msgParams("p/m")
	p.Tools = weatherTool()
	p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}
	m, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if m.StopReason != anthropic.StopReasonToolUse || len(m.Content) != 1 || m.Content[0].Type != "tool_use" ||
		m.Content[0].Name != "get_weather" || string(m.Content[0].Input) != `{"city":"Paris"}` || m.Usage.InputTokens != 11 {
		t.Fatalf("tool_use answer: %+v", m)
	}
	sent := up.last()
	tools, _ := sent["tools"].([]any)
	// An openai-type provider gets the budget as max_completion_tokens
	// (surface_native.go: chatPathWire).
	if len(tools) != 1 || sent["tool_choice"] != "required" || sent["max_completion_tokens"] != float64(256) || sent["max_tokens"] != nil {
		t.Fatalf("upstream request: %v", sent)
	}
	if msgs := sent["messages"].([]any); msgs[0].(map[string]any)["role"] != "system" {
		t.Fatalf("system prompt: %v", msgs)
	}

	// The next turn carries the tool_use and its tool_result.
	p.Messages = append(p.Messages, m.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(m.Content[0].ID, "sunny", false)))
	st := c.Messages.NewStreaming(ctx, p)
	var acc anthropic.Message
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.StopReason != anthropic.StopReasonToolUse || len(acc.Content) != 2 || acc.Content[1].Type != "tool_use" ||
		string(acc.Content[1].Input) != `{"city":"Paris"}` || acc.Usage.OutputTokens != 7 || acc.Usage.InputTokens == 0 {
		t.Fatalf("streamed tool_use: %+v", acc)
	}
	msgs := up.last()["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	prev := msgs[len(msgs)-2].(map[string]any)
	if last["role"] != "tool" || last["tool_call_id"] != "call_1" || last["content"] != "sunny" || prev["tool_calls"] == nil {
		t.Fatalf("tool turn: %v", msgs)
	}

	// A generic OpenAI-compatible type (local) keeps max_tokens.
	p = msgParams("l/m")
	p.Tools = weatherTool()
	if _, err := c.Messages.New(ctx, p); err != nil {
		t.Fatal(err)
	}
	if sent := up.last(); sent["max_tokens"] != float64(256) || sent["max_completion_tokens"] != nil {
		t.Fatalf("local-type request: %v", sent)
	}
}

// Errors come back in Anthropic's shape and status: 401 for a missing or
// wrong key (x-api-key or Bearer), 400 naming the field of a bad body,
// 529 overloaded_error when every target is refused for load.
func TestMessagesErrors(t *testing.T) {
	g, fs := newMsgGW(t)
	ctx := context.Background()
	var ae *anthropic.Error
	cw := anthropicClient(g, "wrong")
	_, err := cw.Messages.New(ctx, msgParams("an/claude"))
	if !errors.As(err, &ae) || ae.StatusCode != 401 || !strings.Contains(ae.RawJSON(), `"authentication_error"`) {
		t.Fatalf("wrong key: %v", err)
	}
	r := g.do("POST", "/v1/messages", `{"model":"an/claude","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":5}}]}]}`,
		"Authorization", "Bearer team-key")
	if r.code != 400 || !strings.Contains(r.body, `"type":"error"`) || !strings.Contains(r.body, "invalid_request_error") ||
		!strings.Contains(r.body, "messages") || r.h.Get("X-Breakwater-Attempts") != "0" {
		t.Fatalf("bad body: %d %s %v", r.code, r.body, r.h)
	}
	// A valid request chat cannot carry (a file source, a server tool):
	// served natively by an anthropic-type target, passed over by the
	// others, the typed 400 naming the field when no target can.
	file := `{"model":"%s","max_tokens":10,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f1"}}]}]}`
	if r := g.do("POST", "/v1/messages", fmt.Sprintf(file, "claude-chain"), "x-api-key", "team-key"); r.code != 200 || r.h.Get("X-Breakwater-Provider") != "an" {
		t.Fatalf("native only, served by the anthropic target: %d %s", r.code, r.body)
	}
	if r := g.do("POST", "/v1/messages", fmt.Sprintf(file, "oa/gpt"), "x-api-key", "team-key"); r.code != 400 ||
		!strings.Contains(r.body, "unsupported_by_provider_type") || !strings.Contains(r.body, "messages[0].content[0].source.type") {
		t.Fatalf("native only, no anthropic target: %d %s", r.code, r.body)
	}
	r = g.do("POST", "/v1/messages", `{"model":"an/claude","messages":[]}`, "x-api-key", "team-key")
	if r.code != 400 || !strings.Contains(r.body, "max_tokens") {
		t.Fatalf("missing max_tokens: %d %s", r.code, r.body)
	}
	fs.SetRules([]faults.Rule{{Respond: &faults.Response{Status: 503}}}, false)
	ct := anthropicClient(g, "team-key")
	_, err = ct.Messages.New(ctx, msgParams("claude-chain"))
	if !errors.As(err, &ae) || ae.StatusCode != 529 || !strings.Contains(ae.RawJSON(), `"overloaded_error"`) {
		t.Fatalf("every target 503: %v", err)
	}
	r = g.do("POST", "/v1/messages", `{"model":"nope/x","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "x-api-key", "team-key")
	if r.code != 404 || !strings.Contains(r.body, `"not_found_error"`) || r.h.Get("X-Breakwater-Attempts") == "" {
		t.Fatalf("unknown model: %d %s", r.code, r.body)
	}
}

// count_tokens asks an anthropic-type target; any other route gets the
// gateway's estimate, told apart by X-Breakwater-Token-Count.
func TestMessagesCountTokens(t *testing.T) {
	g, fs := newMsgGW(t)
	c := anthropicClient(g, "team-key")
	params := func(model string) anthropic.MessageCountTokensParams {
		return anthropic.MessageCountTokensParams{Model: anthropic.Model(model),
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(strings.Repeat("word ", 100)))}}
	}
	var hr *http.Response
	n, err := c.Messages.CountTokens(context.Background(), params("claude-chain"), anthropicopt.WithResponseInto(&hr))
	if err != nil {
		t.Fatal(err)
	}
	if hr.Header.Get("X-Breakwater-Token-Count") != "upstream" || hr.Header.Get("X-Breakwater-Provider") != "an" || n.InputTokens < 100 {
		t.Fatalf("the anthropic target counts: %d %v", n.InputTokens, hr.Header)
	}
	if fs.Stats().ByConnection["an/ak1"]["200"] != 1 {
		t.Fatalf("upstream count_tokens calls: %v", fs.Stats().ByConnection)
	}
	n, err = c.Messages.CountTokens(context.Background(), params("oa/gpt"), anthropicopt.WithResponseInto(&hr))
	if err != nil {
		t.Fatal(err)
	}
	if hr.Header.Get("X-Breakwater-Token-Count") != "estimate" || n.InputTokens < 100 || n.InputTokens > 200 {
		t.Fatalf("estimate of 500 bytes: %d %v", n.InputTokens, hr.Header)
	}
	if r := g.do("POST", "/v1/messages/count_tokens", `{"model":"m"}`, "x-api-key", "team-key"); r.code != 400 || !strings.Contains(r.body, "messages") {
		t.Fatalf("no messages: %d %s", r.code, r.body)
	}
}

// Allow-listed client headers (anthropic-beta, anthropic-version,
// openai-beta by default) reach the upstream; credentials never do.
func TestMessagesPassesAllowListedHeaders(t *testing.T) {
	g, up := newToolGW(t)
	r := g.do("POST", "/v1/messages", `{"model":"p/m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
		"x-api-key", "client-secret", "anthropic-beta", "tools-2024", "anthropic-version", "2023-06-01", "X-Other", "no")
	if r.code != 200 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	up.mu.Lock()
	h := up.hdr
	up.mu.Unlock()
	if h.Get("Anthropic-Beta") != "tools-2024" || h.Get("Anthropic-Version") != "2023-06-01" || h.Get("X-Other") != "" ||
		h.Get("X-Api-Key") != "" || h.Get("Authorization") != "Bearer a" {
		t.Fatalf("upstream headers: %v", h)
	}
	_, _, err := ParseConfig("x.yaml", []byte("server: {passHeaders: [anthropic-beta, x-api-key]}\nproviders: [{id: p, baseURL: http://x/v1, models: [m], connections: [{id: a}]}]\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "X-Api-Key carries a credential") {
		t.Fatalf("a credential header in passHeaders: %v", err)
	}
}

// The fault upstream honours the request (faults/shape.go), through every
// translation: max_tokens cuts the answer with the length reason, tools
// get a tool call, a JSON response format a JSON document.
func TestMessagesFaultUpstreamHonoursTheRequest(t *testing.T) {
	g, _ := newMsgGW(t)
	c := anthropicClient(g, "team-key")
	ctx := context.Background()
	for _, model := range []string{"an/claude", "oa/gpt"} {
		p := msgParams(model)
		p.MaxTokens = 8
		m, err := c.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if m.StopReason != anthropic.StopReasonMaxTokens || textOfMessage(m) != strings.Repeat(faults.ChunkText, 2) {
			t.Fatalf("%s max_tokens 8: %q %q", model, m.StopReason, textOfMessage(m))
		}
		p = msgParams(model)
		p.Tools = weatherTool()
		st := c.Messages.NewStreaming(ctx, p)
		var acc anthropic.Message
		for st.Next() {
			if err := acc.Accumulate(st.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.StopReason != anthropic.StopReasonToolUse || len(acc.Content) != 1 || acc.Content[0].Name != "get_weather" || string(acc.Content[0].Input) != "{}" {
			t.Fatalf("%s tools: %+v", model, acc)
		}
	}
	oc := responsesClient(g, "team-key")
	p := respParams("claude-back", "json please")
	p.Text.Format.OfJSONObject = &responses.ResponseFormatJSONObjectParam{}
	r, err := oc.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Text string }
	if err := json.Unmarshal([]byte(r.OutputText()), &doc); err != nil || doc.Text != wantText {
		t.Fatalf("json format: %v %q", err, r.OutputText())
	}
}

// A Messages request to an anthropic-type target goes native: the body
// as the client sent it (cache_control, thinking, top_k kept; only the
// model replaced), and the upstream's own answer back, thinking signature
// included. The same request to an OpenAI-compatible target is
// translated.
func TestMessagesNativeToAnthropicTarget(t *testing.T) {
	native := `{"id":"msg_up","type":"message","role":"assistant","model":"m","content":[{"type":"thinking","thinking":"hmm","signature":"sig123"},{"type":"text","text":"hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":3}}`
	g, c := newCaptureGW(t, "anthropic", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c","object":"chat.completion","model":"gpt","choices":[{"index":0,"message":{"role":"assistant","content":"from chat"},"finish_reason":"stop"}]}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, native)
	})
	body := `{"model":"chain","max_tokens":100,"top_k":5,"thinking":{"type":"enabled","budget_tokens":50},` +
		`"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`
	r := g.do("POST", "/v1/messages", body, "anthropic-beta", "prompt-caching")
	if r.code != 200 || r.body != native {
		t.Fatalf("native answer: %d %s", r.code, r.body)
	}
	req, sent := c.get(0)
	if sent != strings.Replace(body, `"model":"chain"`, `"model":"m"`, 1) || req.Header.Get("X-Api-Key") != "sk-secret-one" ||
		req.Header.Get("Anthropic-Beta") != "prompt-caching" || req.URL.Path != "/v1/messages" {
		t.Fatalf("native request: %s %v\n%s", req.URL.Path, req.Header, sent)
	}
	r = g.do("POST", "/v1/messages", strings.Replace(body, `"chain"`, `"chain-oa-first"`, 1))
	if r.code != 200 || !strings.Contains(r.body, `"text":"from chat"`) || !strings.Contains(r.body, `"type":"message"`) {
		t.Fatalf("translated answer: %d %s", r.code, r.body)
	}
}

// The allow-list applies to chat completions too (served by the fast
// path), to a native adapter's request as to an OpenAI-compatible one.
func TestChatPassesAllowListedHeaders(t *testing.T) {
	g, c := newCaptureGW(t, "anthropic", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"m","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
	})
	if r := g.chat("p/m", "OpenAI-Beta", "assistants=v2", "anthropic-beta", "b1", "Cookie", "c=1"); r.code != 200 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	req, _ := c.get(0)
	if req.Header.Get("Openai-Beta") != "assistants=v2" || req.Header.Get("Anthropic-Beta") != "b1" || req.Header.Get("Cookie") != "" ||
		req.Header.Get("Anthropic-Version") != "2023-06-01" {
		t.Fatalf("upstream headers: %v", req.Header)
	}
}

// An OpenAI-compatible provider's chat request carries the allow-listed
// headers the client sent. A request that sends none goes out on its
// connection's shared head (connRuntime.head): what another request
// passed never sticks to it, and the credential and framing are there.
func TestChatPassesAllowListedHeadersOpenAICompatible(t *testing.T) {
	g, c := newCaptureGW(t, "openai", func(w http.ResponseWriter, r *http.Request) { okJSON("hi")(w, r, 1) })
	sent := [][]string{nil, {"OpenAI-Beta", "assistants=v2", "Cookie", "c=1"}, {"Anthropic-Version", "v9"}, nil}
	for _, h := range sent {
		if r := g.chat("p/m", h...); r.code != 200 {
			t.Fatalf("%d %s", r.code, r.body)
		}
	}
	if c.n() != len(sent) {
		t.Fatalf("%d upstream requests, want %d", c.n(), len(sent))
	}
	for i, want := range []map[string]string{{}, {"Openai-Beta": "assistants=v2"}, {"Anthropic-Version": "v9"}, {}} {
		req, _ := c.get(i)
		for _, k := range []string{"Openai-Beta", "Anthropic-Version", "Anthropic-Beta", "Cookie"} {
			if got := req.Header.Get(k); got != want[k] {
				t.Errorf("request %d: %s = %q, want %q", i, k, got, want[k])
			}
		}
		if req.Header.Get("Authorization") != "Bearer sk-secret-one" || req.Header.Get("Content-Type") != "application/json" ||
			req.Header.Get("Accept") != "application/json" || req.Header.Get("User-Agent") != "breakwater" {
			t.Errorf("request %d: head %v", i, req.Header)
		}
	}
}

// count_tokens asks an anthropic connection only when the client key may
// use it (allowedConnections); otherwise the estimate.
func TestMessagesCountTokensHonoursAllowedConnections(t *testing.T) {
	fs := faults.NewServer(nil, faults.Options{})
	ts := httptest.NewServer(fs)
	t.Cleanup(ts.Close)
	g := newGW(t, newFakeUp(t), strings.ReplaceAll(`
clientKeys:
  - {id: limited, key: lim-key, allowedConnections: [oa/o1]}
providers:
  - {id: oa, baseURL: {{F}}/oa/v1, models: [gpt], connections: [{id: o1, apiKey: o1}]}
  - {id: an, type: anthropic, baseURL: {{F}}/an/v1, models: [claude], connections: [{id: k1, apiKey: ak1}]}
`+testBase, "{{F}}", ts.URL))
	r := g.do("POST", "/v1/messages/count_tokens", `{"model":"an/claude","messages":[{"role":"user","content":"hello"}]}`, "x-api-key", "lim-key")
	if r.code != 200 || r.h.Get("X-Breakwater-Token-Count") != "estimate" || fs.Stats().Total != 0 {
		t.Fatalf("a connection the key may not use was asked: %d %s %v", r.code, r.body, fs.Stats().ByConnection)
	}
}
