package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/internal/pgtest"
	"github.com/breakwater-gw/breakwater/model"
)

// Benchmarks of docs/store.md. Targets (checked here, never by timed
// assertions in tests): Apply adds ≤ 5 µs to a decision; a storm of 10 000
// failure outcomes/s on 100 connections costs at most one write per entity
// per flush interval; restoring 1 000 connections and 10 000 lockouts takes
// ≤ 1 s; a change reaches another replica within 1 s.

// stormChanges is what one failure outcome on a connection emits: the use
// counter at Begin, the connection's new cooldown at Record, and the
// provider's breaker.
func stormChanges(i int, now model.Time) []model.Change {
	p := fmt.Sprintf("p%d", i%4)
	c := fmt.Sprintf("k%d", i%100)
	conn := model.Conn{RateLimitedUntil: now.Add(5000), CooldownSetAt: now, BackoffLevel: i % 6, LastFailureAt: now,
		HasFailure: true, LastError: "upstream 503", LastErrorType: model.ReasonServerError, ErrorCode: 503, LastErrorAt: now,
		Uses: uint64(i), LastUsedAt: now}
	return []model.Change{
		{At: now, Kind: model.ChangeUsage, Provider: p, Connection: c, Conn: conn},
		{At: now, Kind: model.ChangeConnection, Provider: p, Connection: c, Conn: conn},
		{At: now, Kind: model.ChangeBreaker, Provider: p, Breaker: model.Breaker{State: model.Degraded, FailureCount: i % 11, LastFailureAt: now, HasFailure: true, LastFailureKind: model.KindServerError, Generation: 1}},
	}
}

func BenchmarkApplyMemory(b *testing.B) {
	// The cost Apply adds to a decision, with nothing else running.
	s := NewMemory(MemoryOptions{})
	batches := make([][]model.Change, 1000)
	for i := range batches {
		batches[i] = stormChanges(i, t0.Add(int64(i)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Apply(batches[i%len(batches)])
	}
}

func BenchmarkStormPersistence(b *testing.B) {
	// b.N failure outcomes on 100 connections (4 providers), paced at
	// 10 000/s, through the Postgres store with the default 200 ms flush
	// interval. Reports rows written per second and the p99 latency Apply
	// adds. Run with -benchtime=20000x (2 s of storm) or more.
	s := openPG(b, pgtest.NewDB(b), func(o *PostgresOptions) { o.FlushInterval = 200 * time.Millisecond; o.NoSubscribe = true })
	if _, err := s.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	batches := make([][]model.Change, 10_000)
	for i := range batches {
		batches[i] = stormChanges(i, t0.Add(int64(i)))
	}
	lat := make([]time.Duration, 0, b.N)
	w0 := s.Health().Written
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if i%10 == 0 { // 10 outcomes per millisecond = 10 000/s
			if d := time.Until(start.Add(time.Duration(i/10) * time.Millisecond)); d > 0 {
				time.Sleep(d)
			}
		}
		t := time.Now()
		s.Apply(batches[i%len(batches)])
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start)
	if err := s.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	slices.Sort(lat)
	written := s.Health().Written - w0
	b.ReportMetric(float64(written)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "outcomes/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-apply-ns")
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-apply-ns")
}

func bigTopology() model.Topology {
	var t model.Topology
	for p := 0; p < 20; p++ {
		pc := model.ProviderConfig{ID: fmt.Sprintf("p%d", p), Profile: model.ProfileAPIKey}
		for c := 0; c < 50; c++ {
			pc.Connections = append(pc.Connections, model.ConnectionConfig{ID: fmt.Sprintf("k%d", c)})
		}
		t.Providers = append(t.Providers, pc)
	}
	return t
}

func BenchmarkRestore1000Connections10000Lockouts(b *testing.B) {
	// Startup: open the store, Load and restore 1 000 connections, 20
	// breakers and 10 000 lockouts into an engine. Target ≤ 1 s per op.
	url := pgtest.NewDB(b)
	seed := openPG(b, url, func(o *PostgresOptions) { o.FlushInterval = time.Hour; o.NoSubscribe = true })
	if _, err := seed.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	now := t0
	topo := bigTopology()
	for _, p := range topo.Providers {
		cs := []model.Change{{At: now, Kind: model.ChangeBreaker, Provider: p.ID, Breaker: model.Breaker{State: model.Open, OpenedAt: now, Generation: 3, FailureCount: 12}}}
		for _, c := range p.Connections {
			cs = append(cs, model.Change{At: now, Kind: model.ChangeConnection, Provider: p.ID, Connection: c.ID,
				Conn: model.Conn{RateLimitedUntil: now.Add(60_000), CooldownSetAt: now, BackoffLevel: 2, LastError: "429", ErrorCode: 429, LastErrorAt: now}})
			for m := 0; m < 10; m++ {
				cs = append(cs, model.Change{At: now, Kind: model.ChangeLockout, Provider: p.ID, Connection: c.ID,
					Lockout: model.Lockout{Key: model.LockKey{Name: fmt.Sprintf("model-%d", m)}, Reason: model.ReasonRateLimitExceeded,
						Until: now.Add(120_000), LockedAt: now, FailureCount: 1, LastFailureAt: now, LastCooldownMs: 120_000}})
			}
		}
		seed.Apply(cs)
	}
	if err := seed.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	settings, _ := model.Normalize(model.DefaultSettings())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx := context.Background()
		s, err := OpenPostgres(ctx, url, PostgresOptions{NoSubscribe: true, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		st, err := s.Load(ctx)
		if err != nil {
			b.Fatal(err)
		}
		e, err := model.NewEngine(topo, settings, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			b.Fatal(err)
		}
		if err := RestoreEngine(e, st); err != nil {
			b.Fatal(err)
		}
		if n := len(st.Connections); n != 1000 {
			b.Fatalf("restored %d connections", n)
		}
		_ = s.Close(ctx)
	}
}

func BenchmarkReplicaConvergence(b *testing.B) {
	// A change applied on replica A, until replica B's engine holds it, with
	// the production defaults (200 ms flush interval, LISTEN/NOTIFY, 500 ms
	// poll). Target ≤ 1 s.
	url := pgtest.NewDB(b)
	a := openPG(b, url, func(o *PostgresOptions) { o.FlushInterval = 0; o.PollInterval = 0 })
	r := openPG(b, url, func(o *PostgresOptions) { o.FlushInterval = 0; o.PollInterval = 0 })
	eb := newEngine(b)
	for _, s := range []*Postgres{a, r} {
		if _, err := s.Load(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		msg := fmt.Sprintf("change %d", i)
		start := time.Now()
		a.Apply([]model.Change{{At: t0, Kind: model.ChangeConnection, Provider: "a", Connection: "k1",
			Conn: model.Conn{LastError: msg, LastErrorType: model.ReasonServerError, LastErrorAt: t0.Add(int64(i))}}})
		for seen := false; !seen; {
			select {
			case <-r.Updates():
			case <-time.After(10 * time.Second):
				b.Fatal("no update within 10 s")
			}
			if _, err := r.ApplyRemote(eb, t0); err != nil {
				b.Fatal(err)
			}
			seen = connState(eb, t0, "a", "k1").LastError == msg
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
}

// BenchmarkRequestLogWrite: the gateway-side cost of writing one request
// log row (an ordinary served attempt) to Postgres in the log writer's
// batches: what the request log adds to the gateway's CPU, which stays off
// the request path (docs/store.md#request-log). ns/op and allocs/op are per
// row.
func BenchmarkRequestLogWrite(b *testing.B) {
	s := openPG(b, pgtest.NewDB(b), func(o *PostgresOptions) { o.NoSubscribe = true })
	now := time.Now()
	batch := make([]LogRecord, logBatchMax)
	for i := range batch {
		batch[i] = sanitize(LogRecord{Time: now.Add(time.Duration(i)), RequestID: fmt.Sprintf("%024x", i), Provider: "mock", Connection: "k1",
			Model: "gpt-4o-mini", Status: 200, LatencyMs: 3, FirstByteMs: 2})
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for done := 0; done < b.N; done += len(batch) {
		n := min(len(batch), b.N-done)
		if err := s.reqlog.write(ctx, batch[:n]); err != nil {
			b.Fatal(err)
		}
	}
	// The gateway's own share (wall time includes the server's).
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
