package jsonscan

import (
	"strings"
	"testing"
)

// TestChatChunkReadsProgress pins what the scanner reads from the common
// chunk shapes (model's scanner tests compare it with the full decoder on
// every input): text bytes, reasoning, tool calls and the finish reason.
func TestChatChunkReadsProgress(t *testing.T) {
	for in, want := range map[string]Chunk{
		`{"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`:   {UsefulBytes: 5},
		`{"choices":[{"delta":{"reasoning_content":""}}]}`:                             {Reasoning: true},
		`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`:                         {ToolCall: true},
		`{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"total_tokens":3}}`: {FinishReason: "stop", MentionsUsage: true},
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

// usageSeeds hold "usage" with its quotes in every place a string can end
// (a key at each depth, a value, a string ending with an escaped quote and
// usage), beside near misses that do not.
var usageSeeds = []string{
	`{"choices":[],"usage":{"prompt_tokens":1}}`,
	`{"choices":[],"usage" : null}`,
	`{"usage":null,"choices":[{"delta":{"content":"a"}}]}`,
	`{"choices":[{"delta":{"content":"usage"}}]}`,
	`{"choices":[{"delta":{"content":"say \"usage"}}]}`,
	`{"choices":[{"delta":{"content":"say \\"}},{"delta":{"content":"usage"}}]}`,
	`{"choices":[{"delta":{"reasoning":"\"usage"}}]}`,
	`{"choices":[{"delta":{"role":"usage"}}]}`,
	`{"choices":[{"delta":{"usage":1}}]}`,
	`{"choices":[{"usage":1,"delta":{}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"usage":{"a":"usage"}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"x":["\"usage"]}]}}]}`,
	`{"choices":[{"finish_reason":"usage"}]}`,
	`{"choices":[{"text":"\u0022usage"}]}`,
	`{"x":{"usage":1},"choices":[]}`,
	`{"id":"\"usage","choices":[]}`,
	`{"choices":[{"delta":{"content":"usage\""}}]}`,
	`{"choices":[{"delta":{"content":"usages"}}]}`,
	`{"choices":[{"delta":{"content":"\\usage"}}]}`,
	`{"usagex":1,"choices":[]}`,
	`{"choices":[{"delta":{"content":"usag"}}]}`,
}

// TestChatChunkMentionsUsage pins Chunk.MentionsUsage to the bytes: true
// exactly when they hold "usage" with its quotes, so that a reader of token
// counts that skips a chunk without it never misses one (proxy noteUsage).
func TestChatChunkMentionsUsage(t *testing.T) {
	for _, in := range usageSeeds {
		got, ok := ChatChunk([]byte(in))
		if !ok {
			t.Errorf("ChatChunk(%s) deferred", in)
			continue
		}
		if want := strings.Contains(in, `"usage"`); got.MentionsUsage != want {
			t.Errorf("ChatChunk(%s).MentionsUsage = %v, want %v", in, got.MentionsUsage, want)
		}
	}
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",`
	var p Prefix
	for _, in := range []string{head + `"choices":[{"delta":{"content":"a"}}]}`, head + `"choices":[],"usage":{"prompt_tokens":1}}`,
		`{"id":"\"usage","choices":[]}`, `{"id":"\"usage","choices":[{"delta":{"content":"b"}}]}`} {
		if got, _ := ChatChunkAfter([]byte(in), &p); got.MentionsUsage != strings.Contains(in, `"usage"`) {
			t.Errorf("ChatChunkAfter(%s).MentionsUsage = %v", in, got.MentionsUsage)
		}
	}
}

// FuzzChatChunkMentionsUsage holds MentionsUsage to a search of the bytes
// on every chunk the scanner answers.
func FuzzChatChunkMentionsUsage(f *testing.F) {
	for _, s := range usageSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := ChatChunk(data)
		if ok && got.MentionsUsage != strings.Contains(string(data), `"usage"`) {
			t.Fatalf("ChatChunk(%q).MentionsUsage = %v", data, got.MentionsUsage)
		}
	})
}
