package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const respSample = `{"model":"m","instructions":"sys","max_output_tokens":50,"stream":true,"reasoning":{"effort":"low"},
"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"},"strict":true}},
"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"},
"input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"https://x/y.png"}]},
{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"42"},
{"type":"reasoning","summary":[]},{"type":"message","role":"developer","content":"be nice"}]}`

// The request translation keeps turns in order, maps the Responses-only
// fields onto chat ones, and puts history between instructions and input.
func TestResponsesToChat(t *testing.T) {
	tr, err := ResponsesToChat([]byte(respSample))
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.Encode([]ChatMessage{{Role: "user", Content: "earlier"}, {Role: "assistant", Content: "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(b, &c)
	var roles []string
	for _, m := range c.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "system,user,assistant,user,assistant,tool,system" {
		t.Fatalf("roles %v: %s", roles, b)
	}
	for _, want := range []string{`"max_tokens":50`, `"reasoning_effort":"low"`, `"response_format":{"json_schema":{"name":"x","schema":{"type":"object"},"strict":true},"type":"json_schema"}`,
		`"tool_choice":{"type":"function","function":{"name":"f"}}`, `"stream_options":{"include_usage":true}`, `"image_url":{"url":"https://x/y.png"}`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Fatalf("missing %s in %s", want, b)
		}
	}
}

// The stream keeps the Responses order, numbers every event and ends
// with response.completed carrying the whole output.
func TestRespStreamSequence(t *testing.T) {
	s := &RespStream{Meta: RespMeta{ID: "resp_1", Model: "m"}}
	var out []byte
	for _, ev := range []string{
		`{"choices":[{"index":0,"delta":{"content":"a"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"x\""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
		`[DONE]`,
	} {
		out = s.Event(out, []byte(ev))
	}
	var names []string
	seq := 0
	for _, ev := range strings.Split(strings.TrimSpace(string(out)), "\n\n") {
		name, data, _ := strings.Cut(strings.TrimPrefix(ev, "event: "), "\ndata: ")
		names = append(names, name)
		var v struct {
			Type string `json:"type"`
			Seq  int    `json:"sequence_number"`
		}
		if err := json.Unmarshal([]byte(data), &v); err != nil || v.Type != name || v.Seq != seq {
			t.Fatalf("event %q: %v %+v", ev, err, v)
		}
		seq++
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done response.output_item.added " +
		"response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.done " +
		"response.output_item.done response.completed"
	if strings.Join(names, " ") != want {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(names, " "), want)
	}
	if !strings.Contains(string(out), `"arguments":"{\"x\":1}","status":"completed"`) || !strings.Contains(string(out), `"output_tokens":4`) {
		t.Fatalf("completed: %s", out)
	}
}

func FuzzResponsesToChat(f *testing.F) {
	f.Add([]byte(respSample))
	f.Add([]byte(`{"model":"m","input":"x"}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := ResponsesToChat(b)
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("not a RequestError: %T %v", err, err)
			}
			return
		}
		if body, err := tr.Encode(nil); err == nil {
			var c ChatRequest
			if err := json.Unmarshal(body, &c); err != nil || c.Model != tr.Req.Model {
				t.Fatalf("chat body does not decode as a chat request (%v): %s", err, body)
			}
		}
	})
}

func FuzzRespStream(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"a","tool_calls":[{"index":1,"function":{"arguments":"x"}}]},"finish_reason":"length"}]}`))
	f.Add([]byte(`{"error":{"message":"x","code":5}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &RespStream{Meta: RespMeta{ID: "resp_1", Model: "m"}}
		out := s.Event(nil, b)
		out = s.Event(out, b)
		out = s.End(out)
		for _, ev := range bytes.Split(bytes.TrimSpace(out), []byte("\n\n")) {
			_, data, ok := bytes.Cut(ev, []byte("\ndata: "))
			if !ok || !json.Valid(data) {
				t.Fatalf("event data is not JSON: %q", ev)
			}
		}
	})
}

// Reasoning deltas in the chat stream become a reasoning item streamed
// as its summary, before the message, and the completed response holds
// both, as the JSON answer does.
func TestRespStreamReasoning(t *testing.T) {
	s := &RespStream{Meta: RespMeta{ID: "resp_1", Model: "m"}}
	var out []byte
	for _, ev := range []string{
		`{"choices":[{"index":0,"delta":{"reasoning_content":"let me "}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning":"think"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"42"}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`[DONE]`,
	} {
		out = s.Event(out, []byte(ev))
	}
	var names []string
	for _, ev := range strings.Split(strings.TrimSpace(string(out)), "\n\n") {
		name, data, _ := strings.Cut(strings.TrimPrefix(ev, "event: "), "\ndata: ")
		if !json.Valid([]byte(data)) {
			t.Fatalf("event %q", ev)
		}
		names = append(names, name)
	}
	want := "response.created response.in_progress response.output_item.added response.reasoning_summary_part.added " +
		"response.reasoning_summary_text.delta response.reasoning_summary_text.delta response.reasoning_summary_text.done " +
		"response.reasoning_summary_part.done response.output_item.done response.output_item.added response.content_part.added " +
		"response.output_text.delta response.output_text.done response.content_part.done response.output_item.done response.completed"
	if strings.Join(names, " ") != want {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(names, " "), want)
	}
	if !strings.Contains(string(out), `{"type":"reasoning","id":"rs_1_0","summary":[{"type":"summary_text","text":"let me think"}]}`) ||
		s.Output().Reasoning != "let me think" || s.Output().Text != "42" {
		t.Fatalf("reasoning item: %s", out)
	}
}

// A native Responses stream that breaks: the gateway's error event and
// response.failed continue the upstream's sequence numbers under its
// response id; no second response.created opens another response.
func TestNativeStreamErrorContinuesTheUpstreamsResponse(t *testing.T) {
	var s RespStream
	s.Meta.ID = "resp_gateway"
	s.Passed([]byte(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_up","status":"in_progress"}}`))
	s.Passed([]byte(`{"type":"response.output_text.delta","sequence_number":1,"delta":"hel"}`))
	out := string(s.Error(nil, "stream_interrupted", "the upstream stream broke"))
	if strings.Contains(out, "response.created") || strings.Contains(out, "response.in_progress") {
		t.Fatalf("a second response was opened:\n%s", out)
	}
	if !strings.Contains(out, `"sequence_number":2`) || !strings.Contains(out, `"sequence_number":3`) || strings.Contains(out, `"sequence_number":0`) {
		t.Fatalf("sequence numbers do not continue the upstream's (0, 1):\n%s", out)
	}
	if !strings.Contains(out, `"id":"resp_up"`) || strings.Contains(out, "resp_gateway") {
		t.Fatalf("response.failed does not name the upstream's response:\n%s", out)
	}
}
