package jsonscan

import "testing"

// TestChatChunkReadsProgress pins what the scanner reads from the common
// chunk shapes (model's scanner tests compare it with the full decoder on
// every input): text bytes, reasoning, tool calls and the finish reason.
func TestChatChunkReadsProgress(t *testing.T) {
	for in, want := range map[string]Chunk{
		`{"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`:   {UsefulBytes: 5},
		`{"choices":[{"delta":{"reasoning_content":""}}]}`:                             {Reasoning: true},
		`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`:                         {ToolCall: true},
		`{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"total_tokens":3}}`: {FinishReason: "stop"},
		`{"choices":[{"text":"legacy","finish_reason":"length"}]}`:                     {UsefulBytes: 6, FinishReason: "length"},
	} {
		got, ok := ChatChunk([]byte(in))
		if !ok || got != want {
			t.Errorf("ChatChunk(%s) = %+v, %v; want %+v", in, got, ok, want)
		}
	}
}

// TestChatChunkDefersAndNeverPanics: other event shapes and every prefix of
// a valid chunk are left to the full decoder (ok false), without a panic.
func TestChatChunkDefersAndNeverPanics(t *testing.T) {
	for _, in := range []string{`{"type":"message_stop"}`, `{"error":{"message":"x"}}`, `[]`, ``, `{"Choices":[]}`} {
		if _, ok := ChatChunk([]byte(in)); ok {
			t.Errorf("ChatChunk(%s) answered; want the decoder to", in)
		}
	}
	full := `{"choices":[{"delta":{"content":"a\u00e9\"b"},"finish_reason":"stop"}],"usage":{"n":[1,2.5e3,{"x":null}]}}`
	if _, ok := ChatChunk([]byte(full)); !ok {
		t.Fatalf("ChatChunk(%s) deferred", full)
	}
	for i := range len(full) {
		if _, ok := ChatChunk([]byte(full[:i])); ok {
			t.Errorf("ChatChunk answered a truncated chunk %q", full[:i])
		}
	}
}
