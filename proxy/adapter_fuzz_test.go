package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/internal/wire"
	"github.com/breakwater-gw/breakwater/model"
)

// FuzzAdapterStream: a malformed upstream stream never panics a
// translator, and every event it emits is one pipeStream understands: a
// chat.completion.chunk, [DONE], or an error event (docs/classification.md#restatement),
// so garbage ends as a classified error, never as a silent success.
func FuzzAdapterStream(f *testing.F) {
	f.Add([]byte(anthropicStreamGolden))
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n"))
	f.Add([]byte("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"},{\"functionCall\":{\"name\":\"f\"}}]},\"finishReason\":\"STOP\"}]}\n\n"))
	f.Add([]byte("data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\"}}\n\ndata: {\"type\"\n\n"))
	f.Add([]byte("data: {\"type\":\"message_start\"}\n\ndata: {\"error\":null}\n\n: comment\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"candidates\":[{\"index\":-5,\"content\":null}],\"promptFeedback\":{\"blockReason\":\"X\"}}\n\n"))
	f.Fuzz(func(t *testing.T, native []byte) {
		for _, w := range []wireAdapter{&anthropicWire{}, &geminiWire{}} {
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
				Body: io.NopCloser(bytes.NewReader(native))}
			w.wrap(resp, "m")
			out, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("%T: %v", w, err)
			}
			rd := newSSEReader(bytes.NewReader(out))
			var raw, buf, data []byte
			for {
				raw, buf, data, err = rd.next(raw, buf)
				if err != nil {
					break
				}
				d := bytes.TrimSpace(data)
				if string(d) == "[DONE]" || isErrorEventT(d) {
					continue
				}
				if model.ParseStreamEvent(d).Malformed {
					continue // a malformed native event: pipeStream's garbled-chunk path
				}
				var c wire.AdapterChunk
				if json.Unmarshal(d, &c) != nil || c.Object != "chat.completion.chunk" {
					t.Fatalf("%T emitted %q from %q", w, d, native)
				}
			}
			rd.release()
			if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n\n")) {
				t.Fatalf("%T: output does not end at an event boundary: %q", w, out)
			}
		}
	})
}

// FuzzAdapterJSON: a non-streamed 2xx body translates to a chat.completion
// or to non-JSON bytes (the output-validation path), never a panic.
func FuzzAdapterJSON(f *testing.F) {
	f.Add([]byte(`{"id":"m","type":"message","content":[{"type":"text","text":"x"},{"type":"tool_use","input":null}],"stop_reason":"max_tokens"}`))
	f.Add([]byte(`{"candidates":[{"content":{"parts":[{"text":"x","thought":true}]},"finishReason":"SAFETY"}],"usageMetadata":{}}`))
	f.Add([]byte(`{"promptFeedback":{"blockReason":"SAFETY"}}`))
	f.Add([]byte(`{"type":"message","content":7}`))
	f.Fuzz(func(t *testing.T, native []byte) {
		for _, w := range []wireAdapter{&anthropicWire{}, &geminiWire{}} {
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(bytes.NewReader(native))}
			w.wrap(resp, "m")
			out, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(out) {
				continue
			}
			var c wire.AdapterCompletion
			if json.Unmarshal(out, &c) != nil || c.Object != "chat.completion" || len(c.Choices) == 0 {
				t.Fatalf("%T: valid JSON that is not a completion: %s", w, out)
			}
		}
	})
}

// FuzzAdapterRequest: any client body that passes parseChatRequest becomes
// a valid native JSON body or a typed wireError (a 400), never a panic.
func FuzzAdapterRequest(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto","messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"r"}]}`)
	f.Add(`{"model":"m","stop":["a"],"n":1,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:;base64,"}}]}]}`)
	f.Add(`{"model":"m","messages":[{"role":"system","content":[{"type":"image_url"}]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := parseChatRequest([]byte(body))
		if err != nil {
			return
		}
		for typ, build := range map[string]func() ([]byte, error){
			"anthropic": func() ([]byte, error) { return wire.ChatRequestToMessages(req.body, "up", req.Stream) },
			"gemini":    func() ([]byte, error) { return wire.ChatRequestToGemini(req.body) },
		} {
			out, err := build()
			var we *wireError
			switch {
			case err != nil && !errors.As(err, &we):
				t.Fatalf("%s: untyped error %v", typ, err)
			case err == nil && !json.Valid(out):
				t.Fatalf("%s: invalid JSON %s", typ, out)
			}
		}
	})
}

// BenchmarkAdapter measures the translation overhead per stream event
// (one text delta), and a non-streamed answer. Run:
//
//	go test -run '^$' -bench Adapter -benchmem ./proxy/
func BenchmarkAdapter(b *testing.B) {
	an := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lorem ipsum dol "}}`)
	gm := []byte(`{"candidates":[{"content":{"role":"model","parts":[{"text":"lorem ipsum dol "}]},"index":0}],"modelVersion":"gemini-x","responseId":"r1"}`)
	b.Run("anthropic/event", func(b *testing.B) {
		s := wire.NewMessagesChatStream("m")
		dst := s.Event(nil, []byte(`{"type":"message_start","message":{"id":"msg_1","model":"claude-x","usage":{}}}`))
		b.ReportAllocs()
		for b.Loop() {
			dst = s.Event(dst[:0], an)
		}
	})
	b.Run("gemini/event", func(b *testing.B) {
		s := wire.NewGeminiChatStream(1, "m")
		dst := s.Event(nil, gm) // the first event opens the choice
		b.ReportAllocs()
		for b.Loop() {
			dst = s.Event(dst[:0], gm)
		}
	})
	// through the io.Reader the pipeline reads: SSE framing included
	stream := func(b *testing.B, w wireAdapter, head, ev string) {
		const n = 256
		native := head + strings.Repeat(ev, n)
		buf := make([]byte, 32<<10)
		b.ReportAllocs()
		b.SetBytes(int64(len(native)))
		for b.Loop() {
			resp := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(native))}
			w.wrap(resp, "m")
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					break
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
	}
	b.Run("anthropic/stream256", func(b *testing.B) {
		stream(b, &anthropicWire{}, "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{}}}\n\n",
			"event: content_block_delta\ndata: "+string(an)+"\n\n")
	})
	b.Run("gemini/stream256", func(b *testing.B) {
		stream(b, &geminiWire{}, "", "data: "+string(gm)+"\r\n\r\n")
	})
	b.Run("anthropic/json", func(b *testing.B) {
		native := []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"` + strings.Repeat("lorem ipsum dol ", 64) + `"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":7}}`)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := wire.MessagesAnswerToChat(native, 1, "m"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
