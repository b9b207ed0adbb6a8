package sim

import (
	"slices"
)

// Exclusive session leases in the simulator (docs/leases.md). The scenario's
// traffic carries no lease, so what matters is the set of connections that
// some other owner holds: a request excludes them (Flow.Held, reason
// lease_held) exactly as the gateway excludes every leased connection for
// non-owners. The arbitration itself (one owner per connection) is the
// store's and is tested there and in package proxy.

// leaseAction applies lease-acquire / lease-release. The held list is
// replaced, never mutated (flows share it); every flow step reads the
// current one, so a request in flight stops using a connection leased
// meanwhile, as in the proxy.
func (s *sim) leaseAction(a *Action) {
	next := slices.Clone(s.held)
	for _, c := range a.Connections {
		i := slices.Index(next, c)
		switch {
		case a.Kind == ActLeaseAcquire && i < 0:
			next = append(next, c)
		case a.Kind == ActLeaseRelease && i >= 0:
			next = slices.Delete(next, i, i+1)
		}
	}
	s.held = next
}
