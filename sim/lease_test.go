package sim

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// leaseScenario: provider p with k1..k3 and a managed client "a" whose key
// allows k1 and k2, leasing p/m at 0s (fill-first: k1).
func leaseScenario(t *testing.T, traffic ...Traffic) *Scenario {
	t.Helper()
	sc := simpleScenario(t, 1)
	sc.Settings.WaitForCooldown.Enabled = false
	sc.Topology.Providers[0].Connections = []model.ConnectionConfig{{ID: "k1"}, {ID: "k2"}, {ID: "k3"}}
	sc.Actions = []Action{{Kind: ActLeaseAcquire, Lease: "a", Model: "p/m",
		Connections: []model.ConnRef{{Provider: "p", Connection: "k1"}, {Provider: "p", Connection: "k2"}}}}
	sc.Traffic = traffic
	return sc
}

// runObserved runs sc and returns its requests in sending order and the
// trace.
func runObserved(t *testing.T, sc *Scenario) ([]RequestObservation, *Result, string) {
	t.Helper()
	var obs []RequestObservation
	var buf bytes.Buffer
	res, err := Run(sc, Options{Trace: &buf, Observe: &Observer{Request: func(r RequestObservation) { obs = append(obs, r) }}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) > 0 || len(res.Violations) > 0 {
		t.Fatalf("failures %v violations %v", res.Failures, res.Violations)
	}
	out := make([]RequestObservation, len(obs))
	for _, o := range obs {
		out[o.N-1] = o
	}
	return out, res, buf.String()
}

// TestLeaseFenceRefusesStaleClaim: docs/leases.md#fence — a managed request
// presenting another generation is refused LEASE_FENCE_STALE before any
// dispatch (model.LeaseAdmit): no attempt, no upstream call; the lease's
// own generation is served on the leased connection.
func TestLeaseFenceRefusesStaleClaim(t *testing.T) {
	sc := leaseScenario(t,
		Traffic{At: time.Second, Model: "p/m", Count: 1, Lease: "a", LeaseGeneration: 2},
		Traffic{At: 2 * time.Second, Model: "p/m", Count: 1, Lease: "a"})
	obs, res, _ := runObserved(t, sc)
	if o := obs[0]; o.Code != string(model.CodeLeaseFenceStale) || o.Status != model.LeaseHTTPStatus(model.CodeLeaseFenceStale) || o.Attempts != 0 || o.Result != ResultRejected {
		t.Errorf("stale claim: %+v", o)
	}
	if o := obs[1]; o.Result != ResultServed || o.ServedBy != "p/k1" {
		t.Errorf("the lease's generation: %+v", o)
	}
	if res.Upstream != 1 {
		t.Errorf("a stale claim reached an upstream: %d calls", res.Upstream)
	}
}

// TestLeaseMovesWhenLeasedConnectionCools: docs/leases.md#moving — when a
// cooldown keeps the leased connection out, model.Engine.LeaseMove moves
// the lease to a free eligible connection of the key (k2, not k3: outside
// allowedConnections), and requests without a lease are then routed
// around the new connection, not the old one.
func TestLeaseMovesWhenLeasedConnectionCools(t *testing.T) {
	sc := leaseScenario(t,
		Traffic{At: time.Second, Model: "p/m", Count: 1, Lease: "a"},
		Traffic{At: 2 * time.Second, Model: "p/m", Count: 1, Lease: "a"},
		Traffic{At: 3 * time.Second, Model: "p/m", Count: 1})
	sc.Rules = []faults.Rule{{Match: faults.Match{Connection: "k1"}, Until: 1500 * time.Millisecond,
		Respond: &faults.Response{Status: 429, Headers: map[string]string{"Retry-After": "60"}}}}
	obs, _, tr := runObserved(t, sc)
	if o := obs[0]; o.ServedBy != "p/k1" || o.Attempts != 1 || o.Result != ResultFailed {
		t.Errorf("the leased connection only (no fail-over off it): %+v", o)
	}
	if o := obs[1]; o.ServedBy != "p/k2" || o.Result != ResultServed {
		t.Errorf("the lease should have moved to k2: %+v", o)
	}
	if o := obs[2]; o.ServedBy != "p/k3" {
		t.Errorf("k1 cooling, k2 leased: want k3, got %+v", o)
	}
	if !strings.Contains(tr, `"ev":"lease_move","from":"p/k1","req":2,"t":2000,"to":"p/k2"`) {
		t.Errorf("trace lacks the move:\n%s", tr)
	}
}

// TestLeaseFenceBeforeEveryAttempt: docs/leases.md#fence — the fence runs
// again right before an attempt goes out: a managed request that queued
// for its connection while its lease was released is refused
// LEASE_REQUIRED at dispatch, and the attempt never reaches the upstream.
func TestLeaseFenceBeforeEveryAttempt(t *testing.T) {
	sc := leaseScenario(t,
		Traffic{At: 0, Model: "p/m", Count: 2, Every: 500 * time.Millisecond, Lease: "a"})
	sc.Topology.Providers[0].Connections[0].MaxConcurrent = 1
	sc.Actions = append(sc.Actions, Action{At: time.Second, Kind: ActLeaseRelease, Lease: "a"})
	sc.Rules = []faults.Rule{{Respond: &faults.Response{Latency: 2 * time.Second}}}
	obs, res, _ := runObserved(t, sc)
	if o := obs[0]; o.Result != ResultServed {
		t.Errorf("the first request was dispatched under its lease: %+v", o)
	}
	if o := obs[1]; o.Code != string(model.CodeLeaseRequired) || o.ServedBy != "p/k1" || o.Attempts != 1 {
		t.Errorf("queued past the release: %+v", o)
	}
	if res.Upstream != 1 {
		t.Errorf("the refused attempt reached the upstream: %d calls", res.Upstream)
	}
}

// TestLeasedWhileQueuedRefusedLocally: docs/leases.md#capacity — a request
// without a lease queued for a connection leased meanwhile by another
// client is refused locally when its turn comes
// (model.LeasedWhileQueued): never sent, and with nothing else free it
// answers 429 LEASE_CAPACITY_UNAVAILABLE.
func TestLeasedWhileQueuedRefusedLocally(t *testing.T) {
	sc := simpleScenario(t, 1)
	sc.Settings.WaitForCooldown.Enabled = false
	sc.Topology.Providers[0].Connections = []model.ConnectionConfig{{ID: "k1", MaxConcurrent: 1, MaxWaitMs: 5000}}
	sc.Actions = []Action{{At: time.Second, Kind: ActLeaseAcquire, Connections: []model.ConnRef{{Provider: "p", Connection: "k1"}}}}
	sc.Rules = []faults.Rule{{Respond: &faults.Response{Latency: 2 * time.Second}}}
	sc.Traffic = []Traffic{{At: 0, Model: "p/m", Count: 2, Every: 500 * time.Millisecond}}
	obs, res, _ := runObserved(t, sc)
	if o := obs[1]; o.Code != string(model.CodeLeaseCapacity) || o.Status != 429 || o.ServedBy != "p/k1" || o.DoneAt != 2*time.Second {
		t.Errorf("queued for k1, leased meanwhile: want 429 LEASE_CAPACITY_UNAVAILABLE at its turn (2s), got %+v", o)
	}
	if res.Upstream != 1 {
		t.Errorf("the refused attempt reached the upstream: %d calls", res.Upstream)
	}
}

// TestLeaseEndsAtItsTTL: docs/leases.md#capacity — a lease lasts its ttl.
// While every connection is leased, traffic without a lease is told to
// come back when the first lease ends (Flow.HeldUntil: Retry-After, not
// 1 s); after the end the connection serves again and the named owner is
// refused LEASE_REQUIRED.
func TestLeaseEndsAtItsTTL(t *testing.T) {
	sc := leaseScenario(t,
		Traffic{At: 2 * time.Second, Model: "p/m", Count: 1, Lease: "a"},
		Traffic{At: 3500 * time.Millisecond, Model: "p/m", Count: 1},
		Traffic{At: 6 * time.Second, Model: "p/m", Count: 1, Lease: "a"},
		Traffic{At: 7 * time.Second, Model: "p/m", Count: 1})
	sc.Topology.Providers[0].Connections = sc.Topology.Providers[0].Connections[:2]
	sc.Actions[0].TTL = 5 * time.Second // k1 until 5s
	sc.Actions = append(sc.Actions, Action{At: time.Second, Kind: ActLeaseAcquire, TTL: 30 * time.Second,
		Connections: []model.ConnRef{{Provider: "p", Connection: "k2"}}})
	obs, _, _ := runObserved(t, sc)
	if o := obs[0]; o.ServedBy != "p/k1" || o.Result != ResultServed {
		t.Errorf("within its ttl: %+v", o)
	}
	if o := obs[1]; o.Code != string(model.CodeLeaseCapacity) || o.RetryAfterMs != 2000 {
		t.Errorf("both leased: want LEASE_CAPACITY_UNAVAILABLE, retry when k1's lease ends (2 s), got %+v", o)
	}
	if o := obs[2]; o.Code != string(model.CodeLeaseRequired) || o.Attempts != 0 {
		t.Errorf("after its ttl the lease is over: %+v", o)
	}
	if o := obs[3]; o.ServedBy != "p/k1" || o.Result != ResultServed {
		t.Errorf("after its ttl k1 serves again: %+v", o)
	}
}

// TestLeaseRenewSetsANewEnd: docs/leases.md#lifecycle — lease-renew
// (model.RenewLease) sets the lease's end to now + ttl: the owner is
// served past the acquire's end, until the renewed one. Renewing a lease
// that has ended fails the action, as the gateway's 409 does.
func TestLeaseRenewSetsANewEnd(t *testing.T) {
	sc := leaseScenario(t,
		Traffic{At: 6 * time.Second, Model: "p/m", Count: 1, Lease: "a"},
		Traffic{At: 10 * time.Second, Model: "p/m", Count: 1, Lease: "a"})
	sc.Actions[0].TTL = 5 * time.Second                                                                                 // until 5s
	sc.Actions = append(sc.Actions, Action{At: 4 * time.Second, Kind: ActLeaseRenew, Lease: "a", TTL: 5 * time.Second}) // until 9s
	obs, _, _ := runObserved(t, sc)
	if o := obs[0]; o.ServedBy != "p/k1" || o.Result != ResultServed {
		t.Errorf("renewed until 9s: want served at 6s, got %+v", o)
	}
	if o := obs[1]; o.Code != string(model.CodeLeaseRequired) {
		t.Errorf("the renewed lease ended at 9s: %+v", o)
	}
	sc.Actions = append(sc.Actions, Action{At: 12 * time.Second, Kind: ActLeaseRenew, Lease: "a", Line: 7})
	res, err := Run(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) != 1 || res.Failures[0].Line != 7 || res.Failures[0].Found != string(model.CodeLeaseRequired) {
		t.Errorf("renewing an ended lease: failures %+v, want the action's LEASE_REQUIRED", res.Failures)
	}
}
