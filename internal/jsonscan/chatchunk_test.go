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

// TestChatChunkAfterIsChatChunk: a stream's chunks read with its Prefix
// answer what ChatChunk answers for each, whatever came before (the same
// members, other ones, or a chunk the scanner refused).
func TestChatChunkAfterIsChatChunk(t *testing.T) {
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",`
	stream := []string{
		head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		head + `"choices":[{"index":0,"delta":{"content":"Hello"}}]}`,
		head + `"choices": [{"index":0,"delta":{"content":"Hi"}}]}`,
		head + `"choices":  [{"delta":{"content":"x"}}],"choices":[]}`,
		head + `"choices":[{"delta":{"content":"x"}}],"type":"x"}`,
		head + `"choices":[{"delta":{"content":"x"}}]`,
		head + `"choices":[{"delta":{"content":"x"}}]} x`,
		head + `"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"total_tokens":3}}`,
		head + `"choices":`,
		head + `"choices":null}`,
		`{"id":"c2","choices":[{"delta":{"content":"abc"}}]}`,
		head + `"choices":[{"delta":{"content":"Hello"}}]}`,
		`{"type":"message_stop"}`,
		head + `"choices":[{"delta":{"content":"é"}}]}`,
		`{}`,
	}
	for _, order := range [][]string{stream, reversed(stream)} {
		var p Prefix
		for _, in := range order {
			got, gotOK := ChatChunkAfter([]byte(in), &p)
			want, wantOK := ChatChunk([]byte(in))
			if got != want || gotOK != wantOK {
				t.Errorf("ChatChunkAfter(%s) = %+v, %v; ChatChunk = %+v, %v", in, got, gotOK, want, wantOK)
			}
		}
	}
}

func reversed(s []string) []string {
	r := make([]string, len(s))
	for i, v := range s {
		r[len(s)-1-i] = v
	}
	return r
}

// FuzzChatChunkAfter holds ChatChunkAfter to ChatChunk on the second of
// two chunks read with one Prefix.
func FuzzChatChunkAfter(f *testing.F) {
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",`
	f.Add([]byte(head+`"choices":[{"delta":{"content":"a"}}]}`), []byte(head+`"choices":[{"delta":{"content":"bc"}}]}`))
	f.Add([]byte(head+`"choices":[{"delta":{"content":"a"}}]}`), []byte(head+`"choices": null, "choices":[]}`))
	f.Add([]byte(`{"choices":[]}`), []byte(`{"choices":[{"finish_reason":"stop"}],"usage":{"n":1}}`))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		var p Prefix
		ChatChunkAfter(first, &p)
		got, gotOK := ChatChunkAfter(second, &p)
		want, wantOK := ChatChunk(second)
		if got != want || gotOK != wantOK {
			t.Fatalf("after %q: ChatChunkAfter(%q) = %+v, %v; ChatChunk = %+v, %v", first, second, got, gotOK, want, wantOK)
		}
	})
}
