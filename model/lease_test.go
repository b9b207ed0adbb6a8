package model

import (
	"strings"
	"testing"
)

const testOwner = "bwl_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestLeaseOwnerForm(t *testing.T) {
	// docs/leases.md / docs/leases.md: owner = bwl_ + 43 base64url characters;
	// anything else is LEASE_CONTEXT_INVALID, an empty one REQUIRED, and the
	// message never echoes the presented value.
	ok := []string{testOwner, "bwl_" + strings.Repeat("-", 43), "bwl_" + strings.Repeat("_", 42) + "Z"}
	for _, s := range ok {
		if err := ParseLeaseOwner(s); err != nil {
			t.Errorf("%q refused: %v", s, err)
		}
	}
	bad := map[string]Code{
		"":                                         CodeLeaseContextRequired,
		"vlo_" + strings.Repeat("a", 43):           CodeLeaseContextInvalid, // the reference's prefix is not ours
		"bwl_" + strings.Repeat("a", 42):           CodeLeaseContextInvalid,
		"bwl_" + strings.Repeat("a", 44):           CodeLeaseContextInvalid,
		"bwl_" + strings.Repeat("a", 42) + "=":     CodeLeaseContextInvalid, // padding
		"bwl_" + strings.Repeat("a", 42) + "+":     CodeLeaseContextInvalid, // std base64
		"bwl_" + strings.Repeat("a", 42) + "é"[:1]: CodeLeaseContextInvalid,
		"BWL_" + strings.Repeat("a", 43):           CodeLeaseContextInvalid,
		" bwl_" + strings.Repeat("a", 42):          CodeLeaseContextInvalid,
	}
	for s, code := range bad {
		err := ParseLeaseOwner(s)
		le, isLE := err.(*LeaseError)
		if !isLE || le.Code != code {
			t.Errorf("%q: got %v, want %s", s, err, code)
			continue
		}
		if s != "" && strings.Contains(le.Message, s) {
			t.Errorf("%q: the message echoes the token: %s", s, le.Message)
		}
	}
}

func TestLeaseGenerationForm(t *testing.T) {
	// docs/leases.md: generation ^[1-9]\d*$ and a safe integer (≤ 2^53-1).
	good := map[string]int64{"1": 1, "42": 42, "9007199254740991": MaxLeaseGeneration}
	for s, want := range good {
		if n, err := ParseLeaseGeneration(s); err != nil || n != want {
			t.Errorf("%q: %d %v", s, n, err)
		}
	}
	for _, s := range []string{"0", "01", "-1", "+1", "1.0", "1e3", " 1", "1 ", "9007199254740992",
		"99999999999999999999999", "0x10", "１", "1_000"} {
		_, err := ParseLeaseGeneration(s)
		if le, ok := err.(*LeaseError); !ok || le.Code != CodeLeaseContextInvalid {
			t.Errorf("%q: got %v, want LEASE_CONTEXT_INVALID", s, err)
		}
	}
	if _, err := ParseLeaseGeneration(""); err.(*LeaseError).Code != CodeLeaseContextRequired {
		t.Errorf("empty: %v", err)
	}
}

func TestLeaseTTLClamp(t *testing.T) {
	// docs/leases.md#the-database-arbitrates / docs/leases.md: default 120 s, clamped to [1 s, 30 min];
	// a negative TTL is bad input, not a clamp.
	cases := map[int64]int64{0: 120_000, 1: 1000, 999: 1000, 5000: 5000, 1_800_000: 1_800_000, 1 << 40: 1_800_000}
	for in, want := range cases {
		if got, err := ClampLeaseTTLMs(in); err != nil || got != want {
			t.Errorf("%d → %d %v, want %d", in, got, err, want)
		}
	}
	if _, err := ClampLeaseTTLMs(-1); err == nil {
		t.Error("negative TTL accepted")
	}
}

func TestLeaseFenceOrder(t *testing.T) {
	// docs/leases.md assertFence: none → REQUIRED; generation → STALE; key →
	// AUTHORIZATION_MISMATCH; connection → CONNECTION_MISMATCH; else VALID.
	// An expired row is no lease.
	row := &LeaseRow{OwnerHash: "h", APIKeyID: "team-a", Conn: ConnRef{"p", "k1"}, Generation: 3, ExpiresAt: at(sec(10))}
	claim := func(h string, gen int64, key string, c ConnRef) *LeaseClaim {
		return &LeaseClaim{OwnerHash: h, Generation: gen, APIKeyID: key, Conn: c}
	}
	k1, k2 := ConnRef{"p", "k1"}, ConnRef{"p", "k2"}
	cases := []struct {
		name string
		row  *LeaseRow
		now  Time
		c    *LeaseClaim
		want Fence
	}{
		{"valid", row, at(0), claim("h", 3, "team-a", k1), FenceValid},
		{"valid without a connection (status/renew)", row, at(0), claim("h", 3, "team-a", ConnRef{}), FenceValid},
		{"no row", nil, at(0), claim("h", 3, "team-a", k1), FenceRequired},
		{"expired", row, at(sec(10)), claim("h", 3, "team-a", k1), FenceRequired},
		{"another owner's row", row, at(0), claim("x", 3, "team-a", k1), FenceRequired},
		{"stale generation", row, at(0), claim("h", 2, "team-a", k1), FenceStale},
		{"newer generation", row, at(0), claim("h", 4, "team-a", k1), FenceStale},
		{"stale beats key", row, at(0), claim("h", 2, "team-b", k2), FenceStale},
		{"token of another key", row, at(0), claim("h", 3, "team-b", k1), FenceAuthorizationMismatch},
		{"key beats connection", row, at(0), claim("h", 3, "team-b", k2), FenceAuthorizationMismatch},
		{"other connection", row, at(0), claim("h", 3, "team-a", k2), FenceConnectionMismatch},
	}
	for _, tc := range cases {
		if got := CheckFence(tc.now, tc.row, tc.c); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	wantHTTP := map[Fence]int{FenceRequired: 409, FenceStale: 409, FenceConnectionMismatch: 409, FenceAuthorizationMismatch: 403}
	for f, st := range wantHTTP {
		if got := LeaseHTTPStatus(f.Code()); got != st {
			t.Errorf("%v → %d, want %d", f, got, st)
		}
	}
}

func TestLeaseRetryAfter(t *testing.T) {
	// docs/leases.md: Retry-After = clamp(ceil((earliestExpiry-now)/1000), 1, 3600), 1 when unknown.
	cases := []struct {
		earliest Time
		want     int64
	}{{0, 1}, {at(-5000), 1}, {at(0), 1}, {at(1), 1}, {at(1000), 1}, {at(1001), 2}, {at(119_500), 120},
		{at(3_600_000), 3600}, {at(10_000_000), 3600}}
	for _, tc := range cases {
		if got := LeaseRetryAfterSeconds(at(0), tc.earliest); got != tc.want {
			t.Errorf("earliest %d: %d, want %d", tc.earliest-t0, got, tc.want)
		}
	}
}

func TestSelectExcludesLeaseHeld(t *testing.T) {
	// docs/leases.md / docs/names.md: another owner's leased connection is excluded with
	// reason lease_held, after the health rules (a held connection that is
	// also cooling reports the cooldown); LeaseCapacity counts eligible and
	// free connections from that selection; Held flows through Flow.
	p := oneProvider("p", ProfileAPIKey, 4)
	e := mustEngine(t, topo(p), nil)
	hit(t, e, at(0), "p", "k2", "m1", withHeader(429, "retry-after", "20"))
	var sel Selection
	req := Request{Route: route(t, e, "p/m1"), Held: []ConnRef{{"p", "k1"}, {"p", "k2"}}}
	e.SelectAll(at(sec(1)), &req, &sel)
	got := map[string]Exclusion{}
	for _, x := range sel.Excluded {
		got[x.Connection] = x.Reason
	}
	if got["k1"] != ExclLeaseHeld || got["k2"] != ExclConnectionCooldown || len(sel.Candidates) != 2 {
		t.Fatalf("exclusions %v, candidates %+v", got, sel.Candidates)
	}
	if el, free := LeaseCapacity(&sel); el != 3 || free != 2 {
		t.Fatalf("capacity eligible=%d free=%d, want 3/2", el, free)
	}
	if ExclLeaseHeld.Timer() {
		t.Fatal("a lease is not a timer exclusion")
	}
	f := e.StartFlow(at(sec(1)), route(t, e, "p/m1"), "", nil)
	f.Held = []ConnRef{{"p", "k1"}, {"p", "k3"}, {"p", "k4"}}
	st := f.Next(at(sec(1)), e, &sel)
	if st.Kind == StepAttempt {
		// (it waits for k2's cooldown: the only non-held connection)
		t.Fatalf("every free connection is held or cooling: no attempt may start, got %+v", st.Attempt)
	}
	f = e.StartFlow(at(sec(1)), route(t, e, "p/m1"), "", nil)
	f.Held = []ConnRef{{"p", "k1"}, {"p", "k3"}}
	if st := f.Next(at(sec(1)), e, &sel); st.Kind != StepAttempt || st.Attempt.Connection != "k4" {
		t.Fatalf("flow must skip held connections: %+v", st)
	}
}

func TestUnavailableWhenEveryConnectionIsLeased(t *testing.T) {
	// docs/leases.md: every connection held by other owners' leases is a wait
	// state for an ordinary request: 429 LEASE_CAPACITY_UNAVAILABLE with
	// Retry-After from the first lease's end (HeldUntil), clamped to
	// [1, 3600] s, 1 s when unknown. A mix with a cooling connection keeps
	// the normal routing answer.
	p := oneProvider("p", ProfileAPIKey, 2)
	e := mustEngine(t, topo(p), nil)
	now := at(sec(10))
	var sel Selection
	req := Request{Route: route(t, e, "p/m1"), Held: []ConnRef{{"p", "k1"}, {"p", "k2"}},
		HeldUntil: []Time{now.Add(sec(45)), now.Add(sec(20))}}
	e.Select(now, &req, &sel)
	err := Unavailable(now, &req.Route, &sel)
	if err == nil || err.Code != CodeLeaseCapacity || err.Code.HTTPStatus() != 429 || err.Code.Type() != LeaseErrorType ||
		err.RetryAfterSeconds() != 20 {
		t.Fatalf("all leased: %+v", err)
	}
	req.HeldUntil = nil // unknown ends (the simulator's leases)
	e.Select(now, &req, &sel)
	if err := Unavailable(now, &req.Route, &sel); err == nil || err.Code != CodeLeaseCapacity || err.RetryAfterSeconds() != 1 {
		t.Fatalf("unknown end: %+v", err)
	}
	req.HeldUntil = []Time{now.Add(sec(7200)), now.Add(sec(9000))}
	e.Select(now, &req, &sel)
	if err := Unavailable(now, &req.Route, &sel); err == nil || err.RetryAfterSeconds() != 3600 {
		t.Fatalf("clamp: %+v", err)
	}
	hit(t, e, now, "p", "k2", "m1", withHeader(429, "retry-after", "20"))
	req = Request{Route: route(t, e, "p/m1"), Held: []ConnRef{{"p", "k1"}}}
	e.Select(now, &req, &sel)
	if err := Unavailable(now, &req.Route, &sel); err == nil || err.Code == CodeLeaseCapacity {
		t.Fatalf("leased + cooling is not lease contention: %+v", err)
	}
}

func TestLeaseAcquireRouteRefusesCombos(t *testing.T) {
	// docs/leases.md: managed combos reject every fan-out route before dispatch.
	if err := LeaseAcquireRoute(&Route{Name: "c", Combo: "c"}); err == nil || err.(*LeaseError).Code != CodeLeaseContextInvalid {
		t.Fatalf("combo: %v", err)
	}
	if err := LeaseAcquireRoute(&Route{Name: "p/m", Provider: "p", Model: "m"}); err != nil {
		t.Fatal(err)
	}
}

func FuzzLeaseHeaders(f *testing.F) {
	// The owner and generation header parsers never panic, and what they
	// accept has the canonical form.
	for _, s := range []string{testOwner, "", "1", "0", "9007199254740991", "9007199254740992", "bwl_", "-1"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, owner, gen string) {
		if ParseLeaseOwner(owner) == nil {
			if len(owner) != leaseOwnerLen || !strings.HasPrefix(owner, LeaseOwnerPrefix) {
				t.Fatalf("accepted %q", owner)
			}
		}
		if n, err := ParseLeaseGeneration(gen); err == nil {
			if n < 1 || n > MaxLeaseGeneration || formatInt(n) != gen {
				t.Fatalf("accepted %q as %d", gen, n)
			}
		}
	})
}

func formatInt(n int64) string {
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

func BenchmarkFenceCheck(b *testing.B) {
	// Target (docs/leases.md#fence): the fence adds ≤ 1 µs to the decision
	// path.
	row := &LeaseRow{OwnerHash: strings.Repeat("ab", 32), APIKeyID: "team-a", Conn: ConnRef{"glm", "k1"}, Generation: 7, ExpiresAt: at(sec(120))}
	c := &LeaseClaim{OwnerHash: strings.Repeat("ab", 32), Generation: 7, APIKeyID: "team-a", Conn: ConnRef{"glm", "k1"}}
	b.ReportAllocs()
	for b.Loop() {
		if CheckFence(at(sec(1)), row, c) != FenceValid {
			b.Fatal("not valid")
		}
	}
}

func TestUnavailableLeasedWithANeverEligibleSibling(t *testing.T) {
	// docs/leases.md: a connection held by another owner's lease beside one that
	// will never serve (banned, or not allowed to this key) is still the
	// lease wait (429 LEASE_CAPACITY_UNAVAILABLE with the lease's end), not
	// 503 ALL_TARGETS_SKIPPED "terminal or not allowed" with no Retry-After.
	p := oneProvider("p", ProfileAPIKey, 2)
	e := mustEngine(t, topo(p), nil)
	now := at(sec(10))
	hit(t, e, now, "p", "k1", "m1", withBody(403, `{"error":{"message":"Your account has been deactivated"}}`))
	var sel Selection
	req := Request{Route: route(t, e, "p/m1"), Held: []ConnRef{{"p", "k2"}}, HeldUntil: []Time{now.Add(sec(30))}}
	e.Select(now, &req, &sel)
	if err := Unavailable(now, &req.Route, &sel); err == nil || err.Code != CodeLeaseCapacity || err.RetryAfterSeconds() != 30 {
		t.Fatalf("banned + leased: %+v", err)
	}
	e2 := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), nil)
	req = Request{Route: route(t, e2, "p/m1"), Allowed: []ConnRef{{"p", "k2"}}, Held: []ConnRef{{"p", "k2"}}, HeldUntil: []Time{now.Add(sec(30))}}
	e2.Select(now, &req, &sel)
	if err := Unavailable(now, &req.Route, &sel); err == nil || err.Code != CodeLeaseCapacity {
		t.Fatalf("not allowed + leased: %+v", err)
	}
}

// docs/leases.md#lifecycle: a renew extends the owner's active lease to
// now + ttl (clamped), generation unchanged; a renew the fence refuses
// (no active lease, another generation, another key) changes nothing and
// says why, in the fence's order.
func TestRenewLease(t *testing.T) {
	row := LeaseRow{OwnerHash: "o", APIKeyID: "k", Conn: ConnRef{"p", "k1"}, Generation: 3, ExpiresAt: 5_000}
	c := LeaseClaim{OwnerHash: "o", Generation: 3, APIKeyID: "k", Conn: ConnRef{"p", "k9"}}
	if f := RenewLease(4_000, &row, &c, 10_000); f != FenceValid || row.ExpiresAt != 14_000 || row.Generation != 3 {
		t.Fatalf("renew: %v, row %+v; want VALID, end 14000, generation 3 (a renew is no dispatch: the claim's connection is ignored)", f, row)
	}
	if f := RenewLease(4_000, &row, &c, 10*MaxLeaseTTLMs); f != FenceValid || row.ExpiresAt != 4_000+MaxLeaseTTLMs {
		t.Fatalf("clamp: %v, end %d", f, row.ExpiresAt)
	}
	stale := c
	stale.Generation = 2
	if f := RenewLease(4_000, &row, &stale, 10_000); f != FenceStale || row.ExpiresAt != 4_000+MaxLeaseTTLMs {
		t.Fatalf("stale renew: %v, end %d (unchanged)", f, row.ExpiresAt)
	}
	if f := RenewLease(4_000, nil, &c, 10_000); f != FenceRequired {
		t.Fatalf("no lease: %v", f)
	}
	if f := RenewLease(row.ExpiresAt, &row, &c, 10_000); f != FenceRequired {
		t.Fatalf("an ended lease cannot be renewed: %v", f)
	}
}
