package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/internal/pgtest"
	"github.com/breakwater-gw/breakwater/model"
)

// driveIncident puts every kind of state into an engine: an OPEN breaker,
// cooldowns with backoff, a banned connection, a request-rejected streak,
// lockouts, a tripped provider window and round-robin cursors.
func driveIncident(t testing.TB, e *model.Engine, s Store) model.Time {
	now := t0
	step := func(route string, o model.Outcome) {
		hit(t, e, now, route, o)
		s.Apply(e.Changes())
		now = now.Add(100)
	}
	for i := 0; i < 3; i++ {
		step("b/m1", status(503)) // local: opens at 2
	}
	step("a/m1", status(429))
	step("a/m1", model.Outcome{Kind: model.OutcomeResponse, Status: 403, Body: "Request not allowed"})
	step("a/m2", model.Outcome{Kind: model.OutcomeResponse, Status: 403, Body: "account has been deactivated"})
	step("g/m2", status(429))
	step("g/m1", status(404))
	step("rr", status(200))
	step("c", status(200))
	hitSession(t, e, now, "c", SessionHash("c", "agent-1"), status(200)) // pins the session
	s.Apply(e.Changes())
	return now
}

func TestPostgresRestoreEqualsMemory(t *testing.T) {
	// docs/store.md#restore: every kind of state survives a restart, and the
	// Postgres store restores what the memory store holds.
	url := pgtest.NewDB(t)
	e := newEngine(t)
	pg := openPG(t, url, nil)
	mem := NewMemory(MemoryOptions{})
	if _, err := pg.Load(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	now := driveIncident(t, e, multi{pg, mem})
	if err := pg.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	want := durable(e, now)
	if b := want.Providers[1].Breaker; b.State != model.Open {
		t.Fatalf("incident did not open breaker b: %v", b.State)
	}

	pg2 := openPG(t, url, nil)
	st, err := pg2.Load(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	fromPG := restoredEngine(t, st)
	mst, _ := mem.Load(ctxT(t))
	fromMem := restoredEngine(t, mst)
	if got := durable(fromPG, now); !reflect.DeepEqual(got, want) {
		t.Fatalf("postgres restore differs:\n got %+v\nwant %+v", got, want)
	}
	if got := durable(fromMem, now); !reflect.DeepEqual(got, want) {
		t.Fatalf("memory restore differs:\n got %+v\nwant %+v", got, want)
	}
	// The OPEN breaker keeps its remaining time: still OPEN just before the
	// deadline, HALF_OPEN after.
	for _, v := range fromPG.Providers(now) {
		if v.Provider == "b" && (v.State != model.Open || v.RetryAfterMs <= 0) {
			t.Fatalf("restored breaker b: %+v", v)
		}
	}
}

// multi fans changes out to several stores.
type multi []Store

func (m multi) Apply(c []model.Change) {
	for _, s := range m {
		s.Apply(c)
	}
}
func (m multi) Load(ctx context.Context) (model.State, error) { return m[0].Load(ctx) }
func (m multi) Flush(ctx context.Context) error               { return m[0].Flush(ctx) }
func (m multi) Close(ctx context.Context) error               { return m[0].Close(ctx) }
func (m multi) SaveSettings(ctx context.Context, l settings.Layer) error {
	return m[0].SaveSettings(ctx, l)
}
func (m multi) LoadSettings(ctx context.Context) (settings.Layer, error) {
	return m[0].LoadSettings(ctx)
}
func (m multi) Leases() Leases         { return m[0].Leases() }
func (m multi) LogAttempt(r LogRecord) { m[0].LogAttempt(r) }
func (m multi) RecentAttempts(ctx context.Context, q LogQuery) ([]LogRecord, error) {
	return m[0].RecentAttempts(ctx, q)
}
func (m multi) LastEgressIPs(ctx context.Context, p string, s time.Time) (map[string]string, error) {
	return m[0].LastEgressIPs(ctx, p, s)
}
func (m multi) Updates() <-chan struct{} { return m[0].Updates() }
func (m multi) ApplyRemote(e *model.Engine, now model.Time) (RemoteResult, error) {
	return m[0].ApplyRemote(e, now)
}
func (m multi) Health() Health { return m[0].Health() }

func TestPostgresFailOpenConvergesAfterOutage(t *testing.T) {
	// Fail-open: while Postgres is unreachable changes are kept in memory
	// (coalesced), Flush reports ErrStoreUnavailable, and when it returns the
	// database converges to the in-memory state with nothing lost.
	url := pgtest.NewDB(t)
	px := pgtest.NewProxy(t, url)
	s := openPG(t, px.URL(url), nil)
	if _, err := s.Load(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t)
	px.SetDown(true)
	now := driveIncident(t, e, s)
	if err := s.Flush(ctxT(t)); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("flush during outage: %v, want ErrStoreUnavailable", err)
	}
	if h := s.Health(); h.Up || h.Pending == 0 {
		t.Fatalf("health during outage: %+v", h)
	}
	if h := s.Health(); strings.Contains(h.LastError, "postgres://") {
		t.Fatalf("health leaks the database URL: %q", h.LastError)
	}
	px.SetDown(false)
	eventually(t, "pending changes written", func() bool { return s.Health().Pending == 0 && s.Health().Up })
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	s2 := openPG(t, url, nil)
	st, err := s2.Load(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	r := restoredEngine(t, st)
	if got, want := durable(r, now), durable(e, now); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the outage:\n got %+v\nwant %+v", got, want)
	}
}

// pgAfterIncident opens a Postgres store on url (edit as openPG's) and
// applies driveIncident's changes to it (not flushed).
func pgAfterIncident(t *testing.T, url string, edit func(*PostgresOptions)) (*Postgres, *model.Engine) {
	t.Helper()
	s := openPG(t, url, edit)
	if _, err := s.Load(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t)
	driveIncident(t, e, s)
	return s, e
}

func TestPostgresPendingCountsAFlushInFlight(t *testing.T) {
	// Health's pending counts every change not yet written: while a flush
	// is writing a batch (the background loop's included) its entities are
	// no longer dirty but still pending, and one changed again meanwhile
	// counts once. The background loop is kept out of it (a flush
	// interval of an hour): this test's Flush writes the one batch.
	url := pgtest.NewDB(t)
	s, e := pgAfterIncident(t, url, func(o *PostgresOptions) { o.FlushInterval = time.Hour })
	before := s.Health().Pending
	if before == 0 {
		t.Fatal("no pending changes before the flush")
	}
	var during, again int
	s.flushMu.Lock()
	s.beforeWrite = func() {
		during = s.Health().Pending
		hit(t, e, t0.Add(5000), "rr", status(429)) // changes an entity of the batch
		ch := e.Changes()
		if len(ch) == 0 {
			t.Error("the second hit changed nothing")
		}
		s.Apply(ch)
		again = s.Health().Pending
	}
	s.flushMu.Unlock()
	if err := s.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	s.flushMu.Lock()
	s.beforeWrite = nil
	s.flushMu.Unlock()
	if during != before {
		t.Fatalf("pending while the batch is written: %d, want %d", during, before)
	}
	if again != before {
		t.Fatalf("pending after changing an entity in flight: %d, want %d (counted once)", again, before)
	}
	// After the flush only the re-changed entities are left.
	if got := s.Health().Pending; got == 0 || got >= before {
		t.Fatalf("pending after the flush: %d, want the re-changed entities only (0 < n < %d)", got, before)
	}
}

func TestPostgresCloseDuringOutageSaysWhatIsLost(t *testing.T) {
	// docs/store.md "Fail-open": a stop during an outage loses what could
	// not be written, and Close says how many — in its error and in a log
	// line (the gateway may report only its own flush error) — never the
	// database URL.
	url := pgtest.NewDB(t)
	px := pgtest.NewProxy(t, url)
	var logBuf syncBuffer
	s := openPG(t, px.URL(url), func(o *PostgresOptions) {
		o.Logger = slog.New(slog.NewTextHandler(&logBuf, nil))
	})
	if _, err := s.Load(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t)
	px.SetDown(true)
	driveIncident(t, e, s)
	s.LogAttempt(LogRecord{Time: time.Now(), Provider: "a", Connection: "k1", Status: 503})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := s.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "change(s) and 1 request-log record(s) not written") ||
		strings.Contains(err.Error(), "change(s) and 0") || strings.Contains(err.Error(), "postgres://") {
		t.Fatalf("close during an outage: %v", err)
	}
	if out := logBuf.String(); !strings.Contains(out, "state not written") || !strings.Contains(out, "requestLogRecords=1") ||
		strings.Contains(out, "postgres://") {
		t.Fatalf("close during an outage must log what is lost:\n%s", out)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger used from goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestPostgresCorruptRowsReportedAndSkipped(t *testing.T) {
	// Load never crashes on rows it cannot read (bad enum, JSON of the wrong
	// shape, unknown cursor kind): each is reported with table and key and
	// skipped; everything else loads.
	url := pgtest.NewDB(t)
	s, _ := pgAfterIncident(t, url, nil)
	if err := s.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	db := s.DB()
	for _, q := range []string{
		`UPDATE provider_connections SET status = 'zombie' WHERE provider = 'a' AND connection_id = 'k1'`,
		`UPDATE provider_connections SET conn = '{"status": 42}' WHERE provider = 'a' AND connection_id = 'k2'`,
		`UPDATE domain_circuit_breakers SET breaker = '{"state": "SIDEWAYS"}' WHERE name = 'b'`,
		`INSERT INTO model_lockouts (provider, connection_id, lock_name, exact, reason, failure_count, version) VALUES ('a','k3','m9',false,'no_such_reason',1,1)`,
		`INSERT INTO routing_cursors (kind, name, cursor, version) VALUES ('planet', 'x', 1, 1)`,
		`UPDATE provider_cooldown_windows SET failures = '{"not":"a list"}' WHERE provider = 'a'`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s2 := openPG(t, url, nil)
	st, err := s2.Load(ctxT(t))
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("load: %v, want *LoadError", err)
	}
	got := map[string]bool{}
	for _, p := range le.Problems {
		got[p.Table+"["+p.Key+"]"] = true
	}
	for _, w := range []string{"provider_connections[a/k1]", "provider_connections[a/k2]", "domain_circuit_breakers[b]",
		"model_lockouts[a/k3/m9]", "routing_cursors[combo:planet:x]"} {
		if !got[w] {
			t.Errorf("problem %s not reported; got %v", w, le.Problems)
		}
	}
	// The rest loaded and restores: g's connections and lockouts are there.
	restoredEngine(t, st)
	found := false
	for _, c := range st.Connections {
		if c.Provider == "g" && len(c.Lockouts) > 0 {
			found = true
		}
		if c.Provider == "a" && (c.Connection == "k1" || c.Connection == "k2") && c.Conn != (model.Conn{}) {
			t.Errorf("corrupt row %s/%s restored: %+v", c.Provider, c.Connection, c.Conn)
		}
	}
	if !found {
		t.Errorf("healthy lockouts of g not restored: %+v", st.Connections)
	}
	// A later flush overwrites a corrupt row with the live value.
	e2 := restoredEngine(t, st)
	hit(t, e2, t0.Add(10*3600_000), "a/m1", status(429))
	s2.Apply(e2.Changes())
	if err := s2.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := db.QueryRow(`SELECT status FROM provider_connections WHERE provider = 'a' AND connection_id = 'k1'`).Scan(&status); err != nil || status == "zombie" {
		t.Fatalf("corrupt row not repaired: %q %v", status, err)
	}
}

func TestPostgresCoalescesWrites(t *testing.T) {
	// Write-behind coalescing: many changes to one entity between two flushes
	// are one row write.
	url := pgtest.NewDB(t)
	s := openPG(t, url, func(o *PostgresOptions) { o.FlushInterval = time.Hour })
	if _, err := s.Load(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		s.Apply([]model.Change{{At: t0.Add(int64(i)), Kind: model.ChangeConnection, Provider: "a", Connection: "k1",
			Conn: model.Conn{BackoffLevel: i % 5, RateLimitedUntil: t0.Add(int64(i) + 1000)}}})
	}
	if err := s.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if h := s.Health(); h.Written != 1 || h.Flushes != 1 {
		t.Fatalf("1000 changes of one connection: %d rows in %d flushes, want 1 in 1", h.Written, h.Flushes)
	}
}

func TestPostgresSettingsSavedAndShared(t *testing.T) {
	// docs/settings.md#layers: saved settings are persisted (key_value) and another
	// replica gets them through the change feed.
	url := pgtest.NewDB(t)
	a, b := openPG(t, url, nil), openPG(t, url, nil)
	for _, s := range []*Postgres{a, b} {
		if _, err := s.Load(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := settings.ParseLayerJSON([]byte(`{"providerBreaker":{"apikey":{"failureThreshold":5}},"sessionAffinityTtlMs":"30s"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SaveSettings(ctxT(t), l); err != nil {
		t.Fatal(err)
	}
	got, err := a.LoadSettings(ctxT(t))
	if err != nil || !reflect.DeepEqual(got, l) {
		t.Fatalf("load settings: %v %v, want %v", got, err, l)
	}
	e := newEngine(t)
	var remote settings.Layer
	eventually(t, "settings reach replica b", func() bool {
		r, err := b.ApplyRemote(e, t0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Settings != nil {
			remote = r.Settings
		}
		return remote != nil
	})
	if !reflect.DeepEqual(remote, l) {
		t.Fatalf("replica got %v, want %v", remote, l)
	}
}

func TestPostgresPinsPersistedAndShared(t *testing.T) {
	// docs/selection.md#session-affinity: pins are persisted (by session hash only), restored and
	// shared between replicas.
	rs := newReplicas(t, 2)
	a, b := rs[0], rs[1]
	h := SessionHash("c", "session-123")
	if _, ok := hitSession(t, a.e, t0, "c", h, status(200)); !ok {
		t.Fatal("no candidate")
	}
	a.sync(t, t0)
	var pin model.Pin
	for _, p := range a.e.Pins(t0) {
		if p.Session == h {
			pin = p
		}
	}
	if pin.Connection == "" {
		t.Fatalf("no pin on replica a: %+v", a.e.Pins(t0))
	}
	eventually(t, "pin reaches replica b", func() bool {
		b.sync(t, t0)
		for _, p := range b.e.Pins(t0) {
			if p == pin {
				return true
			}
		}
		return false
	})
	var n int
	if err := a.s.DB().QueryRow(`SELECT count(*) FROM session_affinity_pins WHERE session_hash = $1`, h).Scan(&n); err != nil || n != 1 {
		t.Fatalf("pin row: %d %v", n, err)
	}
	if err := a.s.DB().QueryRow(`SELECT count(*) FROM session_affinity_pins WHERE session_hash LIKE '%session-123%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a raw session id was stored: %d %v", n, err)
	}
	// Restart: a fresh store loads the pin.
	if err := a.s.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	c := openPG(t, a.s.url, nil)
	st, err := c.Load(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Pins) != 1 || st.Pins[0] != pin {
		t.Fatalf("pins after restart: %+v, want %+v", st.Pins, pin)
	}
}

func TestPostgresRequestLog(t *testing.T) {
	// docs/store.md#request-log: one row per attempt, classification headers only, error
	// body cut to 2 KB and redacted; the egress lookup of docs/cooldowns.md#egress-buckets.
	url := pgtest.NewDB(t)
	s := openPG(t, url, nil)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	key := "sk-" + strings.Repeat("A1b2", 10)
	s.LogAttempt(LogRecord{Time: base, RequestID: "r1", Provider: "glm", Connection: "k1", Model: "glm-5", Status: 429,
		LatencyMs: 120, FirstByteMs: 0, Reason: "rate_limit_exceeded", EgressIP: "10.0.0.1",
		Headers:   map[string]string{"Retry-After": "5", "X-RateLimit-Reset-Requests": "1s", "Authorization": "Bearer " + key, "Set-Cookie": "a=b"},
		ErrorBody: `{"error":"quota","api_key":"` + key + `"}` + strings.Repeat("x", 5000)})
	s.LogAttempt(LogRecord{Time: base.Add(time.Second), RequestID: "r2", Provider: "glm", Connection: "k2", Status: 200, EgressIP: "10.0.0.2"})
	s.LogAttempt(LogRecord{Time: base.Add(2 * time.Second), RequestID: "r3", Provider: "glm", Connection: "k1", Status: 200, EgressIP: "10.0.0.3"})
	var recs []LogRecord
	eventually(t, "log written", func() bool {
		var err error
		recs, err = s.RecentAttempts(ctxT(t), LogQuery{Provider: "glm"})
		return err == nil && len(recs) == 3
	})
	r := recs[2]
	if r.RequestID != "r1" || r.Status != 429 || r.Reason != "rate_limit_exceeded" {
		t.Fatalf("oldest record: %+v", r)
	}
	if len(r.ErrorBody) > 2048 || strings.Contains(r.ErrorBody, key) || !strings.Contains(r.ErrorBody, redacted) {
		t.Fatalf("error body not cut/redacted: %d bytes %q", len(r.ErrorBody), r.ErrorBody[:100])
	}
	if _, ok := r.Headers["authorization"]; ok || r.Headers["retry-after"] != "5" || r.Headers["x-ratelimit-reset-requests"] != "1s" || len(r.Headers) != 2 {
		t.Fatalf("headers: %v", r.Headers)
	}
	if one, err := s.RecentAttempts(ctxT(t), LogQuery{RequestID: "r2"}); err != nil || len(one) != 1 || one[0].Connection != "k2" {
		t.Fatalf("requestId filter: %v %v", one, err)
	}
	ips, err := s.LastEgressIPs(ctxT(t), "glm", base.Add(-time.Hour))
	if err != nil || ips["k1"] != "10.0.0.3" || ips["k2"] != "10.0.0.2" {
		t.Fatalf("egress: %v %v", ips, err)
	}
	// The memory store keeps the same records the same way.
	m := NewMemory(MemoryOptions{})
	m.LogAttempt(LogRecord{Time: base, Provider: "glm", Connection: "k1", ErrorBody: "token=" + key, EgressIP: "1.2.3.4"})
	mr, _ := m.RecentAttempts(ctxT(t), LogQuery{})
	if len(mr) != 1 || strings.Contains(mr[0].ErrorBody, key) {
		t.Fatalf("memory log: %+v", mr)
	}
}

// A batch of plain served attempts is copied with only the columns that
// vary (pglog.go); read back, its rows must be exactly what a full-column
// copy gives: the table defaults stand for the columns left out, and a
// missing first byte stays NULL (0), in both shapes.
func TestPostgresRequestLogPlainBatchReadsBackTheSame(t *testing.T) {
	s := openPG(t, pgtest.NewDB(t), func(o *PostgresOptions) { o.NoSubscribe = true })
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	plain := []LogRecord{
		{Time: base, RequestID: "p1", Provider: "mock", Connection: "k1", Model: "m", Status: 200, LatencyMs: 3, FirstByteMs: 2},
		{Time: base.Add(time.Millisecond), RequestID: "p2", Provider: "mock", Connection: "k1", Model: "m", Status: 200, LatencyMs: 4},
	}
	mixed := []LogRecord{
		{Time: base.Add(time.Second), RequestID: "f1", Provider: "mock", Connection: "k1", Model: "m", Status: 200, LatencyMs: 3, FirstByteMs: 2},
		{Time: base.Add(time.Second + time.Millisecond), RequestID: "f2", Provider: "mock", Connection: "k1", Model: "m", Status: 503,
			ErrorType: "response", Reason: "server_error", ErrorBody: "down"},
	}
	if !plainRecord(&plain[0]) || !plainRecord(&plain[1]) || plainRecord(&mixed[1]) {
		t.Fatal("the fixture does not exercise both shapes")
	}
	for _, batch := range [][]LogRecord{plain, mixed} {
		if err := s.reqlog.write(ctxT(t), batch); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.RecentAttempts(ctxT(t), LogQuery{Provider: "mock"})
	if err != nil || len(got) != 4 {
		t.Fatalf("read back %d rows: %v", len(got), err)
	}
	byID := map[string]LogRecord{}
	for _, r := range got {
		byID[r.RequestID] = r
	}
	if p, f := byID["p1"], byID["f1"]; p.Status != 200 || p.FirstByteMs != 2 || p.LatencyMs != 3 || len(p.Headers) != 0 ||
		p.ErrorType != "" || p.Reason != "" || p.EgressIP != "" || p.ErrorBody != "" ||
		p.Provider != f.Provider || p.Connection != f.Connection || p.Model != f.Model || p.FirstByteMs != f.FirstByteMs || len(f.Headers) != 0 {
		t.Fatalf("plain row %+v differs from the same row copied with every column %+v", p, f)
	}
	if p2 := byID["p2"]; p2.FirstByteMs != 0 || !p2.Time.Equal(plain[1].Time) {
		t.Fatalf("plain row without a first byte: %+v", p2)
	}
	if f2 := byID["f2"]; f2.Reason != "server_error" || f2.ErrorBody != "down" || f2.Status != 503 {
		t.Fatalf("failure row: %+v", f2)
	}
}

// Rule (docs/store.md#request-log, bad input never blocks the log): a record carrying
// invalid UTF-8 or a NUL byte — a client's X-Request-Id, an upstream's
// error body or header — is stored with U+FFFD in their place, and the
// records after it are written too (Postgres refuses such text, and the
// whole batch with it).
func TestPostgresRequestLogTakesUnstorableText(t *testing.T) {
	url := pgtest.NewDB(t)
	s := openPG(t, url, nil)
	m := NewMemory(MemoryOptions{})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bad := LogRecord{Time: base, RequestID: "id\xff\x00x", Provider: "glm", Connection: "k1", Model: "m\x00", Status: 502,
		ErrorType: "response", Headers: map[string]string{"Retry-After": "5\xfe"}, ErrorBody: "oops\x00\xc3("}
	good := LogRecord{Time: base.Add(time.Second), RequestID: "good", Provider: "glm", Connection: "k1", Status: 200}
	for _, st := range []Store{s, m} {
		st.LogAttempt(bad)
		st.LogAttempt(good)
	}
	var recs []LogRecord
	eventually(t, "both records written", func() bool {
		var err error
		recs, err = s.RecentAttempts(ctxT(t), LogQuery{Provider: "glm"})
		return err == nil && len(recs) == 2
	})
	mem, _ := m.RecentAttempts(ctxT(t), LogQuery{})
	want := "id\uFFFD\uFFFDx"
	for name, rs := range map[string][]LogRecord{"postgres": recs, "memory": mem} {
		r := rs[len(rs)-1]
		if r.RequestID != want || r.Model != "m\uFFFD" || r.ErrorBody != "oops\uFFFD\uFFFD(" || r.Headers["retry-after"] != "5\uFFFD" {
			t.Fatalf("%s: stored %+v", name, r)
		}
		if rs[0].RequestID != "good" {
			t.Fatalf("%s: the record after the bad one: %+v", name, rs[0])
		}
	}
}

// Rule: a record the database refuses is dropped and counted (LogDropped),
// never retried for ever in front of the records after it.
func TestPostgresRequestLogDropsARefusedRecord(t *testing.T) {
	url := pgtest.NewDB(t)
	s := openPG(t, url, nil)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.LogAttempt(LogRecord{Time: base, RequestID: "before", Provider: "glm", Connection: "k1", Status: 200})
	// Past Postgres's last timestamptz (294276 AD): refused whatever its text.
	s.LogAttempt(LogRecord{Time: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC), RequestID: "refused", Provider: "glm", Connection: "k1", Status: 200})
	s.LogAttempt(LogRecord{Time: base.Add(time.Second), RequestID: "after", Provider: "glm", Connection: "k1", Status: 200})
	var recs []LogRecord
	eventually(t, "the records around the refused one written", func() bool {
		var err error
		recs, err = s.RecentAttempts(ctxT(t), LogQuery{Provider: "glm", Until: base.Add(time.Hour)})
		return err == nil && len(recs) == 2
	})
	if recs[0].RequestID != "after" || recs[1].RequestID != "before" {
		t.Fatalf("written: %+v", recs)
	}
	eventually(t, "the refused record counted", func() bool { h := s.Health(); return h.LogDropped == 1 && h.Pending == 0 })
}

// Rule: the request log's COPY encoding (appendCopyRow) brings every text
// column back exactly, whatever it holds: COPY's own separators and escape
// (tab, newline, carriage return, backslash), quotes, "\N" as text, and
// non-ASCII; in a plain batch and in a full one.
func TestPostgresRequestLogCopyEscapesRoundTrip(t *testing.T) {
	url := pgtest.NewDB(t)
	s := openPG(t, url, nil)
	base := time.Date(2026, 1, 1, 0, 0, 0, 123456000, time.UTC)
	tricky := "a\tb\nc\rd\\e\\Nf\"g'h é 日本"
	plain := LogRecord{Time: base, RequestID: tricky, Provider: "p\\N", Connection: "c\t1", Model: "m\n", Status: 200, LatencyMs: 7, FirstByteMs: 3}
	full := LogRecord{Time: base.Add(time.Second), RequestID: "r2", Provider: "p\\N", Connection: "c\t1", Status: 429,
		ErrorType: "response", Reason: "rate\\limit", EgressIP: "::1", Headers: map[string]string{"Retry-After": tricky},
		ErrorBody: `{"error":"` + tricky + `"}`}
	s.LogAttempt(plain)
	var got []LogRecord
	eventually(t, "the plain batch written", func() bool {
		var err error
		got, err = s.RecentAttempts(ctxT(t), LogQuery{Provider: "p\\N"})
		return err == nil && len(got) == 1
	})
	s.LogAttempt(full)
	eventually(t, "the full batch written", func() bool {
		var err error
		got, err = s.RecentAttempts(ctxT(t), LogQuery{Provider: "p\\N", Connection: "c\t1"})
		return err == nil && len(got) == 2
	})
	for i, want := range []LogRecord{sanitize(full), sanitize(plain)} {
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("record %d:\n got %#v\nwant %#v", i, got[i], want)
		}
	}
}

// Rule: every record logged is written exactly once while the log writer
// runs concurrently with the loggers (flush reuses its batch slice and moves
// what arrived during a write to the front of the buffer).
func TestPostgresRequestLogConcurrentFlushWritesEachOnce(t *testing.T) {
	url := pgtest.NewDB(t)
	s := openPG(t, url, nil)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const writers, each = 4, 3000 // past logBatchMax many times: the writer is kicked while they log
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				s.LogAttempt(LogRecord{Time: base.Add(time.Duration(i) * time.Millisecond), RequestID: fmt.Sprintf("w%d-%d", w, i),
					Provider: "glm", Connection: "k1", Status: 200})
			}
		}()
	}
	wg.Wait()
	q := LogQuery{Provider: "glm", Since: base.Add(-time.Hour), Until: base.Add(time.Hour), Limit: 100000}
	var recs []LogRecord
	eventually(t, "every record written", func() bool {
		var err error
		recs, err = s.RecentAttempts(ctxT(t), q)
		return err == nil && len(recs) >= writers*each && s.Health().Pending == 0
	})
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.RequestID]++
	}
	if len(recs) != writers*each || len(seen) != writers*each {
		t.Fatalf("%d rows, %d distinct request ids; want %d of each", len(recs), len(seen), writers*each)
	}
}
