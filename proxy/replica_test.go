package proxy

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/internal/pgtest"
	"github.com/breakwater-gw/breakwater/store"
)

// newReplica starts a gateway on a shared Postgres database.
func newReplica(t *testing.T, up *fakeUp, url, cfgYAML string) *gw {
	t.Helper()
	cfg, _, err := ParseConfig("test.yaml", []byte(strings.ReplaceAll(cfgYAML, "{{UP}}", up.url())), nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.OpenPostgres(ctx, url, store.PostgresOptions{Migrate: true, Logger: log, MaxConns: 4,
		FlushInterval: 50 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Logger: log, Seed: 1, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveGW(t, g)
	t.Cleanup(func() {
		srv.Close()
		// Bounded: a test that took the database down leaves changes the
		// store would otherwise retry to write for ever.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		g.Close(ctx)
	})
	return &gw{t: t, g: g, srv: srv, up: up}
}

func TestReplicasShareBreakerThroughPostgres(t *testing.T) {
	// docs/store.md#replicas: two gateway replicas on one database
	// converge — a breaker opened by one is seen OPEN by the other, and a
	// restarted replica restores it.
	url := pgtest.NewDB(t)
	up := newFakeUp(t)
	up.set("k1", status(503, `{"error":{"message":"down"}}`))
	up.set("k2", status(503, `{"error":{"message":"down"}}`))
	const cfg = `
server: {listen: 127.0.0.1:0}
providers:
  - id: p
    profile: apikey
    baseURL: {{UP}}
    models: [m]
    connections: [{id: k1, apiKey: k1}, {id: k2, apiKey: k2}]
resilience:
  waitForCooldown: {enabled: false}
  providerBreaker: {apikey: {failureThreshold: 2, degradationThreshold: 1}}
`
	a := newReplica(t, up, url, cfg)
	b := newReplica(t, up, url, cfg)
	a.chat("p/m") // k1 and k2 both answer 503: two provider-level failures
	open := func(g *gw) bool {
		return strings.Contains(g.do("GET", "/api/monitoring/health", "").body, `"OPEN"`)
	}
	if !open(a) {
		t.Fatalf("replica a: breaker not OPEN after 2 failures: %s", a.do("GET", "/api/monitoring/health", "").body)
	}
	deadline := time.Now().Add(10 * time.Second) // generous: the target is 1 s
	for !open(b) {
		if time.Now().After(deadline) {
			t.Fatalf("replica b never saw the breaker open: %s", b.do("GET", "/api/monitoring/health", "").body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := b.chat("p/m"); r.code != 503 || r.errCode() != "provider_circuit_open" {
		t.Fatalf("replica b must refuse with the shared breaker: %d %s", r.code, r.body)
	}
	calls := up.total()
	b.chat("p/m")
	if up.total() != calls {
		t.Fatal("replica b called the upstream while the shared breaker is OPEN")
	}
	// docs/store.md#request-log: every upstream attempt reaches the request log, off the
	// hot path, with its verdict reason and never a prompt.
	pg := a.g.store.(*store.Postgres)
	deadline = time.Now().Add(10 * time.Second)
	for {
		recs, err := pg.RecentAttempts(context.Background(), store.LogQuery{Provider: "p"})
		if err == nil && len(recs) >= 2 {
			r := recs[0]
			if r.Status != 503 || r.Reason != "server_error" || r.LatencyMs < 0 || r.FirstByteMs <= 0 || !strings.Contains(r.ErrorBody, "down") {
				t.Fatalf("request log record: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request log never got the attempts: %v %+v", err, recs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A restart restores the OPEN breaker from Postgres.
	a.g.Close(context.Background())
	c := newReplica(t, up, url, cfg)
	if !open(c) {
		t.Fatalf("restarted replica lost the OPEN breaker: %s", c.do("GET", "/api/monitoring/health", "").body)
	}
}

// docs/api.md#operator-actions across replicas: a key changed with PUT /api/providers on one
// replica clears the ban there; a replica that still holds the banned file
// key keeps it banned — it never sends it, and it never flips the shared
// state back for the first (they fought: each judged the shared state by
// its own key and wrote it).
func TestReplicasJudgeTheRetiredKeyByTheirOwn(t *testing.T) {
	url := pgtest.NewDB(t)
	up := newFakeUp(t)
	up.set("file-key", status(403, `{"error":{"message":"Your account has been deactivated"}}`))
	up.set("new-key", okJSON("hi"))
	const cfg = `
server: {listen: 127.0.0.1:0}
providers:
  - {id: p, profile: apikey, baseURL: {{UP}}, models: [m], connections: [{id: c1, apiKey: file-key}]}
resilience:
  waitForCooldown: {enabled: false}
`
	a := newReplica(t, up, url, cfg)
	b := newReplica(t, up, url, cfg)
	if r := a.chat("p/m"); r.code != 403 {
		t.Fatalf("the ban: %d %s", r.code, r.body)
	}
	if r := a.do("PUT", "/api/providers/p", `{"connections":[{"id":"c1","apiKey":"new-key"}]}`); r.code != 200 {
		t.Fatalf("PUT on a: %d %s", r.code, r.body)
	}
	status := func(g *gw) any { return g.conn("p", "c1")["status"] }
	// b learns of the retirement through the database.
	eventually(t, "replica b sees its key retired", func() bool { return status(b) == "banned" })
	if r := b.chat("p/m"); r.code == 200 || up.count("file-key") != 1 {
		t.Fatalf("b sent its banned key again: %d, file-key calls %d", r.code, up.count("file-key"))
	}
	// a keeps serving with its new key, well after b has seen everything.
	time.Sleep(500 * time.Millisecond)
	for range 3 {
		if r := a.chat("p/m"); r.code != 200 {
			t.Fatalf("a with the new key: %d %s (status %v)", r.code, r.body, status(a))
		}
	}
	if status(a) != "active" || status(b) != "banned" {
		t.Fatalf("a %v, b %v", status(a), status(b))
	}
}
