package model

import (
	"fmt"
	"slices"
)

// LeaseAdmit is a managed request's check before its first dispatch
// (docs/leases.md#fence), the same in the gateway and the simulator: the
// route is one provider's model (a combo cannot be leased), the fence
// holds against row (the owner's active lease; nil = none), the leased
// connection is still one of the key's allowed connections (the key's
// configuration may have changed since the lease was taken) and belongs to
// the route's provider. nil: the request goes on, restricted to the leased
// connection (after LeaseMove).
func LeaseAdmit(now Time, route *Route, row *LeaseRow, c *LeaseClaim, allowed []ConnRef) *LeaseError {
	if e := leaseRouteErr(route); e != nil {
		return e
	}
	if f := CheckFence(now, row, c); f != FenceValid {
		return f.Refusal()
	}
	if !slices.Contains(allowed, row.Conn) {
		return leaseErr(CodeLeaseKeyConfig, "the leased connection is no longer in this key's allowedConnections")
	}
	if row.Conn.Provider != route.Provider {
		return leaseErr(CodeLeaseConnMismatch, "the leased connection's provider does not serve this model")
	}
	return nil
}

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
	e.SelectAll(now, &Request{Route: route, Allowed: []ConnRef{leased}}, sel)
	if len(sel.Candidates) > 0 || len(sel.Excluded) == 0 {
		sel.Candidates = sel.Candidates[:0]
		return false
	}
	e.SelectAll(now, &Request{Route: route, Allowed: allowed, Held: held}, sel)
	return true
}

// LeaseOffer is what a lease acquire may take (docs/leases.md#capacity):
// the eligible connections of the key (healthy by every rule, leased or
// not), the free ones, and the earliest expiry among the leases that hold
// eligible connections (0 = none), which the 429's Retry-After counts to.
type LeaseOffer struct {
	Eligible, Free int
	Earliest       Time
}

// NoteExpiry counts one more lease expiry towards Earliest (the shell notes
// the leases the arbiter reports as it tries the targets).
func (o *LeaseOffer) NoteExpiry(t Time) {
	if t > 0 && (o.Earliest == 0 || t < o.Earliest) {
		o.Earliest = t
	}
}

// LeaseAcquire is the lease acquire's decision (docs/leases.md#capacity):
// the connections a new lease on route may take, in sel.Candidates in
// selection order (the key's allowed connections, routed around the ones
// leased now: held, with heldUntil aligned), and the capacity counts.
// Nothing eligible at all is not a lease dispute: the normal routing error.
// The shell asks the arbiter for each target in turn.
func (e *Engine) LeaseAcquire(now Time, route Route, allowed, held []ConnRef, heldUntil []Time, sel *Selection) (LeaseOffer, *Error) {
	e.SelectAll(now, &Request{Route: route, Allowed: allowed, Held: held}, sel)
	var o LeaseOffer
	o.Eligible, o.Free = LeaseCapacity(sel)
	if o.Eligible == 0 {
		if ue := Unavailable(now, &route, sel); ue != nil {
			return o, ue
		}
		return o, &Error{Code: CodeNoExecutableTargets, Model: route.Model, Message: fmt.Sprintf("no connection can serve %q", route.Name)}
	}
	for _, x := range sel.Excluded {
		if x.Reason != ExclLeaseHeld {
			continue
		}
		if i := slices.Index(held, ConnRef{Provider: x.Provider, Connection: x.Connection}); i >= 0 && i < len(heldUntil) {
			o.NoteExpiry(heldUntil[i])
		}
	}
	return o, nil
}

// LeasedWhileQueued is the check, once admission is over, of an attempt of
// a request without a lease (docs/leases.md#capacity): the attempt may
// have waited in the admission queue (a full connection, pacing) while its
// connection was leased by a managed client. Such a connection is left to
// its owner: the answer is the local refusal LEASE_CAPACITY_UNAVAILABLE,
// recorded as model.ReportLocal (neutral for health; the flow goes on
// elsewhere and answers with it when nothing else serves), with the
// Retry-After of the lease's end. held and until are the leased
// connections now and when each lease ends (aligned, as Flow.HeldUntil;
// 0 or missing = unknown). nil: the attempt goes out.
func LeasedWhileQueued(now Time, a *Attempt, held []ConnRef, until []Time) *Error {
	i := slices.Index(held, ConnRef{Provider: a.Provider, Connection: a.Connection})
	if i < 0 {
		return nil
	}
	var left int64
	if i < len(until) && until[i] > now {
		left = until[i].Sub(now)
	}
	return &Error{Code: CodeLeaseCapacity, Provider: a.Provider, Model: a.Model, RetryAfterMs: leaseRetryAfterMs(now, left),
		Message: "the connection was leased to another owner while this request queued for it"}
}
