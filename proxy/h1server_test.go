package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// seen is what a handler observed of one request.
type seen struct {
	Method, Path, RawQuery, Host, Proto, RequestURI string
	Header                                          http.Header
	ContentLength                                   int64
	Body                                            string
	Close                                           bool
	FastPath                                        bool
}

// captureHandler records each request and answers with its body echoed and a
// few headers, the way the chat handler writes (explicit Content-Length).
type captureHandler struct {
	mu   sync.Mutex
	reqs []seen
}

func (h *captureHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_, fast := w.(*h1Response)
	h.mu.Lock()
	h.reqs = append(h.reqs, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Proto, r.RequestURI,
		r.Header.Clone(), r.ContentLength, string(b), r.Close, fast})
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.Header()["X-Odd"] = []string{"a\r\nInjected: yes"}
	w.Write(b)
}

// all is every request seen so far (under the lock: the race detector does
// not see the ordering a response on a socket gives).
func (h *captureHandler) all() []seen {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]seen(nil), h.reqs...)
}

func (h *captureHandler) last(t *testing.T) seen {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.reqs) == 0 {
		t.Fatal("the handler saw no request")
	}
	return h.reqs[len(h.reqs)-1]
}

// listenLoopback runs serve on a fresh loopback listener and stop at the
// test's end; it returns the address.
func listenLoopback(t *testing.T, serve func(net.Listener) error, stop func() error) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go serve(l)
	t.Cleanup(func() { stop() })
	return l.Addr().String()
}

func startH1(t *testing.T, h http.Handler) string {
	s := newH1Server(h, slog.New(slog.NewTextHandler(io.Discard, nil)), 5*time.Second, 5*time.Second)
	return listenLoopback(t, s.Serve, s.Close)
}

func startStd(t *testing.T, h http.Handler) string {
	s := &http.Server{Handler: h}
	return listenLoopback(t, s.Serve, s.Close)
}

// exchange writes raw to addr and reads responses until the server closes
// or n responses arrived; it returns them normalised (no Date) as text.
func exchange(t *testing.T, addr, raw string, n int) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []string
	for i := 0; i < n; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Header.Del("Date")
		var keys []string
		for k := range resp.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		s := fmt.Sprintf("%d close=%v", resp.StatusCode, resp.Close)
		for _, k := range keys {
			s += fmt.Sprintf("\n%s: %q", k, resp.Header[k])
		}
		out = append(out, s+"\n\n"+string(b))
	}
	return out
}

// dialSend opens a connection to addr (closed with the test), writes raw
// and returns a reader of what comes back.
func dialSend(t *testing.T, addr, raw string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// sameAnswers sends raw to the listener and to a plain net/http server,
// each with its own capturing handler, and fails the test when the two
// answers differ.
func sameAnswers(t *testing.T, raw string) (fast, std *captureHandler) {
	t.Helper()
	fast, std = &captureHandler{}, &captureHandler{}
	fastOut := exchange(t, startH1(t, fast), raw, 1)
	stdOut := exchange(t, startStd(t, std), raw, 1)
	if !reflect.DeepEqual(fastOut, stdOut) {
		t.Errorf("responses differ:\nfast path: %q\nnet/http:  %q", fastOut, stdOut)
	}
	return fast, std
}

func chatReq(headers, body string) string {
	return "POST /v1/chat/completions HTTP/1.1\r\nHost: gw.local:8080\r\n" + headers +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
}

// TestFastPathSeesWhatNetHTTPSees: the handler gets the same request from
// the fast path as from net/http — method, path, Host, canonical header
// keys, duplicate fields, body, Connection: close — and the client gets the
// same response (response splitting in a header value defused the same way).
func TestFastPathSeesWhatNetHTTPSees(t *testing.T) {
	cases := map[string]string{
		"plain":         chatReq("Authorization: Bearer k\r\nContent-Type: application/json\r\n", `{"model":"m"}`),
		"lower-case":    chatReq("authorization: Bearer k\r\ncontent-type: application/json\r\nx-session-id: s1\r\nx-weird_name: v\r\n", `{}`),
		"duplicates":    chatReq("Accept: a\r\naccept: b\r\nX-A: 1\r\nX-a: 2\r\n", `{}`),
		"spaces":        chatReq("X-Pad:   padded value \t\r\nX-Empty:\r\n", `{"a":1}`),
		"close":         chatReq("Connection: close\r\n", `{}`),
		"keep-alive":    chatReq("Connection: Keep-Alive\r\n", `{}`),
		"empty body":    chatReq("", ``),
		"obs-text":      chatReq("X-Latin: caf\xe9\r\n", `{}`),
		"long key name": chatReq("X-"+strings.Repeat("very-long-", 8)+"name: v\r\n", `{}`),
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			fastH, stdH := sameAnswers(t, raw)
			got, want := fastH.last(t), stdH.last(t)
			if !got.FastPath {
				t.Fatalf("the fast path did not take %q", raw)
			}
			got.FastPath = false
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the handler saw\n%+v\nfrom the fast path, and\n%+v\nfrom net/http", got, want)
			}
		})
	}
}

// TestFastPathHandsOverTheRest: every request outside the fast path's shape
// is net/http's, on the same connection, with the bytes already read, and
// gets exactly net/http's answer (malformed heads included).
func TestFastPathHandsOverTheRest(t *testing.T) {
	cases := map[string]string{
		"other path":      "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
		"query":           "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"chunked":         "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"expect":          "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
		"http/1.0":        "POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"no host":         "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
		"two hosts":       "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 2\r\n\r\n{}",
		"bad host":        "POST /v1/chat/completions HTTP/1.1\r\nHost: a b\r\nContent-Length: 2\r\n\r\n{}",
		"no length":       "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n",
		"two lengths":     "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
		"bad length":      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}",
		"space in name":   "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nBad Name: v\r\nContent-Length: 2\r\n\r\n{}",
		"space at colon":  "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-A : v\r\nContent-Length: 2\r\n\r\n{}",
		"folded":          "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-A: v\r\n  more\r\nContent-Length: 2\r\n\r\n{}",
		"ctl in value":    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\nContent-Length: 2\r\n\r\n{}",
		"bare LF":         "POST /v1/chat/completions HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}",
		"upgrade":         "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\n{}",
		"pragma":          "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nPragma: no-cache\r\nContent-Length: 2\r\n\r\n{}",
		"huge head":       "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 6000) + "\r\nContent-Length: 2\r\n\r\n{}",
		"lower-case verb": "post /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"garbage":         "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			fastH, _ := sameAnswers(t, raw)
			for _, r := range fastH.all() {
				if r.FastPath {
					t.Errorf("the fast path took %q", raw)
				}
			}
		})
	}
}

// TestFastPathKeepsAlive: pipelined requests, a fast-path request followed
// by one for net/http on the same connection, and an unread body that is
// skipped to keep the connection.
func TestFastPathKeepsAlive(t *testing.T) {
	h := &captureHandler{}
	addr := startH1(t, h)
	raw := chatReq("", `{"n":1}`) + chatReq("", `{"n":2}`) + "GET /other HTTP/1.1\r\nHost: x\r\n\r\n" + chatReq("", `{"n":3}`)
	out := exchange(t, addr, raw, 4)
	if len(out) != 4 {
		t.Fatalf("got %d responses to 4 pipelined requests: %q", len(out), out)
	}
	var fast []bool
	reqs := h.all()
	for _, r := range reqs {
		fast = append(fast, r.FastPath)
	}
	if !reflect.DeepEqual(fast, []bool{true, true, false, false}) {
		t.Errorf("fast path per request = %v, want the two chats before the hand-over", fast)
	}
	if reqs[1].Body != `{"n":2}` || reqs[3].Body != `{"n":3}` {
		t.Errorf("bodies %q, %q", reqs[1].Body, reqs[3].Body)
	}

	// A handler that does not read the body: the rest is skipped, the next
	// request on the connection is read from the right place.
	skip := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		w.Write([]byte("ok"))
	})
	addr = startH1(t, skip)
	out = exchange(t, addr, chatReq("", strings.Repeat("x", 10000))+chatReq("", "{}"), 2)
	if len(out) != 2 || strings.Contains(out[0], "close=true") {
		t.Errorf("unread body: %q", out)
	}
}

// TestFastPathResponses: how the fast path frames what a handler writes —
// chunked when no length is set (each flush reaching the client), a
// Content-Length of 0 for a handler that writes nothing, no body for a 204,
// and a short body ends the connection instead of leaving the client waiting.
func TestFastPathResponses(t *testing.T) {
	flushed := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Case") {
		case "stream":
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte("data: 1\n\n"))
			w.(http.Flusher).Flush()
			<-flushed
			w.Write([]byte("data: 2\n\n"))
		case "nothing":
		case "204":
			w.WriteHeader(http.StatusNoContent)
			if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrBodyNotAllowed) {
				panic(fmt.Sprint("write on a 204:", err))
			}
		case "short":
			w.Header().Set("Content-Length", "10")
			w.Write([]byte("abc"))
		case "teapot":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusTeapot)
			w.Write([]byte("tea"))
		}
	})
	addr := startH1(t, mux)

	_, br := dialSend(t, addr, chatReq("X-Case: stream\r\n", "{}"))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("stream framing %v, want chunked", resp.TransferEncoding)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: 1\n" {
		t.Fatalf("first event before the handler went on: %q, %v", line, err)
	}
	close(flushed)

	out := exchange(t, addr, chatReq("X-Case: nothing\r\n", "{}")+chatReq("X-Case: 204\r\n", "{}")+chatReq("X-Case: teapot\r\n", "{}"), 3)
	want := []string{
		"200 close=false\nContent-Length: [\"0\"]\n\n",
		"204 close=false\n\n",
		"418 close=false\nContent-Type: [\"text/plain\"]\n\ntea",
	}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("got %q, want %q", out, want)
	}
	out = exchange(t, addr, chatReq("X-Case: short\r\n", "{}")+chatReq("X-Case: nothing\r\n", "{}"), 2)
	if len(out) != 1 || !strings.HasSuffix(out[0], "\n\nabc") {
		t.Errorf("a response shorter than its Content-Length must end the connection; got %q", out)
	}
}

// TestFastPathNoticesClientGone: a client that closes its connection while
// its request runs cancels the request's context (as net/http does), and a
// slow request whose client stays keeps its connection for the next one.
func TestFastPathNoticesClientGone(t *testing.T) {
	cause := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // as net/http, the watch starts once the body is read
		switch r.Header.Get("X-Case") {
		case "wait":
			select {
			case <-r.Context().Done():
				cause <- context.Cause(r.Context())
			case <-time.After(10 * time.Second):
				cause <- errors.New("the request context was never cancelled")
			}
		case "slow":
			time.Sleep(3 * clientWatchDelay)
			w.Header().Set("Content-Length", "4")
			w.Write([]byte("slow"))
		default:
			w.Header().Set("Content-Length", "4")
			w.Write([]byte("fast"))
		}
	})
	addr := startH1(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, chatReq("X-Case: wait\r\n", "{}"))
	time.Sleep(2 * clientWatchDelay)
	c.Close()
	if err := <-cause; !errors.Is(err, errClientGone) {
		t.Errorf("cause %v, want %v", err, errClientGone)
	}

	out := exchange(t, addr, chatReq("X-Case: slow\r\n", "{}")+chatReq("", "{}"), 2)
	if len(out) != 2 || !strings.HasSuffix(out[0], "slow") || !strings.HasSuffix(out[1], "fast") {
		t.Errorf("after a watched request the connection must still serve: %q", out)
	}
}

// TestFastPathShutdown: Shutdown lets an in-flight fast-path request finish,
// ends idle connections, and Serve returns.
func TestFastPathShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Case") == "hold" {
			close(started)
			<-release
		}
		w.Header().Set("Content-Length", "2")
		w.Write([]byte("ok"))
	})
	is := idleAfterOne(t, h)
	s, addr, ibr, served := is.s, is.addr, is.br, is.served

	_, bbr := dialSend(t, addr, chatReq("X-Case: hold\r\n", "{}"))
	<-started
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	if _, err := ibr.ReadByte(); err == nil {
		t.Error("the idle connection was not closed by Shutdown")
	}
	close(release)
	resp, err := http.ReadResponse(bbr, nil)
	if err != nil {
		t.Fatalf("the in-flight request was cut: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "ok" || !resp.Close {
		t.Errorf("in-flight answer %q close=%v, want ok with Connection: close", b, resp.Close)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
}

// TestCanonicalKey: the fast path's key canonicalisation is textproto's for
// every token.
func TestCanonicalKey(t *testing.T) {
	for _, k := range []string{"content-type", "CONTENT-TYPE", "x-session-id", "X-SESSION-ID", "a", "-a-", "x_y-z",
		"www-authenticate", "x-" + strings.Repeat("ab", 40), "Accept", "h2c-x", "1-a"} {
		if got, want := canonicalKey([]byte(k)), http.CanonicalHeaderKey(k); got != want {
			t.Errorf("canonicalKey(%q) = %q, want %q", k, got, want)
		}
	}
}

// FuzzFastHead: whatever head the fast path takes, net/http's own parser
// reads the same request from it (method, path, Host, Content-Length,
// header fields, Connection: close); the fast path never panics.
func FuzzFastHead(f *testing.F) {
	f.Add([]byte(chatReq("Authorization: Bearer k\r\nconnection: close\r\n", "{}")))
	f.Add([]byte(chatReq("X-A: 1\r\nx-a: 2\r\nHOST: y\r\n", "")))
	f.Add([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: [::1]:80\r\nContent-Length: 007\r\n\r\n"))
	f.Add([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nX-A:\t\xff\r\n\r\n{}"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		end, st := scanHead(raw)
		if st != headComplete {
			return
		}
		var h fastHead
		if !parseFastHead(raw[:end], &h) {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			t.Fatalf("the fast path took a head net/http refuses (%v): %q", err, raw[:end])
		}
		if req.Host != h.host {
			t.Errorf("host %q, net/http %q", h.host, req.Host)
		}
		if req.Method != http.MethodPost || req.URL.Path != chatPath || req.URL.RawQuery != "" || req.ProtoMinor != 1 {
			t.Errorf("request line %s %s HTTP/1.%d", req.Method, req.URL, req.ProtoMinor)
		}
		if req.ContentLength != h.contentLength || req.Close != h.close {
			t.Errorf("length %d close %v, net/http %d %v", h.contentLength, h.close, req.ContentLength, req.Close)
		}
		if !reflect.DeepEqual(map[string][]string(req.Header), map[string][]string(h.header)) {
			t.Errorf("header %q, net/http %q", h.header, req.Header)
		}
	})
}

// TestFastPathBodyHasNoHeadDeadline: the header timeout bounds the head
// only; a large body that arrives slowly is read whole (net/http sets no
// body deadline either).
func TestFastPathBodyHasNoHeadDeadline(t *testing.T) {
	h := &captureHandler{}
	s := newH1Server(h, slog.New(slog.NewTextHandler(io.Discard, nil)), 200*time.Millisecond, 5*time.Second)
	addr := listenLoopback(t, s.Serve, s.Close)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	body := strings.Repeat("b", 20000)
	raw := chatReq("", body)
	cut := len(raw) - len(body) + 6000 // the head and more than a buffer of the body
	io.WriteString(c, raw[:cut])
	time.Sleep(500 * time.Millisecond) // past the header timeout
	io.WriteString(c, raw[cut:])
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if len(b) != len(body) || !h.last(t).FastPath {
		t.Errorf("read %d of %d body bytes (fast path %v)", len(b), len(body), h.last(t).FastPath)
	}
}

// TestFastPathServesSeveralListeners: like http.Server, one server can
// Serve several listeners (both paths on each); Shutdown ends every Serve.
func TestFastPathServesSeveralListeners(t *testing.T) {
	h := &captureHandler{}
	s := newH1Server(h, slog.New(slog.NewTextHandler(io.Discard, nil)), 5*time.Second, 5*time.Second)
	served := make(chan error, 2)
	var addrs []string
	for i := 0; i < 2; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, l.Addr().String())
		go func() { served <- s.Serve(l) }()
	}
	for _, a := range addrs {
		out := exchange(t, a, chatReq("", "{}")+"GET /x HTTP/1.1\r\nHost: h\r\n\r\n", 2)
		if len(out) != 2 {
			t.Fatalf("%s answered %q", a, out)
		}
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		select {
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a Serve did not return after Shutdown")
		}
	}
}

// writeLog records every write of the connections a loggedListener accepts.
type writeLog struct {
	mu     sync.Mutex
	writes []string
}

type loggedConn struct {
	net.Conn
	log *writeLog
}

func (c loggedConn) Write(p []byte) (int, error) {
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, string(p))
	c.log.mu.Unlock()
	return c.Conn.Write(p)
}

type loggedListener struct {
	net.Listener
	log *writeLog
}

func (l loggedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return loggedConn{c, l.log}, nil
}

// TestFastPathEndBodyOneWrite: a stream's last events and its terminating
// chunk leave in one write when the handler ends the body before its flush
// (the gateway does at a delivered stream's end), so the client reads the
// end of its stream in one wake-up; nothing is written after it, and a
// write after the end fails.
func TestFastPathEndBodyOneWrite(t *testing.T) {
	late := make(chan error, 1)
	s := newH1Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: 1\n\n"))
		w.(http.Flusher).Flush()
		w.Write([]byte("data: [DONE]\n\n"))
		w.(bodyEnder).endBody()
		w.(http.Flusher).Flush()
		_, err := w.Write([]byte("data: late\n\n"))
		late <- err
	}), slog.New(slog.NewTextHandler(io.Discard, nil)), 5*time.Second, 5*time.Second)
	log := &writeLog{}
	addr := listenLoopback(t, func(l net.Listener) error { return s.Serve(loggedListener{l, log}) }, s.Close)

	_, br := dialSend(t, addr, chatReq("", "{}"))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "data: 1\n\ndata: [DONE]\n\n" {
		t.Fatalf("body %q, %v", body, err)
	}
	if err := <-late; !errors.Is(err, errBodyEnded) {
		t.Errorf("a write after endBody: %v, want errBodyEnded", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if n := len(log.writes); n != 2 || log.writes[1] != "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n" {
		t.Errorf("writes %q, want the head with the first event, then the last event and the terminating chunk in one", log.writes)
	}
}

// idleServer is an h1Server with one client connection left idle after
// one answered request.
type idleServer struct {
	s      *h1Server
	addr   string
	c      net.Conn
	br     *bufio.Reader
	served chan error // Serve's result
}

// idleAfterOne serves h (nil: an "ok" handler) and leaves one client
// connection idle after one answered request.
func idleAfterOne(t *testing.T, h http.Handler) idleServer {
	t.Helper()
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "2")
			w.Write([]byte("ok"))
		})
	}
	is := idleServer{s: newH1Server(h, slog.New(slog.NewTextHandler(io.Discard, nil)), 5*time.Second, 5*time.Second), served: make(chan error, 1)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	is.addr = l.Addr().String()
	go func() { is.served <- is.s.Serve(l) }()
	is.c, is.br = dialSend(t, is.addr, chatReq("", "{}"))
	resp, err := http.ReadResponse(is.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	return is
}

// A request the client sent on an idle connection just as Shutdown starts
// is answered, then the connection ends, instead of being lost with it: the
// client cannot tell it from one sent a moment earlier, and a POST is not
// retried by clients (the issue: graceful shutdown loses no request).
func TestShutdownAnswersARequestJustSent(t *testing.T) {
	for round := 0; round < 30; round++ {
		is := idleAfterOne(t, nil)
		s, c, br := is.s, is.c, is.br
		// The next request and Shutdown race.
		if _, err := io.WriteString(c, chatReq("", "{}")); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Shutdown(context.Background()) }()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("round %d: the request sent before Shutdown got no answer: %v", round, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "ok" {
			t.Fatalf("round %d: answer %q, want ok", round, b)
		}
		if _, err := br.ReadByte(); err == nil {
			t.Fatalf("round %d: the connection stayed open after its last answer", round)
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: Shutdown: %v", round, err)
		}
	}
}

// An idle connection with nothing sent on it ends at Shutdown within the
// last look, and Shutdown returns.
func TestShutdownEndsAnIdleConnection(t *testing.T) {
	is := idleAfterOne(t, nil)
	s, br := is.s, is.br
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with an idle connection: %v", err)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the idle connection was not ended")
	}
}

// A connection whose client sent part of a request head when Shutdown
// starts ends within the last look; it used to hold the exit for the
// header timeout (5 s here, 30 s in the gateway).
func TestShutdownEndsAHalfSentHead(t *testing.T) {
	is := idleAfterOne(t, nil)
	if _, err := io.WriteString(is.c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the head being read", func() bool { return headReading(is.s) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := is.s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a half-sent head: %v (held until the header timeout)", err)
	}
	if _, err := is.br.ReadByte(); err == nil {
		t.Fatal("the connection with a half-sent head was not ended")
	}
}

func headReading(s *h1Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.head.Load() {
			return true
		}
	}
	return false
}
