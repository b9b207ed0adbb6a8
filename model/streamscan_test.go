package model

import (
	"bytes"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/internal/jsonscan"
)

// chatChunkSeeds are chat-completions chunks as providers send them, plus
// the edge cases the scanner must hand to the decoder or read identically.
var chatChunkSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Hello there, friend."},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":0}}}`,
	`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2.5e3,"total_tokens":-0.1E+2}}`,
	`{"choices":[{"delta":{"content":"line\nnext \"quoted\" \\ \/ \t tab \u00e9 \u4e2d \ud83d\ude00"}}]}`,
	`{"choices":[{"delta":{"content":"lone \ud800 high, lone \udc00 low, pair split \ud83d x"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"bad utf8 \xff\xfe and good \xc3\xa9 and cut \xe4\xb8\"}}]}",
	`{"choices":[{"delta":{"reasoning_content":""}}]}`,
	`{"choices":[{"delta":{"reasoning":"thinking..."}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":null,"function_call":null,"content":null}}]}`,
	`{"choices":[{"text":"legacy completion","finish_reason":"length"}]}`,
	`{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"},{"delta":{"content":"bc"},"finish_reason":""}]}`,
	`{"choices":[null,{"delta":null},{"finish_reason":"tool_calls"}]}`,
	`{"choices":null}`,
	`{"a":[1,2,{"b":[true,false,null,"s",-0,1.5e-3]}],"choices":[{"delta":{"content":"ok"}}]}`,
	`{"choices":[{"delta":{"content":"a","Content":"b"}}]}`,
	`{"Choices":[{"delta":{"content":"a"}}]}`,
	`{"choices":[{"delta":{"content":"a","content":"b"}}]}`,
	`{"choices":[{"delta":{"content":"a"}}],"choices":[{"delta":{"content":"bcd"}}]}`,
	`{"choices":[{"delta":{"content":5}}]}`,
	`{"choices":[{"delta":"text"}]}`,
	`{"choices":{"delta":{}}}`,
	`{"\u0063hoices":[{"delta":{"content":"escaped key"}}]}`,
	`{"choices":[{"delta":{"content":"x"}}]} trailing`,
	`{"choices":[{"delta":{"content":"x"}}],}`,
	`{"choices":[{"delta":{"content":"x"}},]}`,
	`{"a":01}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}`,
	`{"error":{"message":"overloaded","code":529}}`,
	`{"choices":[{"delta":{"content":"x"},"finish_reason":"st\u006fp"}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"ctl \x01 char\"}}]}",
	`{"choices":[{"delta":{"content":"bad \x escape"}}]}`,
	`{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":{"j":{"k":{"l":{"m":{"n":{"o":{"p":{"q":{"r":{"s":{"t":{"u":{"v":{"w":{"x":{"y":{"z":{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":1}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}`,
}

// TestScanChatChunkTakesCommonChunks pins that the scanner answers the
// chunks providers actually send (else the gateway silently pays the full
// decoder on every event) and answers them as the decoder does.
func TestScanChatChunkTakesCommonChunks(t *testing.T) {
	for _, in := range chatChunkSeeds[:16] {
		got, ok := scanChatChunk([]byte(in))
		if !ok {
			t.Errorf("the scanner handed a common chunk to the decoder: %s", in)
			continue
		}
		if want := decodeStreamEvent([]byte(in)); got != want {
			t.Errorf("%s: scanner %+v, decoder %+v", in, got, want)
		}
	}
	if ev, _ := scanChatChunk([]byte(chatChunkSeeds[4])); ev.UsefulBytes != len("line\nnext \"quoted\" \\ / \t tab \u00e9 \u4e2d \U0001F600") {
		t.Errorf("escapes decode to %d bytes", ev.UsefulBytes)
	}
}

// TestScanChatChunkDefersWhenUnsure: shapes where encoding/json's rules
// (letter case, duplicates, escapes in keys, types, depth) decide go to the
// decoder; so do the other event formats.
func TestScanChatChunkDefersWhenUnsure(t *testing.T) {
	for _, in := range chatChunkSeeds[16:] {
		if _, ok := scanChatChunk([]byte(in)); ok {
			t.Errorf("the scanner answered a chunk the decoder must read: %s", in)
		}
	}
}

// scanPathSeeds take the scanner down its other paths: the keys providers
// send read by the general key reader (white space, another letter case,
// an escape), values of every type under skipped keys and "usage", the
// depth limit met under "usage", a skipped key and a tool call, strings
// with escapes and bytes outside ASCII on both sides of eight-byte words.
var scanPathSeeds = []string{
	` {"id" : "x" , "object":"chat.completion.chunk","choices" : [ {"index":0 , "delta" : {"content" : "hi" , "role":"assistant"} , "finish_reason" : null } ] , "usage" : { "a" : [ 1 , { } , [ ] ] } } `,
	`{"choices":[{"index":0,"delta":{"content":"tok"},"logprobs":null,"finish_reason":null}],"created":17,"model":"m","object":"o","system_fingerprint":"f","service_tier":"default","obfuscation":"xyz"}`,
	`{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1e5,"x":-0.5E-3,"y":[true,false,null,"\u00e9"],"prompt_tokens_details":{"cached_tokens":0}}}`,
	`{"id":"\u0041","choices":[{"delta":{"reasoning_content":"th\nink","tool_calls":[{"a":{"b":[1,2]}}]}}]}`,
	`{"ID":"x","choices":[]}`, `{"Usage":{}}`, `{"usage":{"\u0041":1}}`, `{"usage":{"Prompt_tokens":1}}`, `{"choices":[{"Index":0,"delta":{"Role":"x"}}]}`,
	`{"choices":[{"finish_reason":"stop","finish_reason":"length"}]}`, `{"choices":[{"delta":{"tool_calls":null,"tool_calls":[1]}}]}`,
	`{"usage":{"prompt_tokens":1,}}`, `{"usage":{"total_tokens"1}}`, `{"usage":{"a":1 "b":2}}`, `{"usage":[1,]}`, `{"usage":null}`, `{"choices":[{"index":01}]}`, `{"choices":[{"logprobs":nullx}]}`,
	`{"id":"abc\"def\\ghi\/jkl\b\f\n\r\t\u12aF mno pqrs tuvw xyz","choices":[]}`, `{"id":"abcdefghijklmnop\x"}`, `{"id":"abcdefghijklmnop\u12G4"}`,
	"{\"id\":\"abcdefghijkl\x01mnop\"}", "{\"id\":\"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7 long non-ascii\",\"choices\":[]}",
	"{\"choices\":[{\"delta\":{\"content\":\"caf\xc3\xa9 na\xefve \xe4\xb8\xad\xe6\x96\x87\\u00e9\"}}]}", "{\"choices\":[{\"finish_reason\":\"st\xc3\xa9p\"}]}",
	`{"usage":{"prompt_tokens":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}`,
	`{"usage":{"prompt_tokens":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}`,
	`{"usage":{"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}`,
	`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"choices":[{"delta":{"tool_calls":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}]}`,
}

// TestScanChatChunkKeyPaths: the realistic events, with white space
// around their colons and commas (so that the general key reader reads
// every key the scanner otherwise matches whole), give the same answers.
func TestScanChatChunkKeyPaths(t *testing.T) {
	spaced := strings.NewReplacer(`":`, `" :`, `,"`, `, "`, `{"`, `{ "`)
	for _, c := range realisticChunks {
		want, ok := scanChatChunk([]byte(c.data))
		in := spaced.Replace(c.data)
		got, gotOK := scanChatChunk([]byte(in))
		if !ok || !gotOK || got != want {
			t.Errorf("%s: %s reads as %+v %v, %s as %+v %v", c.name, c.data, want, ok, in, got, gotOK)
		}
	}
}

// TestScanChatChunkUsageAsAnyKey: skipUsage reads "usage" exactly as
// skipValue reads the value of any other skipped key, the depth limit
// included.
func TestScanChatChunkUsageAsAnyKey(t *testing.T) {
	values := []string{`null`, `1`, `"x"`, `[]`, `{}`, `{ }`, `[1,{"a":[]}]`, `{"prompt_tokens":24,"completion_tokens":10,"total_tokens":34}`,
		`{"prompt_tokens" : 1 , "total_tokens":2}`, `{"prompt_tokens":1,}`, `{"total_tokens"1}`, `{"total_tokens":}`, `{"a":1 "b":2}`,
		`{"prompt_tokens":1,"prompt_tokens":2,"Prompt_tokens":3}`, `{"\u0041":1}`, `{"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0}}`}
	for _, key := range []string{"prompt_tokens", "completion_tokens", "x"} {
		for _, n := range []int{30, 31, 32, 33} {
			pre, post := strings.Repeat("[", n), strings.Repeat("]", n)
			values = append(values, `{"`+key+`":`+pre+`1`+post+`}`, `{"a":1,"`+key+`":`+pre+post+`}`,
				`{"`+key+`":`+strings.Repeat(`{"a":`, n)+`1`+strings.Repeat("}", n)+`}`)
		}
	}
	for _, v := range values {
		usage, usageOK := scanChatChunk([]byte(`{"choices":[],"usage":` + v + `}`))
		other, otherOK := scanChatChunk([]byte(`{"choices":[],"usagf":` + v + `}`))
		other.MentionsUsage = usageOK // the one difference the key makes
		if usage != other || usageOK != otherOK {
			t.Errorf("usage %s: %+v %v; any other key: %+v %v", v, usage, usageOK, other, otherOK)
		}
	}
}

// FuzzScanChatChunk: whenever the scanner answers, it answers exactly what
// the decoder answers (docs/streams.md: the watchdogs see the same progress
// whichever path read the event).
func FuzzScanChatChunk(f *testing.F) {
	for _, s := range chatChunkSeeds {
		f.Add([]byte(s))
	}
	for _, c := range realisticChunks {
		f.Add([]byte(c.data))
	}
	for _, s := range scanPathSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		data = bytes.TrimSpace(data)
		if len(data) == 0 || data[0] != '{' {
			return
		}
		got, ok := scanChatChunk(data)
		if !ok {
			return
		}
		if want := decodeStreamEvent(data); got != want {
			t.Fatalf("%q: scanner %+v, decoder %+v", data, got, want)
		}
	})
}

func BenchmarkParseStreamEvent(b *testing.B) {
	ev := []byte(chatChunkSeeds[1])
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			ParseStreamEvent(ev)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			decodeStreamEvent(ev)
		}
	})
}

// realisticChunks are the three events of a typical chat-completions stream
// as the perfkit mock (and OpenAI) send them: the role chunk, a content
// chunk, the final chunk with usage.
var realisticChunks = []struct{ name, data string }{
	{"role", `{"id":"chatcmpl-mock123","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_mock","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`},
	{"content", `{"id":"chatcmpl-mock123","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_mock","choices":[{"index":0,"delta":{"content":"tok3 "},"logprobs":null,"finish_reason":null}]}`},
	{"final", `{"id":"chatcmpl-mock123","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_mock","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":10,"total_tokens":34}}`},
}

// TestScanChatChunkTakesRealisticChunks pins that the scanner answers the
// events of a typical stream, as the decoder does, without allocating.
func TestScanChatChunkTakesRealisticChunks(t *testing.T) {
	for _, c := range realisticChunks {
		data := []byte(c.data)
		got, ok := scanChatChunk(data)
		if !ok {
			t.Errorf("%s: the scanner handed a realistic chunk to the decoder", c.name)
			continue
		}
		if want := decodeStreamEvent(data); got != want {
			t.Errorf("%s: scanner %+v, decoder %+v", c.name, got, want)
		}
		if n := testing.AllocsPerRun(100, func() { scanChatChunk(data) }); n != 0 {
			t.Errorf("%s: %v allocations per scan", c.name, n)
		}
	}
}

func BenchmarkScanChatChunk(b *testing.B) {
	for _, c := range realisticChunks {
		data := []byte(c.data)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				scanChatChunk(data)
			}
		})
	}
}

// ParseStreamEventAfter reads a stream's events with its chunk prefix as
// ParseStreamEvent reads each alone, whatever came before.
func TestParseStreamEventAfterIsParseStreamEvent(t *testing.T) {
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",`
	events := append([]string{head + `"choices":[{"delta":{"content":"a"}}]}`, head + `"choices":[{"delta":{"content":"bc"}}]}`,
		head + `"choices":[],"error":{"message":"x"}}`, "[DONE]", ""}, chatChunkSeeds...)
	var p jsonscan.Prefix
	for _, in := range events {
		if got, want := ParseStreamEventAfter([]byte(in), &p), ParseStreamEvent([]byte(in)); got != want {
			t.Errorf("ParseStreamEventAfter(%q) = %+v, ParseStreamEvent = %+v", in, got, want)
		}
	}
}
