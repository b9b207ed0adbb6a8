package model

import (
	"fmt"
	"slices"
)

// ChangeKind says what a Change record carries.
type ChangeKind uint8

const (
	ChangeBreaker        ChangeKind = iota // Breaker (and Transition) of Provider
	ChangeConnection                       // Conn of Provider/Connection
	ChangeUsage                            // Conn use counters of Provider/Connection
	ChangeLockout                          // Lockout upserted on Provider/Connection
	ChangeLockoutRemoved                   // Lockout (by key) removed from Provider/Connection
	ChangeWindow                           // provider window gate of Provider
	ChangeCursor                           // round-robin cursor of Provider, or of Combo
	ChangePin                              // session affinity Pin created or slid
	ChangePinRemoved                       // session affinity Pin dropped
)

var changeKindNames = enumNames{"breaker", "connection", "usage", "lockout", "lockout_removed", "window", "cursor", "pin", "pin_removed"}

func (k ChangeKind) String() string               { return changeKindNames.name(uint8(k), "ChangeKind") }
func (k ChangeKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }
func (k *ChangeKind) UnmarshalText(b []byte) error {
	return parseInto(changeKindNames, b, "change kind", (*uint8)(k))
}

// Change is one typed state change: what the shell persists and the
// simulator writes to its trace. Each record carries the full new value of
// the entity it names, so applying records in order (last one wins per key)
// reproduces the engine's state.
type Change struct {
	At         Time       `json:"at"`
	Kind       ChangeKind `json:"kind"`
	Provider   string     `json:"provider,omitempty"`
	Connection string     `json:"connection,omitempty"`
	Combo      string     `json:"combo,omitempty"`
	Transition Transition `json:"transition,omitzero"`
	Breaker    Breaker    `json:"breaker,omitzero"`
	Conn       Conn       `json:"conn,omitzero"`
	Lockout    Lockout    `json:"lockout,omitzero"`
	Window     Window     `json:"window,omitzero"`
	Cursor     uint64     `json:"cursor,omitempty"`
	Pin        Pin        `json:"pin,omitzero"`
}

func (e *Engine) emit(c Change) { e.changes = append(e.changes, c) }

// emitConn records connection c's state (ChangeUsage, ChangeConnection:
// one per served request at least), written in the batch itself rather
// than built as a Change-sized temporary and copied into it.
func (e *Engine) emitConn(now Time, kind ChangeKind, p *provState, c *connState) {
	e.changes = append(e.changes, Change{})
	ch := &e.changes[len(e.changes)-1]
	ch.At, ch.Kind, ch.Provider, ch.Connection, ch.Conn = now, kind, p.id, c.id, c.st
}

func (e *Engine) emitBreaker(now Time, p *provState, tr Transition) {
	e.emit(Change{At: now, Kind: ChangeBreaker, Provider: p.id, Transition: tr, Breaker: p.breaker.clone()})
}

// Changes returns the records produced since the last call and starts a new
// batch. The slice is reused: consume it before calling the engine again.
func (e *Engine) Changes() []Change {
	out := e.changes
	e.changes = e.changes[:0]
	return out
}

// State is the engine's whole state as a plain value: everything a restart
// must restore so that no later decision changes (docs/store.md#restore).
// Records are sorted by provider, connection and key.
type State struct {
	Providers   []ProviderRecord   `json:"providers"`
	Connections []ConnectionRecord `json:"connections"`
	Combos      []ComboRecord      `json:"combos,omitempty"`
	Pins        []Pin              `json:"pins,omitempty"`
}

// ProviderRecord is one provider's breaker, window gate and cursor.
type ProviderRecord struct {
	Provider string  `json:"provider"`
	Breaker  Breaker `json:"breaker"`
	Window   Window  `json:"window,omitzero"`
	Cursor   uint64  `json:"cursor,omitempty"`
}

// ConnectionRecord is one connection's state and its model lockouts.
type ConnectionRecord struct {
	Provider   string    `json:"provider"`
	Connection string    `json:"connection"`
	Conn       Conn      `json:"conn"`
	Lockouts   []Lockout `json:"lockouts,omitempty"`
	// InFlight attempts are process-local; Durable drops them.
	InFlight int `json:"inFlight,omitempty"`
}

// ComboRecord is one combo's round-robin cursor.
type ComboRecord struct {
	Combo  string `json:"combo"`
	Cursor uint64 `json:"cursor,omitempty"`
}

// Snapshot returns a deep copy of the whole state, after applying every lazy
// refresh due at now (so a snapshot at t equals having ticked to t).
func (e *Engine) Snapshot(now Time) State {
	e.Refresh(now)
	var s State
	for i := range e.provs {
		p := &e.provs[i]
		s.Providers = append(s.Providers, ProviderRecord{Provider: p.id, Breaker: p.breaker.clone(), Window: p.window.clone(), Cursor: p.cursor})
		for j := range p.conns {
			c := &p.conns[j]
			r := ConnectionRecord{Provider: p.id, Connection: c.id, Conn: c.st, InFlight: c.inflight}
			if len(c.locks) > 0 {
				r.Lockouts = slices.Clone([]Lockout(c.locks))
				slices.SortFunc(r.Lockouts, func(a, b Lockout) int { return compareKey(a.Key, b.Key) })
			}
			s.Connections = append(s.Connections, r)
		}
	}
	for i := range e.combos {
		s.Combos = append(s.Combos, ComboRecord{Combo: e.combos[i].cfg.ID, Cursor: e.combos[i].cursor})
	}
	for _, p := range e.pins {
		s.Pins = append(s.Pins, p)
	}
	sortState(&s)
	return s
}

func compareKey(a, b LockKey) int {
	if a.Name != b.Name {
		if a.Name < b.Name {
			return -1
		}
		return 1
	}
	if a.Exact == b.Exact {
		return 0
	}
	if !a.Exact {
		return -1
	}
	return 1
}

func sortState(s *State) {
	slices.SortFunc(s.Providers, func(a, b ProviderRecord) int { return cmpStr(a.Provider, b.Provider) })
	slices.SortFunc(s.Connections, func(a, b ConnectionRecord) int {
		if c := cmpStr(a.Provider, b.Provider); c != 0 {
			return c
		}
		return cmpStr(a.Connection, b.Connection)
	})
	slices.SortFunc(s.Combos, func(a, b ComboRecord) int { return cmpStr(a.Combo, b.Combo) })
	sortPins(s.Pins)
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Durable returns the part of the state that outlives the process: in-flight
// attempts and outstanding probe permits die with it, so a restored
// HALF_OPEN breaker gets its full probe budget back.
func (s State) Durable(settings *Settings, profileOf func(provider string) Profile) State {
	out := State{Combos: slices.Clone(s.Combos), Pins: slices.Clone(s.Pins)}
	for _, p := range s.Providers {
		p.Breaker = p.Breaker.clone()
		if p.Breaker.State == HalfOpen {
			p.Breaker.ProbesLeft = max(1, settings.ProviderBreaker.For(profileOf(p.Provider)).HalfOpenRequests)
		}
		p.Breaker.Probes = nil
		p.Window = p.Window.clone()
		out.Providers = append(out.Providers, p)
	}
	for _, c := range s.Connections {
		c.InFlight = 0
		c.Lockouts = slices.Clone(c.Lockouts)
		out.Connections = append(out.Connections, c)
	}
	return out
}

// RestoreError lists records that did not match the topology; they were
// skipped, everything else was restored.
type RestoreError struct {
	Skipped []string
}

func (e *RestoreError) Error() string {
	return fmt.Sprintf("restore: skipped %d record(s) not in the topology: %v", len(e.Skipped), e.Skipped)
}

// Restore replaces the engine's state with s. Records naming providers,
// connections or combos the topology does not have are skipped and reported
// in a *RestoreError; the rest is restored. No change records are emitted.
func (e *Engine) Restore(s State) error {
	var skipped []string
	for i := range e.provs {
		p := &e.provs[i]
		p.breaker, p.window, p.cursor = Breaker{}, Window{}, 0
		for j := range p.conns {
			c := &p.conns[j]
			c.st, c.locks, c.inflight = Conn{}, nil, 0
		}
	}
	for i := range e.combos {
		e.combos[i].cursor = 0
	}
	e.pins = nil
	for _, pin := range s.Pins {
		if _, ok := e.provIdx[pin.Provider]; !ok || pin.Session == "" {
			skipped = append(skipped, "pin of provider "+pin.Provider)
			continue
		}
		if e.pins == nil {
			e.pins = map[pinKey]Pin{}
		}
		e.pins[pinKey{pin.Session, pin.Provider}] = pin
	}
	for _, r := range s.Providers {
		pi, ok := e.provIdx[r.Provider]
		if !ok {
			skipped = append(skipped, "provider "+r.Provider)
			continue
		}
		p := &e.provs[pi]
		p.breaker, p.window, p.cursor = r.Breaker.clone(), r.Window.clone(), r.Cursor
	}
	for _, r := range s.Connections {
		pi, ok := e.provIdx[r.Provider]
		if !ok {
			skipped = append(skipped, "connection "+r.Provider+"/"+r.Connection)
			continue
		}
		ci, ok := e.provs[pi].connIdx[r.Connection]
		if !ok {
			skipped = append(skipped, "connection "+r.Provider+"/"+r.Connection)
			continue
		}
		c := &e.provs[pi].conns[ci]
		c.st, c.inflight = r.Conn, r.InFlight
		c.locks = slices.Clone(lockoutSet(r.Lockouts))
	}
	for _, r := range s.Combos {
		ci, ok := e.comboIdx[r.Combo]
		if !ok {
			skipped = append(skipped, "combo "+r.Combo)
			continue
		}
		e.combos[ci].cursor = r.Cursor
	}
	if len(skipped) > 0 {
		return &RestoreError{Skipped: skipped}
	}
	return nil
}

// Apply folds change records into a State, as a store would: the last
// record per entity wins. It lets tests check that the records describe the
// state completely.
func (s *State) Apply(changes []Change) {
	for _, c := range changes {
		switch c.Kind {
		case ChangePin, ChangePinRemoved:
			i := slices.IndexFunc(s.Pins, func(p Pin) bool { return p.Session == c.Pin.Session && p.Provider == c.Pin.Provider })
			switch {
			case c.Kind == ChangePinRemoved && i >= 0:
				s.Pins = slices.Delete(s.Pins, i, i+1)
			case c.Kind == ChangePin && i >= 0:
				s.Pins[i] = c.Pin
			case c.Kind == ChangePin:
				s.Pins = append(s.Pins, c.Pin)
			}
			continue
		case ChangeBreaker, ChangeWindow, ChangeCursor:
			if c.Combo != "" {
				i := slices.IndexFunc(s.Combos, func(r ComboRecord) bool { return r.Combo == c.Combo })
				if i < 0 {
					s.Combos = append(s.Combos, ComboRecord{Combo: c.Combo})
					i = len(s.Combos) - 1
				}
				s.Combos[i].Cursor = c.Cursor
				continue
			}
			i := slices.IndexFunc(s.Providers, func(r ProviderRecord) bool { return r.Provider == c.Provider })
			if i < 0 {
				s.Providers = append(s.Providers, ProviderRecord{Provider: c.Provider})
				i = len(s.Providers) - 1
			}
			switch c.Kind {
			case ChangeBreaker:
				s.Providers[i].Breaker = c.Breaker.clone()
			case ChangeWindow:
				s.Providers[i].Window = c.Window.clone()
			default:
				s.Providers[i].Cursor = c.Cursor
			}
		default:
			i := slices.IndexFunc(s.Connections, func(r ConnectionRecord) bool {
				return r.Provider == c.Provider && r.Connection == c.Connection
			})
			if i < 0 {
				s.Connections = append(s.Connections, ConnectionRecord{Provider: c.Provider, Connection: c.Connection})
				i = len(s.Connections) - 1
			}
			r := &s.Connections[i]
			switch c.Kind {
			case ChangeConnection:
				uses, last := r.Conn.Uses, r.Conn.LastUsedAt
				r.Conn = c.Conn
				r.Conn.Uses, r.Conn.LastUsedAt = max(uses, c.Conn.Uses), max(last, c.Conn.LastUsedAt)
			case ChangeUsage:
				r.Conn.Uses, r.Conn.LastUsedAt = c.Conn.Uses, c.Conn.LastUsedAt
			case ChangeLockout:
				j := slices.IndexFunc(r.Lockouts, func(l Lockout) bool { return l.Key == c.Lockout.Key })
				if j < 0 {
					r.Lockouts = append(r.Lockouts, c.Lockout)
				} else {
					r.Lockouts[j] = c.Lockout
				}
			case ChangeLockoutRemoved:
				r.Lockouts = slices.DeleteFunc(r.Lockouts, func(l Lockout) bool { return l.Key == c.Lockout.Key })
			}
		}
	}
	sortState(s)
	for i := range s.Connections {
		slices.SortFunc(s.Connections[i].Lockouts, func(a, b Lockout) int { return compareKey(a.Key, b.Key) })
	}
}
