package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

const msgSample = `{"model":"claude","max_tokens":100,"system":[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}],
"stop_sequences":["END"],"temperature":0.5,"top_k":5,"metadata":{"user_id":"u1"},
"tools":[{"name":"get","description":"d","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"get","disable_parallel_tool_use":true},
"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},
{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"ok"},{"type":"tool_use","id":"tu1","name":"get","input":{"a":1}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":[{"type":"text","text":"42"}]},{"type":"text","text":"and?"}]}],"stream":true}`

// The request translation carries every field a chat request can hold and
// names what it drops.
func TestMessagesToChat(t *testing.T) {
	tr, err := MessagesToChat([]byte(msgSample))
	if err != nil {
		t.Fatal(err)
	}
	var c ChatRequest
	var raw map[string]any
	if err := json.Unmarshal(tr.Chat, &raw); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(tr.Chat, &c)
	if !tr.Stream || !c.Stream || c.StreamOptions == nil || !c.StreamOptions.IncludeUsage || *c.MaxTokens != 100 || c.Stop[0] != "END" || c.User != "u1" {
		t.Fatalf("fields: %s", tr.Chat)
	}
	roles := []string{}
	for _, m := range c.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,user" {
		t.Fatalf("roles %v: %s", roles, tr.Chat)
	}
	if !bytes.Contains(tr.Chat, []byte(`"url":"data:image/png;base64,AAAA"`)) || !bytes.Contains(tr.Chat, []byte(`"arguments":"{\"a\":1}"`)) ||
		!bytes.Contains(tr.Chat, []byte(`"tool_choice":{"type":"function","function":{"name":"get"}}`)) || !bytes.Contains(tr.Chat, []byte(`"parallel_tool_calls":false`)) {
		t.Fatalf("translation: %s", tr.Chat)
	}
	if d := strings.Join(tr.Dropped, ","); !strings.Contains(d, "top_k") || !strings.Contains(d, "system.cache_control") {
		t.Fatalf("dropped: %v", tr.Dropped)
	}
}

// Bad input is a RequestError naming the field, never a panic.
func TestMessagesToChatNamesTheField(t *testing.T) {
	for body, field := range map[string]string{
		`{"max_tokens":1,"messages":[{"role":"user","content":"x"}]}`:                                                              "model",
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`:                                                                 "max_tokens",
		`{"model":"m","max_tokens":"x","messages":[]}`:                                                                             "max_tokens",
		`{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"}]}`:                                                "messages[0].role",
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":5}]}`:                                                    "messages[0].content",
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"document"}]}]}`:                                "messages[0].content[0].type",
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"bash_20250124","name":"bash"}]}`: "tools[0].type",
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"maybe"}}`:                   "tool_choice.type",
		// A text block without its text: Anthropic refuses it, and so does
		// the translation (an empty text passed on would be another request).
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text"}]}]}`:                                                      "messages[0].content[0].text",
		`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"text","text":null}]}]}`:                                     "messages[0].content[0].text",
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text"}]}]}]}`: "messages[0].content[0].content[0].text",
		`{"model":"m","max_tokens":1,"system":[{"type":"text"}],"messages":[{"role":"user","content":"x"}]}`:                                         "system[0].text",
	} {
		_, err := MessagesToChat([]byte(body))
		re, ok := err.(*RequestError)
		if !ok || re.Field != field {
			t.Errorf("%s: want field %q, got %v", body, field, err)
		}
	}
}

func TestChatToMessages(t *testing.T) {
	out, err := ChatToMessages([]byte(`{"id":"c1","choices":[{"message":{"content":"hi","reasoning_content":"r","tool_calls":[{"id":"t","function":{"name":"f","arguments":"{\"x\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}`), "claude")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"msg_c1","type":"message","role":"assistant","model":"claude","content":[{"type":"thinking","thinking":"r","signature":""},{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"f","input":{"x":1}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":6,"output_tokens":3,"cache_read_input_tokens":4,"cache_creation_input_tokens":0}}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

// The stream keeps Anthropic's event order: one message_start, blocks
// opened and closed in turn, message_delta then message_stop at [DONE].
func TestMsgStreamSequence(t *testing.T) {
	s := &MsgStream{Model: "claude"}
	var out []byte
	for _, ev := range []string{
		`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant"}}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"b"}}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t1","function":{"name":"f","arguments":"{}"}}]}}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`,
		`[DONE]`,
	} {
		out = s.Event(out, []byte(ev))
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, n)
		}
	}
	want := "message_start ping content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_delta content_block_stop content_block_start content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(names, " "), want)
	}
	if !strings.Contains(string(out), `"stop_reason":"tool_use"`) || !strings.Contains(string(out), `"output_tokens":2`) {
		t.Fatalf("message_delta: %s", out)
	}
	if !s.Done() || len(s.Event(nil, []byte(`{"choices":[]}`))) != 0 {
		t.Fatal("nothing follows message_stop")
	}
}

func TestMsgStreamError(t *testing.T) {
	s := &MsgStream{Model: "claude"}
	out := s.Event(nil, []byte(`{"choices":[{"index":0,"delta":{"content":"a"}}]}`))
	out = s.Event(out, []byte(`{"error":{"message":"cut","type":"server_error","code":"stream_interrupted"}}`))
	if !strings.HasSuffix(string(out), "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"stream_interrupted: cut\"}}\n\n") {
		t.Fatalf("error event: %s", out)
	}
}

func FuzzMessagesToChat(f *testing.F) {
	f.Add([]byte(msgSample))
	f.Add([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`))
	f.Add([]byte(`{"model":"m","max_tokens":1,"system":5,"messages":[{"role":"assistant","content":[{"type":"tool_use"}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := MessagesToChat(b)
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("not a RequestError: %T %v", err, err)
			}
			return
		}
		var c ChatRequest
		if err := json.Unmarshal(tr.Chat, &c); err != nil || c.Model != tr.Model || len(c.Messages) == 0 && !bytes.Contains(tr.Chat, []byte(`"messages":[]`)) {
			t.Fatalf("chat body does not decode as a chat request (%v): %s", err, tr.Chat)
		}
	})
}

func FuzzMsgStream(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"a","tool_calls":[{"index":1,"function":{"arguments":"x"}}]},"finish_reason":"stop"}]}`))
	f.Add([]byte(`{"error":{"message":"x","code":5}}`))
	f.Add([]byte(`[DONE]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &MsgStream{Model: "m"}
		out := s.Event(nil, b)
		out = s.Event(out, b)
		out = s.End(out)
		for _, ev := range bytes.Split(out, []byte("\n\n")) {
			if d, ok := bytes.CutPrefix(ev[bytes.IndexByte(ev, '\n')+1:], []byte("data: ")); ok && !json.Valid(d) {
				t.Fatalf("event data is not JSON: %q", ev)
			}
		}
	})
}

func TestUnknownFields(t *testing.T) {
	got := UnknownMessagesFields([]byte(`{"model":"m","max_tokens":1,"messages":[],"service_tier":"auto","container":null}`))
	if strings.Join(got, ",") != "service_tier,container" {
		t.Fatalf("unknown: %v", got)
	}
	if got := UnknownResponsesFields([]byte(`{"model":"m","input":"x","truncation":"auto"}`)); strings.Join(got, ",") != "truncation" {
		t.Fatalf("unknown: %v", got)
	}
}

// An upstream that sends usage in the stream's first chunk has its
// input_tokens in message_start; message_delta always carries the whole
// count (what Anthropic's SDKs keep), also when usage comes last.
func TestMsgStreamUsage(t *testing.T) {
	s := &MsgStream{Model: "claude"}
	out := s.Event(nil, []byte(`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant"}}],"usage":{"prompt_tokens":12,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":2}}}`))
	out = s.Event(out, []byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}`))
	out = s.Event(out, []byte(`[DONE]`))
	if !strings.Contains(string(out), `"usage":{"input_tokens":10,"output_tokens":0,"cache_read_input_tokens":2}}}`) {
		t.Fatalf("message_start: %s", out)
	}
	s = &MsgStream{Model: "claude"}
	out = s.Event(nil, []byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}`))
	out = s.Event(out, []byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}`))
	out = s.Event(out, []byte(`[DONE]`))
	if !strings.Contains(string(out), `"usage":{"input_tokens":0,"output_tokens":0}}}`) || // no estimate given: 0
		!strings.Contains(string(out), `"usage":{"input_tokens":12,"output_tokens":3,"cache_read_input_tokens":0}}`) {
		t.Fatalf("usage at the end: %s", out)
	}
	// With the request's estimate, message_start says it until the
	// upstream counts; message_delta carries the count.
	s = &MsgStream{Model: "claude", InputEstimate: 7}
	out = s.Event(nil, []byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}`))
	out = s.Event(out, []byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}`))
	out = s.Event(out, []byte(`[DONE]`))
	if !strings.Contains(string(out), `"usage":{"input_tokens":7,"output_tokens":0}}}`) ||
		!strings.Contains(string(out), `"usage":{"input_tokens":12,"output_tokens":3,"cache_read_input_tokens":0}}`) {
		t.Fatalf("usage at the end: %s", out)
	}
}

// Translated chat bodies end with max_tokens, so the rename for OpenAI's
// API is a look at the body's end; other bodies pass unchanged.
func TestUseMaxCompletionTokens(t *testing.T) {
	tr, err := MessagesToChat([]byte(msgSample))
	if err != nil {
		t.Fatal(err)
	}
	out := UseMaxCompletionTokens(tr.Chat)
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil || m["max_completion_tokens"] != float64(100) || m["max_tokens"] != nil {
		t.Fatalf("renamed: %v %s", err, out)
	}
	rt, err := ResponsesToChat([]byte(respSample))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := rt.Encode(nil)
	if !bytes.HasSuffix(UseMaxCompletionTokens(b), []byte(`,"max_completion_tokens":50}`)) {
		t.Fatalf("responses: %s", b)
	}
	for _, s := range []string{`{"model":"m","messages":[]}`, `{"max_tokens":5}`, `{"a":[],"max_tokens":}`, `}`, ``} {
		if got := string(UseMaxCompletionTokens([]byte(s))); got != s {
			t.Errorf("%q became %q", s, got)
		}
	}
}

// message_start's input_tokens for an upstream that counts only at the
// end is count_tokens's estimate of the same request (EstimateTokens), so
// the two never disagree.
func TestMessageStartEstimateIsCountTokensEstimate(t *testing.T) {
	for _, body := range []string{
		msgSample,
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hello there"}]}`,
		`{ "model" : "m" , "max_tokens" : 1 , "system" : null , "tools" : [ ] , "messages" : [ { "role" : "user" , "content" : [ { "type" : "text" , "text" : "x" } ] } ] }`,
		`{"model":"m","max_tokens":1,"system":"s","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`,
	} {
		tr, err := MessagesToChat([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		want, err := EstimateTokens([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if tr.InputEstimate != want || want == 0 {
			t.Errorf("%s: message_start estimate %d, count_tokens estimate %d", body, tr.InputEstimate, want)
		}
	}
}

// A stop sequence the upstream says ended the answer (a chat choice's
// stop_reason string, as vLLM and the anthropic adapter send it) is
// stop_reason stop_sequence with that sequence, in the JSON answer and in
// the stream; without it a stop is end_turn (OpenAI's API cannot tell).
func TestStopSequenceIsNotEndTurn(t *testing.T) {
	chat := `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop","stop_reason":"END"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`
	out, err := ChatToMessages([]byte(chat), "claude")
	if err != nil || !strings.Contains(string(out), `"stop_reason":"stop_sequence","stop_sequence":"END"`) {
		t.Fatalf("JSON answer: %v %s", err, out)
	}
	out, _ = ChatToMessages([]byte(strings.Replace(chat, `,"stop_reason":"END"`, "", 1)), "claude")
	if !strings.Contains(string(out), `"stop_reason":"end_turn","stop_sequence":null`) {
		t.Fatalf("no stop string: %s", out)
	}
	out, _ = ChatToMessages([]byte(strings.Replace(chat, `"stop_reason":"END"`, `"stop_reason":151643`, 1)), "claude")
	if !strings.Contains(string(out), `"stop_reason":"end_turn","stop_sequence":null`) {
		t.Fatalf("a stop token is not a stop sequence: %s", out)
	}
	s := &MsgStream{Model: "claude"}
	ev := s.Event(nil, []byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}`))
	ev = s.Event(ev, []byte(`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":"END"}]}`))
	ev = s.Event(ev, []byte(`[DONE]`))
	if !strings.Contains(string(ev), `"delta":{"stop_reason":"stop_sequence","stop_sequence":"END"}`) {
		t.Fatalf("stream: %s", ev)
	}
}

// Every 503 — the gateway's refusals for load or while shutting down,
// and an upstream's own 503 relayed as the last failure — and an
// upstream's 529 reach an Anthropic client as 529 overloaded_error, which
// its SDKs retry; the other statuses keep theirs.
func TestMsgErrorTypeOverloaded(t *testing.T) {
	for status, want := range map[int]string{503: "overloaded_error 529", 529: "overloaded_error 529", 502: "api_error 502",
		504: "timeout_error 504", 429: "rate_limit_error 429", 500: "api_error 500"} {
		typ, st := MsgErrorType(status)
		if got := typ + " " + strconv.Itoa(st); got != want {
			t.Errorf("%d: %s, want %s", status, got, want)
		}
	}
	st, body := ChatErrorToMessages(503, []byte(`{"error":{"message":"every target is cooling down","type":"server_error","code":"all_targets_cooling_down"}}`))
	if st != 529 || !strings.Contains(string(body), `"message":"all_targets_cooling_down: every target is cooling down"`) {
		t.Fatalf("%d %s", st, body)
	}
}
