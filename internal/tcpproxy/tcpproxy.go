// Package tcpproxy is a loopback TCP proxy that can be taken down — every
// open connection cut, new ones refused at once — and brought back, to
// simulate a dependency outage (Postgres) without touching the server. Tests
// (internal/pgtest) and chaos runs (chaos/) share it.
package tcpproxy

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards 127.0.0.1:<port> to a target address.
type Proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// New starts a proxy on a free loopback port to target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDown cuts every connection and refuses new ones (true), or lets them
// through again (false).
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	var cut []net.Conn
	if down {
		for c := range p.conns {
			cut = append(cut, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// Down reports whether the proxy refuses connections.
func (p *Proxy) Down() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.ln.Close()
	p.SetDown(true)
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil || !p.track(up) {
			if up != nil {
				up.Close()
			}
			p.untrack(c)
			continue
		}
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	p.untrack(dst)
	p.untrack(src)
}
