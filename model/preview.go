package model

// Preview answers what Select would answer at now — the candidates in try
// order and every exclusion with its reason — without changing what a
// selection changes: round-robin cursors stay where they are (no cursor
// change is emitted), no random draw is taken (random, weighted and p2c
// orders are shown in configuration order, since a real request draws its
// own), and no session pin is read or dropped. Lazy state refreshes as on
// every read (an OPEN breaker past its deadline reads as HALF_OPEN).
//
// It is for an operator looking at a route ("what would this pick now, and
// why not the others"); a request never calls it.
func (e *Engine) Preview(now Time, req *Request, out *Selection) {
	r := *req
	r.Session = ""
	e.peek = true
	defer func() { e.peek = false }()
	e.SelectAll(now, &r, out)
}

// Strategy is the route's ordering strategy: the combo's, or the
// provider's for a single-model route. ok is false for an unknown route.
func (e *Engine) Strategy(r Route) (s Strategy, ok bool) {
	if r.Combo != "" {
		i, found := e.comboIdx[r.Combo]
		if !found {
			return 0, false
		}
		return e.combos[i].cfg.Strategy, true
	}
	i, found := e.provIdx[r.Provider]
	if !found {
		return 0, false
	}
	return e.provs[i].cfg.Strategy, true
}
