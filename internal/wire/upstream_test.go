package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// A chat answer reads as a Gemini generateContent answer: reasoning as a
// thought part, the text, each call as a functionCall (arguments that are
// not an object as {}), the finish reason mapped and the usage counted.
func TestChatToGeminiCarriesPartsFinishAndUsage(t *testing.T) {
	chat := `{"id":"c1","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"hm","content":"Hi \"there\"",` +
		`"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"q\":1}"}},{"id":"b","type":"function","function":{"name":"g","arguments":"oops"}}]},` +
		`"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":5}}`
	got, err := ChatToGemini([]byte(chat), "gm", "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"candidates":[{"content":{"role":"model","parts":[{"text":"hm","thought":true},{"text":"Hi \"there\""},` +
		`{"functionCall":{"name":"f","args":{"q":1}}},{"functionCall":{"name":"g","args":{}}}]},"finishReason":"MAX_TOKENS","index":0}],` +
		`"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":5,"totalTokenCount":8},"modelVersion":"gm","responseId":"r1"}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// No content at all is still a candidate with one empty text part.
	got, _ = ChatToGemini([]byte(`{"choices":[{"message":{"content":null},"finish_reason":"stop"}]}`), "gm", "r1")
	if !strings.Contains(string(got), `"parts":[{"text":""}]},"finishReason":"STOP"`) || strings.Contains(string(got), "usageMetadata") {
		t.Fatalf("empty answer: %s", got)
	}
	if _, err := ChatToGemini([]byte(`{"choices":[]}`), "gm", "r1"); err == nil {
		t.Fatal("an answer without a choice translated")
	}
}

// A chat stream reads as Gemini SSE events: one per text or reasoning
// delta; tool call pieces wait for the finish, whose event carries the
// whole calls with finishReason and usage; [DONE] and End add nothing.
func TestGemStreamSendsCallsWholeWithTheFinish(t *testing.T) {
	s := &GemStream{Model: "gm", ID: "r1"}
	var out []byte
	for _, ev := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning":"r"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":8,"completion_tokens":4,"total_tokens":12}}`,
		`[DONE]`,
	} {
		out = s.Event(out, []byte(ev))
	}
	out = s.End(out)
	want := `data: {"candidates":[{"content":{"role":"model","parts":[{"text":"Hi"}]},"index":0}],"modelVersion":"gm","responseId":"r1"}` + "\n\n" +
		`data: {"candidates":[{"content":{"role":"model","parts":[{"text":"r","thought":true}]},"index":0}],"modelVersion":"gm","responseId":"r1"}` + "\n\n" +
		`data: {"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"f","args":{"q":1}}}]},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":4,"totalTokenCount":12},"modelVersion":"gm","responseId":"r1"}` + "\n\n"
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

// Bad stream input is an error event, never a panic, and a tool call
// index far past the calls seen allocates nothing.
func TestGemStreamBadInput(t *testing.T) {
	s := &GemStream{Model: "gm", ID: "r1"}
	out := s.Event(nil, []byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":100000000,"function":{"name":"f"}}]}}]}`))
	if len(out) != 0 || len(s.calls) != 0 {
		t.Fatalf("far index: %q, %d calls", out, len(s.calls))
	}
	out = s.Event(nil, []byte(`{"choices":`))
	var e struct {
		Error struct {
			Code   int    `json:"code"`
			Status string `json:"status"`
		} `json:"error"`
	}
	if d, ok := strings.CutPrefix(string(out), "data: "); !ok || json.Unmarshal([]byte(d), &e) != nil || e.Error.Code != 502 || e.Error.Status != "INTERNAL" {
		t.Fatalf("malformed chunk: %q", out)
	}
}

// The framing and error shapes are the formats' own: an SSE event with
// and without a name, OpenAI's error object, google.rpc.Status.
func TestUpstreamFramingAndErrors(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{string(AppendSSE(nil, "ping", []byte(`{"type":"ping"}`))), "event: ping\ndata: {\"type\":\"ping\"}\n\n"},
		{string(AppendSSE([]byte("x"), "", []byte(`{}`))), "xdata: {}\n\n"},
		{string(ChatError("bad \"x\"", "invalid_request_error", "invalid_request")), `{"error":{"message":"bad \"x\"","type":"invalid_request_error","code":"invalid_request"}}`},
		{string(GeminiError(429, "RESOURCE_EXHAUSTED", "slow down")), `{"error":{"code":429,"message":"slow down","status":"RESOURCE_EXHAUSTED"}}`},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if e, ok := ParseChatError(ChatError("m", "t", "c")); !ok || e.Message != "m" || e.CodeString() != "c" {
		t.Errorf("ChatError does not read back: %+v", e)
	}
}

// models/{model}:{method} splits at the last colon; a missing model or
// method is not an action.
func TestParseGeminiAction(t *testing.T) {
	for _, c := range []struct {
		in, model, method string
		ok                bool
	}{
		{"gemini-2.5:generateContent", "gemini-2.5", "generateContent", true},
		{"a:b:streamGenerateContent", "a:b", "streamGenerateContent", true},
		{"gemini", "", "", false},
		{":generateContent", "", "", false},
		{"gemini:", "", "", false},
	} {
		m, meth, ok := ParseGeminiAction(c.in)
		if m != c.model || meth != c.method || ok != c.ok {
			t.Errorf("%q: %q %q %v", c.in, m, meth, ok)
		}
	}
}

// The batchEmbedContents body the gateway writes reads back as the texts
// and dimensions it carries; a body without requests is a RequestError.
func TestParseGeminiEmbedReadsWhatTheGatewayWrites(t *testing.T) {
	dims := 3
	r := &EmbedRequest{Model: "m", Input: []byte(`["a","b"]`), Dimensions: &dims}
	body, err := EmbeddingsToGemini(r, "e")
	if err != nil {
		t.Fatal(err)
	}
	items, err := ParseGeminiEmbed(body)
	if err != nil || len(items) != 2 || items[0] != (GeminiEmbedItem{"a", 3}) || items[1] != (GeminiEmbedItem{"b", 3}) {
		t.Fatalf("%s read as %+v, %v", body, items, err)
	}
	items, err = ParseGeminiEmbed([]byte(`{"requests":[{"content":{"parts":[{"text":"x"},{"text":"y"}]}}]}`))
	if err != nil || len(items) != 1 || items[0] != (GeminiEmbedItem{"xy", 0}) {
		t.Fatalf("parts: %+v, %v", items, err)
	}
	for _, bad := range []string{`{}`, `{"requests":[]}`, `[]`, `{"requests":"x"}`, `{`} {
		var re *RequestError
		if _, err := ParseGeminiEmbed([]byte(bad)); !errors.As(err, &re) {
			t.Errorf("%s: %v, want a RequestError", bad, err)
		}
	}
}

// OpenAI streams may send the usage in a chunk of its own after the
// finish: the last Gemini event waits for it, and End sends it (STOP, no
// usage) when it never comes.
func TestGemStreamLastEventWaitsForTheUsage(t *testing.T) {
	s := &GemStream{Model: "gm", ID: "r1"}
	out := s.Event(nil, []byte(`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`))
	if len(out) != 0 {
		t.Fatalf("finish without usage sent %s", out)
	}
	out = s.Event(out, []byte(`{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}`))
	out = s.End(s.Event(out, []byte(`[DONE]`)))
	want := `data: {"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"MAX_TOKENS","index":0}],` +
		`"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":3,"totalTokenCount":5},"modelVersion":"gm","responseId":"r1"}` + "\n\n"
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	s = &GemStream{Model: "gm", ID: "r1"}
	out = s.End(s.Event(nil, []byte(`{"choices":[{"index":0,"delta":{"content":"a\"b"}}]}`)))
	want = `data: {"candidates":[{"content":{"role":"model","parts":[{"text":"a\"b"}]},"index":0}],"modelVersion":"gm","responseId":"r1"}` + "\n\n" +
		`data: {"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP","index":0}],"modelVersion":"gm","responseId":"r1"}` + "\n\n"
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}
