package model

// UpdateTopology replaces the topology the engine routes over (a config
// reload) and keeps the state of everything that stays: a provider that
// keeps its id keeps its breaker, window and cursor; a connection that
// keeps its provider and id keeps its status, cooldowns, lockouts, counts,
// in-flight attempts, lane and credential, and takes its new config (caps,
// priority, weight, spend wall). A combo that keeps its id keeps its
// cursor. Providers, connections and combos that are gone are dropped with
// their state, and so are pins to a connection that is gone; new ones start
// fresh. The topology is validated whole first: on error nothing changes.
//
// Attempts begun before the update stay valid: Record, the limiter
// feedback and the spend wall find their connection again by its ids
// (locate). The outcome of an attempt whose connection is gone changes no
// state; its verdict stops the request (the flow answers with what it has).
func (e *Engine) UpdateTopology(topo Topology) error {
	ne, err := NewEngine(topo, e.settings, e.rng)
	if err != nil {
		return err
	}
	for i := range ne.provs {
		np := &ne.provs[i]
		oi, ok := e.provIdx[np.id]
		if !ok {
			continue
		}
		op := &e.provs[oi]
		np.breaker, np.window, np.cursor = op.breaker, op.window, op.cursor
		for j := range np.conns {
			nc := &np.conns[j]
			oj, ok := op.connIdx[nc.id]
			if !ok {
				continue
			}
			cfg := nc.cfg
			*nc = op.conns[oj]
			nc.cfg = cfg
		}
	}
	for i := range ne.combos {
		if oi, ok := e.comboIdx[ne.combos[i].cfg.ID]; ok {
			ne.combos[i].cursor = e.combos[oi].cursor
		}
	}
	for k, pin := range e.pins {
		if _, _, ok := ne.locate(-1, -1, pin.Provider, pin.Connection); ok {
			if ne.pins == nil {
				ne.pins = map[pinKey]Pin{}
			}
			ne.pins[k] = pin
		}
	}
	ne.changes = e.changes
	*e = *ne
	return nil
}

// locate returns the indices of provider prov's connection conn: p and c
// when they still name it (the common case, two string compares), else a
// lookup by id, for an attempt or candidate begun before UpdateTopology.
// ok is false when the connection is gone.
func (e *Engine) locate(p, c int32, prov, conn string) (int32, int32, bool) {
	if p >= 0 && int(p) < len(e.provs) {
		ps := &e.provs[p]
		if c >= 0 && int(c) < len(ps.conns) && ps.id == prov && ps.conns[c].id == conn {
			return p, c, true
		}
	}
	pi, ok := e.provIdx[prov]
	if !ok {
		return 0, 0, false
	}
	ci, ok := e.provs[pi].connIdx[conn]
	if !ok {
		return 0, 0, false
	}
	return int32(pi), int32(ci), true
}

// relocate points a at its connection's current indices; false when the
// connection is gone.
func (e *Engine) relocate(a *Attempt) bool {
	p, c, ok := e.locate(a.p, a.c, a.Provider, a.Connection)
	if ok {
		a.p, a.c = p, c
	}
	return ok
}
