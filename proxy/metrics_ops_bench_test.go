package proxy

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkOperatorMetricsPerRequest is what the operator series add to
// one request: the request counter, the token counters, the end-to-end
// and time-to-first-token histograms, and reading a JSON answer's usage.
func BenchmarkOperatorMetricsPerRequest(b *testing.B) {
	cfg, _, err := ParseConfig("b.yaml", []byte(strings.ReplaceAll(twoConns, "{{UP}}", "http://127.0.0.1:1/v1")), nil)
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close(context.Background())
	body := []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}`)
	r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rs := &reqState{g: g, r: r, start: time.Now(), provider: "glm"}
		rs.req.Model, rs.req.Stream = "glm/glm-5", true
		rs.firstOut = rs.start.Add(time.Millisecond)
		for pb.Next() {
			rs.noteUsage(body)
			rs.countOps(200)
			rs.observeOps(5 * time.Millisecond)
		}
	})
}
