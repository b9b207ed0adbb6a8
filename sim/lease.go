package sim

import (
	"fmt"
	"slices"

	"github.com/breakwater-gw/breakwater/model"
)

// Exclusive session leases in the simulator (docs/leases.md), driving the
// same model steps as the gateway's proxy/leases_fence.go:
//
//   - a lease held by a client outside the traffic (lease-acquire of
//     connections) only takes its connections away: requests without a
//     lease exclude them (Flow.Held, reason lease_held) until it ends
//     (Flow.HeldUntil: the Retry-After of LEASE_CAPACITY_UNAVAILABLE);
//   - a named managed client's lease (lease-acquire with lease:) is taken
//     by model.Engine.LeaseAcquire, and the traffic naming it is managed:
//     model.LeaseAdmit (the fence and the key checks) before its first
//     dispatch, model.Engine.LeaseMove when health or a cooldown keeps the
//     leased connection out, and model.CheckFence before every attempt;
//   - every lease ends at its TTL (the action's ttl) unless lease-renew
//     (model.RenewLease) sets a new end;
//   - an attempt of a request without a lease that queued for a connection
//     leased meanwhile is refused locally (model.LeasedWhileQueued,
//     admission.go).
//
// The simulator is its own arbiter (one process, virtual time): a move
// takes the first target LeaseMove offers, since nothing can lease it
// meanwhile.

// simLease is a named managed client and its lease.
type simLease struct {
	allowed []model.ConnRef // its key's allowedConnections
	row     model.LeaseRow  // the lease (when active)
	ttlMs   int64
	active  bool
	owners  int // owners minted so far: each acquire mints a new one
}

// outsideLease is a connection a client outside the traffic leases, and
// when that lease ends.
type outsideLease struct {
	conn  model.ConnRef
	until model.Time
}

// leaseKeyID is the client key id of a named managed client.
func leaseKeyID(name string) string { return "lease:" + name }

// LeaseTTLMs is the TTL a lease action asks for (the replay sends it as
// ttlMs): its ttl, clamped as the gateway clamps it, or the longest the
// gateway grants when it names none.
func (a *Action) LeaseTTLMs() int64 {
	if a.TTL <= 0 {
		return model.MaxLeaseTTLMs
	}
	ms, _ := model.ClampLeaseTTLMs(a.TTL.Milliseconds())
	return ms
}

// leaseAction applies lease-acquire / lease-renew / lease-release.
func (s *sim) leaseAction(a *Action) {
	s.heldNow() // a lease that ended is gone before the action
	if a.Lease != "" {
		s.namedLeaseAction(a)
		s.rebuildHeld()
		return
	}
	next := slices.Clone(s.outside)
	for _, c := range a.Connections {
		i := slices.IndexFunc(next, func(o outsideLease) bool { return o.conn == c })
		switch {
		case a.Kind == ActLeaseAcquire && i < 0:
			next = append(next, outsideLease{conn: c, until: s.now.Add(a.LeaseTTLMs())})
		case a.Kind == ActLeaseRenew && i < 0:
			s.leaseActionFailed(a, string(model.CodeLeaseRequired))
		case a.Kind == ActLeaseRenew:
			// The client's own lease: its fence holds, so the renew
			// extends it (model.RenewLease).
			row := model.LeaseRow{Conn: c, Generation: 1, ExpiresAt: next[i].until}
			model.RenewLease(s.now, &row, &model.LeaseClaim{Generation: 1}, a.LeaseTTLMs())
			next[i].until = row.ExpiresAt
		case a.Kind == ActLeaseRelease && i >= 0:
			next = slices.Delete(next, i, i+1)
		}
	}
	s.outside = next
	s.rebuildHeld()
}

// rebuildHeld replaces the held lists (never mutated: flows share them)
// with every leased connection and when its lease ends, so a request in
// flight stops using a connection leased meanwhile, as in the proxy.
func (s *sim) rebuildHeld() {
	held := make([]model.ConnRef, 0, len(s.outside)+len(s.leaseOrder))
	until := make([]model.Time, 0, cap(held))
	for _, o := range s.outside {
		held, until = append(held, o.conn), append(until, o.until)
	}
	for _, name := range s.leaseOrder {
		if l := s.leases[name]; l.active && !slices.Contains(held, l.row.Conn) {
			held, until = append(held, l.row.Conn), append(until, l.row.ExpiresAt)
		}
	}
	s.held, s.heldUntil, s.heldEnd = held, until, 0
	for _, u := range until {
		if s.heldEnd == 0 || u < s.heldEnd {
			s.heldEnd = u
		}
	}
}

// heldNow is the leased connections now and when each lease ends
// (aligned, as model.Flow.HeldUntil). A lease whose end has come is
// dropped first, as the gateway's copy drops it: its connection is free
// again, and a named client's lease is over (LEASE_REQUIRED).
func (s *sim) heldNow() ([]model.ConnRef, []model.Time) {
	if s.heldEnd == 0 || s.heldEnd > s.now {
		return s.held, s.heldUntil
	}
	s.outside = slices.DeleteFunc(slices.Clone(s.outside), func(o outsideLease) bool { return o.until <= s.now })
	for _, name := range s.leaseOrder {
		if l := s.leases[name]; l.active && l.row.ExpiresAt <= s.now {
			l.active = false
		}
	}
	s.rebuildHeld()
	return s.held, s.heldUntil
}

// namedLeaseAction acquires or releases a named client's lease. Acquiring
// a lease the client holds, or releasing one it does not, changes nothing.
func (s *sim) namedLeaseAction(a *Action) {
	if s.leases == nil {
		s.leases = map[string]*simLease{}
	}
	l := s.leases[a.Lease]
	if l == nil {
		l = &simLease{}
		s.leases[a.Lease] = l
		s.leaseOrder = append(s.leaseOrder, a.Lease)
	}
	switch {
	case a.Kind == ActLeaseRelease:
		l.active = false
	case a.Kind == ActLeaseRenew:
		s.leaseRenew(a, l)
	case !l.active:
		l.allowed = a.Connections
		l.ttlMs = a.LeaseTTLMs()
		if err := s.leaseAcquire(a.Lease, l, a.Model); err != "" {
			s.leaseActionFailed(a, err)
		}
	}
}

// leaseRenew renews a named client's lease (the gateway's renew action):
// model.RenewLease with the client's current owner and generation. A
// renew the fence refuses (the lease was released or has ended) fails
// the action, as the gateway's 409 fails the replay's.
func (s *sim) leaseRenew(a *Action, l *simLease) {
	var row *model.LeaseRow
	if l.active {
		row = &l.row
	}
	claim := claimOf(a.Lease, l, 0)
	if f := model.RenewLease(s.now, row, &claim, a.LeaseTTLMs()); f != model.FenceValid {
		s.leaseActionFailed(a, string(f.Code()))
		return
	}
	l.ttlMs = a.LeaseTTLMs() // a later move keeps the renewed TTL (the store's TTL)
}

// leaseActionFailed records a lease action the gateway would refuse.
func (s *sim) leaseActionFailed(a *Action, code string) {
	s.res.Failures = append(s.res.Failures, Failure{Line: a.Line, At: a.At, What: "action " + a.Kind.String(),
		Expected: "the action to apply", Found: code})
}

// leaseAcquire takes the first connection model.Engine.LeaseAcquire
// offers, for l.ttlMs.
func (s *sim) leaseAcquire(name string, l *simLease, modelName string) string {
	route, err := s.eng.Resolve(modelName)
	if err != nil {
		return err.Error()
	}
	if err := model.LeaseAcquireRoute(&route); err != nil {
		return err.Error()
	}
	held, until := s.heldNow()
	_, me := s.eng.LeaseAcquire(s.now, route, l.allowed, held, until, &s.sel)
	s.drain()
	switch {
	case me != nil:
		return string(me.Code)
	case len(s.sel.Candidates) == 0:
		return string(model.CodeLeaseCapacity)
	}
	c := s.sel.Candidates[0]
	l.owners++
	l.row = model.LeaseRow{OwnerHash: leaseOwner(name, l.owners), APIKeyID: leaseKeyID(name),
		Conn: model.ConnRef{Provider: c.Provider, Connection: c.Connection}, Generation: 1, ExpiresAt: s.now.Add(l.ttlMs)}
	l.active = true
	return ""
}

// leaseClaim is what a managed request presents: the client's current
// owner (the last one minted, active or not) and the generation.
func (s *sim) leaseClaim(t *Traffic) (model.LeaseClaim, *simLease) {
	l := s.leases[t.Lease] // nil: acquired later in the run, no owner yet
	return claimOf(t.Lease, l, t.LeaseGeneration), l
}

// claimOf is the claim named client name presents: its current owner
// (the last one minted; none yet when l is nil) and generation gen (0 =
// its lease's, at least 1).
func claimOf(name string, l *simLease, gen int64) model.LeaseClaim {
	owners, cur := 0, int64(0)
	if l != nil {
		owners, cur = l.owners, l.row.Generation
	}
	if gen == 0 {
		gen = cur
	}
	return model.LeaseClaim{OwnerHash: leaseOwner(name, owners), Generation: max(gen, 1), APIKeyID: leaseKeyID(name)}
}

// leaseOwner is the owner a named client's n-th acquire mints.
func leaseOwner(name string, n int) string { return fmt.Sprintf("%s#%d", name, n) }

// leaseDispatch prepares a managed request's flow (proxy leaseDispatch):
// model.LeaseAdmit, then model.Engine.LeaseMove. It reports whether the
// request was refused (and answered).
func (s *sim) leaseDispatch(id int32, t *Traffic) bool {
	r := &s.reqs[id]
	held, _ := s.heldNow() // a lease that ended is over
	claim, l := s.leaseClaim(t)
	var row *model.LeaseRow
	var allowed []model.ConnRef
	if l != nil && l.active {
		row, allowed = &l.row, l.allowed
	}
	if le := model.LeaseAdmit(s.now, &r.flow.Route, row, &claim, allowed); le != nil {
		s.finish(id, model.LeaseHTTPStatus(le.Code), string(le.Code), lRejected, 0)
		return true
	}
	s.sel.Candidates, s.sel.Excluded = s.sel.Candidates[:0], s.sel.Excluded[:0]
	if s.eng.LeaseMove(s.now, r.flow.Route, l.row.Conn, l.allowed, held, &s.sel) && len(s.sel.Candidates) > 0 {
		c := s.sel.Candidates[0]
		s.traceLeaseMove(r, l.row.Conn, c)
		// Same generation, a fresh TTL (the store's Transition).
		l.row.Conn = model.ConnRef{Provider: c.Provider, Connection: c.Connection}
		l.row.ExpiresAt = s.now.Add(l.ttlMs)
		s.rebuildHeld()
	}
	s.drain()
	claim.Conn = l.row.Conn
	r.lease = claim
	r.managed = true
	r.flow.Allowed = []model.ConnRef{l.row.Conn}
	r.flow.Held, r.flow.HeldUntil = nil, nil
	return false
}

func (s *sim) traceLeaseMove(r *request, from model.ConnRef, to model.Candidate) {
	s.tr.rec()
	s.tr.ev("lease_move")
	s.tr.str("from", from.String())
	s.tr.int("req", int64(r.id))
	s.tr.end(s.off(s.now))
	s.tr.str("to", to.Provider+"/"+to.Connection) // sorts after "t"
	s.tr.close()
}

// leaseFenceRefuses runs the fence before one attempt of a managed request
// (proxy leaseFenceRefuses): a refused attempt never reaches the upstream,
// is recorded neutrally (a client abort frees its breaker permit) and the
// client gets the fence's error.
func (s *sim) leaseFenceRefuses(id int32, a *model.Attempt) bool {
	r := &s.reqs[id]
	if !r.managed {
		return false
	}
	c := r.lease
	c.Conn = model.ConnRef{Provider: a.Provider, Connection: a.Connection}
	var row *model.LeaseRow
	if l := s.leases[s.sc.Traffic[r.item].Lease]; l != nil && l.active {
		row = &l.row
	}
	f := model.CheckFence(s.now, row, &c)
	if f == model.FenceValid {
		return false
	}
	r.flow.Record(s.now, s.eng, a, model.Report{Outcome: model.Outcome{Kind: model.OutcomeClientAbort}})
	s.drain()
	r.lastConn, r.hasLast = c.Conn, true
	s.finish(id, model.LeaseHTTPStatus(f.Code()), string(f.Code()), lFailed, 0)
	return true
}
