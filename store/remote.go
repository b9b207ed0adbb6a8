package store

import (
	"errors"
	"slices"

	"github.com/breakwater-gw/breakwater/model"
)

// enqueueRemote records another replica's value for ApplyRemote, keeping
// the newest version per entity; the caller holds mu.
func (m *mirror) enqueueRemote(k key, v value, version int64) {
	if r, ok := m.remote[k]; ok && r.version > version {
		return
	}
	m.remote[k] = remoteValue{val: v, version: version}
}

// forgetVersions drops every database version this replica descends from
// (and the queued remote values): the database's history restarted (the
// feed was recreated under a running replica), so its versions no longer
// compare with the ones remembered. The resync that follows takes every
// stored row, merging with local changes not yet written. The caller holds
// mu.
func (m *mirror) forgetVersions() {
	for _, e := range m.ents {
		e.base, e.anc = 0, value{}
	}
	m.remote = map[key]remoteValue{}
}

// applyRemote folds queued remote values into the engine: a value older
// than what this replica already descends from is dropped; an entity with
// local changes not yet written is merged (the two are concurrent); any other
// entity takes the remote value. The engine is snapshotted and restored, so
// in-flight attempts and probe permits survive. Lazy refreshes the snapshot
// runs are folded into the mirror first, as if the shell had passed them to
// Apply.
func (m *mirror) applyRemote(e *model.Engine, now model.Time) (int, error) {
	m.mu.Lock()
	if len(m.remote) == 0 {
		m.mu.Unlock()
		return 0, nil
	}
	m.mu.Unlock()

	st := e.Snapshot(now)
	m.mu.Lock()
	m.apply(e.Changes())
	queued := m.remote
	m.remote = map[key]remoteValue{}
	idx := newStateIndex(&st)
	n := 0
	for k, r := range queued {
		ent, ok := m.ents[k]
		if ok && (r.version < ent.base || (!r.merge && r.version == ent.base)) {
			continue
		}
		v := r.val
		switch {
		case ok && r.merge:
			v = merge3(k.kind, r.anc, ent.val, r.val)
		case ok && (ent.dirty || ent.flushing):
			// Local changes not yet written, or being written by a flush
			// that has not finished: concurrent with the remote value.
			v = merge3(k.kind, ent.anc, ent.val, r.val)
		}
		if !ok {
			ent = m.get(k)
		}
		ent.val, ent.base, ent.anc = v.clone(), r.version, r.val.clone()
		idx.set(k, v)
		n++
	}
	m.mu.Unlock()
	sortState(&st)
	if err := e.Restore(st); err != nil {
		var re *model.RestoreError
		if !errors.As(err, &re) {
			return n, err
		}
		// Entities of providers this replica's topology lacks are kept in
		// the mirror (and the database) but not in the engine.
	}
	return n, nil
}

// stateIndex finds records of a State by entity key.
type stateIndex struct {
	st    *model.State
	provs map[string]int
	conns map[[2]string]int
	combo map[string]int
}

func newStateIndex(st *model.State) *stateIndex {
	x := &stateIndex{st: st, provs: map[string]int{}, conns: map[[2]string]int{}, combo: map[string]int{}}
	for i, p := range st.Providers {
		x.provs[p.Provider] = i
	}
	for i, c := range st.Connections {
		x.conns[[2]string{c.Provider, c.Connection}] = i
	}
	for i, c := range st.Combos {
		x.combo[c.Combo] = i
	}
	return x
}

func (x *stateIndex) prov(id string) *model.ProviderRecord {
	i, ok := x.provs[id]
	if !ok {
		i = len(x.st.Providers)
		x.provs[id] = i
		x.st.Providers = append(x.st.Providers, model.ProviderRecord{Provider: id})
	}
	return &x.st.Providers[i]
}

func (x *stateIndex) conn(p, c string) *model.ConnectionRecord {
	i, ok := x.conns[[2]string{p, c}]
	if !ok {
		i = len(x.st.Connections)
		x.conns[[2]string{p, c}] = i
		x.st.Connections = append(x.st.Connections, model.ConnectionRecord{Provider: p, Connection: c})
	}
	return &x.st.Connections[i]
}

func (x *stateIndex) set(k key, v value) {
	switch k.kind {
	case kindBreaker:
		// Keep the local record's in-flight probes only if the remote value
		// is the same breaker generation: merge already united them.
		x.prov(k.provider).Breaker = v.breaker
	case kindWindow:
		x.prov(k.provider).Window = v.window
	case kindCursor:
		if k.provider != "" {
			x.prov(k.provider).Cursor = v.cursor
			return
		}
		i, ok := x.combo[k.name]
		if !ok {
			i = len(x.st.Combos)
			x.combo[k.name] = i
			x.st.Combos = append(x.st.Combos, model.ComboRecord{Combo: k.name})
		}
		x.st.Combos[i].Cursor = v.cursor
	case kindConn:
		r := x.conn(k.provider, k.conn)
		r.Conn = v.conn
	case kindPin:
		j := slices.IndexFunc(x.st.Pins, func(p model.Pin) bool { return p.Session == k.name && p.Provider == k.provider })
		switch {
		case v.present && j >= 0:
			x.st.Pins[j] = v.pin
		case v.present:
			x.st.Pins = append(x.st.Pins, v.pin)
		case j >= 0:
			x.st.Pins = slices.Delete(x.st.Pins, j, j+1)
		}
	case kindLockout:
		r := x.conn(k.provider, k.conn)
		lk := model.LockKey{Name: k.name, Exact: k.exact}
		j := -1
		for i := range r.Lockouts {
			if r.Lockouts[i].Key == lk {
				j = i
				break
			}
		}
		switch {
		case v.present && j >= 0:
			r.Lockouts[j] = v.lock
		case v.present:
			r.Lockouts = append(r.Lockouts, v.lock)
		case j >= 0:
			r.Lockouts = append(r.Lockouts[:j], r.Lockouts[j+1:]...)
		}
	}
}
