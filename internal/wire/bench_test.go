package wire

import (
	"testing"
)

// Each translation direction, per request, per JSON answer and per
// stream chunk (go test -bench . -benchmem ./internal/wire/).

const benchMsgReq = `{"model":"claude-sonnet","max_tokens":1024,"system":"You are a coding agent.","stream":true,
"tools":[{"name":"read_file","description":"read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}],
"messages":[{"role":"user","content":"fix the bug in main.go"},
{"role":"assistant","content":[{"type":"text","text":"Let me read it."},{"type":"tool_use","id":"tu_1","name":"read_file","input":{"path":"main.go"}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":"package main\n\nfunc main() {}\n"}]}]}`

const benchRespReq = `{"model":"gpt-5","instructions":"You are a coding agent.","stream":true,
"tools":[{"type":"function","name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}],
"input":[{"role":"user","content":"fix the bug in main.go"},
{"type":"function_call","call_id":"c1","name":"read_file","arguments":"{\"path\":\"main.go\"}"},
{"type":"function_call_output","call_id":"c1","output":"package main\n\nfunc main() {}\n"}]}`

const benchChat = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"The bug is on line 3: main does nothing. Here is the fix.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"main.go\",\"content\":\"package main\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":120,"completion_tokens":40,"total_tokens":160}}`

const benchChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"lorem ipsum dol "},"finish_reason":null}]}`

func BenchmarkMessagesRequest(b *testing.B) {
	body := []byte(benchMsgReq)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MessagesToChat(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMessagesJSON(b *testing.B) {
	body := []byte(benchChat)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ChatToMessages(body, "claude-sonnet"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMessagesChunk(b *testing.B) {
	s := &MsgStream{Model: "claude-sonnet"}
	data := []byte(benchChunk)
	out := s.Event(nil, data)
	b.ReportAllocs()
	for b.Loop() {
		out = s.Event(out[:0], data)
	}
}

func BenchmarkResponsesRequest(b *testing.B) {
	body := []byte(benchRespReq)
	b.ReportAllocs()
	for b.Loop() {
		t, err := ResponsesToChat(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := t.Encode(nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResponsesJSON(b *testing.B) {
	body := []byte(benchChat)
	m := &RespMeta{ID: "resp_1", Model: "gpt-5", Created: 1}
	b.ReportAllocs()
	for b.Loop() {
		o, err := ChatToRespOutput(body)
		if err != nil {
			b.Fatal(err)
		}
		_ = ResponseObject(m, o, OutputItems(nil, m.ID, o, "completed"), "", "", "")
	}
}

func BenchmarkResponsesChunk(b *testing.B) {
	s := &RespStream{Meta: RespMeta{ID: "resp_1", Model: "gpt-5"}}
	data := []byte(benchChunk)
	out := s.Event(nil, data)
	b.ReportAllocs()
	for b.Loop() {
		out = s.Event(out[:0], data)
		if len(s.items) > 0 {
			s.items[0].text = s.items[0].text[:0] // a bounded answer: keep the buffer from growing over b.N chunks
		}
	}
}

func BenchmarkEmbeddingsGeminiRequest(b *testing.B) {
	r, err := ParseEmbeddings([]byte(`{"model":"e","input":["alpha beta","gamma delta","epsilon"],"dimensions":256}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EmbeddingsToGemini(r, "text-embedding-004"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEmbeddingsGeminiJSON(b *testing.B) {
	vals := make([]byte, 0, 4096)
	vals = append(vals, `{"embeddings":[{"values":[`...)
	for i := 0; i < 256; i++ {
		if i > 0 {
			vals = append(vals, ',')
		}
		vals = append(vals, "0.0123456"...)
	}
	vals = append(vals, "]}]}"...)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := GeminiToEmbeddings(vals, "e", false); err != nil {
			b.Fatal(err)
		}
	}
}

// The start of a stream — the upstream's role chunk, then its first
// content chunk — is what stands between the upstream's first token and
// the client's: the prelude events (message_start and ping,
// response.created and response.in_progress) and the first content
// event, written as one.
const benchRoleChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`

const benchFinishChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":20,"total_tokens":44}}`

func BenchmarkMessagesStreamStart(b *testing.B) {
	role, first := []byte(benchRoleChunk), []byte(benchChunk)
	var out []byte
	b.ReportAllocs()
	for b.Loop() {
		s := MsgStream{Model: "claude-sonnet"}
		out = s.Event(out[:0], role)
		out = s.Event(out, first)
	}
}

func BenchmarkResponsesStreamStart(b *testing.B) {
	role, first := []byte(benchRoleChunk), []byte(benchChunk)
	var out []byte
	b.ReportAllocs()
	for b.Loop() {
		s := RespStream{Meta: RespMeta{ID: "resp_1", Model: "gpt-5", Created: 1}}
		out = s.Event(out[:0], role)
		out = s.Event(out, first)
	}
}

// The stream's end: the finish chunk with usage, then [DONE].
func BenchmarkMessagesStreamEnd(b *testing.B) {
	role, first, fin, done := []byte(benchRoleChunk), []byte(benchChunk), []byte(benchFinishChunk), []byte("[DONE]")
	var out []byte
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s := MsgStream{Model: "claude-sonnet"}
		out = s.Event(s.Event(out[:0], role), first)
		b.StartTimer()
		out = s.Event(out[:0], fin)
		out = s.Event(out, done)
	}
}

func BenchmarkResponsesStreamEnd(b *testing.B) {
	role, first, fin, done := []byte(benchRoleChunk), []byte(benchChunk), []byte(benchFinishChunk), []byte("[DONE]")
	var out []byte
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s := RespStream{Meta: RespMeta{ID: "resp_1", Model: "gpt-5", Created: 1}}
		out = s.Event(s.Event(out[:0], role), first)
		b.StartTimer()
		out = s.Event(out[:0], fin)
		out = s.Event(out, done)
	}
}
