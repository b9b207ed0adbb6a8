package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSurfaceFirstContent measures, per client format, the two legs
// of a stream's time to first content that the gateway adds, one stream
// at a time over loopback to an in-process upstream (the perfkit mock's
// chunk shapes, the content a moment after the role chunk):
//
//   - req-ns: from the client sending the request to the upstream having
//     it (auth, body read, translation, routing, the upstream request);
//   - first-ns: from the upstream writing its first content chunk to the
//     client reading the first content event (relay, translation, write
//     and flush).
//
// Medians over the run; chat is the yardstick the other formats are read
// against.
func BenchmarkSurfaceFirstContent(b *testing.B) {
	var sent, arrived atomic.Int64 // unix ns: the upstream's first content write, the request's arrival
	var dials atomic.Int64         // upstream connections opened: a stream's must be reused
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Store(time.Now().UnixNano())
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		head := `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"gpt-5","choices":[{"index":0,`
		io.WriteString(w, head+`"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n")
		fl.Flush()
		time.Sleep(200 * time.Microsecond) // the content in a read of its own, as a paced upstream sends it
		for i := range 5 {
			if i == 0 {
				sent.Store(time.Now().UnixNano())
			}
			io.WriteString(w, head+`"delta":{"content":"tok `+string(rune('a'+i))+`"},"logprobs":null,"finish_reason":null}]}`+"\n\n")
			fl.Flush()
		}
		io.WriteString(w, head+`"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":5,"total_tokens":29}}`+"\n\ndata: [DONE]\n\n")
	}))
	up.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			dials.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	g := twoConnsGateway(b, up.URL)
	defer g.Close(context.Background())
	addr := serveLoopback(b, g)
	defer g.srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for _, s := range surfaceStreams {
		b.Run(s.name, func(b *testing.B) {
			reqNs := make([]int64, 0, b.N)
			firstNs := make([]int64, 0, b.N)
			b.ReportAllocs()
			cpu0, dials0 := processCPU(), dials.Load()
			for b.Loop() {
				t0 := time.Now().UnixNano()
				res, err := client.Post("http://"+addr+s.path, "application/json", strings.NewReader(s.body))
				if err != nil {
					b.Fatal(err)
				}
				br := bufio.NewReader(res.Body)
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						b.Fatalf("%s: no content event (%v)", s.name, err)
					}
					if bytes.HasPrefix(line, []byte("data:")) && bytes.Contains(line, []byte(s.delta)) {
						firstNs = append(firstNs, time.Now().UnixNano()-sent.Load())
						break
					}
				}
				reqNs = append(reqNs, arrived.Load()-t0)
				io.Copy(io.Discard, br)
				res.Body.Close()
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(dials.Load()-dials0)/float64(b.N), "dials/op")
			b.ReportMetric(float64(median(reqNs)), "req-ns")
			b.ReportMetric(float64(median(firstNs)), "first-ns")
		})
	}
}

func median(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// surfaceStreams is one streamed request per client format (the perfkit
// streamlat bodies) and what marks its first content event.
var surfaceStreams = []struct{ name, path, body, delta string }{
	{"chat", "/v1/chat/completions", `{"model":"oa/gpt-5","stream":true,"messages":[{"role":"user","content":"Say hello in one short sentence."}]}`, `"content":"tok`},
	{"messages", "/v1/messages", `{"model":"oa/gpt-5","max_tokens":64,"stream":true,"system":"You are a terse assistant.","messages":[{"role":"user","content":"Say hello in one short sentence."}]}`, "content_block_delta"},
	{"responses", "/v1/responses", `{"model":"oa/gpt-5","max_output_tokens":64,"stream":true,"instructions":"You are a terse assistant.","input":"Say hello in one short sentence."}`, "response.output_text.delta"},
}

// twoConnsGateway is a gateway on the twoConns config in front of the
// upstream at upURL.
func twoConnsGateway(tb testing.TB, upURL string) *Gateway {
	tb.Helper()
	cfg, _, err := ParseConfig("t.yaml", []byte(strings.ReplaceAll(twoConns, "{{UP}}", upURL+"/v1")), nil)
	if err != nil {
		tb.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	return g
}
