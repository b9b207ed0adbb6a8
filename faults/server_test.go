package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newTestServer(t *testing.T, rules []Rule) (*Server, *httptest.Server) {
	t.Helper()
	s := NewServer(rules, Options{MaxHold: 2 * time.Second})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

func chat(t *testing.T, base, provider, conn string, stream bool) (*http.Response, error) {
	t.Helper()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
	url := base + "/v1/chat/completions"
	if provider != "" {
		url = base + "/" + provider + "/v1/chat/completions"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+conn)
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return (&http.Client{Transport: tr}).Do(req)
}

func TestServerStatusesHeadersAndIdentity(t *testing.T) {
	srv, ts := newTestServer(t, []Rule{
		{Match: Match{Provider: "glm", Connection: "k1"}, Respond: &Response{Status: 429, Headers: map[string]string{"Retry-After": "20"}}},
		{Match: Match{Provider: "glm", Connection: "k2"}, Respond: &Response{Status: 403, Body: `{"error":{"message":"用户额度不足"}}`}},
	})
	resp, err := chat(t, ts.URL, "glm", "k1", false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "20" || !strings.Contains(string(b), `"error"`) {
		t.Errorf("k1: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	resp, err = chat(t, ts.URL, "glm", "k2", false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(b), "用户额度不足") {
		t.Errorf("k2: %d %s", resp.StatusCode, b)
	}
	resp, err = chat(t, ts.URL, "other", "x", false)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if resp.StatusCode != 200 || c.Object != "chat.completion" || len(c.Choices) != 1 || c.Choices[0].Message.Content == "" {
		t.Errorf("default: %d %+v", resp.StatusCode, c)
	}
	st := srv.Stats()
	if st.Total != 3 || st.ByConnection["glm/k1"]["429"] != 1 || st.ByConnection["other/x"]["200"] != 1 {
		t.Errorf("stats %+v", st)
	}
}

func readSSE(t *testing.T, r io.Reader) (data []string, err error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	return data, sc.Err()
}

func TestServerStreams(t *testing.T) {
	_, ts := newTestServer(t, []Rule{
		{Match: Match{Connection: "cut"}, Respond: &Response{Fault: Cut, Stream: Stream{Chunks: 5, StallAfter: 2}}},
		{Match: Match{Connection: "bad"}, Respond: &Response{Fault: MalformedChunk, Stream: Stream{Chunks: 4, StallAfter: 1}}},
		{Match: Match{Connection: "nodone"}, Respond: &Response{Fault: NoDone, Stream: Stream{Chunks: 3}}},
		{Match: Match{Connection: "stall"}, Respond: &Response{Fault: Stall, Stream: Stream{Chunks: 3, StallAfter: 1, StallFor: 50 * time.Millisecond}}},
	})
	// complete stream
	resp, err := chat(t, ts.URL, "p", "ok", true)
	if err != nil {
		t.Fatal(err)
	}
	data, err := readSSE(t, resp.Body)
	resp.Body.Close()
	if err != nil || resp.Header.Get("Content-Type") != "text/event-stream" || len(data) != DefaultChunks+2 || data[len(data)-1] != "[DONE]" {
		t.Errorf("ok stream: %v %d chunks %q", err, len(data), data)
	}
	for _, d := range data[:len(data)-1] {
		if !json.Valid([]byte(d)) {
			t.Errorf("invalid chunk %q", d)
		}
	}
	// cut: two chunks then the connection dies mid-body
	resp, err = chat(t, ts.URL, "p", "cut", true)
	if err != nil {
		t.Fatal(err)
	}
	data, err = readSSE(t, resp.Body)
	resp.Body.Close()
	if err == nil || len(data) != 2 {
		t.Errorf("cut: want an error after 2 chunks, got %v after %d", err, len(data))
	}
	// malformed
	resp, err = chat(t, ts.URL, "p", "bad", true)
	if err != nil {
		t.Fatal(err)
	}
	data, _ = readSSE(t, resp.Body)
	resp.Body.Close()
	if len(data) < 2 || json.Valid([]byte(data[1])) {
		t.Errorf("malformed: chunk 2 should be broken JSON: %q", data)
	}
	// no [DONE]
	resp, err = chat(t, ts.URL, "p", "nodone", true)
	if err != nil {
		t.Fatal(err)
	}
	data, err = readSSE(t, resp.Body)
	resp.Body.Close()
	if err != nil || len(data) != 4 || data[len(data)-1] == "[DONE]" || !strings.Contains(data[3], `"finish_reason":"stop"`) {
		t.Errorf("no-done: %v %q", err, data)
	}
	// a short stall resumes
	start := time.Now()
	resp, err = chat(t, ts.URL, "p", "stall", true)
	if err != nil {
		t.Fatal(err)
	}
	data, err = readSSE(t, resp.Body)
	resp.Body.Close()
	if err != nil || len(data) != 5 || time.Since(start) < 50*time.Millisecond {
		t.Errorf("stall: %v %d chunks after %v", err, len(data), time.Since(start))
	}
}

func TestServerResetAndTimeout(t *testing.T) {
	_, ts := newTestServer(t, []Rule{
		{Match: Match{Connection: "reset"}, Respond: &Response{Fault: Reset}},
		{Match: Match{Connection: "slow"}, Respond: &Response{Latency: 5 * time.Second}},
		{Match: Match{Connection: "hang"}, Respond: &Response{Fault: Timeout}},
	})
	if _, err := chat(t, ts.URL, "p", "reset", false); err == nil {
		t.Error("reset: want a transport error")
	}
	// A client that gives up ends a slow answer.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/p/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Authorization", "Bearer slow")
	start := time.Now()
	_, err := http.DefaultClient.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Errorf("slow: %v after %v", err, time.Since(start))
	}
	// No response at all: held until MaxHold (2 s here), then closed without an answer.
	start = time.Now()
	if _, err := chat(t, ts.URL, "p", "hang", false); err == nil {
		t.Error("hang: want an error")
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("hang answered after %v", d)
	}
}

func TestControlAPI(t *testing.T) {
	_, ts := newTestServer(t, nil)
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do("PUT", "/_faults", "- match: {provider: p}\n  respond: {status: 503}\n"); code != 200 || !strings.Contains(body, `"rules": 1`) {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if code, body := do("GET", "/_faults", ""); code != 200 || !strings.Contains(body, `"status": 503`) {
		t.Errorf("GET: %d %s", code, body)
	}
	resp, err := chat(t, ts.URL, "p", "k", false)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("after PUT: %v %v", err, resp)
	}
	resp.Body.Close()
	if code, body := do("PUT", "/_faults", "- respond: {statuss: 503}"); code != 400 || !strings.Contains(body, `did you mean \"status\"`) {
		t.Errorf("bad PUT: %d %s", code, body)
	}
	if code, body := do("GET", "/_stats", ""); code != 200 || !strings.Contains(body, `"503": 1`) {
		t.Errorf("stats: %d %s", code, body)
	}
	if code, _ := do("DELETE", "/_faults", ""); code != 200 {
		t.Error("DELETE")
	}
	resp, err = chat(t, ts.URL, "p", "k", false)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after DELETE: %v %v", err, resp)
	}
	resp.Body.Close()
	if code, body := do("GET", "/p/v1/models", ""); code != 200 || !strings.Contains(body, `"object":"list"`) {
		t.Errorf("models: %d %s", code, body)
	}
	if code, body := do("GET", "/_catalog", ""); code != 200 || !strings.Contains(body, "rate-limit-retry-after") {
		t.Errorf("catalog: %d", code)
	}
	if code, _ := do("POST", "/v1/chat/completions", "not json"); code != 400 {
		t.Errorf("bad body: %d", code)
	}
}

func TestServerRuleClockAndSpeed(t *testing.T) {
	now := time.Unix(0, 0)
	s := NewServer([]Rule{{From: 10 * time.Second, Respond: &Response{Status: 503}}}, Options{Speed: 10, Now: func() time.Time { return now }})
	ts := httptest.NewServer(s)
	defer ts.Close()
	get := func() int {
		resp, err := chat(t, ts.URL, "p", "k", false)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get() != 200 {
		t.Error("before from")
	}
	now = now.Add(time.Second) // ×10: 10 s of rule time
	if get() != 503 {
		t.Error("after from")
	}
}
