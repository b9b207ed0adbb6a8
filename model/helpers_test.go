package model

import (
	"math/rand/v2"
)

// t0 is the virtual epoch the tests start from: 2026-01-01T00:00:00Z.
const t0 = Time(1767225600000)

func at(ms int64) Time { return t0.Add(ms) }

func sec(n int64) int64 { return n * 1000 }

func mustEngine(t tb, topo Topology, edit func(*Settings)) *Engine {
	t.Helper()
	s := DefaultSettings()
	// Most rule tests pin one rule at a time; dedup is pinned by its own test.
	s.ProviderBreaker.Dedup = BreakerDedup{}
	if edit != nil {
		edit(&s)
	}
	n, err := Normalize(s)
	if err != nil {
		t.Fatalf("normalize: %v", err)
	}
	e, err := NewEngine(topo, n, rand.New(rand.NewPCG(7, 7)))
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	return e
}

// oneProvider is a provider with n connections k1..kn serving m1 and m2.
func oneProvider(id string, prof Profile, n int) ProviderConfig {
	p := ProviderConfig{ID: id, Profile: prof, Models: []string{"m1", "m2"}}
	for i := 1; i <= n; i++ {
		p.Connections = append(p.Connections, ConnectionConfig{ID: "k" + string(rune('0'+i))})
	}
	return p
}

func topo(ps ...ProviderConfig) Topology { return Topology{Providers: ps} }

func status(code int) Outcome { return Outcome{Kind: OutcomeResponse, Status: code} }

func withBody(code int, body string) Outcome {
	return Outcome{Kind: OutcomeResponse, Status: code, Body: body}
}

func withHeader(code int, k, v string) Outcome {
	return Outcome{Kind: OutcomeResponse, Status: code, Headers: HeaderMap{k: v}}
}

func route(t tb, e *Engine, name string) Route {
	t.Helper()
	r, err := e.Resolve(name)
	if err != nil {
		t.Fatalf("resolve %q: %v", name, err)
	}
	return r
}

func selectAt(t tb, e *Engine, now Time, name string) *Selection {
	t.Helper()
	var s Selection
	req := Request{Route: route(t, e, name)}
	e.SelectAll(now, &req, &s)
	return &s
}

// beginOn starts an attempt on a named connection (bypassing strategy).
func beginOn(t tb, e *Engine, now Time, provider, conn, model string) Attempt {
	t.Helper()
	a, err := e.tryBegin(now, provider, conn, model)
	if err != nil {
		t.Fatalf("begin %s/%s at %d: %v", provider, conn, now-t0, err)
	}
	return a
}

func (e *Engine) tryBegin(now Time, provider, conn, model string) (Attempt, error) {
	pi := e.provIdx[provider]
	ci := e.provs[pi].connIdx[conn]
	return e.Begin(now, Candidate{Provider: provider, Connection: conn, Model: model, p: int32(pi), c: int32(ci)})
}

// hit runs one whole attempt on a connection: begin and record at now.
func hit(t tb, e *Engine, now Time, provider, conn, model string, o Outcome) Verdict {
	t.Helper()
	a := beginOn(t, e, now, provider, conn, model)
	return e.Record(now, &a, o)
}

func breakerOf(e *Engine, provider string) *Breaker { return &e.provs[e.provIdx[provider]].breaker }

func connOf(e *Engine, provider, conn string) *Conn {
	p := &e.provs[e.provIdx[provider]]
	return &p.conns[p.connIdx[conn]].st
}

func locksOf(e *Engine, provider, conn string) lockoutSet {
	p := &e.provs[e.provIdx[provider]]
	return p.conns[p.connIdx[conn]].locks
}

func stateAt(e *Engine, now Time, provider string) BreakerState {
	for _, v := range e.Providers(now) {
		if v.Provider == provider {
			return v.State
		}
	}
	return 255
}

func candidates(s *Selection) []string {
	var out []string
	for _, c := range s.Candidates {
		out = append(out, c.Provider+"/"+c.Connection)
	}
	return out
}

// tb is what the helpers need from *testing.T, *testing.B and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}
