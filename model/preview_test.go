package model

import (
	"slices"
	"testing"
)

func candOrder(s *Selection) []string {
	var out []string
	for _, c := range s.Candidates {
		out = append(out, c.Provider+"/"+c.Connection)
	}
	return out
}

// Preview is read-only: a round-robin cursor does not move, no change is
// emitted, and the next real Select answers as if no preview happened.
func TestPreviewMovesNoRoundRobinCursor(t *testing.T) {
	p := oneProvider("p", ProfileAPIKey, 3)
	p.Strategy = RoundRobin
	e := mustEngine(t, topo(p), nil)
	e.Changes()
	req := Request{Route: route(t, e, "p/m1")}
	var a, b Selection
	e.Preview(at(0), &req, &a)
	e.Preview(at(0), &req, &b)
	if !slices.Equal(candOrder(&a), candOrder(&b)) || len(a.Candidates) != 3 {
		t.Fatalf("two previews differ: %v then %v", candOrder(&a), candOrder(&b))
	}
	if n := e.PendingChanges(); n != 0 {
		t.Fatalf("preview emitted %d changes, want 0", n)
	}
	first := selectAt(t, e, at(0), "p/m1")
	if !slices.Equal(candOrder(first), candOrder(&a)) {
		t.Fatalf("Select after a preview = %v, want the previewed %v", candOrder(first), candOrder(&a))
	}
	var c Selection
	e.Preview(at(0), &req, &c)
	if slices.Equal(candOrder(&c), candOrder(&a)) {
		t.Fatalf("preview after a Select still shows %v: the cursor it reads did not move", candOrder(&a))
	}
}

// Preview takes no random draw: an engine that previewed a random combo
// draws the same next order as one that did not.
func TestPreviewTakesNoRandomDraw(t *testing.T) {
	build := func() *Engine {
		p := oneProvider("p", ProfileAPIKey, 4)
		p.Strategy = Random
		q := oneProvider("q", ProfileAPIKey, 1)
		tp := topo(p, q)
		tp.Combos = []ComboConfig{{ID: "c", Strategy: Weighted, Targets: []ComboTarget{{Provider: "p", Model: "m1"}, {Provider: "q", Model: "m1"}}}}
		return mustEngine(t, tp, nil)
	}
	e1, e2 := build(), build()
	req := Request{Route: route(t, e1, "c")}
	var s Selection
	for range 5 {
		e1.Preview(at(0), &req, &s)
	}
	if got := candOrder(&s); !slices.Equal(got, []string{"p/k1", "p/k2", "p/k3", "p/k4", "q/k1"}) {
		t.Fatalf("preview of a random/weighted route = %v, want configuration order", got)
	}
	for i := range 5 {
		a, b := selectAt(t, e1, at(0), "c"), selectAt(t, e2, at(0), "c")
		if !slices.Equal(candOrder(a), candOrder(b)) {
			t.Fatalf("select %d after previews = %v, without = %v: a preview consumed randomness", i, candOrder(a), candOrder(b))
		}
	}
}

// Preview reports exclusions with their reasons like Select does.
func TestPreviewReportsExclusions(t *testing.T) {
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 2)), nil)
	a := beginOn(t, e, at(0), "p", "k1", "m1")
	e.Record(at(1), &a, status(401))
	req := Request{Route: route(t, e, "p/m1")}
	var s Selection
	e.Preview(at(2), &req, &s)
	if len(s.Excluded) != 1 || s.Excluded[0].Connection != "k1" || s.Excluded[0].Reason != ExclConnectionCooldown ||
		s.Excluded[0].LockReason != ReasonAuthError || s.Excluded[0].RemainingMs <= 0 {
		t.Fatalf("excluded = %+v, want k1 cooling after an auth error, with its time left", s.Excluded)
	}
	if got := candOrder(&s); !slices.Equal(got, []string{"p/k2"}) {
		t.Fatalf("candidates = %v, want [p/k2]", got)
	}
	if st, ok := e.Strategy(req.Route); !ok || st != FillFirst {
		t.Fatalf("Strategy = %v %v, want fill-first", st, ok)
	}
}

// The connection view shows the 401 ladder's strikes (toward expired) so an
// operator sees how close a key is to terminal; a strike older than the
// streak window no longer counts.
func TestConnectionViewShowsLadderStrikes(t *testing.T) {
	e := mustEngine(t, topo(oneProvider("p", ProfileAPIKey, 1)), nil)
	a := beginOn(t, e, at(0), "p", "k1", "m1")
	e.Record(at(1), &a, status(401))
	v := e.Connections(at(2), "p")[0]
	if v.AuthStrikes != 1 || v.AuthStrikesMax != expiredRetryMax+1 || v.RejectedStrikes != 0 || v.RejectedStrikesMax != rejectedThreshold {
		t.Fatalf("view after one 401 = %+v", v)
	}
	if v := e.Connections(at(1+streakWindowMs), "p")[0]; v.AuthStrikes != 0 {
		t.Fatalf("a strike past the streak window still shows: %+v", v)
	}
}
