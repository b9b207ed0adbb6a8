package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	sseContent = `data: {"id":"s","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"}}]}` + "\n\n"
	sseFinish  = `data: {"id":"s","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
)

// A stream that ends with [DONE] hands its upstream connection back for
// the next request, as a JSON answer does: the gateway reads on to the
// body's end (on HTTP/1.1 the last chunk, written after the handler's
// [DONE] flush) instead of closing the body right after [DONE], which
// costs the connection: a dial, on https a handshake, per stream
// (transport.go drainAfterDone). Bounded in time: the upstream here sends
// its last chunk a millisecond after [DONE], well inside the bound, so
// only a stall of this machine makes a stream dial again; without the
// drain every one does.
func TestStreamsReuseTheUpstreamConnection(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	var mu sync.Mutex
	conns := map[string]bool{}
	up.set("glm-k1", func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseContent)
		w.(http.Flusher).Flush()
		io.WriteString(w, sseFinish)
		w.(http.Flusher).Flush()
		time.Sleep(time.Millisecond) // the last chunk follows, a moment later
	})
	const streams = 10
	for i := 0; i < streams; i++ {
		if r := g.stream("glm/glm-5"); r.code != 200 || !strings.HasSuffix(r.body, "data: [DONE]\n\n") {
			t.Fatalf("stream %d: %d %s", i, r.code, r.body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) > streams/2 {
		t.Fatalf("%d sequential streams took %d upstream connections", streams, len(conns))
	}
}

// The drain after [DONE] is bounded: an upstream that sends [DONE] and
// then holds its body open does not hold the client's stream, which ends
// with [DONE] as it came.
func TestStreamDoneWithTheBodyHeldOpenStillEnds(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	up.set("glm-k1", func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseContent+sseFinish)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	r := g.stream("glm/glm-5")
	if ev := sseEvents(r.body); r.code != 200 || len(ev) != 3 || ev[2] != "[DONE]" {
		t.Fatalf("got %d %s", r.code, r.body)
	}
}
