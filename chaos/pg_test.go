package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/internal/pgtest"
	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/store"
)

// Faults beyond the upstreams, against Postgres (internal/pgtest: skipped
// without a database, failed when CI=true).

func TestMain(m *testing.M) { pgtest.Main(m) }

// pgStores opens Postgres stores for a run through a pgtest proxy and
// watches whether any of them saw the database down.
type pgStores struct {
	url     string
	mu      sync.Mutex
	opened  []*store.Postgres
	sawDown atomic.Bool
	stop    chan struct{}
}

func newPGStores(t *testing.T, url string) *pgStores {
	p := &pgStores{url: url, stop: make(chan struct{})}
	go func() {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tk.C:
				p.mu.Lock()
				for _, s := range p.opened {
					if !s.Health().Up {
						p.sawDown.Store(true)
					}
				}
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(p.stop) })
	return p
}

func (p *pgStores) open(ctx context.Context) (proxy.StateStore, error) {
	s, err := store.OpenPostgres(ctx, p.url, store.PostgresOptions{FlushInterval: 100 * time.Millisecond, NoSubscribe: true})
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.opened = append(p.opened, s)
	p.mu.Unlock()
	return s, nil
}

// TestPostgresOutageMidRun: the database goes away while a provider fails
// and a key is rate limited. Decisions continue from memory (every
// invariant holds while it is down), and once it is back a restart restores
// the incident state changed during the outage: nothing was lost.
func TestPostgresOutageMidRun(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	px := pgtest.NewProxy(t, url)
	cfg := exampleConfig(t)
	stores := newPGStores(t, px.URL(url))
	s := mustSchedule(t, cfg, `
duration: 6s
load: {workers: 3, rate: 25, streamRatio: 0.3}
faults:
  - {name: database unreachable, at: 200ms, until: 2500ms, action: db-down}
  - {name: alpha 503, at: 500ms, until: 2200ms, match: {provider: alpha}, respond: {status: 503}}
  - {name: beta/b1 rate limited, at: 600ms, until: 3s, match: {provider: beta, connection: b1}, respond: {status: 429, headers: {Retry-After: "4"}}}
  - {name: restart once the database is back, at: 3600ms, action: restart}
`)
	rep, err := Run(context.Background(), Options{Config: cfg, Schedule: s, OpenStore: stores.open, DB: px, NoLeakCheck: true, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed {
		logReport(t, rep)
		t.Fatal("the run failed")
	}
	if !stores.sawDown.Load() {
		t.Error("the store never saw the database down: the outage did not happen")
	}
	for _, name := range []string{"breaker-opens-within-threshold", "restart-restores-state", "liveness"} {
		if r := statusOf(rep, name); r.Status != Pass {
			logReport(t, rep)
			t.Errorf("%s: %s (%s)", name, r.Status, r.Detail)
		}
	}
	if len(rep.Restarts) != 1 || rep.Persist == nil {
		t.Fatalf("restarts %d, persist %v: want one restart and the end-of-run check", len(rep.Restarts), rep.Persist)
	}
}

// TestRestartMidIncidentPostgres: Close, then New on the same database in
// the middle of an incident restores breakers and cooldowns, and a twin
// restored from the database takes the same decisions as the gateway that
// was not restarted.
func TestRestartMidIncidentPostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	cfg := exampleConfig(t)
	stores := newPGStores(t, url)
	s := mustSchedule(t, cfg, `
duration: 5s
load: {workers: 3, rate: 25, streamRatio: 0.3}
faults:
  - {name: gamma down hard, at: 200ms, until: 4s, match: {provider: gamma}, respond: {fault: reset}}
  - {name: beta/b1 rate limited, at: 300ms, until: 4s, match: {provider: beta, connection: b1}, respond: {status: 429, headers: {Retry-After: "4"}}}
  - {name: restart mid-incident, at: 2s, action: restart}
`)
	rep, err := Run(context.Background(), Options{Config: cfg, Schedule: s, OpenStore: stores.open, NoLeakCheck: true, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed {
		logReport(t, rep)
		t.Fatal("the run failed")
	}
	if len(rep.Restarts) != 1 {
		t.Fatalf("%d restarts, want 1", len(rep.Restarts))
	}
	rc := rep.Restarts[0]
	if rc.Err != "" || len(rc.Diffs) > 0 || len(rc.Decisions) > 0 || rc.DecisionsChecked == 0 {
		logReport(t, rep)
		t.Fatalf("restart check: %+v, want state restored and decisions compared", rc)
	}
}

// TestSecondReplica: a second gateway started on the same database while
// the first is mid-incident restores its state and decides the same; both
// then serve load side by side with every answer complete or typed, and a
// third gateway started after both stopped restores the incident.
func TestSecondReplica(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	rules := []faults.Rule{
		{Match: faults.Match{Provider: "alpha"}, Respond: &faults.Response{Status: 503}},
		{Match: faults.Match{Provider: "beta", Connection: "b1"}, Respond: &faults.Response{Status: 429, Headers: map[string]string{"Retry-After": "30"}}},
	}
	fs := faults.NewServer(nil, faults.Options{})
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: fs}
	go up.Serve(upLn)
	defer up.Close()
	cfg, _, err := proxy.ParseConfig("replica.yaml", []byte(fmt.Sprintf(`
providers:
  - {id: alpha, baseURL: http://%[1]s/alpha/v1, models: [m1], connections: [{id: a1, apiKey: a1}, {id: a2, apiKey: a2}]}
  - {id: beta, baseURL: http://%[1]s/beta/v1, models: [m1], connections: [{id: b1, apiKey: b1}, {id: b2, apiKey: b2}]}
resilience:
  providerBreaker:
    apikey: {degradationThreshold: 1, failureThreshold: 2, resetTimeoutMs: 60s}
    dedup: {connectionMs: 0, transportMs: 0}
  waitForCooldown: {enabled: false}
  requestBudget: {deadlineMs: 5s}
`, upLn.Addr())), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stores := newPGStores(t, url)
	type replica struct {
		e *env
		q *requester
	}
	start := func() *replica {
		e, err := setupEnv(ctx, &Options{Config: cfg, OpenStore: stores.open})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.teardown(context.Background()) })
		fs.SetRules(rules, false) // the run resets the upstream's rules when it attaches
		return &replica{e: e, q: &requester{client: newClient(16), base: e.base, deadline: 7 * time.Second}}
	}
	health := func(r *replica) Sample {
		var s Sample
		r.e.readHealth(ctx, &s)
		if s.HealthErr != "" {
			t.Fatal(s.HealthErr)
		}
		return s
	}
	a := start()
	for i := 0; i < 20 && health(a).Providers["alpha"].State != "OPEN"; i++ {
		a.q.do(ctx, "alpha/m1", false, time.Now())
	}
	a.q.do(ctx, "beta/m1", false, time.Now())
	ha := health(a)
	// The remaining times in ha count from this read: the gap to the
	// second replica's read starts here, not after the flush below (which
	// a busy machine can hold for half a second).
	t0 := time.Now()
	if ha.Providers["alpha"].State != "OPEN" || ha.Conns["beta/b1"].Status != "cooldown" {
		t.Fatalf("no incident on the first replica: %+v", ha)
	}
	if _, _, err := a.e.storedState(ctx); err != nil { // flushes
		t.Fatal(err)
	}
	b := start()
	hb := health(b)
	if d := compareState(&ha, &hb, time.Since(t0).Milliseconds()); len(d) > 0 {
		t.Fatalf("the second replica did not restore the incident: %v", d)
	}
	for _, m := range []string{"alpha/m1", "beta/m1"} {
		pa, pb := probeOf(ptr(a.q.do(ctx, m, false, time.Now()))), probeOf(ptr(b.q.do(ctx, m, false, time.Now())))
		if pa != pb {
			t.Errorf("replicas decide differently: %s vs %s", pa, pb)
		}
	}
	// Both serve load side by side.
	var bad atomic.Int64
	var total atomic.Int64
	var wg sync.WaitGroup
	for _, r := range []*replica{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
				for _, m := range []string{"alpha/m1", "beta/m1"} {
					o := r.q.do(ctx, m, m == "beta/m1", time.Now())
					total.Add(1)
					if o.Kind == KindViolation {
						bad.Add(1)
						t.Errorf("%s: %s", o.Violation, o.Detail)
					}
				}
			}
		}()
	}
	wg.Wait()
	if total.Load() < 20 {
		t.Errorf("only %d requests", total.Load())
	}
	final := health(a)
	t1 := time.Now()
	for _, r := range []*replica{a, b} {
		if err := r.e.stopGateway(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := start()
	hc := health(c)
	if hc.Providers["alpha"].State != "OPEN" || hc.Conns["beta/b1"].Status != "cooldown" {
		t.Fatalf("a third gateway lost the incident: alpha %+v, beta/b1 %+v", hc.Providers["alpha"], hc.Conns["beta/b1"])
	}
	if d := compareState(&final, &hc, time.Since(t1).Milliseconds()); len(d) > 0 {
		t.Logf("the merged state differs from the first replica's (both wrote): %v", d)
	}
}

func ptr[T any](v T) *T { return &v }
