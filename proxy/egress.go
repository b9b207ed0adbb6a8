package proxy

import (
	"context"
	"net"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Egress-bucketed lock wiring (docs/classification.md): free tiers limited per egress IP
// (provider type opencode) lose every sibling connection sharing the IP when
// one of them gets a rate-limit or quota 429. The rule is the model's
// (Engine.SetEgressIP, applyEgressBucket); the gateway's part is to learn
// each attempt's egress IP — the local address of the TCP connection the
// request went out on, from httptrace's GotConn — feed it to the model
// before the attempt's outcome is recorded, log it in the request log, and
// restore the last known IPs from the request log (last 24 h) at startup.
// Best effort: behind NAT the local address is the host's, which is still
// what siblings on this host share.

// egressWindow is how far back the request log is read at startup.
const egressWindow = 24 * time.Hour

// egressProbe captures the local IP of the connection an attempt used.
type egressProbe struct {
	addr atomic.Pointer[string]
}

// trace returns ctx with a client trace that records the connection's
// local address into the probe.
func (p *egressProbe) trace(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if info.Conn == nil {
			return
		}
		if ip := hostIP(info.Conn.LocalAddr()); ip != "" {
			p.addr.Store(&ip)
		}
	}})
}

// ip is the recorded egress IP, "" when the attempt never got a connection.
func (p *egressProbe) ip() string {
	if s := p.addr.Load(); s != nil {
		return *s
	}
	return ""
}

// egressOf is the attempt's egress IP: the connection's configured egressIp
// (an egress proxy), else the local address the probe saw.
func egressOf(c *connRuntime, p *egressProbe) string {
	if c.cfg.EgressIP != "" {
		return c.cfg.EgressIP
	}
	return p.ip()
}

func hostIP(a net.Addr) string {
	switch t := a.(type) {
	case *net.TCPAddr:
		return t.IP.String()
	case nil:
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil || net.ParseIP(host) == nil {
		return ""
	}
	return host
}

// egressSource is a store that keeps the request log's egress IPs.
type egressSource interface {
	LastEgressIPs(ctx context.Context, provider string, since time.Time) (map[string]string, error)
}

// restoreEgress seeds the model with each connection's last known egress IP
// from the request log of the last 24 h, for connections whose persisted
// state has none (an older store, or a state row lost). A store error only
// logs: the lock is best effort.
func (g *Gateway) restoreEgress(ctx context.Context) {
	src, ok := g.store.(egressSource)
	if !ok {
		return // a store without a request log
	}
	now := g.now()
	known := map[model.ConnRef]bool{}
	g.lock()
	for _, r := range g.eng.Snapshot(g.modelNow()).Connections {
		if r.Conn.EgressIP != "" {
			known[model.ConnRef{Provider: r.Provider, Connection: r.Connection}] = true
		}
	}
	g.unlock()
	for _, p := range g.eng.Topology().Providers {
		ips, err := src.LastEgressIPs(ctx, p.ID, now.Add(-egressWindow))
		if err != nil {
			g.log.Warn("could not read last egress IPs from the request log", "provider", p.ID, "err", err)
			continue
		}
		g.lock()
		for conn, ip := range ips {
			ref := model.ConnRef{Provider: p.ID, Connection: conn}
			if !known[ref] && ip != "" {
				_ = g.eng.SetEgressIP(g.modelNow(), ref, ip) // unknown connections (config changed) are skipped
			}
		}
		g.unlock()
	}
}
