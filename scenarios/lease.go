package scenarios

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/scenarios/yamlnode"
	"github.com/breakwater-gw/breakwater/sim"
)

// actionKeysOf is every key an action kind reads (sim/run.go applyAction,
// replay/run.go): any other one would be ignored, so the loader refuses
// it rather than run a file that means something it does not do.
var actionKeysOf = map[sim.ActionKind][]string{
	sim.ActResetBreaker:    {"provider"},
	sim.ActClearCooldowns:  {"provider", "connection", "connections", "all"},
	sim.ActResetConnection: {"connection", "connections"},
	sim.ActClearLockout:    {"connection", "connections", "model", "all"},
	sim.ActSet:             {"settings", "set"},
	sim.ActConnectionTest:  {"connection", "connections"},
	sim.ActLeaseAcquire:    {"connection", "connections", "lease", "model", "ttl"},
	sim.ActLeaseRelease:    {"connection", "connections", "lease"},
	sim.ActLeaseRenew:      {"connection", "connections", "lease", "ttl"},
	sim.ActRateLimit:       {"connection", "connections", "enabled"},
}

// checkActionKeys refuses the keys a's kind ignores, at each such key;
// keys holds the action's keys and their key nodes.
func (l *loader) checkActionKeys(f string, a *sim.Action, keys map[string]*yaml.Node) {
	allowed := append([]string{"at", "action"}, actionKeysOf[a.Kind]...)
	for _, key := range actionKeys { // a stable order for the errors
		if k := keys[key]; k != nil && !slices.Contains(allowed, key) {
			l.d.Errf(k, f+"."+key, "%s ignores %s (its keys: %s)", a.Kind, key, strings.Join(allowed, ", "))
		}
	}
}

// checkTrafficLease: a lease the item presents has a name, and a
// generation is presented only with a lease (nodes: the item's values).
func (l *loader) checkTrafficLease(f string, t *sim.Traffic, nodes map[string]*yaml.Node) {
	if n := nodes["lease"]; n != nil && t.Lease == "" {
		l.d.Errf(n, f+".lease", `a lease needs a name (a lease-acquire's lease:); leave lease: out for traffic without one`)
	}
	if n := nodes["leaseGeneration"]; n != nil && t.LeaseGeneration > 0 && t.Lease == "" {
		l.d.Errf(n, f+".leaseGeneration", "leaseGeneration needs lease (the named lease whose generation the requests present)")
	}
}

// checkTrafficLeases: a lease the traffic presents is one an action
// acquires (the managed client whose key the requests carry). Reported at
// the item's lease: value.
func (l *loader) checkTrafficLeases() {
	for i, t := range l.sc.Traffic {
		if t.Lease != "" && !slices.ContainsFunc(l.sc.Actions, func(a sim.Action) bool { return a.Kind == sim.ActLeaseAcquire && a.Lease == t.Lease }) {
			l.d.Errf(l.trafficLease[i], fmt.Sprintf("traffic[%d].lease", i), "no lease-acquire action names lease %q", t.Lease)
		}
	}
}

// checkLeaseAction: an outside client's lease names its connections; a
// named client's acquire names the model and its key's allowed
// connections (docs/scenarios.md#actions).
func (l *loader) checkLeaseAction(v *yaml.Node, f string, a *sim.Action) {
	switch {
	case hasKey(v, "lease") && a.Lease == "":
		l.d.Errf(yamlnode.Find(v, "lease"), f+".lease", "a lease needs a name; leave lease: out for an outside client's lease of connection:")
	case a.Lease == "" && len(a.Connections) == 0:
		l.d.Errf(v, f+".connection", "%s needs a connection (provider/connection) or a lease", a.Kind)
	case a.Lease == "" && hasKey(v, "model"):
		l.d.Errf(v, f+".model", "model applies to a named lease-acquire (with lease:); an outside client's lease names only its connections")
	case a.Lease != "" && a.Kind == sim.ActLeaseAcquire && (a.Model == "" || len(a.Connections) == 0):
		l.d.Errf(v, f, "lease-acquire of lease %q needs model and connections (its key's allowedConnections)", a.Lease)
	case a.Lease != "" && a.Kind != sim.ActLeaseAcquire && len(a.Connections) > 0:
		l.d.Errf(v, f+".connections", "%s of lease %q names no connections", a.Kind, a.Lease)
	case a.Lease != "" && a.Kind != sim.ActLeaseAcquire && !slices.ContainsFunc(l.sc.Actions, func(b sim.Action) bool { return b.Kind == sim.ActLeaseAcquire && b.Lease == a.Lease }):
		l.d.Errf(v, f+".lease", "%s of lease %q: no earlier lease-acquire names it", a.Kind, a.Lease)
	case hasKey(v, "ttl") && a.Kind != sim.ActLeaseRelease && (a.TTL < time.Second || a.TTL > model.MaxLeaseTTLMs*time.Millisecond):
		l.d.Errf(v, f+".ttl", "ttl applies to lease-acquire and lease-renew only, from 1s to 30m")
	}
}

// leaseHolders is who a lease action acts for: the named client, or the
// outside client of each connection.
func leaseHolders(a *sim.Action) []string {
	if a.Lease != "" {
		return []string{fmt.Sprintf("lease %q", a.Lease)}
	}
	out := make([]string, len(a.Connections))
	for i, c := range a.Connections {
		out[i] = "the lease of " + c.String()
	}
	return out
}

// leaseField is the field of action i naming whose lease it is (the one
// checkLeaseAction reports at, so a problem is reported once).
func leaseField(v *yaml.Node, i int, a *sim.Action) string {
	f := fmt.Sprintf("actions[%d]", i)
	switch {
	case a.Lease != "":
		return f + ".lease"
	case hasKey(v, "connections"):
		return f + ".connections"
	}
	return f + ".connection"
}

// checkLeaseOrder refuses the lease actions that would change nothing,
// as their order shows (by at:, file order among equal times, as the
// simulator and the replay apply them; a lease is held from its acquire
// until its release or its ttl): an acquire of a lease held then, a
// release of one not held (never acquired, released, or ended). Whether
// an acquire succeeds is only known at run time, so a release after a
// refused acquire still passes here and changes nothing. A renew of a
// lease not held is a run-time failure the scenarios may pin, so it
// passes too.
func (l *loader) checkLeaseOrder() {
	idx := make([]int, 0, len(l.sc.Actions))
	for i, a := range l.sc.Actions {
		if a.Kind == sim.ActLeaseAcquire || a.Kind == sim.ActLeaseRelease || a.Kind == sim.ActLeaseRenew {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(i, j int) int { return cmp.Compare(l.sc.Actions[i].At, l.sc.Actions[j].At) })
	until := map[string]time.Duration{} // holder → when its lease ends; absent: not held
	for _, i := range idx {
		a := &l.sc.Actions[i]
		f := leaseField(l.actionNodes[i], i, a)
		for _, h := range leaseHolders(a) {
			end, held := until[h]
			held = held && a.At < end
			switch {
			case a.Kind == sim.ActLeaseAcquire && held:
				l.d.Errf(l.actionNodes[i], f, "lease-acquire at %v: %s is already held then (until %v); release it first", a.At, h, end)
			case a.Kind == sim.ActLeaseAcquire, a.Kind == sim.ActLeaseRenew && held:
				until[h] = a.At + time.Duration(a.LeaseTTLMs())*time.Millisecond
			case a.Kind == sim.ActLeaseRelease && !held:
				l.d.Errf(l.actionNodes[i], f, "lease-release at %v: %s is not held then (never acquired, already released, or past its ttl)", a.At, h)
			case a.Kind == sim.ActLeaseRelease:
				delete(until, h)
			}
		}
	}
}
