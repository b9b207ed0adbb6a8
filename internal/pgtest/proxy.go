package pgtest

import (
	"net/url"
	"testing"

	"github.com/breakwater-gw/breakwater/internal/tcpproxy"
)

// Proxy is a TCP proxy in front of the test server that a test can take
// down (every open connection is cut and new ones are refused at once) and
// bring back, to simulate a database outage without touching the server.
type Proxy struct {
	*tcpproxy.Proxy
}

// NewProxy starts a proxy to the host of dbURL; it stops when the test ends.
func NewProxy(t testing.TB, dbURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tcpproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &Proxy{p}
}

// URL returns dbURL rewritten to go through the proxy.
func (p *Proxy) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.Host = p.Addr()
	return u.String()
}
