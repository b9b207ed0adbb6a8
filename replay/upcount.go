package replay

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// callCounter counts the upstream calls the fault upstream answers per
// client request. A window's `upstreamCalls` is a count of upstream calls,
// which X-Breakwater-Attempts over-counts when an attempt was refused
// locally (a saturated gate, a paced slot past its budget: an attempt in
// the model's terms, never sent; sim/admission.go) and cannot give for a
// request the client gave up on. Each replay request's body names its
// number ("replay request N", run.go send) and the gateway forwards the
// message text to the upstream, so the in-process fault upstream can tell
// whose call it answers.
//
// It also keeps the connection each request's last call came on (the
// provider is the first path segment of the fault upstream's base URL, the
// connection its API key): a client that gave up before the answer's
// headers got no X-Breakwater-Connection, but the decision was made.
type callCounter struct {
	inner http.Handler
	mu    sync.Mutex
	calls map[int]int
	last  map[int]string
}

var replayMarker = []byte("replay request ")

func newCallCounter(inner http.Handler) *callCounter {
	return &callCounter{inner: inner, calls: map[int]int{}, last: map[int]string{}}
}

func (c *callCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Method == http.MethodPost {
		b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(b))
		if err == nil {
			if i := bytes.Index(b, replayMarker); i >= 0 {
				j := i + len(replayMarker)
				k := j
				for k < len(b) && b[k] >= '0' && b[k] <= '9' {
					k++
				}
				if n, err := strconv.Atoi(string(b[j:k])); err == nil {
					p, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
					c.mu.Lock()
					c.calls[n]++
					c.last[n] = p + "/" + apiKey(r)
					c.mu.Unlock()
				}
			}
		}
	}
	c.inner.ServeHTTP(w, r)
}

// apiKey is the key a gateway connection sends (Authorization: Bearer, or
// an adapter's x-api-key / x-goog-api-key), as the fault upstream reads it.
func apiKey(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		k, _ := strings.CutPrefix(a, "Bearer ")
		return strings.TrimSpace(k)
	}
	if k := r.Header.Get("X-Goog-Api-Key"); k != "" {
		return strings.TrimSpace(k)
	}
	return strings.TrimSpace(r.Header.Get("X-Api-Key"))
}

// lastConn returns the provider/connection of request n's last upstream
// call ("" for none).
func (c *callCounter) lastConn(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[n]
}

// of returns the upstream calls made for request n.
func (c *callCounter) of(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[n]
}
