package replay

import (
	"bytes"
	"context"
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
type callCounter struct {
	inner http.Handler
	mu    sync.Mutex
	calls map[int]int
	seen  map[int]chan struct{} // closed at request n's first call
	prog  *progress             // told of each call (quiet.go); nil = none
}

// reqNumKey keys a replay request's number in the context of its calls to
// the fault upstream (set by callCounter, read by waiting).
type reqNumKey struct{}

var replayMarker = []byte("replay request ")

func newCallCounter(inner http.Handler) *callCounter {
	return &callCounter{inner: inner, calls: map[int]int{}, seen: map[int]chan struct{}{}}
}

func (c *callCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for _, h := range []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key"} {
		if v := r.Header.Get(h); v != "" {
			r.Header.Set(h, strings.Replace(v, connKeyPrefix, "", 1)) // the fault upstream reads the id
		}
	}
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
					c.mu.Lock()
					c.calls[n]++
					if c.calls[n] == 1 {
						close(chanOf(c.seen, n))
					}
					c.mu.Unlock()
					if c.prog != nil {
						c.prog.receivedCall(n)
					}
					r = r.WithContext(context.WithValue(r.Context(), reqNumKey{}, n))
				}
			}
		}
	}
	c.inner.ServeHTTP(w, r)
}

// reqNum is the replay request number of an upstream call's context.
func reqNum(ctx context.Context) (int, bool) {
	n, ok := ctx.Value(reqNumKey{}).(int)
	return n, ok
}

func chanOf(m map[int]chan struct{}, n int) chan struct{} {
	ch, ok := m[n]
	if !ok {
		ch = make(chan struct{})
		m[n] = ch
	}
	return ch
}

// of returns the upstream calls made for request n.
func (c *callCounter) of(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[n]
}
