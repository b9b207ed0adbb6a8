package proxy

import (
	"errors"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/store"
)

// Managed dispatch (docs/leases.md, docs/leases.md): a chat request that presents
// X-Breakwater-Lease-Owner / -Generation is routed only to the leased
// connection, and the fence runs before every upstream attempt. A request
// without them is routed around every leased connection (lease_held).

// presentsLease reports whether the request carries lease headers: a
// managed request, or one leaseDispatch refuses.
func (rs *reqState) presentsLease() bool {
	return headerValue(rs.r.Header, hdrLeaseOwner) != "" || headerValue(rs.r.Header, hdrLeaseGeneration) != ""
}

// leaseDispatch prepares the flow after StartFlow. It reports (true,
// status) when the request was refused before any dispatch.
func (rs *reqState) leaseDispatch() (bool, int) {
	g := rs.g
	owner, genText := headerValue(rs.r.Header, hdrLeaseOwner), headerValue(rs.r.Header, hdrLeaseGeneration)
	if owner == "" && genText == "" {
		return false, 0 // not managed: refreshHeld keeps it off leased connections
	}
	if rs.key == nil || !g.view().managed[rs.key.id] {
		return true, writeLeaseError(rs.w, model.CodeLeaseKeyConfig, "lease headers need an API key with scope "+model.LeaseScope+" and a non-empty allowedConnections")
	}
	if err := model.ParseLeaseOwner(owner); err != nil {
		return true, writeLeaseErr(rs.w, err)
	}
	gen, err := model.ParseLeaseGeneration(genText)
	if err != nil {
		return true, writeLeaseErr(rs.w, err)
	}
	// A combo is refused before the arbiter is asked (LeaseAdmit checks it
	// too); like LeaseAdmit's refusals, the answer says attempts 0.
	if err := model.LeaseAcquireRoute(&rs.flow.Route); err != nil {
		rs.setHeaders(rs.w.Header())
		return true, writeLeaseErr(rs.w, err)
	}
	claim := &model.LeaseClaim{OwnerHash: hashOwner(owner), Generation: gen, APIKeyID: rs.key.id}
	row, _, err := g.leases.verify(rs.ctx, owner, claim)
	if err != nil {
		return true, g.writeLeaseStoreDown(rs.w, err)
	}
	// The checks are the model's (the simulator makes the same ones);
	// verify above only brought the arbiter's row when the copy lagged.
	if le := model.LeaseAdmit(g.modelNow(), &rs.flow.Route, &row, claim, rs.key.allowed); le != nil {
		rs.setHeaders(rs.w.Header())
		return true, writeLeaseErr(rs.w, le)
	}
	if moved, ok := rs.leaseMove(owner, claim, row); ok {
		row = moved
	}
	claim.Conn = row.Conn
	rs.lease, rs.leaseOwner = claim, owner
	rs.flow.Allowed = []model.ConnRef{row.Conn}
	rs.flow.Held, rs.flow.HeldUntil = nil, nil
	return false, 0
}

// leaseMove: when health or a cooldown keeps the leased connection out,
// move the lease, same generation, to another free eligible connection of
// the key. Whether to move and where are model.Engine.LeaseMove's
// (docs/leases.md#moving); the arbiter's Transition makes each move. Without
// a target the request keeps its lease and gets the normal routing answer.
func (rs *reqState) leaseMove(owner string, claim *model.LeaseClaim, row model.LeaseRow) (model.LeaseRow, bool) {
	g := rs.g
	now := g.modelNow()
	held := g.leases.heldFor(now) // includes ours: excluded as lease_held, not a target
	g.lock()
	blocked := g.eng.LeaseMove(now, rs.flow.Route, row.Conn, rs.key.allowed, held, rs.sel)
	cands := append([]model.Candidate(nil), rs.sel.Candidates...) // the arbiter is called without the lock
	g.unlock()
	if !blocked {
		return row, false
	}
	for _, c := range cands {
		l, _, err := g.leases.arb.Transition(rs.ctx, owner, claim.APIKeyID, claim.Generation, c.Provider, c.Connection, store.EndHealthOrCooldown)
		var lc *store.LeaseConflict
		switch {
		case err == nil:
			g.leases.put(l)
			return rowOf(l), true
		case errors.As(err, &lc):
			continue
		default:
			return row, false // stale or unavailable: the fence decides below
		}
	}
	return row, false
}

// leaseFenceRefuses runs the fence before one upstream attempt of a managed
// request (the in-memory copy: no I/O). On refusal the attempt is recorded
// neutrally (it never reached the upstream) and the client gets the fence's
// error; it reports (true, status) then.
func (rs *reqState) leaseFenceRefuses(a *model.Attempt) (bool, int) {
	if rs.lease == nil {
		return false, 0
	}
	g := rs.g
	c := *rs.lease
	c.Conn = model.ConnRef{Provider: a.Provider, Connection: a.Connection}
	f := g.leases.fence(g.modelNow(), &c)
	if f != model.FenceValid {
		// The copy may lag another replica (a renewal made there): the
		// arbiter decides before the client is refused.
		var err error
		if _, f, err = g.leases.verify(rs.ctx, rs.leaseOwner, &c); err != nil {
			rs.abandonAttempt(a)
			return true, g.writeLeaseStoreDown(rs.w, err)
		}
	}
	if f == model.FenceValid {
		return false, 0
	}
	rs.abandonAttempt(a)
	rs.setHeaders(rs.w.Header())
	return true, writeLeaseError(rs.w, f.Code(), f.Message())
}

// abandonAttempt records a begun attempt that never reached the upstream,
// neutrally (it frees the breaker permit; no health effect).
func (rs *reqState) abandonAttempt(a *model.Attempt) {
	g := rs.g
	g.lock()
	rs.flow.Record(g.modelNow(), g.eng, a, model.Report{Outcome: model.Outcome{Kind: model.OutcomeClientAbort}})
	g.unlock()
}

// refreshHeld gives a request without a lease, before every flow step, the
// connections leased now (docs/leases.md: excluded as lease_held), so a lease
// taken while the request runs is respected from its next attempt on. A
// managed request is restricted to its own connection instead.
func (rs *reqState) refreshHeld() {
	// Without a lease-scoped key in the config no connection can be held
	// (replicas share the config): no copy to read or refresh.
	if rs.lease == nil && len(rs.g.leases.managed) > 0 {
		rs.flow.Held, rs.flow.HeldUntil = rs.g.leases.heldUntilFor(rs.g.modelNow())
	}
}
