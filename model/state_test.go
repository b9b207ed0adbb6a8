package model

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestSnapshotJSONRoundTrip(t *testing.T) {
	// The state is a plain value the store can persist as JSON and restore.
	e := mustEngine(t, topo(oneProvider("p", ProfileLocal, 2)), func(s *Settings) { s.ModelLockout.Enabled = true })
	hit(t, e, at(0), "p", "k1", "m2", status(404))
	hit(t, e, at(0), "p", "k2", "m1", status(401))
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	s := e.Snapshot(at(1))
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalizeState(s), normalizeState(back)) {
		t.Fatalf("JSON round trip changed the state:\n%s", b)
	}
	for _, want := range []string{`"state":"OPEN"`, `"lastErrorType":"auth_error"`, `"reason":"not_found"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("snapshot JSON lacks %s: %s", want, b)
		}
	}
}

func TestDurableDropsProcessLocalState(t *testing.T) {
	// docs/breaker.md#half-open/14: in-flight attempts and outstanding probes die
	// with the process; a restored HALF_OPEN breaker gets its probe budget back.
	e := mustEngine(t, topo(oneProvider("p", ProfileLocal, 2)), nil)
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	beginOn(t, e, at(sec(15)), "p", "k2", "m1") // takes the only probe permit
	s := e.Snapshot(at(sec(15)))
	d := s.Durable(&e.settings, func(string) Profile { return ProfileLocal })
	if d.Providers[0].Breaker.ProbesLeft != 1 || len(d.Providers[0].Breaker.Probes) != 0 {
		t.Fatalf("durable breaker: %+v", d.Providers[0].Breaker)
	}
	for _, c := range d.Connections {
		if c.InFlight != 0 {
			t.Fatalf("durable state keeps in-flight attempts: %+v", c)
		}
	}
	if s.Providers[0].Breaker.ProbesLeft != 0 {
		t.Fatal("Durable must not modify the snapshot it copies")
	}
	e2 := mustEngine(t, topo(oneProvider("p", ProfileLocal, 2)), nil)
	if err := e2.Restore(d); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.tryBegin(at(sec(15)), "p", "k1", "m1"); err != nil {
		t.Fatalf("restored HALF_OPEN must admit a probe: %v", err)
	}
}

func TestRestoreSkipsUnknownRecords(t *testing.T) {
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	s := e.Snapshot(at(0))
	s.Providers = append(s.Providers, ProviderRecord{Provider: "gone"})
	s.Connections = append(s.Connections, ConnectionRecord{Provider: "p", Connection: "gone"})
	e2 := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
	err := e2.Restore(s)
	var re *RestoreError
	if !errors.As(err, &re) || len(re.Skipped) != 2 {
		t.Fatalf("restore error: %v", err)
	}
	if connOf(e2, "p", "k1").BackoffLevel != 1 {
		t.Fatal("known records must still be restored")
	}
}

func TestTopologyValidation(t *testing.T) {
	ok := oneProvider("p", ProfileAPIKey, 1)
	bad := func(mut func(*Topology)) error {
		tp := topo(ok)
		tp.Providers[0].Connections = append([]ConnectionConfig(nil), ok.Connections...)
		mut(&tp)
		_, err := NewEngine(tp, DefaultSettings(), rand.New(rand.NewPCG(1, 1)))
		return err
	}
	cases := map[string]func(*Topology){
		"providers[0].id":                func(t *Topology) { t.Providers[0].ID = "" },
		"providers[1].id":                func(t *Topology) { t.Providers = append(t.Providers, ok) },
		"providers[0].connections":       func(t *Topology) { t.Providers[0].Connections = nil },
		"providers[0].connections[1].id": func(t *Topology) { t.Providers[0].Connections = append(t.Providers[0].Connections, ok.Connections[0]) },
		"providers[0].dailyResetUtc":     func(t *Topology) { t.Providers[0].DailyResetUTC = "25:00" },
		"combos[0].targets[0].provider": func(t *Topology) {
			t.Combos = []ComboConfig{{ID: "c", Targets: []ComboTarget{{Provider: "x", Model: "m1"}}}}
		},
		"combos[0].targets[0].model": func(t *Topology) {
			t.Combos = []ComboConfig{{ID: "c", Targets: []ComboTarget{{Provider: "p", Model: "zz"}}}}
		},
		"combos[0].targets[0].connection": func(t *Topology) {
			t.Combos = []ComboConfig{{ID: "c", Targets: []ComboTarget{{Provider: "p", Model: "m1", Connection: "zz"}}}}
		},
		"combos[0].targets":                  func(t *Topology) { t.Combos = []ComboConfig{{ID: "c"}} },
		"providers[0].connections[0].weight": func(t *Topology) { t.Providers[0].Connections[0].Weight = -1 },
	}
	for field, mut := range cases {
		err := bad(mut)
		var te *TopologyError
		if !errors.As(err, &te) || te.Field != field {
			t.Errorf("want a TopologyError on %s, got %v", field, err)
		}
	}
}

func TestHealthViews(t *testing.T) {
	// docs/README.md#troubleshooting: breakers and every connection's cooldown in one place; reads
	// refresh expired state.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), func(s *Settings) { s.ModelLockout.Enabled = true })
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	hit(t, e, at(0), "p", "k2", "m2", status(404))
	pv := e.Providers(at(sec(1)))
	if len(pv) != 1 || pv[0].State != Closed || pv[0].FailureCount != 1 {
		t.Fatalf("providers: %+v", pv)
	}
	cv := e.Connections(at(sec(1)), "p")
	if len(cv) != 2 || cv[0].Status != StatusCooldown || cv[0].CooldownRemainingMs != sec(2) || cv[0].BackoffLevel != 1 {
		t.Fatalf("k1 view: %+v", cv[0])
	}
	if len(cv[1].Lockouts) != 1 || cv[1].Lockouts[0].Model != "m2" || cv[1].Lockouts[0].Reason != ReasonNotFound {
		t.Fatalf("k2 lockouts: %+v", cv[1])
	}
	if got := e.Lockouts(at(sec(1))); len(got) != 2 {
		t.Fatalf("lockouts: %+v", got)
	}
	if n := e.ClearAllLockouts(at(sec(1))); n != 2 || len(e.Lockouts(at(sec(1)))) != 0 {
		t.Fatalf("clear all lockouts: %d", n)
	}
}

func TestClearCooldownsSkipsTerminal(t *testing.T) {
	// docs/api.md#cooldown-manager: the cooldown manager clears cooldowns and lockouts, shows
	// terminal states but never clears them.
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 3)), func(s *Settings) { s.ModelLockout.Enabled = true })
	hit(t, e, at(0), "p", "k1", "m1", status(503))
	hit(t, e, at(0), "p", "k2", "m1", withBody(402, "insufficient credits"))
	res, err := e.ClearCooldowns(at(1), nil, true, "p")
	if err != nil || res != (ClearResult{Cleared: 1, Unchanged: 1, SkippedTerminal: 1, LockoutsCleared: 1}) {
		t.Fatalf("clear: %+v %v", res, err)
	}
	if connOf(e, "p", "k2").Status != StatusCreditsExhausted {
		t.Fatal("cooldown manager cleared a terminal state")
	}
	if _, err := e.ClearCooldowns(at(1), []ConnRef{{"p", "nope"}}, false, ""); err == nil {
		t.Fatal("unknown connection must be an error")
	}
}

func TestEnumTextRoundTrip(t *testing.T) {
	// Names used in the API, trace and database are spelled once and parse back.
	for _, s := range []BreakerState{Closed, Degraded, Open, HalfOpen} {
		b, _ := s.MarshalText()
		var back BreakerState
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("%v: %v", s, err)
		}
	}
	for r := ReasonNone + 1; r <= ReasonUnknown; r++ {
		back, err := ParseReason(r.String())
		if err != nil || back != r {
			t.Errorf("reason %v: %v", r, err)
		}
	}
	for _, name := range []string{"fill-first", "priority", "weighted", "round-robin", "random", "p2c", "least-used"} {
		if s, err := ParseStrategy(name); err != nil || s.String() != name {
			t.Errorf("strategy %s: %v", name, err)
		}
	}
	if _, err := ParseProfile("cookie"); err == nil {
		t.Error("unknown profile must fail")
	}
	if _, err := ParseConnRef("glm/k1"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"glm", "/k1", "glm/", "a/b/c"} {
		if _, err := ParseConnRef(bad); err == nil {
			t.Errorf("ParseConnRef(%q) must fail", bad)
		}
	}
}

func TestUntilDailyReset(t *testing.T) {
	// docs/lockouts.md#quota-reset: the provider's dailyResetUtc, never host midnight.
	cases := []struct {
		now      Time
		resetMin int
		want     int64
	}{
		{at(0), 0, 24 * hour},                   // exactly at the reset: the next one
		{at(1), 0, 24*hour - 1},                 // just after
		{at(23 * hour), 0, hour},                // an hour before midnight
		{at(hour), 90, 30 * minute},             // 01:00 → 01:30
		{at(2 * hour), 90, 24*hour - 30*minute}, // 02:00 → next day 01:30
	}
	for _, c := range cases {
		if got := untilDailyReset(c.now, c.resetMin); got != c.want {
			t.Errorf("untilDailyReset(%d, %d) = %d, want %d", c.now-t0, c.resetMin, got, c.want)
		}
	}
}

func TestSetCredentialRetiresATerminalKey(t *testing.T) {
	// docs/api.md#operator-actions: a credentials change clears a terminal state. The state
	// outlives the change and is shared (it is stored; the runtime key is
	// not): a process that holds the old, banned key — a restart on the
	// config file, a replica that never got the new key — must keep it
	// terminal, while the process with the new key serves; neither flips
	// the shared state for the other.
	tp := topo(oneProvider("p", ProfileAPIKey, 1))
	e := mustEngine(t, tp, nil)
	ref := ConnRef{"p", "k1"}
	if ch, err := e.SetCredential(at(0), ref, "fp-file"); err != nil || ch {
		t.Fatalf("the first key is adopted, the state unchanged: %v %v", ch, err)
	}
	hit(t, e, at(0), "p", "k1", "m1", withBody(403, `{"error":{"message":"Your account has been deactivated"}}`))
	if c := connOf(e, "p", "k1"); c.Status != StatusBanned {
		t.Fatalf("banned: %v", c.Status)
	}
	// A second process on the same state, with the file key.
	other := mustEngine(t, tp, nil)
	// PUT a new key on the first: active, every error cleared, the old key
	// retired.
	if ch, _ := e.SetCredential(at(hour), ref, "fp-runtime"); !ch {
		t.Fatal("a new key changes the state")
	}
	if c := connOf(e, "p", "k1"); c.Status != StatusActive || c.LastErrorType != ReasonNone || c.Retired != "fp-file=banned" {
		t.Fatalf("the new key starts over: %+v", *c)
	}
	if got := candidates(selectAt(t, e, at(hour), "p/m1")); len(got) != 1 {
		t.Fatalf("the new key serves: %v", got)
	}
	// The other process (a restart on the file, or a replica) gets the
	// shared state and holds the retired key: terminal for it.
	if err := other.Restore(e.Snapshot(at(hour))); err != nil {
		t.Fatal(err)
	}
	other.SetCredential(at(hour), ref, "fp-file")
	if got := candidates(selectAt(t, other, at(hour), "p/m1")); len(got) != 0 {
		t.Fatalf("the retired key is never sent: %v", got)
	}
	if v := other.Connections(at(hour), "p")[0]; v.Status != StatusBanned {
		t.Fatalf("shown banned where the old key is held: %+v", v)
	}
	if c := connOf(other, "p", "k1"); c.Status != StatusActive {
		t.Fatalf("the shared state is not flipped: %+v", *c)
	}
	// A key retired later (another replica's PUT) is picked up when the
	// shared lists are re-read.
	third := mustEngine(t, tp, nil)
	third.SetCredential(at(0), ref, "fp-file")
	if err := third.Restore(e.Snapshot(at(hour))); err != nil {
		t.Fatal(err)
	}
	third.RefreshCredentials()
	if got := candidates(selectAt(t, third, at(hour), "p/m1")); len(got) != 0 {
		t.Fatalf("after a remote retire: %v", got)
	}
	// The operator's reset vouches for the key a process holds.
	if ch, _ := other.ResetConnection(at(2*hour), ref); !ch {
		t.Fatal("reset")
	}
	if got := candidates(selectAt(t, other, at(2*hour), "p/m1")); len(got) != 1 || connOf(other, "p", "k1").Retired != "" {
		t.Fatalf("reset, the key usable again and unretired: %v %q", got, connOf(other, "p", "k1").Retired)
	}
}
