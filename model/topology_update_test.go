package model

import (
	"reflect"
	"strings"
	"testing"
)

func inflightOf(e *Engine, provider, conn string) int {
	p := &e.provs[e.provIdx[provider]]
	return p.conns[p.connIdx[conn]].inflight
}

// Rule: a topology update keeps the state of the connections that stay
// (status, cooldown, in-flight count) even when their index moves, drops
// the ones that are gone, and an attempt begun before the update records
// on its own connection, found again by id.
func TestUpdateTopologyKeepsStateOfConnectionsThatStay(t *testing.T) {
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 3)), nil)
	hit(t, e, at(0), "p", "k1", "m1", withHeader(429, "Retry-After", "60"))
	cooling := *connOf(e, "p", "k1")
	if cooling.RateLimitedUntil <= at(0) {
		t.Fatalf("k1 should cool after a 429: %+v", cooling)
	}
	inflight3 := beginOn(t, e, at(1), "p", "k3", "m1") // in flight across the update
	inflight2 := beginOn(t, e, at(1), "p", "k2", "m1") // its connection is removed

	// k2 goes away; k3 moves from index 2 to index 0; k1 moves to index 1
	// and takes a new cap; a new k4 arrives.
	next := ProviderConfig{ID: "p", Profile: ProfileAPIKey, Models: []string{"m1", "m2"}, Connections: []ConnectionConfig{
		{ID: "k3"}, {ID: "k1", MaxConcurrent: 9}, {ID: "k4"}}}
	if err := e.UpdateTopology(topo(next)); err != nil {
		t.Fatal(err)
	}
	if got := *connOf(e, "p", "k1"); !reflect.DeepEqual(got, cooling) {
		t.Fatalf("k1's cooldown was lost: %+v, want %+v", got, cooling)
	}
	if p := &e.provs[e.provIdx["p"]]; p.conns[p.connIdx["k1"]].cfg.MaxConcurrent != 9 {
		t.Fatalf("k1 did not take its new config")
	}
	if inflightOf(e, "p", "k3") != 1 {
		t.Fatalf("k3's in-flight attempt was lost")
	}
	if _, ok := e.provs[0].connIdx["k2"]; ok {
		t.Fatalf("k2 is still there")
	}
	// The attempt on k3 (index 2 before, 0 now) records on k3.
	e.Record(at(2), &inflight3, withHeader(429, "Retry-After", "60"))
	if inflightOf(e, "p", "k3") != 0 || connOf(e, "p", "k3").RateLimitedUntil <= at(2) {
		t.Fatalf("k3's outcome did not land on k3: %+v", *connOf(e, "p", "k3"))
	}
	if connOf(e, "p", "k4").RateLimitedUntil != 0 {
		t.Fatalf("k4 (new, at k3's old index) took another connection's outcome")
	}
	// The attempt on the removed k2 changes nothing and stops.
	before := *connOf(e, "p", "k4")
	v := e.Record(at(2), &inflight2, status(500))
	if v.Next != NextStop || !strings.Contains(v.Message, "removed") || !reflect.DeepEqual(*connOf(e, "p", "k4"), before) {
		t.Fatalf("removed connection's outcome: %+v", v)
	}
}

// Rule: an invalid topology changes nothing.
func TestUpdateTopologyInvalidChangesNothing(t *testing.T) {
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), nil)
	hit(t, e, at(0), "p", "k1", "m1", withHeader(429, "Retry-After", "60"))
	before := *connOf(e, "p", "k1")
	bad := oneProvider("p", ProfileAPIKey, 2)
	bad.Connections[1].ID = "k1" // duplicate id
	if err := e.UpdateTopology(topo(bad)); err == nil {
		t.Fatal("a duplicate connection id was accepted")
	}
	if len(e.provs[0].conns) != 2 || !reflect.DeepEqual(*connOf(e, "p", "k1"), before) {
		t.Fatal("a refused update changed the engine")
	}
}
