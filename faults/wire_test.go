package faults

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The fault upstream answers the anthropic and gemini provider types
// (docs/classification.md#provider-types) in their native wire formats, selected by path; the rules
// are the same as for OpenAI attempts.

func post(t *testing.T, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	return send(t, "POST", url, body, hdr...)
}

// send makes one request with the header pairs given and returns the
// response with its body read.
func send(t *testing.T, method, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// dataLines returns the SSE data payloads of a body.
func dataLines(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestWireAnthropic(t *testing.T) {
	srv, ts := newTestServer(t, []Rule{
		{Match: Match{Connection: "bad"}, Respond: &Response{Status: 529, Headers: map[string]string{"retry-after": "9"}}},
		{Match: Match{Connection: "cut"}, Respond: &Response{Fault: NoDone}},
	})
	resp, body := post(t, ts.URL+"/an/v1/messages", `{"model":"claude","max_tokens":1000,"messages":[]}`, "x-api-key", "k1")
	var m struct {
		StopReason string `json:"stop_reason"`
		Content    []struct{ Type, Text string }
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &m) != nil || !strings.Contains(body, `"type":"message"`) ||
		len(m.Content) != 1 || m.Content[0].Text != strings.Repeat(ChunkText, DefaultChunks) || m.StopReason != "end_turn" {
		t.Fatalf("JSON: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, ts.URL+"/an/v1/messages", `{"model":"claude","stream":true}`, "x-api-key", "k1")
	ev := dataLines(body)
	if resp.Header.Get("Content-Type") != "text/event-stream" || !strings.Contains(ev[0], "message_start") ||
		!strings.Contains(ev[len(ev)-1], "message_stop") || strings.Count(body, "text_delta") != DefaultChunks {
		t.Fatalf("stream: %s", body)
	}
	for _, d := range ev {
		if !json.Valid([]byte(d)) {
			t.Fatalf("invalid event %s", d)
		}
	}
	resp, body = post(t, ts.URL+"/an/v1/messages", `{"model":"claude"}`, "x-api-key", "bad")
	if resp.StatusCode != 529 || resp.Header.Get("Retry-After") != "9" || body != `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` {
		t.Fatalf("native error: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	_, body = post(t, ts.URL+"/an/v1/messages", `{"model":"claude","stream":true}`, "x-api-key", "cut")
	if strings.Contains(body, "message_stop") || !strings.Contains(body, "message_delta") {
		t.Fatalf("no-done: %s", body)
	}
	if st := srv.Stats().ByConnection; st["an/k1"]["200"] != 2 || st["an/bad"]["529"] != 1 {
		t.Fatalf("stats %v", st)
	}
}

func TestWireGemini(t *testing.T) {
	srv, ts := newTestServer(t, []Rule{
		{Match: Match{Model: "pro"}, Respond: &Response{Status: 429}},
		{Match: Match{Connection: "mal"}, Respond: &Response{Fault: MalformedChunk, Stream: Stream{StallAfter: 1}}},
	})
	resp, body := post(t, ts.URL+"/gm/v1/models/flash:generateContent", `{"contents":[]}`, "x-goog-api-key", "g1")
	if resp.StatusCode != 200 || !strings.Contains(body, `"finishReason":"STOP"`) || !strings.Contains(body, `"modelVersion":"flash"`) {
		t.Fatalf("JSON: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, ts.URL+"/gm/v1/models/flash:streamGenerateContent?alt=sse", `{"contents":[]}`, "x-goog-api-key", "g1")
	ev := dataLines(body)
	if resp.Header.Get("Content-Type") != "text/event-stream" || len(ev) != DefaultChunks+1 || !strings.Contains(ev[len(ev)-1], "STOP") {
		t.Fatalf("stream: %s", body)
	}
	resp, body = post(t, ts.URL+"/gm/v1/models/pro:generateContent", `{"contents":[]}`, "x-goog-api-key", "g1")
	if resp.StatusCode != 429 || !strings.Contains(body, `"status":"RESOURCE_EXHAUSTED"`) || !strings.Contains(body, `"code":429`) {
		t.Fatalf("native error: %d %s", resp.StatusCode, body)
	}
	_, body = post(t, ts.URL+"/gm/v1/models/flash:streamGenerateContent?alt=sse", `{"contents":[]}`, "x-goog-api-key", "mal")
	bad := 0
	for _, d := range dataLines(body) {
		if !json.Valid([]byte(d)) {
			bad++
		}
	}
	if bad != 1 {
		t.Fatalf("malformed-chunk: %s", body)
	}
	if resp, _ := post(t, ts.URL+"/gm/v1/models/flash:embed", `{}`); resp.StatusCode != 400 {
		t.Fatalf("unknown method: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/gm/v1/models", nil)
	req.Header.Set("X-Goog-Api-Key", "g1")
	mr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mr.Body)
	mr.Body.Close()
	if mr.StatusCode != 200 || !strings.Contains(string(mb), `"models/`) {
		t.Fatalf("models: %s", mb)
	}
	if st := srv.Stats().ByConnection; st["gm/g1"]["200"] < 2 || st["gm/g1"]["429"] != 1 {
		t.Fatalf("stats %v", st)
	}
}

// The fault upstream speaks the Responses format (JSON and SSE) and
// counts tokens, so every client surface can be tried against it alone.
func TestResponsesAndCountTokens(t *testing.T) {
	ts := httptest.NewServer(NewServer(nil, Options{}))
	defer ts.Close()
	post := func(path, body string) (int, string) {
		res, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, b := post("/p/v1/responses", `{"model":"m","input":"hi"}`); code != 200 || !strings.Contains(b, `"object":"response"`) || !strings.Contains(b, ChunkText) {
		t.Fatalf("responses JSON: %d %s", code, b)
	}
	if code, b := post("/p/v1/responses", `{"model":"m","input":"hi","stream":true}`); code != 200 || !strings.Contains(b, "event: response.output_text.delta") || !strings.Contains(b, "event: response.completed") {
		t.Fatalf("responses stream: %d %s", code, b)
	}
	if code, b := post("/p/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"12345678"}]}`); code != 200 || !strings.Contains(b, `"input_tokens":`) {
		t.Fatalf("count_tokens: %d %s", code, b)
	}
	if code, b := post("/p/v1/embeddings", `{"model":"m","input":["a","b"],"dimensions":3}`); code != 200 || strings.Count(b, `"object":"embedding"`) != 2 {
		t.Fatalf("embeddings: %d %s", code, b)
	}
}
