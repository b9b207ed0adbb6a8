package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeLog records what a listener's connections write, one entry per
// Write call (a system call on a TCP connection).
type writeLog struct {
	net.Listener
	mu     sync.Mutex
	writes [][]byte
}

func (l *writeLog) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &loggedConn{Conn: c, log: l}, nil
}

func (l *writeLog) reset() {
	l.mu.Lock()
	l.writes = nil
	l.mu.Unlock()
}

func (l *writeLog) all() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.writes...)
}

type loggedConn struct {
	net.Conn
	log *writeLog
}

func (c *loggedConn) Write(p []byte) (int, error) {
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, bytes.Clone(p))
	c.log.mu.Unlock()
	return c.Conn.Write(p)
}

// TestSurfaceStreamStartIsOneWrite pins how a translated stream starts
// (docs/surfaces.md, "Cost"): the response head, the format's prelude
// events and the first content event reach the client's connection in
// one write, as a chat stream's head and first chunk do — no separate
// packet for the headers or the prelude ahead of the content.
func TestSurfaceStreamStartIsOneWrite(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		head := `data: {"id":"chatcmpl-w","object":"chat.completion.chunk","created":1,"model":"gpt-5","choices":[{"index":0,`
		io.WriteString(w, head+`"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n")
		fl.Flush()
		time.Sleep(2 * time.Millisecond) // the content in a read of its own, as a paced upstream sends it
		io.WriteString(w, head+`"delta":{"content":"tok a"},"finish_reason":null}]}`+"\n\n")
		fl.Flush()
		io.WriteString(w, head+`"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	g := twoConnsGateway(t, up.URL)
	defer g.Close(context.Background())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := &writeLog{Listener: l}
	go g.Serve(wl)
	defer g.srv.Close()
	client := &http.Client{Transport: &http.Transport{}}
	for _, s := range surfaceStreams {
		wl.reset()
		res, err := client.Post("http://"+l.Addr().String()+s.path, "application/json", strings.NewReader(s.body))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(res.Body)
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				t.Fatalf("%s: no content event (%v)", s.name, err)
			}
			if bytes.Contains(line, []byte(s.delta)) {
				break
			}
		}
		writes := wl.all()
		io.Copy(io.Discard, br)
		res.Body.Close()
		// Later events may have gone out since; the first write must
		// already hold the head and the first content.
		if len(writes) == 0 {
			t.Fatalf("%s: no write logged", s.name)
		}
		if w := writes[0]; !bytes.HasPrefix(w, []byte("HTTP/1.1 200")) || !bytes.Contains(w, []byte(s.delta)) {
			t.Errorf("%s: the stream's first write is not the head with the first content:\n%s", s.name, w)
		}
	}
}
