package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// connCounter counts the TCP connections a test server accepted.
type connCounter struct {
	mu  sync.Mutex
	new int
}

func (c *connCounter) hook(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		c.mu.Lock()
		c.new++
		c.mu.Unlock()
	}
}

func (c *connCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.new
}

func newTestUpClient() *upClient {
	d := net.Dialer{Timeout: 2 * time.Second}
	return newUpClient(&http.Client{}, d.DialContext)
}

func post(t *testing.T, u *upClient, ctx context.Context, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	return u.Do(req)
}

func readAllClose(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

// The direct upstream path keeps one keep-alive connection for sequential
// requests (the point of the client: no per-request dial, no hand-off).
func TestUpClientReusesKeepAliveConnection(t *testing.T) {
	var cc connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(append([]byte("echo:"), b...))
	}))
	srv.Config.ConnState = cc.hook
	srv.Start()
	defer srv.Close()
	u := newTestUpClient()
	defer u.CloseIdle(true)
	for i := 0; i < 5; i++ {
		res, err := post(t, u, context.Background(), srv.URL+"/x", "hi")
		if err != nil {
			t.Fatal(err)
		}
		if got := readAllClose(t, res); got != "echo:hi" || res.StatusCode != 200 {
			t.Fatalf("got %d %q", res.StatusCode, got)
		}
	}
	if n := cc.count(); n != 1 {
		t.Fatalf("5 sequential requests opened %d connections, want 1", n)
	}
}

// An idle connection the upstream closed is retried once on a fresh one:
// the request never reached a handler, so the client sees no error.
func TestUpClientRetriesStaleIdleConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	u := newTestUpClient()
	defer u.CloseIdle(true)
	res, err := post(t, u, context.Background(), srv.URL, "a")
	if err != nil {
		t.Fatal(err)
	}
	readAllClose(t, res)
	srv.CloseClientConnections() // the upstream drops the idle keep-alive
	time.Sleep(20 * time.Millisecond)
	res, err = post(t, u, context.Background(), srv.URL, "b")
	if err != nil {
		t.Fatalf("a stale idle connection surfaced as an error: %v", err)
	}
	if got := readAllClose(t, res); got != "ok" {
		t.Fatalf("got %q", got)
	}
}

// Cancelling the context (a phase timer or a watchdog) wakes a blocked body
// read at once, and the connection is not reused afterwards.
func TestUpClientCancelWakesBlockedReadAndDropsConnection(t *testing.T) {
	var cc connCounter
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			w.Write([]byte("part"))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Write([]byte("fast"))
	}))
	srv.Config.ConnState = cc.hook
	srv.Start()
	defer srv.Close()
	defer close(release)
	u := newTestUpClient()
	defer u.CloseIdle(true)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := post(t, u, ctx, srv.URL+"/slow", "")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "part" {
		t.Fatalf("first bytes: %q %v", buf, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := res.Body.Read(make([]byte, 16))
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read after cancel returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not wake the blocked read")
	}
	res.Body.Close()
	res, err = post(t, u, context.Background(), srv.URL+"/fast", "")
	if err != nil {
		t.Fatal(err)
	}
	readAllClose(t, res)
	if n := cc.count(); n != 2 {
		t.Fatalf("connections = %d, want 2 (the cancelled one must not be reused)", n)
	}
}

// A stream read up to its last event and closed before the chunked
// terminator was consumed keeps its connection when the terminator is
// already buffered.
func TestUpClientStreamClosedAtDoneKeepsConnection(t *testing.T) {
	var cc connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			w.Write([]byte("data: {}\n\n"))
			w.(http.Flusher).Flush()
		}
		w.Write([]byte("data: [DONE]\n\n"))
	}))
	srv.Config.ConnState = cc.hook
	srv.Start()
	defer srv.Close()
	u := newTestUpClient()
	defer u.CloseIdle(true)
	for i := 0; i < 3; i++ {
		res, err := post(t, u, context.Background(), srv.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		buf := make([]byte, 64)
		for !bytes.Contains(got, []byte("[DONE]")) {
			n, err := res.Body.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		time.Sleep(10 * time.Millisecond) // let the terminator arrive
		res.Body.Close()
	}
	if n := cc.count(); n != 1 {
		t.Fatalf("connections = %d, want 1", n)
	}
}

// "Connection: close" from the upstream is honoured: the next request dials.
func TestUpClientHonoursConnectionClose(t *testing.T) {
	var cc connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Write([]byte("bye"))
	}))
	srv.Config.ConnState = cc.hook
	srv.Start()
	defer srv.Close()
	u := newTestUpClient()
	defer u.CloseIdle(true)
	for i := 0; i < 2; i++ {
		res, err := post(t, u, context.Background(), srv.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := readAllClose(t, res); got != "bye" {
			t.Fatalf("got %q", got)
		}
	}
	if n := cc.count(); n != 2 {
		t.Fatalf("connections = %d, want 2", n)
	}
}

// Informational answers (103 Early Hints) before the real one are skipped.
func TestUpClientSkipsInformationalResponses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</x>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.WriteHeader(http.StatusTeapot)
		w.Write([]byte("tea"))
	}))
	defer srv.Close()
	u := newTestUpClient()
	defer u.CloseIdle(true)
	res, err := post(t, u, context.Background(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAllClose(t, res); res.StatusCode != http.StatusTeapot || got != "tea" {
		t.Fatalf("got %d %q", res.StatusCode, got)
	}
}

// TLS upstreams (and configured HTTP proxies) go through net/http's
// Transport, which also brings HTTP/2.
func TestUpClientTLSUsesFallbackTransport(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("secure"))
	}))
	defer srv.Close()
	d := net.Dialer{}
	u := newUpClient(srv.Client(), d.DialContext)
	res, err := post(t, u, context.Background(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAllClose(t, res); got != "secure" {
		t.Fatalf("got %q", got)
	}
	u.mu.Lock()
	pooled := len(u.idle)
	u.mu.Unlock()
	if pooled != 0 {
		t.Fatal("a TLS upstream went through the direct path")
	}
}

// A refused dial surfaces as a dial *net.OpError, which the executor maps
// to the transport "refused" outcome (SPEC §11.3).
func TestUpClientDialErrorIsOpError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	u := newTestUpClient()
	_, err = post(t, u, context.Background(), "http://"+addr+"/x", "")
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("err = %v, want a dial OpError", err)
	}
}

// Idle connections older than the idle timeout are closed, not reused.
func TestUpClientIdleTimeoutDropsOldConnections(t *testing.T) {
	var cc connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 10)))
	}))
	srv.Config.ConnState = cc.hook
	srv.Start()
	defer srv.Close()
	u := newTestUpClient()
	u.idleFor = 30 * time.Millisecond
	defer u.CloseIdle(true)
	for i := 0; i < 2; i++ {
		res, err := post(t, u, context.Background(), srv.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		readAllClose(t, res)
		time.Sleep(60 * time.Millisecond)
	}
	if n := cc.count(); n != 2 {
		t.Fatalf("connections = %d, want 2", n)
	}
}

// writeRequest is Request.Write without its allocations: for every request
// shape the gateway sends (and a few it does not), the bytes on the wire
// must be the same, including CR/LF in a value never splitting the head.
func TestWriteRequestMatchesRequestWrite(t *testing.T) {
	mk := func(method, url, body string, h http.Header) func() *http.Request {
		return func() *http.Request {
			var r *http.Request
			if body == "" && method == http.MethodGet {
				r, _ = http.NewRequest(method, url, nil)
			} else {
				r, _ = http.NewRequest(method, url, strings.NewReader(body))
			}
			for k, v := range h {
				r.Header[k] = v
			}
			return r
		}
	}
	cases := map[string]func() *http.Request{
		"chat": mk("POST", "http://127.0.0.1:9001/v1/chat/completions", `{"model":"m"}`, http.Header{
			"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}, "Authorization": {"Bearer k"}, "User-Agent": {"breakwater"}}),
		"no user agent":    mk("POST", "http://h:80/v1/x?alt=sse&key=1", `{}`, http.Header{"X-Api-Key": {"k"}}),
		"empty user agent": mk("POST", "http://h/v1/x", `{}`, http.Header{"User-Agent": {""}}),
		"get":              mk("GET", "http://h/v1/models", "", http.Header{"Authorization": {"Bearer k"}}),
		"empty post body":  mk("POST", "http://h/v1/x", "", nil),
		"multi values":     mk("POST", "http://h/x", "ab", http.Header{"X-A": {"1", "2"}, "X-B": {" padded\t"}}),
		"injection":        mk("POST", "http://h/x", "ab", http.Header{"X-A": {"v\r\nX-Evil: 1"}, "X-B": {"tail\r\n"}, "X-C": {"\n\r a\rb\n\nc \t"}, "X-D": {"\r\n"}}),
		"ignored headers":  mk("POST", "http://h/x", "ab", http.Header{"Host": {"other"}, "Content-Length": {"99"}}),
	}
	for name, newReq := range cases {
		var want, got bytes.Buffer
		bw := bufio.NewWriter(&want)
		if err := newReq().Write(bw); err != nil {
			t.Fatal(err)
		}
		bw.Flush()
		bw = bufio.NewWriter(&got)
		if err := writeRequest(bw, newReq()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		bw.Flush()
		if got.String() != want.String() {
			t.Errorf("%s:\n got %q\nwant %q", name, got.String(), want.String())
		}
	}
}

// Rule: newPostRequest builds what http.NewRequestWithContext builds for a
// POST with a byte body, from a URL parsed once, and an attempt changing
// its request leaves the template alone.
func TestNewPostRequestMatchesNewRequest(t *testing.T) {
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, 1)
	for _, raw := range []string{"http://127.0.0.1:9001/v1/chat/completions", "https://api.example.com:443/v1/chat/completions?x=1", "http://h:80/a%20b/chat/completions"} {
		tmpl, err := http.NewRequest(http.MethodPost, raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{`{"model":"m"}`, ""} {
			want, _ := http.NewRequestWithContext(ctx, http.MethodPost, raw, bytes.NewReader([]byte(body)))
			got := newPostRequest(ctx, tmpl, []byte(body))
			if got.Method != want.Method || got.URL.String() != want.URL.String() || got.Host != want.Host || got.Proto != want.Proto ||
				got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor || got.ContentLength != want.ContentLength ||
				got.Context() != ctx || len(got.Header) != 0 || (body == "") != (got.Body == http.NoBody) {
				t.Fatalf("%s %q: got %+v\nwant %+v", raw, body, got, want)
			}
			for i, rd := range []func() (io.ReadCloser, error){func() (io.ReadCloser, error) { return got.Body, nil }, got.GetBody, got.GetBody} {
				rc, err := rd()
				b, _ := io.ReadAll(rc)
				if err != nil || string(b) != body || rc.Close() != nil {
					t.Fatalf("%s: body read %d gave %q, %v; want %q", raw, i, b, err, body)
				}
			}
			got.URL.Path, got.Header["X"] = "/changed", []string{"1"}
			if tmpl.URL.Path == "/changed" || len(tmpl.Header) != 0 {
				t.Fatalf("the template changed: %v %v", tmpl.URL, tmpl.Header)
			}
		}
	}
}
