package store

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/internal/pgtest"
	"github.com/breakwater-gw/breakwater/model"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// t0 is the virtual epoch of the tests: 2026-01-01T00:00:00Z.
const t0 = model.Time(1767225600000)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testTopology has three providers of each profile and two combos, so
// every table (breakers, windows, cursors, connections, lockouts) gets rows.
func testTopology() model.Topology {
	mk := func(id, typ string, prof model.Profile, strat model.Strategy, n int) model.ProviderConfig {
		p := model.ProviderConfig{ID: id, Type: typ, Profile: prof, Models: []string{"m1", "m2"}, Strategy: strat}
		for i := 1; i <= n; i++ {
			p.Connections = append(p.Connections, model.ConnectionConfig{ID: "k" + string(rune('0'+i)), Priority: i})
		}
		return p
	}
	a := mk("a", "openai", model.ProfileAPIKey, model.RoundRobin, 3)
	a.QuotaFamilies = map[string][]string{"all": {"m*"}}
	b := mk("b", "local", model.ProfileLocal, model.FillFirst, 2)
	g := mk("g", "gemini", model.ProfileOAuth, model.LeastUsed, 2)
	return model.Topology{
		Providers: []model.ProviderConfig{a, b, g},
		Combos: []model.ComboConfig{
			{ID: "c", Strategy: model.Priority, Targets: []model.ComboTarget{{Provider: "a", Model: "m1"}, {Provider: "b", Model: "m1"}, {Provider: "g", Model: "m2"}}},
			{ID: "rr", Strategy: model.RoundRobin, Targets: []model.ComboTarget{{Provider: "a", Model: "m2"}, {Provider: "g", Model: "m1", Connection: "k2"}}},
		},
	}
}

func testSettings(t interface{ Fatal(...any) }) model.Settings {
	s := model.DefaultSettings()
	s.ModelLockout.Enabled = true
	s.ProviderCooldown.Enabled = true
	s.ProviderBreaker.Local.HalfOpenRequests = 2
	s.SessionAffinityTTLMs = 600_000
	n, err := model.Normalize(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newEngine(t testing.TB) *model.Engine {
	t.Helper()
	e, err := model.NewEngine(testTopology(), testSettings(t), rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// restoredEngine is a fresh engine with st restored into it.
func restoredEngine(t testing.TB, st model.State) *model.Engine {
	t.Helper()
	e := newEngine(t)
	if err := RestoreEngine(e, st); err != nil {
		t.Fatal(err)
	}
	return e
}

// hit runs one whole attempt on the first candidate of route at now.
func hit(t testing.TB, e *model.Engine, now model.Time, route string, o model.Outcome) (model.Verdict, bool) {
	return hitSession(t, e, now, route, "", o)
}

// hitSession is hit for a client session (affinity pins, docs/selection.md#session-affinity).
func hitSession(t testing.TB, e *model.Engine, now model.Time, route, session string, o model.Outcome) (model.Verdict, bool) {
	t.Helper()
	r, err := e.Resolve(route)
	if err != nil {
		t.Fatal(err)
	}
	var sel model.Selection
	e.Select(now, &model.Request{Route: r, Session: session}, &sel)
	if len(sel.Candidates) == 0 {
		return model.Verdict{}, false
	}
	a, err := e.Begin(now, sel.Candidates[0])
	if err != nil {
		return model.Verdict{}, false
	}
	return e.Record(now, &a, o), true
}

func status(code int) model.Outcome { return model.Outcome{Kind: model.OutcomeResponse, Status: code} }

func durable(e *model.Engine, now model.Time) model.State {
	set := e.Settings()
	return normalize(e.Snapshot(now).Durable(&set, profileFunc(e)))
}

// normalize maps empty and nil slices alike for comparison.
func normalize(s model.State) model.State {
	if len(s.Pins) == 0 {
		s.Pins = nil
	}
	if len(s.Combos) == 0 {
		s.Combos = nil
	}
	for i := range s.Providers {
		if len(s.Providers[i].Breaker.Probes) == 0 {
			s.Providers[i].Breaker.Probes = nil
		}
		if len(s.Providers[i].Window.Failures) == 0 {
			s.Providers[i].Window.Failures = nil
		}
	}
	for i := range s.Connections {
		if len(s.Connections[i].Lockouts) == 0 {
			s.Connections[i].Lockouts = nil
		}
		s.Connections[i].InFlight = 0
	}
	return s
}

func openPG(t testing.TB, url string, edit func(*PostgresOptions)) *Postgres {
	t.Helper()
	o := PostgresOptions{FlushInterval: 20 * time.Millisecond, PollInterval: 50 * time.Millisecond, MaxConns: 4, Logger: quietLogger()}
	if edit != nil {
		edit(&o)
	}
	s, err := openRetrying(url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// openRetrying opens a store, waiting out a server that is briefly full
// ("too many clients") when other test processes share it.
func openRetrying(url string, o PostgresOptions) (*Postgres, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := OpenPostgres(ctx, url, o)
		cancel()
		if err == nil || !errors.Is(err, ErrStoreUnavailable) || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or a generous deadline passes (
// docs/testing.md#time-in-tests: tests never assert durations; the targets are benchmarks).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
