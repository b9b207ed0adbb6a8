package store

import (
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/internal/pgtest"
	"github.com/breakwater-gw/breakwater/model"
)

// docs/cooldowns.md#egress-buckets / docs/admission.md across replicas: the egress IP and the rateLimitProtection
// switch survive a merge (they used to be dropped by the three-way merge).
func TestMergeKeepsEgressAndProtection(t *testing.T) {
	anc := model.Conn{}
	mine := model.Conn{EgressIP: "203.0.113.7", EgressAt: 1000, RateLimitProtection: model.ToggleOn}
	theirs := model.Conn{BackoffLevel: 1}
	got := mergeConn3(anc, mine, theirs)
	if got.EgressIP != "203.0.113.7" || got.EgressAt != 1000 || got.RateLimitProtection != model.ToggleOn || got.BackoffLevel != 1 {
		t.Fatalf("three-way merge lost a field: %+v", got)
	}
	later := model.Conn{EgressIP: "198.51.100.1", EgressAt: 2000, RateLimitProtection: model.ToggleOff}
	if got := mergeConn3(anc, mine, later); got.EgressIP != "198.51.100.1" || got.RateLimitProtection != model.ToggleOff {
		t.Fatalf("conflict: the later sighting and off win: %+v", got)
	}
	a, b := mergeConn(mine, later), mergeConn(later, mine)
	if a.EgressIP != b.EgressIP || a.EgressIP != "198.51.100.1" || a.RateLimitProtection != b.RateLimitProtection {
		t.Fatalf("two-way merge must be commutative: %+v vs %+v", a, b)
	}
}

// docs/admission.md / docs/classification.md / docs/store.md#restore: POST /api/rate-limits' switch and the last
// known egress IP live in the connection's state, so the Postgres store
// keeps them across a restart.
func TestPostgresKeepsProtectionAndEgress(t *testing.T) {
	url := pgtest.NewDB(t)
	e := newEngine(t)
	pg := openPG(t, url, nil)
	if _, err := pg.Load(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	now := model.TimeOf(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ref := model.ConnRef{Provider: "g", Connection: "k1"}
	if err := e.SetRateLimitProtection(now, ref, true); err != nil {
		t.Fatal(err)
	}
	if err := e.SetEgressIP(now, model.ConnRef{Provider: "a", Connection: "k2"}, "203.0.113.7"); err != nil {
		t.Fatal(err)
	}
	pg.Apply(e.Changes())
	if err := pg.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	pg2 := openPG(t, url, nil)
	st, err := pg2.Load(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	e2 := restoredEngine(t, st)
	if on, queued, _ := e2.RateLimitProtection(ref); !on || !queued {
		t.Fatalf("rateLimitProtection lost across a restart: %v %v", on, queued)
	}
	for _, r := range e2.Snapshot(now).Connections {
		if r.Provider == "a" && r.Connection == "k2" && r.Conn.EgressIP != "203.0.113.7" {
			t.Fatalf("egress IP lost across a restart: %+v", r.Conn)
		}
	}
}

// docs/api.md#operator-actions across replicas and restarts: the credentials retired while
// terminal survive a merge (a dropped list would let a replica, or a
// restart, send a banned key again).
func TestMergeKeepsRetired(t *testing.T) {
	anc := model.Conn{}
	mine := model.Conn{Retired: "aa=expired"}
	theirs := model.Conn{BackoffLevel: 2}
	got := mergeConn3(anc, mine, theirs)
	if got.Retired != "aa=expired" || got.BackoffLevel != 2 {
		t.Fatalf("three-way merge lost a field: %+v", got)
	}
	other := model.Conn{Retired: "dd=banned"}
	a, b := mergeConn(mine, other), mergeConn(other, mine)
	if a != b || a.Retired != "aa=expired,dd=banned" {
		t.Fatalf("two-way merge: both retired, commutative: %+v vs %+v", a, b)
	}
}
