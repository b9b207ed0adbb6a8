package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	rtmetrics "runtime/metrics"
	"strings"
	"syscall"
	"testing"
)

// BenchmarkGateway measures one client request through the gateway to an
// in-process upstream (JSON and SSE), end to end over loopback HTTP, served
// by Serve as `breakwater serve` serves it.
func BenchmarkGateway(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "sse"
		}
		b.Run(name, func(b *testing.B) {
			up := benchUpstream()
			defer up.Close()
			cfg, _, err := ParseConfig("b.yaml", []byte(strings.ReplaceAll(twoConns, "{{UP}}", up.URL+"/v1")), nil)
			if err != nil {
				b.Fatal(err)
			}
			g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close(context.Background())
			addr := serveLoopback(b, g) // the production server
			defer g.srv.Close()
			body := benchBody(stream)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			runClients(b, client, addr, body)
		})
	}
}

// BenchmarkFloor is BenchmarkGateway's harness (client, upstream, loopback)
// with a plain net/http proxy in the gateway's place, as examples/bareproxy
// is one: the body read whole, a Transport round trip, the answer copied
// through and flushed. BenchmarkGateway's cpu-ns/op minus this one's is
// the gateway's own work per request.
func BenchmarkFloor(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "sse"
		}
		b.Run(name, func(b *testing.B) {
			up := benchUpstream()
			defer up.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
			defer tr.CloseIdleConnections()
			bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				in, err := io.ReadAll(r.Body)
				if err != nil {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				req, err := http.NewRequestWithContext(r.Context(), r.Method, up.URL+r.URL.RequestURI(), bytes.NewReader(in))
				if err != nil {
					w.WriteHeader(http.StatusBadGateway)
					return
				}
				req.Header.Set("Content-Type", "application/json")
				if stream {
					req.Header.Set("Accept", "text/event-stream")
				}
				res, err := tr.RoundTrip(req)
				if err != nil {
					w.WriteHeader(http.StatusBadGateway)
					return
				}
				defer res.Body.Close()
				for k, v := range res.Header {
					w.Header()[k] = v
				}
				w.WriteHeader(res.StatusCode)
				f := w.(http.Flusher)
				buf := make([]byte, 4096)
				for {
					n, err := res.Body.Read(buf)
					if n > 0 {
						w.Write(buf[:n])
						f.Flush()
					}
					if err != nil {
						return
					}
				}
			}))
			defer bare.Close()
			body := benchBody(stream)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			runClients(b, client, strings.TrimPrefix(bare.URL, "http://"), body)
		})
	}
}

// benchUpstream is the in-process upstream both harnesses call: a short
// JSON answer, or ten SSE chunks when the request accepts a stream.
func benchUpstream() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if strings.Contains(r.Header.Get("Accept"), "event-stream") {
			sse(streamOpt{chunks: 10})(w, r, 1)
			return
		}
		okJSON("hello there")(w, r, 1)
	}))
}

// benchBody is the client's chat request, streamed or not.
func benchBody(stream bool) string {
	if stream {
		return `{"model":"glm/glm-5","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	}
	return `{"model":"glm/glm-5","messages":[{"role":"user","content":"hello"}]}`
}

// runClients posts body to addr from GOMAXPROCS clients in parallel and
// reports the process's CPU per request beside the wall time.
func runClients(b *testing.B, client *http.Client, addr, body string) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, g0 := processCPU(), goroutinesCreated()
	defer func() {
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		// Each goroutine started is a wake-up to schedule; the difference
		// to BenchmarkFloor is the gateway's own.
		b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
	}()
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

// goroutinesCreated counts the goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []rtmetrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// processCPU is the process's user+system CPU time in nanoseconds. On a
// shared machine wall time per op moves with the neighbours' load; CPU per
// op (client, gateway and upstream together, all in this process) much less.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
