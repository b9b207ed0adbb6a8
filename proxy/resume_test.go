package proxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/model"
)

// The splice rule: a continuation chunk takes the first part's id, loses
// its role, and its usage adds the first part's.
func TestChunkRewriteSplicesIntoTheClientsStream(t *testing.T) {
	k := &resumeShell{id: "first", usage: &tokenUsage{Prompt: 10, Completion: 5, Total: 15}}
	strip := 0
	out, content, keep := chunkRewrite([]byte(`{"id":"second","choices":[{"index":0,"delta":{"role":"assistant","content":"lo"}}]}`), k, &strip)
	if !keep || string(content) != "lo" || strings.Contains(string(out), "role") || !strings.Contains(string(out), `"id":"first"`) {
		t.Fatalf("content chunk: %s %q %v", out, content, keep)
	}
	if _, _, keep := chunkRewrite([]byte(`{"id":"second","choices":[{"index":0,"delta":{"role":"assistant"}}]}`), k, &strip); keep {
		t.Fatal("a role-only chunk is passed on: a second role for the client")
	}
	out, _, keep = chunkRewrite([]byte(`{"id":"second","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":7,"total_tokens":37,"x":1}}`), k, &strip)
	var u struct {
		Usage map[string]int `json:"usage"`
	}
	if !keep || json.Unmarshal(out, &u) != nil || u.Usage["prompt_tokens"] != 40 || u.Usage["completion_tokens"] != 12 || u.Usage["total_tokens"] != 52 || u.Usage["x"] != 1 {
		t.Fatalf("usage: %s", out)
	}
	// A native prefill left its trailing space out: the continuation's
	// leading space is not repeated.
	strip = 1
	_, content, _ = chunkRewrite([]byte(`{"choices":[{"index":0,"delta":{"content":" next"}}]}`), &resumeShell{}, &strip)
	if string(content) != "next" || strip != 0 {
		t.Fatalf("strip: %q %d", content, strip)
	}
}

// Each continuation style's prefill request.
func TestPrefillBodyStyles(t *testing.T) {
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[]}`)
	for _, c := range []model.Continuation{model.ContinueAssistant, model.ContinueNative, model.ContinueFinalMessage, model.ContinuePrefix} {
		b, err := prefillBody(body, "Hel", c)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Messages []map[string]any `json:"messages"`
			CFM      *bool            `json:"continue_final_message"`
			AGP      *bool            `json:"add_generation_prompt"`
			Tools    []any            `json:"tools"`
		}
		if json.Unmarshal(b, &r) != nil || len(r.Messages) != 2 || r.Messages[1]["role"] != "assistant" || r.Messages[1]["content"] != "Hel" || r.Tools == nil {
			t.Fatalf("%v: %s", c, b)
		}
		if (c == model.ContinueFinalMessage) != (r.CFM != nil && *r.CFM && r.AGP != nil && !*r.AGP) {
			t.Fatalf("%v: continue_final_message: %s", c, b)
		}
		if (c == model.ContinuePrefix) != (r.Messages[1]["prefix"] == true) {
			t.Fatalf("%v: prefix: %s", c, b)
		}
	}
	// A client's own prefill is extended, not followed by a second one.
	b, _ := prefillBody([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure: "}]}`), "one", model.ContinueAssistant)
	if !strings.Contains(string(b), `"content":"Sure: one"`) || strings.Count(string(b), "assistant") != 1 {
		t.Fatalf("client prefill: %s", b)
	}
}

// A tool call that reached the client blocks resume: a cut after it ends
// with the error event, no prefill is sent.
func TestResumeBlockedByAToolCall(t *testing.T) {
	up := newFakeUp(t)
	cfg := strings.Replace(twoConns, "  - id: glm\n", "  - id: glm\n    continuation: assistant\n", 1)
	if cfg == twoConns {
		t.Fatal("twoConns changed shape: no continuation set")
	}
	g := newGW(t, up, cfg)
	up.set("glm-k1", func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		io.WriteString(w, `data: {"id":"s","choices":[{"index":0,"delta":{"content":"calling "}}]}`+"\n\n")
		io.WriteString(w, `data: {"id":"s","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{"}}]}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	up.set("glm-k2", sse(streamOpt{chunks: 2}))
	r := g.stream("glm/glm-5")
	if !strings.Contains(r.body, "stream_interrupted") || up.count("glm-k2") != 0 {
		t.Fatalf("want the error event and no resume: k2 calls %d\n%s", up.count("glm-k2"), r.body)
	}
	// The same cut without the tool call is resumed on k2.
	up.set("glm-k1", sse(streamOpt{chunks: 4, cutAfter: 2}))
	r = g.stream("glm/glm-5")
	if up.count("glm-k2") != 1 || strings.Contains(r.body, "stream_interrupted") || !strings.HasSuffix(strings.TrimSpace(r.body), "[DONE]") {
		t.Fatalf("a cut after text only is resumed: k2 calls %d\n%s", up.count("glm-k2"), r.body)
	}
}

// BenchmarkStreamResumable is BenchmarkGateway/sse for a provider that
// can continue a prefill: every content event's text is kept for a
// possible resume (streamEvent) — the cost resume adds to a healthy stream.
func BenchmarkStreamResumable(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		sse(streamOpt{chunks: 10})(w, r, 1)
	}))
	defer up.Close()
	y := strings.Replace(strings.ReplaceAll(twoConns, "{{UP}}", up.URL+"/v1"), "  - id: glm\n", "  - id: glm\n    continuation: assistant\n", 1)
	cfg, _, err := ParseConfig("b.yaml", []byte(y), nil)
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close(context.Background())
	addr := serveLoopback(b, g)
	defer g.srv.Close()
	body := `{"model":"glm/glm-5","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				b.Fatalf("status %d", res.StatusCode)
			}
		}
	})
}
