package jsonscan

import "testing"

// streamChunk is an ordinary content chunk of an OpenAI chat stream, as
// providers send it (and the perfkit mock upstream does).
const streamChunk = `{"id":"chatcmpl-mock12345","object":"chat.completion.chunk","created":1764640000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_mock","choices":[{"index":0,"delta":{"content":"tok3 "},"logprobs":null,"finish_reason":null}]}`

func BenchmarkChatChunk(b *testing.B) {
	data := []byte(streamChunk)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if c, ok := ChatChunk(data); !ok || c.UsefulBytes != 5 {
			b.Fatal("not read")
		}
	}
}

// BenchmarkChatChunkAfter is a stream's chunk after the first: its
// members before "choices" are the previous chunk's.
func BenchmarkChatChunkAfter(b *testing.B) {
	data := []byte(streamChunk)
	var p Prefix
	ChatChunkAfter(data, &p)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if c, ok := ChatChunkAfter(data, &p); !ok || c.UsefulBytes != 5 {
			b.Fatal("not read")
		}
	}
}
