package store

import (
	"cmp"
	"slices"
	"sync"

	"github.com/breakwater-gw/breakwater/model"
)

// The mirror is the store's in-memory picture of the persisted state: the
// latest value of every entity the engine reported, folded from change
// records exactly as model.State.Apply folds them. Postgres writes dirty
// entities behind; the memory store simply is its mirror.

// kind names an entity table.
type kind uint8

const (
	kindBreaker kind = iota
	kindWindow
	kindCursor
	kindConn
	kindLockout
	kindPin
	kindSettings // only in the change feed
)

var kindNames = [...]string{"breaker", "window", "cursor", "connection", "lockout", "pin", "settings"}

func (k kind) String() string { return kindNames[k] }

func parseKind(s string) (kind, bool) {
	i := slices.Index(kindNames[:], s)
	return kind(i), i >= 0
}

// key identifies one entity. provider is the provider id ("" for a combo
// cursor, whose combo id is in name); name is a lockout key name, a combo id
// or a pin's session hash.
type key struct {
	kind     kind
	provider string
	conn     string
	name     string
	exact    bool
}

// value is an entity's value; only the field of its kind is meaningful.
type value struct {
	present bool // false: the entity was removed (lockouts, pins)
	at      model.Time
	breaker model.Breaker
	window  model.Window
	cursor  uint64
	conn    model.Conn
	lock    model.Lockout
	pin     model.Pin
}

func (v value) clone() value {
	v.breaker.Probes = slices.Clone(v.breaker.Probes)
	v.window.Failures = slices.Clone(v.window.Failures)
	return v
}

type entry struct {
	key   key
	val   value
	base  int64 // database version this value descends from (0: none seen)
	anc   value // the stored value at version base: the common ancestor for merge3
	dirty bool
	// flushing: a flush took this entity's local value and has not finished;
	// until it has, that value is a local change a remote one must merge
	// with (dirty alone no longer says so).
	flushing bool
}

type mirror struct {
	mu    sync.Mutex
	track bool // collect dirty entries (Postgres); the memory store does not
	ents  map[key]*entry
	dirty []*entry
	// flight is how many entities a flush took (takeDirty) and has not
	// finished writing: still pending changes, though no longer dirty.
	flight int
	// remote holds other replicas' values waiting for ApplyRemote, latest
	// per entity.
	remote map[key]remoteValue
}

type remoteValue struct {
	val     value
	version int64
	// merge: the value this replica's own flush wrote after merging with a
	// concurrent one; anc is the local value that flush started from, so
	// changes made since are kept (merge3) even though the version is
	// already known.
	merge bool
	anc   value
}

func newMirror(track bool) *mirror {
	return &mirror{track: track, ents: map[key]*entry{}, remote: map[key]remoteValue{}}
}

// get returns the entry for k, creating it; the caller holds mu.
func (m *mirror) get(k key) *entry {
	if e, ok := m.ents[k]; ok {
		return e
	}
	e := &entry{key: k}
	m.ents[k] = e
	return e
}

func (m *mirror) markDirty(e *entry) {
	if m.track && !e.dirty {
		e.dirty = true
		m.dirty = append(m.dirty, e)
	}
}

// apply folds change records like model.State.Apply; the caller holds mu.
func (m *mirror) apply(changes []model.Change) {
	for i := range changes {
		c := &changes[i]
		var e *entry
		switch c.Kind {
		case model.ChangeBreaker, model.ChangeWindow, model.ChangeCursor:
			if c.Combo != "" {
				e = m.get(key{kind: kindCursor, name: c.Combo})
				e.val.cursor = c.Cursor
				break
			}
			switch c.Kind {
			case model.ChangeBreaker:
				e = m.get(key{kind: kindBreaker, provider: c.Provider})
				e.val.breaker = c.Breaker
				e.val.breaker.Probes = slices.Clone(c.Breaker.Probes)
			case model.ChangeWindow:
				e = m.get(key{kind: kindWindow, provider: c.Provider})
				e.val.window = c.Window
				e.val.window.Failures = slices.Clone(c.Window.Failures)
			default:
				e = m.get(key{kind: kindCursor, provider: c.Provider})
				e.val.cursor = c.Cursor
			}
		case model.ChangeConnection:
			e = m.get(key{kind: kindConn, provider: c.Provider, conn: c.Connection})
			uses, last := e.val.conn.Uses, e.val.conn.LastUsedAt
			e.val.conn = c.Conn
			e.val.conn.Uses, e.val.conn.LastUsedAt = max(uses, c.Conn.Uses), max(last, c.Conn.LastUsedAt)
		case model.ChangeUsage:
			e = m.get(key{kind: kindConn, provider: c.Provider, conn: c.Connection})
			e.val.conn.Uses, e.val.conn.LastUsedAt = c.Conn.Uses, c.Conn.LastUsedAt
		case model.ChangePin, model.ChangePinRemoved:
			e = m.get(key{kind: kindPin, provider: c.Pin.Provider, name: c.Pin.Session})
			e.val.present = c.Kind == model.ChangePin
			e.val.pin = c.Pin
		case model.ChangeLockout, model.ChangeLockoutRemoved:
			e = m.get(key{kind: kindLockout, provider: c.Provider, conn: c.Connection, name: c.Lockout.Key.Name, exact: c.Lockout.Key.Exact})
			e.val.present = c.Kind == model.ChangeLockout
			e.val.lock = c.Lockout
			if c.Kind == model.ChangeLockout {
				// A lockout's connection has a record even if the
				// connection itself never changed, as in State.Apply.
				m.get(key{kind: kindConn, provider: c.Provider, conn: c.Connection}).val.present = true
			}
		default:
			continue
		}
		e.val.present = e.val.present || (c.Kind != model.ChangeLockoutRemoved && c.Kind != model.ChangePinRemoved)
		e.val.at = c.At
		m.markDirty(e)
	}
}

// state builds a model.State from the mirror; the caller holds mu.
func (m *mirror) state() model.State {
	var st model.State
	provs := map[string]int{}
	conns := map[[2]string]int{}
	prov := func(id string) *model.ProviderRecord {
		i, ok := provs[id]
		if !ok {
			i = len(st.Providers)
			provs[id] = i
			st.Providers = append(st.Providers, model.ProviderRecord{Provider: id})
		}
		return &st.Providers[i]
	}
	conn := func(p, c string) *model.ConnectionRecord {
		i, ok := conns[[2]string{p, c}]
		if !ok {
			i = len(st.Connections)
			conns[[2]string{p, c}] = i
			st.Connections = append(st.Connections, model.ConnectionRecord{Provider: p, Connection: c})
		}
		return &st.Connections[i]
	}
	for k, e := range m.ents {
		if !e.val.present {
			continue
		}
		v := e.val.clone()
		switch k.kind {
		case kindBreaker:
			prov(k.provider).Breaker = v.breaker
		case kindWindow:
			prov(k.provider).Window = v.window
		case kindCursor:
			if k.provider == "" {
				st.Combos = append(st.Combos, model.ComboRecord{Combo: k.name, Cursor: v.cursor})
			} else {
				prov(k.provider).Cursor = v.cursor
			}
		case kindConn:
			conn(k.provider, k.conn).Conn = v.conn
		case kindLockout:
			r := conn(k.provider, k.conn)
			r.Lockouts = append(r.Lockouts, v.lock)
		case kindPin:
			st.Pins = append(st.Pins, v.pin)
		}
	}
	sortState(&st)
	return st
}

func sortState(st *model.State) {
	slices.SortFunc(st.Providers, func(a, b model.ProviderRecord) int { return cmp.Compare(a.Provider, b.Provider) })
	slices.SortFunc(st.Connections, func(a, b model.ConnectionRecord) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Connection, b.Connection))
	})
	slices.SortFunc(st.Combos, func(a, b model.ComboRecord) int { return cmp.Compare(a.Combo, b.Combo) })
	for i := range st.Connections {
		slices.SortFunc(st.Connections[i].Lockouts, compareLockouts)
	}
	// as model.State: by session key, then provider
	slices.SortFunc(st.Pins, func(a, b model.Pin) int {
		return cmp.Or(cmp.Compare(a.Session, b.Session), cmp.Compare(a.Provider, b.Provider))
	})
}

// compareLockouts orders lockouts as model.Snapshot does: by key name, the
// bare key before the exact one.
func compareLockouts(a, b model.Lockout) int {
	if c := cmp.Compare(a.Key.Name, b.Key.Name); c != 0 {
		return c
	}
	switch {
	case a.Key.Exact == b.Key.Exact:
		return 0
	case !a.Key.Exact:
		return -1
	}
	return 1
}

// takeDirty hands the dirty entities' current values to a flush and clears
// their dirty marks; the caller holds mu.
func (m *mirror) takeDirty() []entry {
	out := make([]entry, len(m.dirty))
	for i, e := range m.dirty {
		out[i] = entry{key: e.key, val: e.val.clone(), base: e.base, anc: e.anc.clone()}
		e.dirty, e.flushing = false, true
	}
	clear(m.dirty)
	m.dirty = m.dirty[:0]
	m.flight = len(out)
	return out
}

// requeue marks entities dirty again after a failed flush; their values in
// the mirror are the latest anyway.
func (m *mirror) requeue(batch []entry) {
	m.flight = 0
	for i := range batch {
		if e, ok := m.ents[batch[i].key]; ok {
			e.flushing = false
			m.markDirty(e)
		}
	}
}

// pending counts the entities whose local change is not yet written: the
// dirty ones and those a flush is writing now (one taken and changed
// again since counts once).
func (m *mirror) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.dirty) + m.flight
	for _, e := range m.dirty {
		if e.flushing {
			n--
		}
	}
	return n
}
