package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/breakwater-gw/breakwater/internal/pgtest"
	"github.com/breakwater-gw/breakwater/model"
)

// The state-machine test of docs/store.md#restore through the Postgres
// store: random requests, outcomes, time steps and operator actions drive a
// reference engine and a live engine in lockstep; the live engine's changes
// go through the store, which suffers random outages (a proxy that cuts
// every connection) and random restarts (close, reopen, Load into a fresh
// engine). After every restart the restored state equals the reference's
// durable state, and no later decision differs.

var rapidOutcomes = []model.Outcome{
	status(200), status(200), status(503), status(500), status(502), status(408),
	{Kind: model.OutcomeTransport, Transport: model.TransportReset},
	status(429), {Kind: model.OutcomeResponse, Status: 429, Headers: model.HeaderMap{"retry-after": "5"}},
	{Kind: model.OutcomeResponse, Status: 429, Body: `{"error":{"message":"too many concurrent requests"}}`},
	{Kind: model.OutcomeResponse, Status: 429, Body: `{"error":{"message":"You exceeded your current quota"}}`},
	status(401), {Kind: model.OutcomeResponse, Status: 403, Body: "Request not allowed"},
	{Kind: model.OutcomeResponse, Status: 403, Body: "account has been deactivated"},
	{Kind: model.OutcomeResponse, Status: 402, Body: "insufficient credits"}, status(404),
	{Kind: model.OutcomeResponse, Status: 400, Body: "maximum context length exceeded"},
	{Kind: model.OutcomeStall}, {Kind: model.OutcomeClientAbort}, {Kind: model.OutcomeLocalQueue},
}

var rapidRoutes = []string{"a/m1", "a/m2", "b/m1", "g/m2", "c", "rr"}

type pgAction struct {
	Kind    int // 0 advance, 1 select+begin, 2 record, 3 reset breaker, 4 clear cooldowns, 5 reset connection, 6 refresh, 7 toggle outage, 8 restart, 9 flush
	Dt      int64
	Route   int
	Pick    int
	Outcome int
}

func pgActionGen() *rapid.Generator[pgAction] {
	return rapid.Custom(func(t *rapid.T) pgAction {
		k := rapid.IntRange(0, 100).Draw(t, "kind")
		a := pgAction{Pick: rapid.IntRange(0, 1000).Draw(t, "pick")}
		switch {
		case k < 20:
			a.Kind = 0
			a.Dt = rapid.OneOf(rapid.Int64Range(0, 2000), rapid.Int64Range(0, 120_000), rapid.Int64Range(0, 2*3600_000)).Draw(t, "dt")
		case k < 50:
			a.Kind, a.Route = 1, rapid.IntRange(0, len(rapidRoutes)-1).Draw(t, "route")
		case k < 80:
			a.Kind, a.Outcome = 2, rapid.IntRange(0, len(rapidOutcomes)-1).Draw(t, "outcome")
		case k < 82:
			a.Kind = 3
		case k < 83:
			a.Kind = 4
		case k < 84:
			a.Kind = 5
		case k < 86:
			a.Kind = 6
		case k < 91:
			a.Kind = 7
		case k < 96:
			a.Kind = 8
		default:
			a.Kind = 9
		}
		return a
	})
}

// side is one engine with its attempts in flight.
type side struct {
	e        *model.Engine
	pcg      *rand.PCG
	inflight []model.Attempt
	sel      model.Selection
}

func newSide(t tb, pcg *rand.PCG) *side {
	e, err := model.NewEngine(testTopology(), testSettings(t), rand.New(pcg))
	if err != nil {
		t.Fatal(err)
	}
	return &side{e: e, pcg: pcg}
}

func clonePCG(t tb, p *rand.PCG) *rand.PCG {
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	q := &rand.PCG{}
	if err := q.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	return q
}

// step runs one engine action and describes every decision it made.
func (s *side) step(t tb, now model.Time, a pgAction) string {
	e := s.e
	switch a.Kind {
	case 1:
		r, err := e.Resolve(rapidRoutes[a.Route])
		if err != nil {
			t.Fatal(err)
		}
		req := model.Request{Route: r, Session: []string{"", "", SessionHash("x", "s1"), SessionHash("x", "s2")}[a.Pick%4]}
		e.Select(now, &req, &s.sel)
		var b strings.Builder
		fmt.Fprintf(&b, "select %s:", r.Name)
		for _, c := range s.sel.Candidates {
			fmt.Fprintf(&b, " %s/%s", c.Provider, c.Connection)
		}
		for _, x := range s.sel.Excluded {
			fmt.Fprintf(&b, " -%s/%s:%v:%d", x.Provider, x.Connection, x.Reason, x.RemainingMs)
		}
		if len(s.sel.Candidates) > 0 {
			c := s.sel.Candidates[a.Pick%len(s.sel.Candidates)]
			at, err := e.Begin(now, c)
			if err != nil {
				fmt.Fprintf(&b, " begin-error %v", err)
			} else {
				s.inflight = append(s.inflight, at)
				fmt.Fprintf(&b, " begin %s/%s probe=%v", c.Provider, c.Connection, at.Probe())
			}
		} else if u := model.Unavailable(now, &req.Route, &s.sel); u != nil {
			fmt.Fprintf(&b, " unavailable %s %d", u.Code, u.RetryAfterSeconds())
		}
		return b.String()
	case 2:
		if len(s.inflight) == 0 {
			return "record none"
		}
		i := a.Pick % len(s.inflight)
		at := s.inflight[i]
		s.inflight = append(s.inflight[:i], s.inflight[i+1:]...)
		v := e.Record(now, &at, rapidOutcomes[a.Outcome])
		return fmt.Sprintf("record %s/%s %d: %v %v %v next=%v", at.Provider, at.Connection, a.Outcome, v.Reason, v.Breaker, v.Conn, v.Next)
	case 3:
		p := testTopology().Providers[a.Pick%3].ID
		n, _ := e.ResetBreakers(now, p)
		return fmt.Sprintf("reset %s %d", p, n)
	case 4:
		res, _ := e.ClearCooldowns(now, nil, true, "")
		return fmt.Sprintf("clear %+v", res)
	case 5:
		p := testTopology().Providers[a.Pick%3]
		c := p.Connections[a.Pick%len(p.Connections)].ID
		ok, _ := e.ResetConnection(now, model.ConnRef{Provider: p.ID, Connection: c})
		return fmt.Sprintf("reset-conn %s/%s %v", p.ID, c, ok)
	case 6:
		e.Refresh(now)
		return "refresh"
	}
	return ""
}

// drain ends every attempt in flight as a client abort (a clean stop).
func (s *side) drain(now model.Time) string {
	var b strings.Builder
	for i := range s.inflight {
		v := s.e.Record(now, &s.inflight[i], model.Outcome{Kind: model.OutcomeClientAbort})
		fmt.Fprintf(&b, "abort %s/%s %v;", s.inflight[i].Provider, s.inflight[i].Connection, v.Next)
	}
	s.inflight = s.inflight[:0]
	return b.String()
}

// tb is what the helpers need from *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func truncateState(t tb, db *sql.DB) {
	if _, err := db.Exec(`TRUNCATE domain_circuit_breakers, provider_cooldown_windows, routing_cursors,
		provider_connections, model_lockouts, session_affinity_pins, state_changes, key_value`); err != nil {
		t.Fatal(err)
	}
}

func TestRapidPostgresRestartsAndOutagesChangeNoDecision(t *testing.T) {
	url := pgtest.NewDB(t)
	px := pgtest.NewProxy(t, url)
	admin, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	rapid.Check(t, func(rt *rapid.T) {
		truncateState(rt, admin)
		px.SetDown(false)
		open := func() *Postgres {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := openRetrying(px.URL(url), PostgresOptions{FlushInterval: 5 * time.Millisecond, NoSubscribe: true, MaxConns: 4, Logger: quietLogger()})
			if err != nil {
				rt.Fatal(err)
			}
			if _, err := s.Load(ctx); err != nil {
				rt.Fatal(err)
			}
			return s
		}
		closeStore := func(s *Postgres) {
			px.SetDown(false)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Close(ctx); err != nil {
				rt.Fatalf("clean stop lost changes: %v", err)
			}
		}
		s := open()
		defer func() { closeStore(s) }()
		ref := newSide(rt, rand.NewPCG(11, 12))
		live := newSide(rt, rand.NewPCG(11, 12))
		now := t0
		// folded is what the store must hold: the state it loaded, with every
		// change record it accepted folded in (model.State.Apply).
		var folded model.State
		accept := func(cs []model.Change) {
			folded.Apply(cs)
			s.Apply(cs)
		}
		restart := func(label string) {
			lr, ll := ref.drain(now), live.drain(now)
			if lr != ll {
				rt.Fatalf("%s: drains differ:\n ref:  %s\n live: %s", label, lr, ll)
			}
			ref.e.Changes()
			accept(live.e.Changes())
			closeStore(s)
			s = open()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			st, err := s.Load(ctx)
			cancel()
			if err != nil {
				rt.Fatal(err)
			}
			if got, want := normalize(st), normalize(folded); !reflect.DeepEqual(got, want) {
				rt.Fatalf("%s: stored state is not the fold of the accepted changes:\n got %+v\nwant %+v", label, got, want)
			}
			live = newSide(rt, clonePCG(rt, ref.pcg))
			if err := RestoreEngine(live.e, st); err != nil {
				rt.Fatal(err)
			}
			if got, want := durable(live.e, now), durable(ref.e, now); !reflect.DeepEqual(got, want) {
				rt.Fatalf("%s: restored state differs:\n got %+v\nwant %+v", label, got, want)
			}
			ref.e.Changes()
			accept(live.e.Changes())
		}
		acts := rapid.SliceOfN(pgActionGen(), 40, 160).Draw(rt, "actions")
		for i, a := range acts {
			switch a.Kind {
			case 0:
				now = now.Add(a.Dt)
			case 7:
				px.SetDown(!px.Down())
			case 8:
				restart(fmt.Sprintf("restart at step %d", i))
			case 9:
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = s.Flush(ctx) // fails during an outage; nothing is lost
				cancel()
			default:
				lr, ll := ref.step(rt, now, a), live.step(rt, now, a)
				if lr != ll {
					rt.Fatalf("step %d differs:\n ref:  %s\n live: %s", i, lr, ll)
				}
				ref.e.Changes()
				accept(live.e.Changes())
			}
		}
		restart("final restart")
	})
}
