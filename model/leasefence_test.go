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

// docs/leases.md#capacity: a lease acquire offers the free eligible
// connections of the key in selection order, counts eligible and free ones,
// and retries at the earliest expiry of a lease holding an eligible
// connection; nothing eligible at all is the normal routing error.
func TestLeaseAcquireOffer(t *testing.T) {
	p := oneProvider("p", ProfileAPIKey, 3)
	e := mustEngine(t, topo(p), nil)
	r := route(t, e, "p/m1")
	k := func(id string) ConnRef { return ConnRef{"p", id} }
	all := []ConnRef{k("k1"), k("k2"), k("k3")}
	var sel Selection
	o, err := e.LeaseAcquire(at(0), r, all, []ConnRef{k("k1"), k("k2")}, []Time{at(sec(30)), at(sec(10))}, &sel)
	if err != nil || o.Eligible != 3 || o.Free != 1 || o.Earliest != at(sec(10)) {
		t.Fatalf("offer %+v err %v, want 3 eligible, 1 free, earliest k2's expiry", o, err)
	}
	if got := candidates(&sel); len(got) != 1 || got[0] != "p/k3" {
		t.Fatalf("targets %v, want k3", got)
	}
	o.NoteExpiry(at(sec(5)))
	o.NoteExpiry(0)
	if o.Earliest != at(sec(5)) {
		t.Fatalf("an earlier expiry the arbiter reports counts: %v", o.Earliest)
	}
	for _, c := range all {
		hit(t, e, at(0), "p", c.Connection, "m1", withHeader(429, "retry-after", "20"))
	}
	if _, err := e.LeaseAcquire(at(sec(1)), r, all, nil, nil, &sel); err == nil {
		t.Fatal("nothing eligible: the normal routing error, not a lease dispute")
	}
}

// docs/leases.md#fence: a managed request is checked before its first
// dispatch in this order: a combo cannot be leased, then the fence (no
// active lease, another generation, another key), then the leased
// connection must still be one of the key's allowed connections and serve
// the route's provider.
func TestLeaseAdmitOrder(t *testing.T) {
	p := oneProvider("p", ProfileAPIKey, 2)
	e := mustEngine(t, topo(p), nil)
	r := route(t, e, "p/m1")
	k1 := ConnRef{"p", "k1"}
	row := LeaseRow{OwnerHash: "o", APIKeyID: "key", Conn: k1, Generation: 3, ExpiresAt: at(sec(60))}
	claim := func(gen int64, key string) *LeaseClaim {
		return &LeaseClaim{OwnerHash: "o", Generation: gen, APIKeyID: key}
	}
	combo := r
	combo.Combo = "c"
	other := r
	other.Provider = "q"
	cases := []struct {
		name    string
		route   *Route
		row     *LeaseRow
		claim   *LeaseClaim
		allowed []ConnRef
		want    Code
	}{
		{"a combo, before the fence", &combo, nil, claim(3, "key"), nil, CodeLeaseContextInvalid},
		{"no lease", &r, nil, claim(3, "key"), []ConnRef{k1}, CodeLeaseRequired},
		{"another generation", &r, &row, claim(2, "key"), []ConnRef{k1}, CodeLeaseFenceStale},
		{"another key", &r, &row, claim(3, "other"), []ConnRef{k1}, CodeLeaseAuthMismatch},
		{"no longer allowed", &r, &row, claim(3, "key"), []ConnRef{{"p", "k2"}}, CodeLeaseKeyConfig},
		{"another provider", &other, &row, claim(3, "key"), []ConnRef{k1}, CodeLeaseConnMismatch},
		{"valid", &r, &row, claim(3, "key"), []ConnRef{k1}, ""},
	}
	for _, c := range cases {
		le := LeaseAdmit(at(sec(1)), c.route, c.row, c.claim, c.allowed)
		var got Code
		if le != nil {
			got = le.Code
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	if le := LeaseAdmit(at(sec(60)), &r, &row, claim(3, "key"), []ConnRef{k1}); le == nil || le.Code != CodeLeaseRequired {
		t.Errorf("an expired lease is no lease: %v", le)
	}
}

// docs/leases.md#capacity: an attempt without a lease whose connection was
// leased while it queued is refused LEASE_CAPACITY_UNAVAILABLE, told to
// come back when that lease ends (1 s when its end is unknown); an attempt
// on a connection no lease holds goes out.
func TestLeasedWhileQueued(t *testing.T) {
	a := &Attempt{Provider: "p", Connection: "k2", Model: "m1"}
	held := []ConnRef{{"p", "k1"}, {"p", "k2"}}
	until := []Time{at(sec(5)), at(sec(30))}
	if err := LeasedWhileQueued(at(0), &Attempt{Provider: "p", Connection: "k3", Model: "m1"}, held, until); err != nil {
		t.Fatalf("a connection no lease holds: %v", err)
	}
	err := LeasedWhileQueued(at(sec(10)), a, held, until)
	if err == nil || err.Code != CodeLeaseCapacity || err.RetryAfterMs != 20_000 {
		t.Fatalf("leased while queued: %+v, want LEASE_CAPACITY_UNAVAILABLE retry 20 s (k2's lease, not k1's)", err)
	}
	if err := LeasedWhileQueued(at(sec(10)), a, held, nil); err == nil || err.RetryAfterMs != 1000 {
		t.Fatalf("unknown end: %+v, want retry 1 s", err)
	}
}
