package proxy

import (
	"crypto/sha256"
	"net/http"
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Session affinity (SPEC §2c, REFERENCE M15): a client session is pinned to
// one connection per provider so multi-turn agents stay on one account. The
// selection itself stays the model's: the pin only reorders the eligible
// candidates the model returned (pinOrder, a pure function and a candidate
// for package model), and a pin whose connection is no longer eligible is
// dropped.

// sessionHeaders are read in order; none of them is ever forwarded upstream.
var sessionHeaders = []string{"X-Session-Id", "X-Breakwater-Session"}

// sessionKey returns a digest of the request's session header, or false.
// Session ids are never kept or logged in clear.
func sessionKey(r *http.Request) ([32]byte, bool) {
	for _, h := range sessionHeaders {
		if v := r.Header.Get(h); v != "" {
			return sha256.Sum256([]byte(v)), true
		}
	}
	return [32]byte{}, false
}

type pinKey struct {
	session  [32]byte
	provider string
}

type pin struct {
	connection string
	expires    time.Time
}

type affinity struct {
	mu   sync.Mutex
	pins map[pinKey]pin
}

func newAffinity() *affinity { return &affinity{pins: map[pinKey]pin{}} }

// lookup returns the live pins of a session for the providers in cands.
func (a *affinity) lookup(session [32]byte, cands []model.Candidate, now time.Time, out map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range cands {
		if _, done := out[c.Provider]; done {
			continue
		}
		k := pinKey{session, c.Provider}
		p, ok := a.pins[k]
		if !ok {
			continue
		}
		if !now.Before(p.expires) {
			delete(a.pins, k)
			continue
		}
		out[c.Provider] = p.connection
	}
}

// set pins (or re-pins, sliding the TTL) a session to a connection.
func (a *affinity) set(session [32]byte, provider, connection string, expires time.Time) {
	a.mu.Lock()
	a.pins[pinKey{session, provider}] = pin{connection, expires}
	a.mu.Unlock()
}

// drop removes a pin only if it still points at connection (REFERENCE M15
// failover).
func (a *affinity) drop(session [32]byte, provider, connection string) {
	a.mu.Lock()
	k := pinKey{session, provider}
	if p, ok := a.pins[k]; ok && p.connection == connection {
		delete(a.pins, k)
	}
	a.mu.Unlock()
}

// sweep forgets expired pins.
func (a *affinity) sweep(now time.Time) {
	a.mu.Lock()
	for k, p := range a.pins {
		if !now.Before(p.expires) {
			delete(a.pins, k)
		}
	}
	a.mu.Unlock()
}

func (a *affinity) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pins)
}

// pinOrder moves each provider's pinned connection to the front of its run
// of candidates (same target), keeping every other candidate in the model's
// order. It returns the providers whose pin was not among the candidates
// (their pins are stale).
func pinOrder(cands []model.Candidate, pins map[string]string) (stale []string) {
	if len(pins) == 0 {
		return nil
	}
	found := map[string]bool{}
	for i := 0; i < len(cands); {
		j := i
		for j < len(cands) && cands[j].Target == cands[i].Target && cands[j].Provider == cands[i].Provider {
			j++
		}
		if want, ok := pins[cands[i].Provider]; ok {
			for k := i; k < j; k++ {
				if cands[k].Connection == want {
					found[cands[i].Provider] = true
					c := cands[k]
					copy(cands[i+1:k+1], cands[i:k])
					cands[i] = c
					break
				}
			}
		}
		i = j
	}
	for p := range pins {
		if !found[p] {
			stale = append(stale, p)
		}
	}
	return stale
}
