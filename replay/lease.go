package replay

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/sim"
)

// The lease actions (docs/leases.md; sim/lease.go, docs/scenarios.md): a managed
// client outside the scenario's traffic holds a connection, and the
// traffic (which carries no lease) is routed around it (lease_held). The
// replay does what such a client does against the gateway: a client key
// with scope lease:exclusive whose allowedConnections is exactly the
// connection (so the gateway's acquire can only pick that one) calls
// POST /api/v1/session-leases, and releases with the owner token and
// generation it got, sent as X-Breakwater-Lease-Owner / -Generation.
//
// A named lease (lease-acquire with lease:) is one managed client: its key
// has the action's connections as allowedConnections, its acquire names
// the action's model and the gateway picks the connection. Traffic naming
// the lease is sent with that key and the owner and generation it holds
// (or the generation the item names), so the gateway's fence and lease
// move run on it as in the simulator. The simulator's client takes each
// acquire's connections as its allowedConnections; a gateway key's are
// fixed by its config, so the replay gives the named client one key per
// distinct connection list its acquires name and switches to that key at
// each acquire (the owner it then presents is that key's).
//
// Because the gateway then has client keys, the traffic needs one too: a
// plain key without scopes or allowedConnections (every connection, no
// lease), as the simulator's traffic.

// replayOrgID is the organisation id of the generated spend-wall reset URL.
const replayOrgID = "00000000-0000-4000-8000-00000000beef"

type leaseKeys struct {
	client  string            // the traffic's key
	managed map[string]string // "provider/connection" → its managed client's key
	models  map[string]string // "provider/connection" → the model named at acquire
	order   []string          // connections in first-use order (stable config)

	named      map[string]*namedLease // lease name → its managed client
	namedOrder []string

	mu   sync.Mutex
	held map[string]heldLease // "provider/connection" → the lease the replay holds
}

// namedLease is a named managed client: its key and allowedConnections,
// and the owner it was last given (kept after a release: a request that
// presents it then is refused LEASE_REQUIRED, as in the simulator).
type namedLease struct {
	key    string            // the key of its current (last) acquire
	keys   map[string]string // allowed connections (joined by ",") → key
	sets   []string          // the connection lists in first-use order
	owner  string            // never logged or reported; "" until the first acquire
	gen    int64
	active bool
	until  time.Duration // when its lease ends, in the run's time
}

type heldLease struct {
	owner      string // never logged or reported
	generation int64
	until      time.Duration // when the lease ends, in the run's time
}

// newLeaseKeys returns the keys a scenario's lease actions need; nil when it
// has none.
func newLeaseKeys(sc *sim.Scenario) *leaseKeys {
	var lk *leaseKeys
	for _, a := range sc.Actions {
		if a.Kind != sim.ActLeaseAcquire && a.Kind != sim.ActLeaseRelease && a.Kind != sim.ActLeaseRenew {
			continue
		}
		if lk == nil {
			lk = &leaseKeys{client: "bwreplay_client_" + randomKey(), managed: map[string]string{},
				models: map[string]string{}, held: map[string]heldLease{}, named: map[string]*namedLease{}}
		}
		if a.Lease != "" {
			lk.addNamed(&a)
			continue
		}
		for _, c := range a.Connections {
			ref := c.String()
			if _, ok := lk.managed[ref]; ok {
				continue
			}
			lk.managed[ref] = "bwreplay_lease_" + randomKey()
			lk.models[ref] = leaseModel(sc, c.Provider)
			lk.order = append(lk.order, ref)
		}
	}
	return lk
}

// leaseModel is the model named when acquiring a lease on a provider's
// connection: its first model, else the first model the traffic asks of
// it (a provider without models passes any through).
func leaseModel(sc *sim.Scenario, provider string) string {
	for _, p := range sc.Topology.Providers {
		if p.ID == provider && len(p.Models) > 0 {
			return provider + "/" + p.Models[0]
		}
	}
	for _, t := range sc.Traffic {
		if strings.HasPrefix(t.Model, provider+"/") {
			return t.Model
		}
	}
	return provider + "/lease"
}

// addNamed notes a named lease's managed client and one key for each
// distinct connection list its acquires name (the first is the key it
// starts with, the one traffic before any acquire is sent with).
func (lk *leaseKeys) addNamed(a *sim.Action) {
	if a.Kind != sim.ActLeaseAcquire {
		return
	}
	n := lk.named[a.Lease]
	if n == nil {
		n = &namedLease{keys: map[string]string{}}
		lk.named[a.Lease] = n
		lk.namedOrder = append(lk.namedOrder, a.Lease)
	}
	set := connList(a)
	if _, ok := n.keys[set]; ok {
		return
	}
	n.keys[set] = "bwreplay_lease_" + randomKey()
	n.sets = append(n.sets, set)
	if n.key == "" {
		n.key = n.keys[set]
	}
}

// connList is a lease action's connections as "p/c1,p/c2".
func connList(a *sim.Action) string {
	refs := make([]string, len(a.Connections))
	for i, c := range a.Connections {
		refs[i] = c.String()
	}
	return strings.Join(refs, ",")
}

func (lk *leaseKeys) clientKeys() []proxy.ClientKey {
	out := []proxy.ClientKey{{ID: "replay-traffic", Key: lk.client}}
	for i, ref := range lk.order {
		out = append(out, proxy.ClientKey{ID: "replay-lease-" + strconv.Itoa(i+1), Key: lk.managed[ref],
			Scopes: []string{model.LeaseScope}, AllowedConnections: []string{ref}})
	}
	for _, name := range lk.namedOrder {
		n := lk.named[name]
		for i, set := range n.sets {
			id := "replay-lease-" + name
			if i > 0 {
				id += "#" + strconv.Itoa(i+1)
			}
			out = append(out, proxy.ClientKey{ID: id, Key: n.keys[set],
				Scopes: []string{model.LeaseScope}, AllowedConnections: strings.Split(set, ",")})
		}
	}
	return out
}

// leaseHeaders sets a managed request's key and lease headers: the owner
// the named client holds (a well-formed unknown one before its first
// acquire) and its generation, or the one the traffic item presents.
func (lk *leaseKeys) leaseHeaders(h http.Header, t *sim.Traffic) {
	lk.mu.Lock()
	n := lk.named[t.Lease]
	owner, gen, key := n.owner, n.gen, n.key
	lk.mu.Unlock()
	if owner == "" {
		owner, gen = model.LeaseOwnerPrefix+strings.Repeat("A", 43), 1
	}
	if t.LeaseGeneration > 0 {
		gen = t.LeaseGeneration
	}
	h.Set("Authorization", "Bearer "+key)
	h.Set("X-Breakwater-Lease-Owner", owner)
	h.Set("X-Breakwater-Lease-Generation", strconv.FormatInt(gen, 10))
}

// namedAction acquires or releases a named lease; acquiring one the client
// holds, or releasing one it does not, changes nothing, as in the
// simulator.
func (r *runner) namedAction(ctx context.Context, a *sim.Action) error {
	lk := r.e.leases
	lk.mu.Lock()
	n := lk.named[a.Lease]
	owner, gen, until, key := n.owner, n.gen, n.until, n.key
	active := n.active && a.At < until // a lease that ended is over, as in the simulator
	lk.mu.Unlock()
	switch {
	case a.Kind == sim.ActLeaseAcquire && !active:
		var v struct {
			Owner      string `json:"owner"`
			Generation int64  `json:"generation"`
		}
		// This acquire's connections: the key that lists them.
		key = n.keys[connList(a)]
		body := map[string]any{"action": "acquire", "model": a.Model, "ttlMs": a.LeaseTTLMs()}
		if err := r.e.call(ctx, http.MethodPost, "/api/v1/session-leases", key, body, &v); err != nil {
			return fmt.Errorf("lease %s: %w", a.Lease, err)
		}
		owner, gen, active = v.Owner, v.Generation, true
		until = a.At + time.Duration(a.LeaseTTLMs())*time.Millisecond
	case a.Kind == sim.ActLeaseRelease && active:
		if err := r.e.leaseCall(ctx, key, owner, gen, map[string]any{"action": "release"}); err != nil {
			return fmt.Errorf("lease %s: %w", a.Lease, err)
		}
		active = false
	case a.Kind == sim.ActLeaseRenew:
		// Sent even when the lease is over: the gateway refuses it, as the
		// simulator's model.RenewLease does (the action fails in both).
		if err := r.e.leaseCall(ctx, key, owner, gen, map[string]any{"action": "renew", "ttlMs": a.LeaseTTLMs()}); err != nil {
			return fmt.Errorf("lease %s: %w", a.Lease, err)
		}
		until = a.At + time.Duration(a.LeaseTTLMs())*time.Millisecond
	}
	lk.mu.Lock()
	n.owner, n.gen, n.active, n.until, n.key = owner, gen, active, until, key
	lk.mu.Unlock()
	return nil
}

// leaseCall posts a renew or release for owner at generation gen, with
// the managed key (the owner and generation as the lease headers).
func (e *env) leaseCall(ctx context.Context, key, owner string, gen int64, body map[string]any) error {
	hdr := http.Header{}
	hdr.Set("X-Breakwater-Lease-Owner", owner)
	hdr.Set("X-Breakwater-Lease-Generation", strconv.FormatInt(gen, 10))
	return e.doHeaders(ctx, e.base+"/api/v1/session-leases", http.MethodPost, "/api/v1/session-leases", key, hdr, body, nil)
}

// renewHeld renews the lease the replay holds on ref. Renewing one it
// does not hold (never acquired, released, ended) fails, as the gateway's
// renew and the simulator's do.
func (r *runner) renewHeld(ctx context.Context, a *sim.Action, ref string, h heldLease, holding bool) error {
	if !holding {
		return fmt.Errorf("%s (no lease held)", model.CodeLeaseRequired)
	}
	if err := r.e.leaseCall(ctx, r.e.leases.managed[ref], h.owner, h.generation, map[string]any{"action": "renew", "ttlMs": a.LeaseTTLMs()}); err != nil {
		return err
	}
	h.until = a.At + time.Duration(a.LeaseTTLMs())*time.Millisecond
	r.e.leases.mu.Lock()
	r.e.leases.held[ref] = h
	r.e.leases.mu.Unlock()
	return nil
}

// leaseAction runs lease-acquire / lease-renew / lease-release. Acquiring
// a connection the replay already holds, or releasing one it does not,
// changes nothing, as in the simulator.
func (r *runner) leaseAction(ctx context.Context, a *sim.Action) error {
	lk := r.e.leases
	if lk == nil {
		return fmt.Errorf("%s needs a managed client key the replay generates only for its in-process gateway", a.Kind)
	}
	if a.Lease != "" {
		return r.namedAction(ctx, a)
	}
	var errs []string
	for _, c := range a.Connections {
		ref := c.String()
		lk.mu.Lock()
		h, holding := lk.held[ref]
		lk.mu.Unlock()
		holding = holding && a.At < h.until // a lease that ended is over, as in the simulator
		switch {
		case a.Kind == sim.ActLeaseAcquire && !holding:
			var v struct {
				Owner      string `json:"owner"`
				Generation int64  `json:"generation"`
				Connection string `json:"connection"`
			}
			// The action's TTL, the simulator's (Run warns when the
			// scaled run is longer than the longest TTL).
			body := map[string]any{"action": "acquire", "model": lk.models[ref], "ttlMs": a.LeaseTTLMs()}
			if err := r.e.call(ctx, http.MethodPost, "/api/v1/session-leases", lk.managed[ref], body, &v); err != nil {
				errs = append(errs, ref+": "+err.Error())
				continue
			}
			if v.Connection != ref {
				errs = append(errs, fmt.Sprintf("%s: the gateway leased %s", ref, v.Connection))
			}
			lk.mu.Lock()
			lk.held[ref] = heldLease{owner: v.Owner, generation: v.Generation, until: a.At + time.Duration(a.LeaseTTLMs())*time.Millisecond}
			lk.mu.Unlock()
		case a.Kind == sim.ActLeaseRelease && holding:
			if err := r.e.leaseCall(ctx, lk.managed[ref], h.owner, h.generation, map[string]any{"action": "release"}); err != nil {
				errs = append(errs, ref+": "+err.Error())
				continue
			}
			lk.mu.Lock()
			delete(lk.held, ref)
			lk.mu.Unlock()
		case a.Kind == sim.ActLeaseRenew:
			if err := r.renewHeld(ctx, a, ref, h, holding); err != nil {
				errs = append(errs, ref+": "+err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
