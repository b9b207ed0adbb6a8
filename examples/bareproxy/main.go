// Command bareproxy is the floor `make bench-proxy` measures the gateway
// against: a reverse proxy with no logic at all (one upstream, keep-alive
// HTTP/1.1 driven from the handler's goroutine, responses copied through
// and flushed). Whatever a gateway adds on top of this is its own cost;
// what this adds over the direct mock is the cost of any extra Go HTTP hop
// on the machine.
//
// usage: bareproxy LISTEN UPSTREAM_HOST:PORT
package main

import (
	"bufio"
	"bytes"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
)

type conn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

type pool struct {
	addr string
	mu   sync.Mutex
	idle []*conn
}

func (p *pool) get() (*conn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, br: bufio.NewReader(c), bw: bufio.NewWriter(c)}, nil
}

func (p *pool) put(c *conn) {
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: bareproxy LISTEN UPSTREAM_HOST:PORT")
	}
	p := &pool{addr: os.Args[2]}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequest(r.Method, "http://"+p.addr+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		c, err := p.get()
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if err := req.Write(c.bw); err != nil || c.bw.Flush() != nil {
			c.c.Close()
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		res, err := http.ReadResponse(c.br, req)
		if err != nil {
			c.c.Close()
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		buf := make([]byte, 4096)
		f := w.(http.Flusher)
		for {
			n, err := res.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				f.Flush()
			}
			if err != nil {
				break
			}
		}
		res.Body.Close()
		p.put(c)
	})
	log.Fatal(http.ListenAndServe(os.Args[1], h))
}
