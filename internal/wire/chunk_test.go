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
