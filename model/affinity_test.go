package model

import (
	"reflect"
	"testing"
)

func TestSessionAffinity(t *testing.T) {
	// docs/selection.md#session-affinity: a session is pinned to one connection per provider for
	// sessionAffinityTtlMs (sliding); 0 disables; an ineligible pin is dropped.
	mk := func(ttl Millis) *Engine {
		p := oneProvider("p", ProfileAPIKey, 3)
		return mustEngine(t, topo(p), func(s *Settings) { s.SessionAffinityTTLMs = ttl })
	}
	sel := func(e *Engine, now Time, session string, last bool) []string {
		var s Selection
		req := Request{Route: route(t, e, "p/m1"), Session: session}
		e.Select(now, &req, &s)
		if len(s.Candidates) > 0 && session != "" {
			c := s.Candidates[0]
			if last { // the shell picks another connection this time
				c = s.Candidates[len(s.Candidates)-1]
			}
			a, err := e.Begin(now, c)
			if err != nil {
				t.Fatal(err)
			}
			e.Record(now, &a, status(200))
		}
		return candidates(&s)
	}
	e := mk(60_000)
	sel(e, at(0), "sess-a", true) // pins sess-a to k3 (the attempt went there)
	if got := sel(e, at(1000), "sess-a", false); got[0] != "p/k3" {
		t.Fatalf("pinned connection must come first: %v", got)
	}
	if got := candidates(selectAt(t, e, at(1000), "p/m1")); got[0] != "p/k1" {
		t.Fatalf("no session: strategy order: %v", got)
	}
	// The pin slides with use: still alive 60 s after the last use.
	if got := sel(e, at(60_999), "sess-a", false); got[0] != "p/k3" {
		t.Fatalf("sliding pin expired early: %v", got)
	}
	// Expiry: ExpiresAt <= now.
	var s Selection
	req := Request{Route: route(t, e, "p/m1"), Session: "sess-a"}
	e.Select(at(60_999+60_000), &req, &s)
	if got := candidates(&s); got[0] != "p/k1" {
		t.Fatalf("expired pin still applied: %v", got)
	}
	// An ineligible pinned connection drops the pin.
	e = mk(60_000)
	sel(e, at(0), "sess-b", true) // → k3
	hit(t, e, at(1), "p", "k3", "m1", status(503))
	if got := sel(e, at(2), "sess-b", false); reflect.DeepEqual(got[:1], []string{"p/k3"}) {
		t.Fatalf("cooling pinned connection selected: %v", got)
	}
	if pins := e.Pins(at(2)); len(pins) != 1 || pins[0].Connection == "k3" {
		t.Fatalf("pin must move off the cooling connection: %+v", pins)
	}
	// TTL 0 disables affinity.
	e = mk(0)
	sel(e, at(0), "sess-c", false)
	if len(e.Pins(at(0))) != 0 {
		t.Fatal("affinity with ttl 0 created a pin")
	}
}
