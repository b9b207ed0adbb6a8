package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// count_tokens on an anthropic-type upstream. Counting is a side call,
// not a model request: it goes to the first anthropic-type target of the
// route (its first connection with a key the client key may use), outside the resilience flow
// (it neither counts against nor waits on a connection's health), and any
// failure falls back to the gateway's estimate.

// countTimeout bounds the side call (every target it tries).
const countTimeout = 10 * time.Second

// countUpstream returns an anthropic-type upstream's count_tokens answer,
// or false when the route has no such target or it did not answer 200.
func (g *Gateway) countUpstream(ctx context.Context, r *http.Request, ck *clientKey, body []byte, name string) ([]byte, string, bool) {
	ctx, cancel := context.WithTimeout(ctx, countTimeout)
	defer cancel()
	g.lock()
	route, err := g.eng.Resolve(name)
	g.unlock()
	if err != nil {
		return nil, "", false
	}
	var targets []string
	if route.IsCombo() {
		if c := g.view().combos[route.Combo]; c != nil {
			for _, t := range c.Targets {
				targets = append(targets, t.Target)
			}
		}
	} else {
		targets = []string{route.Provider + "/" + route.Model}
	}
	for _, t := range targets {
		pid, mdl, ok := strings.Cut(t, "/")
		prov := g.provider(pid)
		if !ok || prov == nil || prov.cfg.Type != "anthropic" {
			continue
		}
		key := ""
		for _, c := range prov.cfg.Connections {
			if c.APIKey != "" && keyAllows(ck, pid, c.ID) {
				key = c.APIKey
				break
			}
		}
		if key == "" {
			continue // no connection this client may use
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return nil, "", false
		}
		m["model"], _ = json.Marshal(mdl)
		nb, _ := json.Marshal(m)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(prov.cfg.BaseURL, "/")+"/messages/count_tokens", bytes.NewReader(nb))
		if err != nil {
			return nil, "", false
		}
		(&anthropicWire{}).setAuth(req.Header, key)
		for _, k := range g.conf().Server.PassHeaders {
			if v := r.Header[k]; len(v) > 0 {
				req.Header[k] = v
			}
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := g.client.Do(req) // the gateway's own client (sendOnceTransport)
		if err != nil {
			return nil, "", false
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !json.Valid(b) {
			return nil, "", false
		}
		return b, pid, true
	}
	return nil, "", false
}

// keyAllows reports whether a client key may use a connection (its
// allowedConnections; every connection when it lists none).
func keyAllows(ck *clientKey, provider, conn string) bool {
	if ck == nil || len(ck.allowed) == 0 {
		return true
	}
	for _, a := range ck.allowed {
		if a.Provider == provider && a.Connection == conn {
			return true
		}
	}
	return false
}
