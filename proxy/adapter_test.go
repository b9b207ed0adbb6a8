package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/internal/wire"
	"github.com/breakwater-gw/breakwater/model"
)

// Unit tests of the wire adapters (docs/classification.md#provider-types: a provider's type selects
// its wire adapter). Golden documents are compared as JSON values.

func jsonEq(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: output is not JSON: %v\n%s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad golden: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// docs/classification.md#provider-types anthropic: system → system, roles, max_tokens default,
// sampling, stop → stop_sequences, tools and tool calls.
func TestAnthropicRequestTranslation(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"minimal, default max_tokens",
			`{"model":"c","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`},
		{"system, sampling, stop string, stream",
			`{"model":"c","stream":true,"max_tokens":50,"temperature":0.2,"top_p":0.9,"stop":"END","user":"u1","messages":[{"role":"system","content":"be brief"},{"role":"developer","content":[{"type":"text","text":"no lists"}]},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":"ok"},{"role":"user","content":"more"}]}`,
			`{"model":"up","max_tokens":50,"system":"be brief\n\nno lists","temperature":0.2,"top_p":0.9,"stop_sequences":["END"],"stream":true,"metadata":{"user_id":"u1"},"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":[{"type":"text","text":"ok"}]},{"role":"user","content":[{"type":"text","text":"more"}]}]}`},
		{"max_completion_tokens wins, stop list, images",
			`{"model":"c","max_tokens":10,"max_completion_tokens":20,"stop":["x","y"],"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,QUJD"}},{"type":"image_url","image_url":{"url":"https://e/x.png"}}]}]}`,
			`{"model":"up","max_tokens":20,"stop_sequences":["x","y"],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"QUJD"}},{"type":"image","source":{"type":"url","url":"https://e/x.png"}}]}]}`},
		{"tools, tool calls and results (consecutive results merged)",
			`{"model":"c","tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}},{"type":"function","function":{"name":"g"}}],"tool_choice":"required","parallel_tool_calls":false,"messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\":\"x\"}"}},{"id":"t2","type":"function","function":{"name":"g","arguments":""}}]},{"role":"tool","tool_call_id":"t1","content":"r1"},{"role":"tool","tool_call_id":"t2","content":[{"type":"text","text":"r2"}]}]}`,
			`{"model":"up","max_tokens":4096,"tools":[{"name":"f","description":"d","input_schema":{"type":"object","properties":{"a":{"type":"string"}}}},{"name":"g","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"any","disable_parallel_tool_use":true},"messages":[{"role":"user","content":[{"type":"text","text":"go"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":"x"}},{"type":"tool_use","id":"t2","name":"g","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r1"},{"type":"tool_result","tool_use_id":"t2","content":"r2"}]}]}`},
		{"named tool choice",
			`{"model":"c","tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}},"messages":[{"role":"user","content":"go"}]}`,
			`{"model":"up","max_tokens":4096,"tools":[{"name":"f","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"tool","name":"f"},"messages":[{"role":"user","content":[{"type":"text","text":"go"}]}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := parseChatRequest([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			out, err := wire.ChatRequestToMessages(req.body, "up", req.Stream)
			if err != nil {
				t.Fatal(err)
			}
			jsonEq(t, "body", out, c.want)
		})
	}
}

// docs/classification.md#provider-types gemini: contents/parts, systemInstruction, generationConfig,
// function calls and responses.
func TestGeminiRequestTranslation(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"minimal",
			`{"model":"c","messages":[{"role":"user","content":"hi"}]}`,
			`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`},
		{"system and generation config",
			`{"model":"c","max_tokens":64,"temperature":0.5,"top_p":0.8,"stop":["S"],"n":2,"seed":7,"response_format":{"type":"json_object"},"messages":[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"q"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,AAAA"}}]},{"role":"assistant","content":"a"},{"role":"user","content":"q2"}]}`,
			`{"systemInstruction":{"parts":[{"text":"sys"}]},"generationConfig":{"temperature":0.5,"topP":0.8,"maxOutputTokens":64,"stopSequences":["S"],"candidateCount":2,"seed":7,"responseMimeType":"application/json"},"contents":[{"role":"user","parts":[{"text":"q"},{"inlineData":{"mimeType":"image/jpeg","data":"AAAA"}}]},{"role":"model","parts":[{"text":"a"}]},{"role":"user","parts":[{"text":"q2"}]}]}`},
		{"tools, calls and responses",
			`{"model":"c","tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"messages":[{"role":"user","content":"go"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"{\"ok\":true}"},{"role":"assistant","tool_calls":[{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c2","content":"plain"}]}`,
			`{"tools":[{"functionDeclarations":[{"name":"f","description":"d","parameters":{"type":"object"}}]}],"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["f"]}},"contents":[{"role":"user","parts":[{"text":"go"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{"a":1}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"ok":true}}}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"content":"plain"}}}]}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := wire.ChatRequestToGemini([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			jsonEq(t, "body", out, c.want)
		})
	}
	g := &geminiWire{base: "https://g/v1beta"}
	if u := g.url("models/gemini-2.5-pro", true); u != "https://g/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse" {
		t.Fatalf("stream url %s", u)
	}
	if u := g.url("flash", false); u != "https://g/v1beta/models/flash:generateContent" {
		t.Fatalf("url %s", u)
	}
}

// What a native format cannot express is a typed 400 (wireError), never a
// silent drop and never a panic.
func TestAdapterUnsupportedRequest(t *testing.T) {
	cases := []struct {
		typ, in, want string
	}{
		{"anthropic", `{"model":"m","n":2,"messages":[]}`, `"n"`},
		{"anthropic", `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`, "input_audio"},
		{"anthropic", `{"model":"m","response_format":{"type":"json_schema"},"messages":[]}`, "json_schema"},
		{"anthropic", `{"model":"m","messages":[{"role":"function","content":"x"}]}`, `role "function"`},
		{"anthropic", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"[1]"}}]}]}`, "JSON object"},
		{"anthropic", `{"model":"m","tool_choice":"required","messages":[]}`, "needs \"tools\""},
		{"anthropic", `{"model":"m","messages":[{"role":"user","content":7}]}`, "content must be"},
		{"anthropic", `{"model":"m","logprobs":true,"messages":[]}`, "logprobs"},
		{"gemini", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, "data: URL"},
		{"gemini", `{"model":"m","messages":[{"role":"tool","tool_call_id":"zz","content":"r"}]}`, "names no earlier"},
		{"gemini", `{"model":"m","functions":[{"name":"f"}],"messages":[]}`, "functions"},
		{"gemini", `{"model":"m","stop":5,"messages":[]}`, `"stop"`},
		// no conversational turn: a clear 400, not an upstream call with null messages
		{"anthropic", `{"model":"m","messages":[{"role":"system","content":"only a system prompt"}]}`, "no user, assistant or tool message"},
		{"gemini", `{"model":"m","messages":[]}`, "no user, assistant or tool message"},
		// an image in a tool result or an assistant turn is not dropped silently
		{"anthropic", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/png;base64,QQ=="}}]}]}`, "tool messages take text only"},
		{"anthropic", `{"model":"m","messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, "assistant messages take text only"},
		{"gemini", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,QQ=="}}]}]}`, "tool messages take text only"},
		{"gemini", `{"model":"m","messages":[{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/png;base64,QQ=="}}]}]}`, "assistant messages take text only"},
	}
	for _, c := range cases {
		var err error
		if c.typ == "anthropic" {
			_, err = wire.ChatRequestToMessages([]byte(c.in), "m", false)
		} else {
			_, err = wire.ChatRequestToGemini([]byte(c.in))
		}
		var we *wireError
		if !errors.As(err, &we) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: want a wireError mentioning %q, got %v", c.typ, c.in, c.want, err)
			continue
		}
		merr, ok := unsupportedError(c.typ, err)
		if !ok || merr.Code != model.CodeUnsupportedByProviderType || merr.Code.HTTPStatus() != 400 || !strings.Contains(merr.Message, c.want) {
			t.Errorf("rejection: %+v", merr)
		}
	}
}

func TestAnthropicResponseTranslation(t *testing.T) {
	native := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"Hello"},{"type":"tool_use","id":"tu1","name":"f","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":7}}`
	out, err := wire.MessagesAnswerToChat([]byte(native), 42, "m")
	if err != nil {
		t.Fatal(err)
	}
	jsonEq(t, "completion", out, `{"id":"msg_1","object":"chat.completion","created":42,"model":"claude-x","choices":[{"index":0,"message":{"role":"assistant","content":"Hello","reasoning_content":"hmm","tool_calls":[{"id":"tu1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":15,"completion_tokens":7,"total_tokens":22}}`)
	for _, bad := range []string{`{"type":"error","error":{"type":"overloaded_error"}}`, `[]`, `{"type":"message","content":7}`} {
		if _, err := wire.MessagesAnswerToChat([]byte(bad), 0, "m"); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

func TestGeminiResponseTranslation(t *testing.T) {
	native := `{"candidates":[{"content":{"role":"model","parts":[{"text":"plan","thought":true},{"text":"Hi "},{"text":"there"},{"functionCall":{"name":"f","args":{"q":"x"}}}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":4,"thoughtsTokenCount":2,"totalTokenCount":9},"modelVersion":"gemini-x","responseId":"r1"}`
	out, err := wire.GeminiAnswerToChat([]byte(native), 42, "m")
	if err != nil {
		t.Fatal(err)
	}
	jsonEq(t, "completion", out, `{"id":"r1","object":"chat.completion","created":42,"model":"gemini-x","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there","reasoning_content":"plan","tool_calls":[{"id":"call_0","type":"function","function":{"name":"f","arguments":"{\"q\":\"x\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":6,"total_tokens":9}}`)
	// No responseId / modelVersion: an id of its own (never one shared by
	// every such answer) and the model asked for.
	blocked, err := wire.GeminiAnswerToChat([]byte(`{"promptFeedback":{"blockReason":"SAFETY"}}`), 1, "gemini-asked")
	if err != nil {
		t.Fatal(err)
	}
	var b1 struct{ ID string }
	json.Unmarshal(blocked, &b1)
	if !strings.HasPrefix(b1.ID, "chatcmpl-") || len(b1.ID) < 20 {
		t.Fatalf("fallback id %q", b1.ID)
	}
	jsonEq(t, "blocked", blocked, `{"id":"`+b1.ID+`","object":"chat.completion","created":1,"model":"gemini-asked","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"content_filter"}]}`)
	again, _ := wire.GeminiAnswerToChat([]byte(`{"promptFeedback":{"blockReason":"SAFETY"}}`), 1, "gemini-asked")
	if bytes.Equal(again, blocked) {
		t.Fatal("two answers without a responseId got the same id")
	}
	if _, err := wire.GeminiAnswerToChat([]byte(`{"candidates":[]}`), 0, "m"); err == nil {
		t.Error("an answer without candidates is not a completion")
	}
}

// translateStream runs a native SSE body through an adapter's stream
// translator and returns the OpenAI events' data.
func translateStream(t testing.TB, w wireAdapter, native string) []string {
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(native))}
	w.wrap(resp, "m")
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("translate: %v", err)
	}
	return sseEvents(string(b))
}

func deltas(t *testing.T, events []string) (text, finish string, usage map[string]any) {
	t.Helper()
	for _, e := range events {
		if e == "[DONE]" {
			continue
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event is not JSON: %s", e)
		}
		if c["object"] != "chat.completion.chunk" {
			t.Fatalf("not a chunk: %s", e)
		}
		if u, ok := c["usage"].(map[string]any); ok {
			usage = u
		}
		for _, ch := range c["choices"].([]any) {
			m := ch.(map[string]any)
			if d, ok := m["delta"].(map[string]any)["content"].(string); ok {
				text += d
			}
			if f, ok := m["finish_reason"].(string); ok {
				finish = f
			}
		}
	}
	return
}

const anthropicStreamGolden = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-x\",\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo <b>\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"tu1\",\"name\":\"f\",\"input\":{}}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"1}\"}}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":12}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

func TestAnthropicStreamTranslation(t *testing.T) {
	ev := translateStream(t, &anthropicWire{}, anthropicStreamGolden)
	if ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("want [DONE] last: %v", ev)
	}
	text, finish, usage := deltas(t, ev)
	if text != "Hello <b>" || finish != "tool_calls" {
		t.Fatalf("text %q finish %q\n%s", text, finish, strings.Join(ev, "\n"))
	}
	if usage["prompt_tokens"] != 9.0 || usage["completion_tokens"] != 12.0 || usage["total_tokens"] != 21.0 {
		t.Fatalf("usage %v", usage)
	}
	// the tool call: id and name first, then the arguments in pieces
	var args string
	for _, e := range ev {
		if strings.Contains(e, `"tool_calls":[`) {
			if !strings.Contains(e, `"index":0`) {
				t.Fatalf("tool call index: %s", e)
			}
			var c wire.AdapterChunk
			_ = json.Unmarshal([]byte(e), &c)
			args += c.Choices[0].Delta.ToolCalls[0].Function.Arguments
		}
	}
	if args != `{"a":1}` {
		t.Fatalf("arguments %q", args)
	}
	// the watchdogs (model.ParseStreamEvent, docs/streams.md) see text and tool
	// progress in the translated chunks
	var useful, tool bool
	for _, e := range ev {
		pe := model.ParseStreamEvent([]byte(e))
		useful = useful || pe.UsefulBytes > 0
		tool = tool || pe.ToolCall
	}
	if !useful || !tool {
		t.Fatalf("watchdog view: useful %v tool %v", useful, tool)
	}
}

// An in-stream native error is passed through as one data event with an
// "error" member, so pipeStream classifies the native body exactly as it
// classifies an OpenAI in-stream error (model.StreamErrorStatus).
func TestAdapterStreamErrors(t *testing.T) {
	ev := translateStream(t, &anthropicWire{}, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
	if len(ev) != 1 || !isErrorEventT([]byte(ev[0])) {
		t.Fatalf("anthropic error: %v", ev)
	}
	if st, _ := model.StreamErrorStatus([]byte(ev[0])); st != 529 {
		t.Fatalf("overloaded_error → %d, want 529", st)
	}
	gm := `{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"30s"}]}}`
	ev = translateStream(t, &geminiWire{}, "data: "+gm+"\n\n")
	if len(ev) != 1 || ev[0] != gm {
		t.Fatalf("gemini error must pass unchanged: %v", ev)
	}
	if st, _ := model.StreamErrorStatus([]byte(ev[0])); st != 429 {
		t.Fatalf("gemini error → %d", st)
	}
	// A native event that does not parse becomes data pipeStream reads as
	// a garbled chunk (not JSON: the output-validation failure, as for the
	// openai type and the simulator's malformed-chunk), never an error
	// object that would classify as an upstream 502.
	for _, w := range []wireAdapter{&anthropicWire{}, &geminiWire{}} {
		ev = translateStream(t, w, "data: {not json\n\n")
		if len(ev) != 1 || model.ParseStreamEvent([]byte(ev[0])) != (model.StreamEvent{Malformed: true}) {
			t.Fatalf("malformed: %v", ev)
		}
	}
}

func TestGeminiStreamTranslation(t *testing.T) {
	native := "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hi\"}]},\"index\":0}],\"modelVersion\":\"gemini-x\",\"responseId\":\"r1\"}\r\n\r\n" +
		"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\" there\"}]},\"finishReason\":\"MAX_TOKENS\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":2,\"candidatesTokenCount\":3,\"totalTokenCount\":5}}\r\n\r\n"
	ev := translateStream(t, &geminiWire{}, native)
	if ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("a finished gemini stream ends with [DONE]: %v", ev)
	}
	text, finish, usage := deltas(t, ev)
	if text != "Hi there" || finish != "length" || usage["total_tokens"] != 5.0 {
		t.Fatalf("text %q finish %q usage %v", text, finish, usage)
	}
	if !strings.Contains(ev[0], `"role":"assistant"`) || !strings.Contains(ev[0], `"id":"r1"`) {
		t.Fatalf("first chunk: %s", ev[0])
	}
	// a stream cut before any finishReason gets no [DONE]: pipeStream sees
	// an early EOF, never a complete answer
	ev = translateStream(t, &geminiWire{}, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}]}}]}\n\n")
	if ev[len(ev)-1] == "[DONE]" {
		t.Fatalf("cut stream got [DONE]: %v", ev)
	}
	// function calls stream as whole tool calls
	ev = translateStream(t, &geminiWire{}, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":{\"a\":1}}}]},\"finishReason\":\"STOP\"}]}\n\n")
	_, finish, _ = deltas(t, ev)
	if finish != "tool_calls" || !strings.Contains(strings.Join(ev, ""), `"id":"call_0"`) {
		t.Fatalf("function call stream: %v", ev)
	}
	// two candidates (n: 2) finishing in one event: the answer's usage goes
	// out once, not once per candidate's finish
	ev = translateStream(t, &geminiWire{}, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]},\"finishReason\":\"STOP\",\"index\":0},"+
		"{\"content\":{\"parts\":[{\"text\":\"b\"}]},\"finishReason\":\"STOP\",\"index\":1}],\"usageMetadata\":{\"promptTokenCount\":2,\"candidatesTokenCount\":4,\"totalTokenCount\":6}}\n\n")
	if n := strings.Count(strings.Join(ev, ""), `"usage"`); n != 1 {
		t.Fatalf("usage sent %d times for one answer: %v", n, ev)
	}
}

// A non-streamed 2xx the adapter cannot read is served as non-JSON bytes,
// so deliverJSON takes the output-validation path (OutcomeQuality).
func TestAdapterJSONUntranslatable(t *testing.T) {
	for _, w := range []wireAdapter{&anthropicWire{}, &geminiWire{}} {
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"unexpected":true}`))}
		w.wrap(resp, "m")
		b, _ := io.ReadAll(resp.Body)
		if json.Valid(b) {
			t.Fatalf("%T: untranslatable answer must not be valid JSON: %s", w, b)
		}
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, "back\\slash", "nl\n", "<&>", "héllo", "\x00\x1f", "bad\xffutf8", "\u2028"} {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("%q: got %s want %s", s, got, want)
		}
	}
}

// Anthropic's stop_sequence stop is a chat "stop" that names the sequence
// in the choice's stop_reason (vLLM's field), in the JSON answer and in
// the stream, so a Messages client of a translated answer gets
// stop_sequence back instead of end_turn; a natural end names none.
func TestAnthropicStopSequenceReachesTheChatAnswer(t *testing.T) {
	native := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"a"}],"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":1,"output_tokens":1}}`
	out, err := wire.MessagesAnswerToChat([]byte(native), 42, "m")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte(`"finish_reason":"stop","stop_reason":"END"`)) {
		t.Fatalf("JSON: %s", out)
	}
	out, _ = wire.MessagesAnswerToChat([]byte(strings.Replace(native, `"stop_reason":"stop_sequence","stop_sequence":"END"`, `"stop_reason":"end_turn","stop_sequence":null`, 1)), 42, "m")
	if bytes.Contains(out, []byte(`"stop_reason"`)) {
		t.Fatalf("end_turn names no sequence: %s", out)
	}
	ev := translateStream(t, &anthropicWire{}, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"model\":\"c\",\"usage\":{\"input_tokens\":1}}}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n"+
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"},\"usage\":{\"output_tokens\":1}}\n\n"+
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	if !strings.Contains(strings.Join(ev, "\n"), `"finish_reason":"stop","stop_reason":"END"`) {
		t.Fatalf("stream: %v", ev)
	}
	chat := []byte(`{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop","stop_reason":"END"}]}`)
	if m, _ := wire.ChatToMessages(chat, "claude"); !bytes.Contains(m, []byte(`"stop_reason":"stop_sequence","stop_sequence":"END"`)) {
		t.Fatalf("back to Messages: %s", m)
	}
}
