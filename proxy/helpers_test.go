package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeUp is a programmable OpenAI-compatible upstream: the behaviour of
// each attempt is chosen by the connection's key (Authorization: Bearer).
type fakeUp struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	by     map[string]behaviour
	calls  map[string]int
	models []string // "model" field of each request received
	keys   []string
	hdrs   []http.Header
	at     []time.Time // when each request arrived
}

// behaviour answers one attempt; n is the 1-based attempt number for that key.
type behaviour func(w http.ResponseWriter, r *http.Request, n int)

func newFakeUp(t *testing.T) *fakeUp {
	f := &fakeUp{t: t, by: map[string]behaviour{}, calls: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeUp) url() string { return f.srv.URL + "/v1" }

func (f *fakeUp) set(key string, b behaviour) {
	f.mu.Lock()
	f.by[key] = b
	f.mu.Unlock()
}

func (f *fakeUp) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[key]
}

// arrivals returns when each request arrived, in order.
func (f *fakeUp) arrivals() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.at)
}

func (f *fakeUp) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

func (f *fakeUp) serve(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if r.URL.Path == "/v1/models" {
		if key == "bad" {
			w.WriteHeader(401)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[]}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var v struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &v)
	f.mu.Lock()
	f.calls[key]++
	n := f.calls[key]
	f.models = append(f.models, v.Model)
	f.keys = append(f.keys, key)
	f.hdrs = append(f.hdrs, r.Header.Clone())
	f.at = append(f.at, time.Now())
	b := f.by[key]
	f.mu.Unlock()
	if b == nil {
		b = okJSON("hello")
	}
	b(w, r, n)
}

func okJSON(content string) behaviour {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, content)
	}
}

func status(code int, body string, headers ...string) behaviour {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// seq answers the n-th attempt with bs[n-1], the last one repeating.
func seq(bs ...behaviour) behaviour {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		bs[min(n, len(bs))-1](w, r, n)
	}
}

// slow delays the response headers.
func slow(d time.Duration, b behaviour) behaviour {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		b(w, r, n)
	}
}

type streamOpt struct {
	chunks     int
	interval   time.Duration
	stallAfter int           // content chunks before a stall (0 = none)
	stallFor   time.Duration // 0 = until the client gives up
	cutAfter   int           // content chunks before the connection is cut
	errAfter   int           // content chunks before an error event (-1 = before any)
	errEvent   string
	noRole     bool
	reasoning  int // reasoning frames before content
	noDone     bool
	brokenAt   int // content chunk (1-based) sent as an event whose data is not JSON (0 = none)
}

func sse(o streamOpt) behaviour {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		fl := w.(http.Flusher)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		send := func(s string) { io.WriteString(w, "data: "+s+"\n\n"); fl.Flush() }
		if !o.noRole {
			send(`{"id":"s","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"}}]}`)
		}
		if o.errAfter < 0 {
			send(o.errEvent)
			return
		}
		for i := 0; i < o.reasoning; i++ {
			send(`{"id":"s","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}`)
			time.Sleep(o.interval)
		}
		for i := 0; i < o.chunks; i++ {
			if o.stallAfter > 0 && i == o.stallAfter {
				if o.stallFor == 0 {
					<-r.Context().Done()
					return
				}
				time.Sleep(o.stallFor)
			}
			if o.cutAfter > 0 && i == o.cutAfter {
				panic(http.ErrAbortHandler) // cut the connection mid-stream
			}
			if o.errAfter > 0 && i == o.errAfter {
				send(o.errEvent)
				return
			}
			if i+1 == o.brokenAt { // the fault catalog's malformed-chunk
				send(`{"id":"s","choices":[{"delta":{"content":"lor`)
				continue
			}
			send(fmt.Sprintf(`{"id":"s","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok%d "}}]}`, i))
			if o.interval > 0 {
				select {
				case <-time.After(o.interval):
				case <-r.Context().Done():
					return
				}
			}
		}
		send(`{"id":"s","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		if !o.noDone {
			send(`[DONE]`)
		}
	}
}

// testBase turns off the waits so failure tests answer at once, unless a
// test's resilience section says otherwise.
const testBase = `
resilience:
  waitForCooldown: {enabled: false}
  comboCooldownWait: {enabled: false}
`

type gw struct {
	t     *testing.T
	admin string // management key from the ADMIN= env, for the helpers
	g     *Gateway
	srv   *gwServer
	up    *fakeUp
}

// gwServer is a gateway served as `breakwater serve` serves it (Serve) on a
// loopback port.
type gwServer struct {
	URL string
	g   *Gateway
}

func (s *gwServer) Close() { s.g.srv.Close() }

func serveGW(t *testing.T, g *Gateway) *gwServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	s := &gwServer{URL: "http://" + l.Addr().String(), g: g}
	t.Cleanup(s.Close)
	return s
}

// newGW starts a gateway from YAML; {{UP}} is the fake upstream's base URL.
func newGW(t *testing.T, up *fakeUp, cfgYAML string, env ...string) *gw {
	t.Helper()
	return newGWOpts(t, up, cfgYAML, Options{Environ: env})
}

// newGWOpts is newGW with Options (its Logger and Seed are the test's).
func newGWOpts(t *testing.T, up *fakeUp, cfgYAML string, opts Options) *gw {
	t.Helper()
	env := opts.Environ
	y := strings.ReplaceAll(cfgYAML, "{{UP}}", up.url())
	cfg, _, err := ParseConfig("test.yaml", []byte(y), env)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts.Seed = 1
	g, err := New(context.Background(), cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := serveGW(t, g)
	t.Cleanup(func() {
		srv.Close()
		g.Close(context.Background())
	})
	out := &gw{t: t, g: g, srv: srv, up: up}
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "ADMIN="); ok {
			out.admin = v
		}
	}
	return out
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

type resp struct {
	code int
	h    http.Header
	body string
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.body)
	}
	return v
}

func (r resp) errCode() string {
	var v struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(r.body), &v)
	return v.Error.Code
}

func (g *gw) do(method, path, body string, headers ...string) resp {
	g.t.Helper()
	return g.doCtx(context.Background(), method, path, body, headers...)
}

func (g *gw) doCtx(ctx context.Context, method, path, body string, headers ...string) resp {
	g.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, g.srv.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return resp{code: -1, body: err.Error()}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{code: res.StatusCode, h: res.Header, body: string(b)}
}

func (g *gw) chat(model string, headers ...string) resp {
	g.t.Helper()
	return g.do("POST", "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model), headers...)
}

func (g *gw) stream(model string, headers ...string) resp {
	g.t.Helper()
	return g.do("POST", "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, model), headers...)
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// eventually polls cond with a generous deadline (no timed assertions).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func (g *gw) health() map[string]any {
	g.t.Helper()
	r := g.do("GET", "/api/monitoring/health", "", "Authorization", "Bearer "+g.admin)
	if r.code != 200 {
		g.t.Fatalf("health: %d %s", r.code, r.body)
	}
	return r.json(g.t)
}

func (g *gw) conn(provider, conn string) map[string]any {
	g.t.Helper()
	for _, c := range g.health()["connections"].([]any) {
		m := c.(map[string]any)
		if m["provider"] == provider && m["connection"] == conn {
			return m
		}
	}
	g.t.Fatalf("no connection %s/%s in health", provider, conn)
	return nil
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func asErr[T error](err error, target *T) bool { return errors.As(err, target) }

// newTestServer serves a gateway's handler; it is closed with the test
// binary (used where the gateway's own lifetime is under test).
func newTestServer(g *Gateway) string {
	return httptest.NewServer(g.Handler()).URL
}

// serveLoopback serves g with Serve (as `breakwater serve` does) on a
// loopback port and returns its address; stopping it is the caller's.
func serveLoopback(tb testing.TB, g *Gateway) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go g.Serve(l)
	return l.Addr().String()
}
