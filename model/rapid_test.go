package model

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// The property tests drive the engine with random sequences of requests,
// outcomes, time steps and operator actions over a small fixed topology and
// check the invariants of docs/testing.md#kinds-of-tests after every step.

var rapidOutcomes = []Outcome{
	status(200), status(200), status(503), status(500), status(502), status(408),
	{Kind: OutcomeTransport, Transport: TransportReset},
	status(429), withHeader(429, "retry-after", "5"),
	withBody(429, `{"error":{"message":"too many concurrent requests"}}`),
	withBody(429, `{"error":{"message":"You exceeded your current quota"}}`),
	status(401), withBody(403, "Request not allowed"), withBody(403, "account has been deactivated"),
	withBody(402, "insufficient credits"), status(404),
	withBody(400, "maximum context length exceeded"),
	{Kind: OutcomeStall}, {Kind: OutcomeClientAbort}, {Kind: OutcomeLocalQueue},
}

var rapidRoutes = []string{"a/m1", "a/m2", "b/m1", "g/m2", "c", "rr"}

func rapidTopology() Topology {
	a := oneProvider("a", ProfileAPIKey, 3)
	a.QuotaFamilies = map[string][]string{"all": {"m*"}}
	b := oneProvider("b", ProfileLocal, 2)
	b.Type = "local"
	g := oneProvider("g", ProfileOAuth, 2)
	g.Type = "gemini"
	g.Strategy = LeastUsed
	tp := topo(a, b, g)
	tp.Combos = []ComboConfig{
		{ID: "c", Strategy: Priority, Targets: []ComboTarget{{Provider: "a", Model: "m1"}, {Provider: "b", Model: "m1"}, {Provider: "g", Model: "m2"}}},
		{ID: "rr", Strategy: Weighted, Targets: []ComboTarget{{Provider: "a", Model: "m2", Weight: 3}, {Provider: "g", Model: "m1", Connection: "k2"}}},
	}
	return tp
}

type action struct {
	Kind    int // 0 advance, 1 select+begin, 2 record, 3 reset breaker, 4 clear cooldowns, 5 reset connection, 6 refresh
	Dt      int64
	Route   int
	Pick    int
	Outcome int
}

func actionGen() *rapid.Generator[action] {
	return rapid.Custom(func(t *rapid.T) action {
		k := rapid.IntRange(0, 100).Draw(t, "kind")
		a := action{Pick: rapid.IntRange(0, 1000).Draw(t, "pick")}
		switch {
		case k < 25:
			a.Kind = 0
			a.Dt = rapid.OneOf(rapid.Int64Range(0, 2000), rapid.Int64Range(0, 120_000), rapid.Int64Range(0, 2*hour)).Draw(t, "dt")
		case k < 60:
			a.Kind, a.Route = 1, rapid.IntRange(0, len(rapidRoutes)-1).Draw(t, "route")
		case k < 94:
			a.Kind, a.Outcome = 2, rapid.IntRange(0, len(rapidOutcomes)-1).Draw(t, "outcome")
		case k < 96:
			a.Kind = 3
		case k < 97:
			a.Kind = 4
		case k < 98:
			a.Kind = 5
		default:
			a.Kind = 6
		}
		return a
	})
}

type runner struct {
	e        *Engine
	pcg      *rand.PCG
	now      Time
	inflight []Attempt
	sel      Selection
	routes   []Route
	last     Attempt // the attempt the last record step finished
	lastV    Verdict
	onBegin  func(Attempt)
	onRecord func(Attempt, Verdict)
	onReset  func(provider string)
	// full: select with Selection.Full (SelectAll); otherwise a lazy
	// Select completed by SelectRest before anything else runs.
	full bool
	// firstOnly: see step.
	firstOnly bool
}

func newRunner(t tb, edit func(*Settings), seed uint64) *runner {
	s := DefaultSettings()
	s.ProviderBreaker.Local.HalfOpenRequests = 2
	s.SessionAffinityTTLMs = 60_000
	if edit != nil {
		edit(&s)
	}
	n, err := Normalize(s)
	if err != nil {
		t.Fatal(err)
	}
	pcg := rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	e, err := NewEngine(rapidTopology(), n, rand.New(pcg))
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{e: e, pcg: pcg, now: t0}
	for _, name := range rapidRoutes {
		rt, err := e.Resolve(name)
		if err != nil {
			t.Fatal(err)
		}
		r.routes = append(r.routes, rt)
	}
	return r
}

// clone restores the runner's snapshot into a fresh engine with the same
// random state, and copies the attempts in flight.
func (r *runner) clone(t tb) *runner {
	st := r.e.Snapshot(r.now)
	b, _ := r.pcg.MarshalBinary()
	pcg := &rand.PCG{}
	if err := pcg.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(rapidTopology(), r.e.Settings(), rand.New(pcg))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Restore(st); err != nil {
		t.Fatal(err)
	}
	return &runner{e: e, pcg: pcg, now: r.now, inflight: append([]Attempt(nil), r.inflight...), routes: r.routes}
}

// step runs one action and returns a line describing every decision made.
func (r *runner) step(a action) string {
	e := r.e
	switch a.Kind {
	case 0:
		r.now = r.now.Add(a.Dt)
		return fmt.Sprintf("advance %d", a.Dt)
	case 1:
		req := Request{Route: r.routes[a.Route], Session: []string{"", "s1", "s2"}[a.Pick%3]}
		var b strings.Builder
		r.sel.Full = r.full
		e.Select(r.now, &req, &r.sel)
		// firstOnly: every other request takes the request path's first
		// candidate without listing the rest (a lazy Select stays partial).
		first := r.firstOnly && a.Pick%2 == 0
		if r.sel.Partial() && !first {
			// docs/model.md#lazy-selection: a lazy selection is a prefix of
			// the full one, and SelectRest completes it.
			cands, excl := slices.Clone(r.sel.Candidates), slices.Clone(r.sel.Excluded)
			e.SelectRest(r.now, &req, &r.sel)
			if len(cands) == 0 || len(cands) > len(r.sel.Candidates) || !slices.Equal(cands, r.sel.Candidates[:len(cands)]) ||
				len(excl) > len(r.sel.Excluded) || !slices.Equal(excl, r.sel.Excluded[:len(excl)]) {
				fmt.Fprintf(&b, "lazy selection %v %v is no prefix of %v %v; ", cands, excl, r.sel.Candidates, r.sel.Excluded)
			}
		}
		fmt.Fprintf(&b, "select %s:", req.Route.Name)
		if first && len(r.sel.Candidates) > 0 {
			c := r.sel.Candidates[0]
			fmt.Fprintf(&b, " first %s/%s", c.Provider, c.Connection)
			r.sel.Candidates = r.sel.Candidates[:1]
		} else {
			for _, c := range r.sel.Candidates {
				fmt.Fprintf(&b, " %s/%s", c.Provider, c.Connection)
			}
			for _, x := range r.sel.Excluded {
				fmt.Fprintf(&b, " -%s/%s:%v:%d", x.Provider, x.Connection, x.Reason, x.RemainingMs)
			}
		}
		if len(r.sel.Candidates) > 0 {
			c := r.sel.Candidates[a.Pick%len(r.sel.Candidates)]
			at, err := e.Begin(r.now, c)
			if err != nil {
				fmt.Fprintf(&b, " begin-error %v", err)
			} else {
				r.inflight = append(r.inflight, at)
				if r.onBegin != nil {
					r.onBegin(at)
				}
				fmt.Fprintf(&b, " begin %s/%s probe=%v", c.Provider, c.Connection, at.Probe())
			}
		} else if u := Unavailable(r.now, &req.Route, &r.sel); u != nil {
			fmt.Fprintf(&b, " unavailable %s %d", u.Code, u.RetryAfterSeconds())
		}
		return b.String()
	case 2:
		if len(r.inflight) == 0 {
			return "record none"
		}
		r.last = Attempt{}
		i := a.Pick % len(r.inflight)
		at := r.inflight[i]
		r.inflight = append(r.inflight[:i], r.inflight[i+1:]...)
		v := e.Record(r.now, &at, rapidOutcomes[a.Outcome])
		r.last, r.lastV = at, v
		if r.onRecord != nil {
			r.onRecord(at, v)
		}
		return fmt.Sprintf("record %s/%s %d: %v %v %v next=%v", at.Provider, at.Connection, a.Outcome, v.Reason, v.Breaker, v.Conn, v.Next)
	case 3:
		p := e.provs[a.Pick%len(e.provs)].id
		n, _ := e.ResetBreakers(r.now, p)
		if r.onReset != nil {
			r.onReset(p)
		}
		return fmt.Sprintf("reset %s %d", p, n)
	case 4:
		res, _ := e.ClearCooldowns(r.now, nil, true, "")
		return fmt.Sprintf("clear %+v", res)
	case 5:
		p := &e.provs[a.Pick%len(e.provs)]
		c := p.conns[a.Pick%len(p.conns)].id
		ok, _ := e.ResetConnection(r.now, ConnRef{p.id, c})
		return fmt.Sprintf("reset-conn %s/%s %v", p.id, c, ok)
	default:
		e.Refresh(r.now)
		return "refresh"
	}
}

// checkInvariants pins the safety rules after every step.
func checkInvariants(t *rapid.T, r *runner, a action, before State, line string) {
	e := r.e
	now := r.now
	// A terminal connection is never selected (docs/cooldowns.md).
	if a.Kind == 1 {
		for _, c := range r.sel.Candidates {
			if connOf(e, c.Provider, c.Connection).Status.Terminal() {
				t.Fatalf("terminal connection %s/%s selected: %s", c.Provider, c.Connection, line)
			}
		}
	}
	for i := range e.provs {
		p := &e.provs[i]
		b := &p.breaker
		o := e.opts(p)
		// OPEN admits nothing before its deadline (docs/breaker.md).
		if b.State == Open && now < b.openUntil(o) {
			if _, err := e.tryBegin(now, p.id, p.conns[0].id, "m1"); err == nil {
				t.Fatalf("OPEN breaker %s admitted before its deadline", p.id)
			}
		}
		// HALF_OPEN never hands out more than the probe budget.
		if b.State == HalfOpen && b.ProbesLeft+len(b.Probes) > max(1, o.p.HalfOpenRequests) {
			t.Fatalf("breaker %s: %d free + %d taken permits > budget %d", p.id, b.ProbesLeft, len(b.Probes), o.p.HalfOpenRequests)
		}
		for j := range p.conns {
			c := &p.conns[j]
			if c.st.Status.Terminal() && c.st.RateLimitedUntil != 0 {
				t.Fatalf("terminal connection %s/%s carries a cooldown", p.id, c.id)
			}
			for _, l := range c.locks {
				if l.FailureCount < 1 {
					t.Fatalf("lockout with failureCount %d kept", l.FailureCount)
				}
			}
		}
	}
	// A 429 never moves breaker counters (docs/breaker.md#trip-statuses).
	if a.Kind == 2 && r.last.Provider != "" && rapidOutcomes[a.Outcome].Status == 429 {
		for _, pr := range before.Providers {
			if pr.Provider != r.last.Provider {
				continue
			}
			after := e.provs[e.provIdx[pr.Provider]].breaker
			if pr.Breaker.FailureCount != after.FailureCount || pr.Breaker.State != after.State || pr.Breaker.OpenCycles != after.OpenCycles {
				t.Fatalf("a 429 moved breaker %s: %v/%d → %v/%d (%s)", pr.Provider, pr.Breaker.State, pr.Breaker.FailureCount, after.State, after.FailureCount, line)
			}
		}
	}
}

func TestRapidInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := newRunner(t, func(s *Settings) {
			s.ModelLockout.Enabled = rapid.Bool().Draw(t, "lockout")
			s.ProviderCooldown.Enabled = rapid.Bool().Draw(t, "window")
		}, 1)
		acts := rapid.SliceOfN(actionGen(), 50, 300).Draw(t, "actions")
		for _, a := range acts {
			var before State
			if a.Kind == 2 {
				r.e.Refresh(r.now)
				before = r.e.Snapshot(r.now)
			}
			line := r.step(a)
			checkInvariants(t, r, a, before, line)
		}
	})
}

func TestRapidSnapshotRestoreChangesNoDecision(t *testing.T) {
	// docs/store.md#restore: snapshot → restore at any step changes no later
	// decision.
	rapid.Check(t, func(t *rapid.T) {
		acts := rapid.SliceOfN(actionGen(), 50, 300).Draw(t, "actions")
		k := rapid.IntRange(0, len(acts)-1).Draw(t, "restart")
		a := newRunner(t, nil, 3)
		for _, x := range acts[:k] {
			a.step(x)
		}
		b := a.clone(t)
		for i, x := range acts[k:] {
			la, lb := a.step(x), b.step(x)
			if la != lb {
				t.Fatalf("after restore at step %d, step %d differs:\n orig: %s\n rest: %s", k, k+i, la, lb)
			}
		}
		if sa, sb := a.e.Snapshot(a.now), b.e.Snapshot(b.now); !reflect.DeepEqual(sa, sb) {
			t.Fatalf("final states differ after restore at %d", k)
		}
	})
}

func TestRapidLazyReadsEqualTicking(t *testing.T) {
	// docs/breaker.md lazy recovery: reading state lazily at t equals having ticked
	// (Refresh) at every step up to t.
	rapid.Check(t, func(t *rapid.T) {
		acts := rapid.SliceOfN(actionGen(), 50, 300).Draw(t, "actions")
		lazy, ticked := newRunner(t, nil, 5), newRunner(t, nil, 5)
		for i, x := range acts {
			if x.Kind == 6 {
				continue // the lazy engine never ticks
			}
			ticked.e.Refresh(ticked.now)
			if la, lt := lazy.step(x), ticked.step(x); la != lt {
				t.Fatalf("step %d differs:\n lazy:   %s\n ticked: %s", i, la, lt)
			}
		}
		if sl, st := lazy.e.Snapshot(lazy.now), ticked.e.Snapshot(ticked.now); !reflect.DeepEqual(sl, st) {
			t.Fatalf("states differ:\n lazy:   %+v\n ticked: %+v", sl, st)
		}
	})
}

func TestRapidLazySelectEqualsFull(t *testing.T) {
	// docs/model.md#lazy-selection: a lazy Select (completed by SelectRest when
	// the caller looks further) decides, draws and changes state exactly as
	// a full listing: the same lines, change records and final state.
	rapid.Check(t, func(t *rapid.T) {
		acts := rapid.SliceOfN(actionGen(), 50, 300).Draw(t, "actions")
		lazy, full := newRunner(t, nil, 7), newRunner(t, nil, 7)
		full.full = true
		lazy.firstOnly, full.firstOnly = true, true
		for i, x := range acts {
			if ll, lf := lazy.step(x), full.step(x); ll != lf {
				t.Fatalf("step %d differs:\n lazy: %s\n full: %s", i, ll, lf)
			}
			if cl, cf := lazy.e.Changes(), full.e.Changes(); !reflect.DeepEqual(cl, cf) {
				t.Fatalf("step %d: change records differ:\n lazy: %+v\n full: %+v", i, cl, cf)
			}
		}
		if sl, sf := lazy.e.Snapshot(lazy.now), full.e.Snapshot(full.now); !reflect.DeepEqual(sl, sf) {
			t.Fatalf("states differ:\n lazy: %+v\n full: %+v", sl, sf)
		}
	})
}

func TestRapidDeterministicChanges(t *testing.T) {
	// docs/model.md#determinism: same inputs and seed give identical change records.
	rapid.Check(t, func(t *rapid.T) {
		acts := rapid.SliceOfN(actionGen(), 50, 200).Draw(t, "actions")
		seed := rapid.Uint64().Draw(t, "seed")
		collect := func() []Change {
			r := newRunner(t, nil, seed)
			var all []Change
			for _, x := range acts {
				r.step(x)
				all = append(all, cloneChanges(r.e.Changes())...)
			}
			return all
		}
		if a, b := collect(), collect(); !reflect.DeepEqual(a, b) {
			t.Fatal("same seed and inputs produced different change records")
		}
	})
}

func cloneChanges(cs []Change) []Change {
	out := make([]Change, len(cs))
	for i, c := range cs {
		c.Breaker = c.Breaker.clone()
		c.Window = c.Window.clone()
		out[i] = c
	}
	return out
}

func TestRapidChangesDescribeState(t *testing.T) {
	// The change records are complete: folding them into the initial state
	// gives the engine's state (what the store relies on).
	rapid.Check(t, func(t *rapid.T) {
		acts := rapid.SliceOfN(actionGen(), 50, 300).Draw(t, "actions")
		r := newRunner(t, func(s *Settings) { s.ModelLockout.Enabled = true; s.ProviderCooldown.Enabled = true }, 9)
		folded := r.e.Snapshot(r.now)
		r.e.Changes()
		for _, x := range acts {
			r.step(x)
			folded.Apply(r.e.Changes())
		}
		got := r.e.Snapshot(r.now)
		folded.Apply(r.e.Changes())
		for i := range got.Connections {
			got.Connections[i].InFlight = 0
		}
		if !reflect.DeepEqual(normalizeState(folded), normalizeState(got)) {
			t.Fatalf("folded changes:\n%+v\nengine state:\n%+v", folded, got)
		}
	})
}

// normalizeState maps empty and nil slices alike for comparison.
func normalizeState(s State) State {
	if len(s.Pins) == 0 {
		s.Pins = nil
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

func TestRapidConcurrentFailuresRaiseLevelOnce(t *testing.T) {
	// docs/cooldowns.md thundering herd: N concurrent failures on one connection raise
	// backoffLevel once.
	rapid.Check(t, func(t *rapid.T) {
		r := newRunner(t, nil, 1)
		n := rapid.IntRange(1, 30).Draw(t, "n")
		start := at(rapid.Int64Range(0, hour).Draw(t, "start"))
		var as []Attempt
		for i := 0; i < n; i++ {
			as = append(as, beginOn(t, r.e, start, "a", "k1", "m1"))
		}
		before := connOf(r.e, "a", "k1").BackoffLevel
		now := start
		for i := range as {
			now = now.Add(rapid.Int64Range(0, 500).Draw(t, "gap"))
			o := rapidOutcomes[rapid.SampledFrom([]int{2, 3, 4, 5, 6, 7}).Draw(t, "outcome")]
			r.e.Record(now, &as[i], o)
		}
		if got := connOf(r.e, "a", "k1").BackoffLevel; got > before+1 {
			t.Fatalf("%d concurrent failures raised the level from %d to %d", n, before, got)
		}
	})
}

func TestRapidSuccessDecayHalves(t *testing.T) {
	// docs/lockouts.md: a healthy response halves a covering lockout's failureCount
	// (floor) and removes it at 0.
	rapid.Check(t, func(t *rapid.T) {
		r := newRunner(t, func(s *Settings) { s.ModelLockout.Enabled = true }, 1)
		n := rapid.IntRange(1, 12).Draw(t, "failures")
		for i := 0; i < n; i++ {
			hit(t, r.e, at(int64(i)), "a", "k1", "m1", status(502))
		}
		key := LockKey{Name: "m1", Exact: true}
		count := n
		for count > 0 {
			hit(t, r.e, at(100), "a", "k1", "m1", status(200))
			count /= 2
			i := locksOf(r.e, "a", "k1").find(key)
			if count == 0 && i >= 0 {
				t.Fatal("lockout kept at failureCount 0")
			}
			if count > 0 && (i < 0 || locksOf(r.e, "a", "k1")[i].FailureCount != count) {
				t.Fatalf("want failureCount %d", count)
			}
		}
	})
}
