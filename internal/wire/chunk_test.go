package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzChunkMatchesReference pins readChunk to encoding/json: wherever
// encoding/json decodes a chunk, the walk gives the same ChatChunk
// (stop_reason compared as JSON values, since encoding/json keeps the
// token's bytes and the walk a slice of them).
func FuzzChunkMatchesReference(f *testing.F) {
	f.Add([]byte(benchRoleChunk))
	f.Add([]byte(benchChunk))
	f.Add([]byte(benchFinishChunk))
	f.Add([]byte(`{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"r","tool_calls":[{"index":1,"id":"t","function":{"name":"n","arguments":"{\"a\":1}"}}]},"finish_reason":"stop","stop_reason":"END"}]}`))
	f.Add([]byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":1}}}`))
	f.Add([]byte(`{"ID":"x","Choices":[{"Index":2}]}`))
	f.Add([]byte(`{"usage":{"prompt_tokens_detAils":{"cached_tokens":3},"Prompt_Tokens":4}}`))
	f.Add([]byte(`{"error":{"message":"boom","code":"c"}}`))
	f.Add([]byte(`{"id":"\u00e9\ud800","choices":null,"model":5}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want ChatChunk
		if json.Unmarshal(b, &want) != nil {
			return
		}
		var got ChatChunk
		if err := readChunk(b, &got); err != nil {
			t.Fatalf("%s: encoding/json reads it, the walk: %v", b, err)
		}
		if !sameStopReasons(got, want) {
			t.Fatalf("%s: stop_reason differs", b)
		}
		clearStopReasons(&got)
		clearStopReasons(&want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\ngot  %+v\nwant %+v", b, got, want)
		}
	})
}

func sameStopReasons(a, b ChatChunk) bool {
	if len(a.Choices) != len(b.Choices) {
		return false
	}
	for i := range a.Choices {
		if !bytes.Equal(bytes.TrimSpace(a.Choices[i].StopReason), bytes.TrimSpace(b.Choices[i].StopReason)) {
			return false
		}
	}
	return true
}

func clearStopReasons(c *ChatChunk) {
	for i := range c.Choices {
		c.Choices[i].StopReason = nil
	}
}

// A reused chunk holds nothing of the one before.
func TestReadChunkForgetsTheChunkBefore(t *testing.T) {
	var c ChatChunk
	if err := readChunk([]byte(`{"id":"a","choices":[{"index":0,"delta":{"content":"x","tool_calls":[{"index":0,"id":"t"}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`), &c); err != nil {
		t.Fatal(err)
	}
	if err := readChunk([]byte(`{"id":"b","choices":[{"index":0,"delta":{}}]}`), &c); err != nil {
		t.Fatal(err)
	}
	d := c.Choices[0].Delta
	if c.ID != "b" || c.Usage != nil || d.Content != nil || d.ToolCalls != nil || c.Choices[0].FinishReason != nil {
		t.Fatalf("left over: %+v", c)
	}
}

// FuzzTextDeltaMatchesDecoder pins the fast path (plainDelta, for text
// chunks and for a stream's opening role chunk) to the full decoder: the
// choices of a chunk it takes are index 0, carry that text and nothing
// else — no finish reason, tool calls or reasoning — the chunk has no
// usage or error, and the id it reads for a role chunk is the chunk's.
// (A chunk with no choices array at all, which no upstream sends, is not
// pinned: the walk does not check the object's structure.)
func FuzzTextDeltaMatchesDecoder(f *testing.F) {
	f.Add([]byte(benchChunk))
	f.Add([]byte(benchRoleChunk))
	f.Add([]byte(benchFinishChunk))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"héllo"},"finish_reason":null}]}`))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}`))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}`))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":1}}`))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"a","reasoning_content":"r"}}]}`))
	f.Add([]byte(`{"id":"x\"usage\"","choices":[{"index":0,"delta":{"content":"a"}}]}`))
	f.Add([]byte(`{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}`))
	f.Add([]byte(`{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null}}]}`))
	f.Add([]byte(`{"id":"c1","choices":[{"index":0,"delta":{"content":"a","refusal":"no"}}]}`))
	f.Add([]byte(`{"model":"m","id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"}}]}`))
	f.Add([]byte(`{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":{"id":"n"}}],"ID":"c2"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, role := range []bool{false, true} {
			id, text, ok := plainDelta(b, role)
			if !ok {
				continue
			}
			var c ChatChunk
			if json.Unmarshal(b, &c) != nil || c.Choices == nil {
				return // not a chunk (the stream's parser skips it), or no choices
			}
			var want string
			if err := json.Unmarshal(append(append([]byte{'"'}, text...), '"'), &want); err != nil {
				t.Fatalf("%s: the text %q is not a JSON string's content: %v", b, text, err)
			}
			if c.Usage != nil || c.Error != nil {
				t.Fatalf("%s: taken as a text delta, has usage or an error", b)
			}
			if role && string(id) != c.ID {
				t.Fatalf("%s: taken as a role chunk with id %q, decodes to id %q", b, id, c.ID)
			}
			got := ""
			for _, ch := range c.Choices {
				d := ch.Delta
				if ch.Index != 0 || d.ReasoningContent != nil || d.Reasoning != nil || len(d.ToolCalls) > 0 ||
					(ch.FinishReason != nil && *ch.FinishReason != "") {
					t.Fatalf("%s: taken as text %q, has the choice %+v", b, want, ch)
				}
				if d.Content != nil {
					got += *d.Content
				}
			}
			if got != want {
				t.Fatalf("%s: taken as text %q, decodes to %q", b, want, got)
			}
		}
	})
}

// A stream's opening chunks — OpenAI's and the perfkit mock's role
// chunk, with and without an empty content — take the fast path too,
// with their id: they are translated on the way to the first content.
func TestPlainDeltaTakesRoleChunks(t *testing.T) {
	for chunk, wantID := range map[string]string{
		benchRoleChunk: "chatcmpl-1",
		`{"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"gpt-5","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`:                                                                                           "chatcmpl-b",
		`{"id":"chatcmpl-o","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","service_tier":"default","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"obfuscation":"x"}`: "chatcmpl-o",
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}`:                                                                                                                                     "c",
	} {
		if id, text, ok := plainDelta([]byte(chunk), true); !ok || string(id) != wantID || len(text) != 0 {
			t.Errorf("%s: plainDelta = %q, %q, %v; want id %q", chunk, id, text, ok, wantID)
		}
		if _, ok := textDelta([]byte(chunk)); ok {
			t.Errorf("%s: a role chunk taken as a text chunk after the start", chunk)
		}
	}
}

// The common text chunks — OpenAI's shape, with logprobs and a null
// finish reason, and the perfkit mock's — take the fast path: the full
// decoder costs several times as much for each one.
func TestTextDeltaTakesCommonChunks(t *testing.T) {
	for chunk, want := range map[string]string{
		benchChunk: "lorem ipsum dol ",
		`{"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"gpt-5","choices":[{"index":0,"delta":{"content":"tok a"},"logprobs":null,"finish_reason":null}]}`:                                  "tok a",
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":"héllo ✓"},"logprobs":null,"finish_reason":null}],"obfuscation":"x"}`: "héllo ✓",
	} {
		if text, ok := textDelta([]byte(chunk)); !ok || string(text) != want {
			t.Errorf("%s: textDelta = %q, %v; want %q", chunk, text, ok, want)
		}
	}
}
