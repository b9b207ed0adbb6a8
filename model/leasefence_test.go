package model

import "testing"

// docs/leases.md#moving: a lease whose connection the rules keep out (here
// a cooldown) moves to another free eligible connection of the key, never
// to one leased (its own included) or outside allowedConnections; a
// connection that serves keeps its lease.
func TestLeaseMove(t *testing.T) {
	p := oneProvider("p", ProfileAPIKey, 4)
	e := mustEngine(t, topo(p), nil)
	r := route(t, e, "p/m1")
	k := func(id string) ConnRef { return ConnRef{"p", id} }
	allowed := []ConnRef{k("k1"), k("k2"), k("k3")}
	held := []ConnRef{k("k1"), k("k2")} // k1 is ours, k2 another owner's
	var sel Selection
	if e.LeaseMove(at(0), r, k("k1"), allowed, held, &sel) || len(sel.Candidates) != 0 {
		t.Fatalf("a serving leased connection keeps its lease: %+v", sel.Candidates)
	}
	hit(t, e, at(0), "p", "k1", "m1", withHeader(429, "retry-after", "20"))
	if !e.LeaseMove(at(sec(1)), r, k("k1"), allowed, held, &sel) {
		t.Fatal("a cooling leased connection must be moved")
	}
	if got := candidates(&sel); len(got) != 1 || got[0] != "p/k3" {
		t.Fatalf("move targets %v, want only k3 (k2 leased, k4 not allowed)", got)
	}
	hit(t, e, at(sec(1)), "p", "k3", "m1", withHeader(429, "retry-after", "20"))
	if !e.LeaseMove(at(sec(2)), r, k("k1"), allowed, held, &sel) || len(sel.Candidates) != 0 {
		t.Fatalf("nowhere to go: the request keeps its lease: %+v", sel.Candidates)
	}
}
