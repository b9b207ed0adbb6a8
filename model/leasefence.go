package model

// LeaseMove is the lease move's decision (docs/leases.md#moving): normal
// model, quota, health and cooldown rules still apply to a leased
// connection, and when they keep it out of a managed request's route
// (nothing eligible, something excluded) the lease moves, same generation,
// to another free eligible connection of the key. It reports whether the
// leased connection is kept out and, when it is, leaves the connections
// the lease may move to in sel.Candidates, in the order selection ranks
// them (empty: nowhere to go; the request keeps its lease and gets the
// normal routing answer). allowed is the key's allowedConnections; held
// are the connections leased now, the request's own included, so a lease
// is never its own move target. The shell asks the arbiter to move the
// lease to each target in turn (a target leased meanwhile is skipped).
func (e *Engine) LeaseMove(now Time, route Route, leased ConnRef, allowed, held []ConnRef, sel *Selection) bool {
	e.Select(now, &Request{Route: route, Allowed: []ConnRef{leased}}, sel)
	if len(sel.Candidates) > 0 || len(sel.Excluded) == 0 {
		sel.Candidates = sel.Candidates[:0]
		return false
	}
	e.Select(now, &Request{Route: route, Allowed: allowed, Held: held}, sel)
	return true
}
