package proxy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/store"
)

// Two connections of an egress-bucketed provider (type opencode) that go out
// from one host share one egress IP.
const egressConfig = `
providers:
  - id: oc
    type: opencode
    baseURL: {{UP}}
    models: [m]
    strategy: round-robin
    connections:
      - {id: k1, apiKey: oc-k1}
      - {id: k2, apiKey: oc-k2}
` + testBase

const rateLimit429 = `{"error":{"message":"Rate limit exceeded, slow down","type":"rate_limit_exceeded"}}`

func egressSeen(t *testing.T, g *gw, conn string) string {
	t.Helper()
	g.g.lock()
	defer g.g.unlock()
	for _, r := range g.g.eng.Snapshot(g.g.modelNow()).Connections {
		if r.Provider == "oc" && r.Connection == conn {
			return r.Conn.EgressIP
		}
	}
	return ""
}

// docs/classification.md egress buckets, end to end: the gateway learns each attempt's
// egress IP (httptrace GotConn → LocalAddr), logs it in the request log, and
// a rate-limit 429 on one connection cools its sibling on the same IP, so
// the sibling is not called for a certain failure.
func TestEgressBucketCoolsSiblingsThroughTheGateway(t *testing.T) {
	up := newFakeUp(t)
	st := store.NewMemory(store.MemoryOptions{})
	g := newGWStore(t, up, egressConfig, st)
	for i := 0; i < 2; i++ { // round-robin: one call on each connection
		if r := g.chat("oc/m"); r.code != 200 {
			t.Fatalf("warm-up %d: %d %s", i, r.code, r.body)
		}
	}
	ip1, ip2 := egressSeen(t, g, "k1"), egressSeen(t, g, "k2")

	if ip1 == "" || ip1 != ip2 || net.ParseIP(ip1) == nil {
		t.Fatalf("egress IPs not learned: k1=%q k2=%q (calls k1=%d k2=%d)", ip1, ip2, up.count("oc-k1"), up.count("oc-k2"))
	}
	recs, _ := st.RecentAttempts(context.Background(), store.LogQuery{Provider: "oc", Limit: 10})
	if len(recs) < 2 || recs[0].EgressIP != ip1 {
		t.Fatalf("the request log must carry the egress IP: %+v", recs)
	}
	up.set("oc-k1", status(429, rateLimit429, "Retry-After", "30"))
	up.set("oc-k2", status(429, rateLimit429, "Retry-After", "30"))
	calls2 := up.count("oc-k2")
	r := g.chat("oc/m") // round-robin starts at k1
	if r.code != 429 {
		t.Fatalf("want 429 once the bucket is spent: %d %s", r.code, r.body)
	}
	if up.count("oc-k2") != calls2 {
		t.Fatalf("the sibling on the same egress IP was called for a certain failure")
	}
	c2 := g.conn("oc", "k2")
	if c2["status"] != "cooldown" {
		t.Fatalf("k2 must cool with k1 (shared egress IP): %v", c2)
	}
	if rem := c2["cooldownRemainingMs"].(float64); rem < 25_000 {
		t.Fatalf("k2 cools as long as k1: %v", c2)
	}
}

// docs/classification.md: never terminal, and disableCooling siblings are skipped — pinned
// in the model (TestEgressBucket*); here: after a restart with no persisted
// connection state the last known egress IPs come back from the request log
// (last 24 h), so the very first 429 already cools the sibling.
func TestEgressRestoredFromRequestLog(t *testing.T) {
	up := newFakeUp(t)
	st := store.NewMemory(store.MemoryOptions{})
	now := time.Now()
	for _, c := range []string{"k1", "k2"} {
		st.LogAttempt(store.LogRecord{Time: now.Add(-time.Hour), RequestID: "r-" + c, Provider: "oc", Connection: c, Model: "m",
			Status: 200, EgressIP: "203.0.113.7"})
	}
	st.LogAttempt(store.LogRecord{Time: now.Add(-48 * time.Hour), RequestID: "old", Provider: "oc", Connection: "k2", Model: "m",
		Status: 200, EgressIP: "198.51.100.1"})
	g := newGWStore(t, up, egressConfig, st)
	if a, b := egressSeen(t, g, "k1"), egressSeen(t, g, "k2"); a != "203.0.113.7" || b != "203.0.113.7" {
		t.Fatalf("egress IPs not restored from the request log: %q %q", a, b)
	}
	// The live attempt goes out from 127.0.0.1; the sibling still carries
	// the restored 203.0.113.7, so the two no longer match: best effort,
	// no sibling is cooled on stale evidence.
	up.set("oc-k1", status(429, rateLimit429, "Retry-After", "30"))
	if r := g.chat("oc/m"); r.code != 200 {
		t.Fatalf("k2 serves: its last known IP differs from k1's live one: %d %s", r.code, r.body)
	}
	if !strings.HasPrefix(egressSeen(t, g, "k1"), "127.") {
		t.Fatalf("the live attempt's IP replaces the restored one: %q", egressSeen(t, g, "k1"))
	}
}
