package model

import "slices"

// Pin is a session affinity pin (docs/selection.md#session-affinity): one client session stays on one
// connection of a provider, so a multi-turn agent keeps its account.
// Session is an opaque key chosen by the shell — a hash of the session
// header, never the raw id, which must not be stored or logged.
type Pin struct {
	Session    string `json:"session"`
	Provider   string `json:"provider"`
	Connection string `json:"connection"`
	ExpiresAt  Time   `json:"expiresAt"` // expired when ExpiresAt <= now
}

type pinKey struct{ session, provider string }

// applyAffinity moves a live pin's connection to the front of one target's
// candidates (those from index from on). A pin whose connection is no longer
// a candidate, or that expired, is dropped.
func (e *Engine) applyAffinity(now Time, req *Request, out *Selection, from int, p *provState) {
	ttl := int64(e.settings.SessionAffinityTTLMs)
	if ttl <= 0 || req.Session == "" {
		return
	}
	for i := from; i < len(out.Candidates); i++ {
		out.Candidates[i].session = req.Session
	}
	k := pinKey{req.Session, p.id}
	pin, ok := e.pins[k]
	if !ok {
		return
	}
	if pin.ExpiresAt <= now {
		e.dropPin(now, k)
		return
	}
	for i := from; i < len(out.Candidates); i++ {
		if out.Candidates[i].Connection == pin.Connection {
			c := out.Candidates[i]
			copy(out.Candidates[from+1:i+1], out.Candidates[from:i])
			out.Candidates[from] = c
			return
		}
	}
	e.dropPin(now, k)
}

// pinOnBegin creates or slides the pin of a session to the connection an
// attempt starts on.
func (e *Engine) pinOnBegin(now Time, c *Candidate) {
	ttl := int64(e.settings.SessionAffinityTTLMs)
	if ttl <= 0 || c.session == "" {
		return
	}
	pin := Pin{Session: c.session, Provider: c.Provider, Connection: c.Connection, ExpiresAt: now.Add(ttl)}
	if e.pins == nil {
		e.pins = map[pinKey]Pin{}
	}
	e.pins[pinKey{c.session, c.Provider}] = pin
	e.emit(Change{At: now, Kind: ChangePin, Provider: pin.Provider, Connection: pin.Connection, Pin: pin})
}

func (e *Engine) dropPin(now Time, k pinKey) {
	pin := e.pins[k]
	delete(e.pins, k)
	e.emit(Change{At: now, Kind: ChangePinRemoved, Provider: pin.Provider, Connection: pin.Connection, Pin: pin})
}

// expirePins drops every expired pin, in a deterministic order.
func (e *Engine) expirePins(now Time) {
	var dead []pinKey
	for k, p := range e.pins {
		if p.ExpiresAt <= now {
			dead = append(dead, k)
		}
	}
	slices.SortFunc(dead, comparePinKey)
	for _, k := range dead {
		e.dropPin(now, k)
	}
}

func comparePinKey(a, b pinKey) int {
	if c := cmpStr(a.session, b.session); c != 0 {
		return c
	}
	return cmpStr(a.provider, b.provider)
}

// Pins lists the live pins (for the management API and the store).
func (e *Engine) Pins(now Time) []Pin {
	out := make([]Pin, 0, len(e.pins))
	for _, p := range e.pins {
		if p.ExpiresAt > now {
			out = append(out, p)
		}
	}
	sortPins(out)
	return out
}

func sortPins(ps []Pin) {
	slices.SortFunc(ps, func(a, b Pin) int {
		return comparePinKey(pinKey{a.Session, a.Provider}, pinKey{b.Session, b.Provider})
	})
}
