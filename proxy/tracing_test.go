package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// collector is an OTLP/HTTP endpoint that keeps every span it receives.
type collector struct {
	mu    sync.Mutex
	spans []map[string]any
	auth  []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/json" {
		w.WriteHeader(404)
		return
	}
	var body struct {
		ResourceSpans []struct {
			ScopeSpans []struct {
				Spans []map[string]any `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		w.WriteHeader(400)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.auth = append(c.auth, r.Header.Get("Authorization"))
	for _, rs := range body.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
}

// Tracing (off by default) sends one server span per request with a
// client span per attempt as its children, in the trace of an incoming
// traceparent.
func TestTracingSpanPerRequestAndAttempt(t *testing.T) {
	col := &collector{}
	cs := httptest.NewServer(col)
	defer cs.Close()
	up := newFakeUp(t)
	y := strings.Replace(mgmtConfig, `server: {managementKey: "${ADMIN}"}`,
		"server:\n  managementKey: \"${ADMIN}\"\n  tracing: {endpoint: '"+cs.URL+"', headers: {Authorization: 'Bearer col'}}", 1)
	g := newGW(t, up, y, "ADMIN=s3cret")
	up.set("glm-k1", status(500, `{"error":{"message":"boom"}}`))
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if r := g.chat("glm/glm-5", "traceparent", parent); r.code != 200 {
		t.Fatalf("chat: %d %s", r.code, r.body)
	}
	// The trace is handed over when the handler finishes, just after the
	// client has its answer.
	eventually(t, "the handler finishes", func() bool { return g.g.active.Load() == 0 })
	g.g.CloseTracing(context.Background())
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.spans) != 3 {
		t.Fatalf("want 1 request span + 2 attempt spans, got %d: %v", len(col.spans), col.spans)
	}
	root := col.spans[0]
	if root["traceId"] != "0af7651916cd43dd8448eb211c80319c" || root["parentSpanId"] != "b7ad6b7169203331" || root["kind"] != float64(2) {
		t.Fatalf("request span: %v", root)
	}
	for i, s := range col.spans[1:] {
		if s["traceId"] != root["traceId"] || s["parentSpanId"] != root["spanId"] || s["kind"] != float64(3) {
			t.Fatalf("attempt span %d is not the request's child: %v", i, s)
		}
	}
	if st := col.spans[1]["status"].(map[string]any); st["code"] != float64(2) || st["message"] != "500" {
		t.Fatalf("the failed attempt's status: %v", st)
	}
	if col.auth[0] != "Bearer col" {
		t.Fatalf("collector headers not sent: %v", col.auth)
	}
	if b, _ := json.Marshal(col.spans); strings.Contains(string(b), "glm-k1") {
		t.Fatal("a credential reached a span")
	}
}

// A bad tracing config is a config error with its line.
func TestTracingConfigValidated(t *testing.T) {
	y := "server:\n  tracing: {endpoint: 'grpc://x:4317', sampleRatio: 2}\nproviders:\n  - {id: p, baseURL: 'http://x/v1', connections: [{id: c}]}\n"
	_, _, err := ParseConfig("t.yaml", []byte(y), nil)
	if err == nil || !strings.Contains(err.Error(), "server.tracing.endpoint") || !strings.Contains(err.Error(), "server.tracing.sampleRatio") {
		t.Fatalf("got %v", err)
	}
}

// docs/operations.md#traces: a tracing header the Transport would refuse (a
// name that is not a token, a value with a control character) is a config
// error naming the field, by the same rule as a connection's key; the value
// is never quoted. Tab in a value passes, as net/http sends it.
func TestTracingHeadersValidated(t *testing.T) {
	cfg := func(headers string) string {
		return "server:\n  tracing:\n    endpoint: 'http://127.0.0.1:4318'\n    headers:\n" + headers +
			"providers:\n  - {id: p, baseURL: 'http://x/v1', models: [m], connections: [{id: c}]}\n"
	}
	bad := []struct{ headers, field, problem, secret string }{
		{"      Authorization: \"Bearer s3\\r\\nX-Injected: 1\"\n", "server.tracing.headers.Authorization:", "control character", "s3"},
		{"      X-Key: \"k\\x00ey\"\n", "server.tracing.headers.X-Key:", "byte 0x00", "k\x00ey"},
		{"      X-Key: \"k\\x7fey\"\n", "server.tracing.headers.X-Key:", "byte 0x7f", "k\x7fey"},
		{"      'X Key': v\n", "server.tracing.headers.X Key:", "not a valid header name", ""},
		{"      'X:Key': v\n", "server.tracing.headers.X:Key:", "not a valid header name", ""},
		{"      \"X\\r\\nKey\": v\n", "server.tracing.headers:", "not a valid header name", ""},
		{"      '': v\n", "server.tracing.headers.:", "cannot be empty", ""},
	}
	for _, b := range bad {
		_, _, err := ParseConfig("t.yaml", []byte(cfg(b.headers)), nil)
		if err == nil || !strings.Contains(err.Error(), b.field) || !strings.Contains(err.Error(), b.problem) {
			t.Errorf("headers %q: got %v, want %q ... %q", b.headers, err, b.field, b.problem)
			continue
		}
		if !strings.Contains(err.Error(), "t.yaml:") {
			t.Errorf("headers %q: the error has no file and line: %v", b.headers, err)
		}
		if b.secret != "" && strings.Contains(err.Error(), b.secret) {
			t.Errorf("headers %q: the error quotes the value: %v", b.headers, err)
		}
	}
	if _, _, err := ParseConfig("t.yaml", []byte(cfg("      Authorization: \"Bearer\\ttok\"\n      x-honeycomb-team: k\n")), nil); err != nil {
		t.Fatalf("valid tracing headers refused: %v", err)
	}
}
