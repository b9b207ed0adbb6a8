package model

import (
	"cmp"
	"fmt"
	"github.com/breakwater-gw/breakwater/internal/suggest"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Route is a resolved client model: a combo, or one provider and model.
type Route struct {
	Name     string `json:"name"`     // what the client asked for
	Combo    string `json:"combo"`    // combo id, or "" for a single-model route
	Provider string `json:"provider"` // single-model route
	Model    string `json:"model"`
	combo    int32
	provider int32
	weighted bool // a weighted combo (its all-excluded answer, docs/selection.md#waiting-for-a-cooldown)
}

// IsCombo reports whether the route is a combo.
func (r *Route) IsCombo() bool { return r.Combo != "" }

// Resolve turns a client model name into a route (docs/settings.md#defaults): combo id →
// alias → provider/model with a configured provider → a bare model listed
// by exactly one provider → a CodeModelNotFound error naming the candidates.
func (e *Engine) Resolve(name string) (Route, error) {
	if r, ok := e.routes[name]; ok {
		return r, nil
	}
	r, err := e.resolve(name, true)
	if err == nil && r.Name == name && len(e.routes) < maxRoutes {
		if e.routes == nil {
			e.routes = map[string]Route{}
		}
		e.routes[name] = r
	}
	return r, err
}

// maxRoutes bounds Engine.routes.
const maxRoutes = 1024

func (e *Engine) resolve(name string, aliases bool) (Route, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return Route{}, &Error{Code: CodeInvalidModel, Message: "model is required"}
	}
	if i, ok := e.comboIdx[name]; ok {
		return Route{Name: name, Combo: name, combo: int32(i), provider: -1, weighted: e.topo.Combos[i].Strategy == Weighted}, nil
	}
	if aliases {
		if target, ok := e.topo.Aliases[name]; ok {
			r, err := e.resolve(target, false)
			r.Name = name
			return r, err
		}
	}
	if prov, model, ok := strings.Cut(name, "/"); ok {
		if i, ok := e.provIdx[prov]; ok {
			if model == "" {
				return Route{}, &Error{Code: CodeInvalidModel, Message: fmt.Sprintf("model %q names provider %q but no model", name, prov)}
			}
			p := &e.provs[i]
			if p.models != nil && !p.models[model] {
				return Route{}, &Error{Code: CodeModelNotFound, Message: fmt.Sprintf("provider %q does not serve model %q; it serves %v", prov, model, p.cfg.Models)}
			}
			return Route{Name: name, Provider: prov, Model: model, provider: int32(i), combo: -1}, nil
		}
	}
	var found []int
	for i := range e.provs {
		if e.provs[i].models[name] {
			found = append(found, i)
		}
	}
	if len(found) == 1 {
		p := &e.provs[found[0]]
		return Route{Name: name, Provider: p.id, Model: name, provider: int32(found[0]), combo: -1}, nil
	}
	var cands []string
	if len(found) > 1 {
		for _, i := range found {
			cands = append(cands, e.provs[i].id+"/"+name)
		}
		return Route{}, &Error{Code: CodeModelNotFound, Message: fmt.Sprintf("model %q is served by several providers; name one of %v", name, cands)}
	}
	for _, c := range e.topo.Combos {
		cands = append(cands, c.ID)
	}
	for a := range e.topo.Aliases {
		cands = append(cands, a)
	}
	for _, p := range e.topo.Providers {
		for _, m := range p.Models {
			cands = append(cands, p.ID+"/"+m)
		}
	}
	sort.Strings(cands)
	near := suggest.Nearest(name, cands)
	if len(cands) > 12 {
		cands = append(cands[:12], "...")
	}
	if near != "" {
		return Route{}, &Error{Code: CodeModelNotFound, Message: fmt.Sprintf("unknown model %q (did you mean %q?); try one of %v", name, near, cands)}
	}
	return Route{}, &Error{Code: CodeModelNotFound, Message: fmt.Sprintf("unknown model %q; try one of %v", name, cands)}
}

// ConnRef names one connection.
type ConnRef struct {
	Provider   string `json:"provider"`
	Connection string `json:"connection"`
}

// String is the "provider/connection" form (docs/names.md).
func (r ConnRef) String() string { return r.Provider + "/" + r.Connection }

// ParseConnRef parses "provider/connection".
func ParseConnRef(s string) (ConnRef, error) {
	p, c, ok := strings.Cut(s, "/")
	if !ok || p == "" || c == "" || strings.Contains(c, "/") {
		return ConnRef{}, fmt.Errorf("want provider/connection, got %q", s)
	}
	return ConnRef{p, c}, nil
}

// Request is one selection request.
type Request struct {
	Route Route
	// Allowed restricts the connections (a client key's allowedConnections);
	// empty allows all.
	Allowed []ConnRef
	// Skip lists connections already tried by this request.
	Skip []ConnRef
	// Session is the opaque session key for affinity (docs/selection.md#session-affinity); "" = none.
	Session string
	// Held lists the connections another owner's exclusive lease holds
	// (docs/leases.md): excluded with reason lease_held, after every health rule,
	// so a held connection that is also cooling reports the cooldown.
	Held []ConnRef
	// HeldUntil, when set, is aligned with Held: when each lease ends (0 =
	// unknown). It gives the lease_held exclusion its time left, so a
	// request that finds every connection leased is told when to retry.
	HeldUntil []Time
}

// Candidate is one eligible (target, connection) in try order.
type Candidate struct {
	Provider   string `json:"provider"`
	Connection string `json:"connection"`
	Model      string `json:"model"`
	Target     int    `json:"target"` // index in the combo's targets, 0 for single-model
	p, c       int32
	session    string
}

// Excluded says which layer kept a target or connection out, and for how
// long. Connection is empty when the whole target was excluded.
type Excluded struct {
	Provider    string    `json:"provider"`
	Connection  string    `json:"connection,omitempty"`
	Model       string    `json:"model"`
	Target      int       `json:"target"`
	Reason      Exclusion `json:"reason"`
	RemainingMs int64     `json:"remainingMs,omitempty"` // 0 when no timer ends it
	// LockReason is the lockout's or terminal's reason.
	LockReason Reason `json:"lockReason,omitempty"`
}

// Selection is Select's answer. Its slices are reused between calls: the
// caller owns one Selection per goroutine and passes it back in.
//
// Select is lazy (docs/model.md#lazy-selection): it stops at the first
// eligible connection of the first target that has one, when listing the
// rest would change no state, and leaves the rest to SelectRest.
// Candidates then holds a prefix of the full try order (its first entry is
// the one a full listing puts first) and Excluded only what came before it;
// Partial reports it. A caller that needs every candidate and exclusion (a
// fallback beyond the first target, the typed unavailable answer, a wait, a
// trace or an explanation) calls SelectAll, or SelectRest right after
// Select, or sets Full.
type Selection struct {
	Candidates []Candidate
	Excluded   []Excluded
	// Earliest is the first instant a timer exclusion ends (0 = none), and
	// EarliestTransient the first end among the transient connection
	// cooldowns and model lockouts that a wait may bridge (docs/selection.md#waiting-for-a-cooldown).
	Earliest          Time
	EarliestTransient Time
	// Full makes every Select list every target's candidates and
	// exclusions (a simulator trace, a debug explanation): Select is then
	// SelectAll.
	Full    bool
	targets []int32
	conns   []int32
	// The deferred rest of a lazy combo selection (SelectRest): the rest
	// of the stopped target's connections (scan) and the targets from
	// position next on.
	partial bool
	combo   int32
	next    int
	scan    connScan
	rest    []int32
}

// Partial reports whether the selection stopped early: Candidates and
// Excluded hold a prefix, and SelectRest lists the rest.
func (s *Selection) Partial() bool { return s.partial }

func (s *Selection) reset() {
	s.Candidates = s.Candidates[:0]
	s.Excluded = s.Excluded[:0]
	s.Earliest, s.EarliestTransient = 0, 0
	s.partial = false
	s.rest = s.rest[:0]
}

func (s *Selection) exclude(now Time, x *Excluded) {
	s.Excluded = append(s.Excluded, *x)
	if x.RemainingMs <= 0 || !x.Reason.Timer() {
		return
	}
	at := now.Add(x.RemainingMs)
	if s.Earliest == 0 || at < s.Earliest {
		s.Earliest = at
	}
	// Only a short connection cooldown or lockout is worth waiting for
	// (docs/selection.md#waiting-for-a-cooldown); an open breaker or a cooling provider answers at once.
	if (x.Reason == ExclConnectionCooldown || x.Reason == ExclModelLockout) && x.LockReason.transient() {
		if s.EarliestTransient == 0 || at < s.EarliestTransient {
			s.EarliestTransient = at
		}
	}
}

// Select returns the eligible connections for a request in strategy order,
// and for every excluded target or connection the layer that excluded it.
// Reads refresh lazy state (an expired OPEN becomes HALF_OPEN here).
//
// It is lazy (see Selection, docs/model.md#lazy-selection): it may stop
// after the first eligible connection. It stops only where the full listing would change no
// more state than the breakers' lazy refresh, which it still applies to
// every later target, in order: so the first candidate, every change record
// and every draw of the random source are those of SelectAll, and
// SelectRest, called before anything else changes the engine, completes
// the lists exactly as SelectAll would have made them.
func (e *Engine) Select(now Time, req *Request, out *Selection) {
	out.reset()
	r := &req.Route
	if r.Combo == "" {
		if r.provider < 0 || int(r.provider) >= len(e.provs) || e.provs[r.provider].id != r.Provider {
			return
		}
		var sc connScan
		if !e.openTarget(now, out, &sc, r.provider, -1, r.Model, 0, false) {
			return
		}
		var stop *lazyScan
		if !out.Full && (req.Session == "" || e.settings.SessionAffinityTTLMs <= 0) {
			stop = &lazyScan{e: e, req: req}
		}
		if k := e.scanConns(now, req, out, &sc, out.conns, stop); k >= 0 {
			out.scan = sc
			out.rest = append(out.rest[:0], out.conns[k:]...)
			out.partial, out.combo, out.next = len(out.rest) > 0, -1, 0
		}
		return
	}
	if r.combo < 0 || int(r.combo) >= len(e.combos) || e.combos[r.combo].cfg.ID != r.Combo {
		return
	}
	cs := &e.combos[r.combo]
	out.targets = e.orderTargets(now, cs, out.targets[:0])
	lazy := &lazyScan{e: e, req: req, cs: cs, from: -1}
	if out.Full {
		lazy = nil
	}
	var sc connScan
	for i, ti := range out.targets {
		if lazy != nil && len(out.Candidates) > 0 {
			if lazy.from < 0 {
				lazy.from = e.lastStirring(req, cs, out.targets, i) + 1
			}
			if i >= lazy.from {
				e.deferTargets(now, out, r.combo, i)
				return
			}
		}
		t := &cs.cfg.Targets[ti]
		if !e.openTarget(now, out, &sc, cs.tp[ti], cs.tc[ti], t.Model, int(ti), true) {
			continue
		}
		var stop *lazyScan
		if lazy != nil && lazy.from < 0 && (req.Session == "" || e.settings.SessionAffinityTTLMs <= 0) {
			// Without a session pin to apply, the target's first
			// eligible connection is its first candidate.
			lazy.pos = i
			stop = lazy
		}
		if k := e.scanConns(now, req, out, &sc, out.conns, stop); k >= 0 {
			out.scan = sc
			out.rest = append(out.rest[:0], out.conns[k:]...)
			e.deferTargets(now, out, r.combo, i+1)
			return
		}
	}
}

// SelectAll is Select listing every target's candidates and exclusions.
func (e *Engine) SelectAll(now Time, req *Request, out *Selection) {
	e.Select(now, req, out)
	e.SelectRest(now, req, out)
}

// SelectRest completes a partial selection: the same now and request as the
// Select that made it, before anything else changes the engine.
func (e *Engine) SelectRest(now Time, req *Request, out *Selection) {
	if !out.partial {
		return
	}
	out.partial = false
	if len(out.rest) > 0 {
		e.scanConns(now, req, out, &out.scan, out.rest, nil)
		out.rest = out.rest[:0]
	}
	if out.combo < 0 {
		return // a single-model route: one target
	}
	cs := &e.combos[out.combo]
	var sc connScan
	for _, ti := range out.targets[out.next:] {
		t := &cs.cfg.Targets[ti]
		if e.openTarget(now, out, &sc, cs.tp[ti], cs.tc[ti], t.Model, int(ti), true) {
			e.scanConns(now, req, out, &sc, out.conns, nil)
		}
	}
}

// lazyScan is a lazy combo selection's view of the targets after the one
// being scanned (position pos): whether it may stop at that target's
// first candidate.
type lazyScan struct {
	e    *Engine
	req  *Request
	cs   *comboState
	pos  int
	from int // first target position left to SelectRest; -1 = not known yet
}

// stopHere: the first candidate is found at target position pos; the scan
// stops when no later target would change state beyond a breaker refresh.
func (l *lazyScan) stopHere(targets []int32) bool {
	if l.cs == nil {
		return true // a single-model route: no later target
	}
	l.from = l.e.lastStirring(l.req, l.cs, targets, l.pos+1) + 1
	return l.from == l.pos+1
}

// lastStirring is the position of the last target from position from on
// whose listing changes state beyond its breaker's lazy refresh, or
// from-1: a round-robin cursor moves, a random order draws, a session pin
// may drop (docs/selection.md#session-affinity). Such a target is listed
// at once, so that state changes in the order of a full listing.
func (e *Engine) lastStirring(req *Request, cs *comboState, targets []int32, from int) int {
	last := from - 1
	pins := req.Session != "" && e.settings.SessionAffinityTTLMs > 0 && len(e.pins) > 0
	stirs := cs.stirring > 0 && !e.peek
	if !pins && !stirs {
		return last // no later target can stir
	}
	for i := from; i < len(targets); i++ {
		ti := targets[i]
		if stirs && cs.stirs[ti] {
			last = i
			continue
		}
		if pins {
			if _, ok := e.pins[pinKey{req.Session, e.provs[cs.tp[ti]].id}]; ok {
				last = i
			}
		}
	}
	return last
}

// stirsOrder reports whether ordering the provider's connections changes
// state: a round-robin cursor moves, a random, weighted or p2c order of two
// or more connections draws (orderConns; a peek does neither).
func (p *provState) stirsOrder() bool {
	switch p.cfg.Strategy {
	case RoundRobin:
		return true
	case Random, Weighted, P2C:
		return len(p.order) >= 2
	}
	return false
}

// deferTargets leaves the targets from position from on to SelectRest. Their
// breakers' lazy transitions apply now, in target order, as a full listing
// applies them (the change records and their order stay those of
// SelectAll); the rest of their listing reads state only.
func (e *Engine) deferTargets(now Time, out *Selection, combo int32, from int) {
	cs := &e.combos[combo]
	for _, ti := range out.targets[from:] {
		e.refreshProvider(now, &e.provs[cs.tp[ti]])
	}
	out.partial, out.combo, out.next = from < len(out.targets) || len(out.rest) > 0, combo, from
}

// connScan is what checking one target's connections needs.
type connScan struct {
	pi, pinned int32
	model, fam string
	target     int
	probe      bool
	first      int // index in Candidates of the target's first candidate
	p          *provState
}

// openTarget applies the target-level layers (breaker, provider cooldown,
// served models) and, when the target passes, fills sc and orders its
// connections into out.conns. An excluded target leaves sc as it was:
// every combo selection passes over the targets of the providers that are
// down, so that path builds nothing it does not list.
func (e *Engine) openTarget(now Time, out *Selection, sc *connScan, pi, pinned int32, model string, target int, combo bool) bool {
	p := &e.provs[pi]
	e.refreshProvider(now, p)
	if !p.breaker.admits() {
		out.exclude(now, &Excluded{Provider: p.id, Model: model, Target: target, Reason: ExclCircuitOpen,
			RemainingMs: p.breaker.retryAfter(now, e.opts(p))})
		return false
	}
	if combo {
		if ms := e.windowCooling(now, p); ms > 0 {
			out.exclude(now, &Excluded{Provider: p.id, Model: model, Target: target, Reason: ExclProviderCooldown, RemainingMs: ms})
			return false
		}
	}
	if p.models != nil && !p.models[model] {
		out.exclude(now, &Excluded{Provider: p.id, Model: model, Target: target, Reason: ExclNoModel})
		return false
	}
	*sc = connScan{pi: pi, pinned: pinned, model: model, fam: p.family(model), target: target,
		probe: p.breaker.State == HalfOpen, first: len(out.Candidates), p: p}
	if pinned >= 0 {
		out.conns = append(out.conns[:0], pinned)
	} else {
		out.conns = e.orderConns(now, p, model, out.conns[:0])
	}
	return true
}

// scanConns checks conns, a target's connections in order, appending each
// to the candidates or the exclusions, then applies session affinity to
// the target's candidates. With stop set, it returns at the first candidate
// when the rest may wait (lazyScan.stopHere): the index in conns of the
// first connection left unchecked. Otherwise it returns -1.
func (e *Engine) scanConns(now Time, req *Request, out *Selection, sc *connScan, conns []int32, stop *lazyScan) int {
	p := sc.p
	for k, ci := range conns {
		c := &p.conns[ci]
		x := Excluded{Provider: p.id, Connection: c.id, Model: sc.model, Target: sc.target}
		switch {
		case !allowed(req.Allowed, p.id, c.id):
			x.Reason = ExclNotAllowed
		case contains(req.Skip, p.id, c.id):
			x.Reason = ExclTried // the debug log said not_allowed for a connection the key may use
		case c.st.Status.Terminal():
			x.Reason, x.LockReason = ExclTerminal, terminalReason(c.st.Status)
		case c.retiredAs.Terminal(): // this process's key was retired while terminal
			x.Reason, x.LockReason = ExclTerminal, terminalReason(c.retiredAs)
		case c.st.RateLimitedUntil > now:
			x.Reason, x.RemainingMs, x.LockReason = ExclConnectionCooldown, c.st.RateLimitedUntil.Sub(now), c.st.LastErrorType
			if l := c.locks.blockingAt(now, sc.fam, sc.model, sc.probe); l != nil && l.Until > c.st.RateLimitedUntil {
				// The model stays locked after the cooldown ends: the
				// longer of the two is when this connection serves the
				// model again (Retry-After, waits), and what keeps it out.
				x.Reason, x.RemainingMs, x.LockReason = ExclModelLockout, l.Until.Sub(now)+1, l.Reason
			}
		default:
			if l := c.locks.blockingAt(now, sc.fam, sc.model, sc.probe); l != nil {
				// locked while now <= Until: it serves again 1 ms later
				x.Reason, x.RemainingMs, x.LockReason = ExclModelLockout, l.Until.Sub(now)+1, l.Reason
			} else if ms := e.pinnedWindow(now, sc.pinned, c); ms > 0 {
				x.Reason, x.RemainingMs = ExclProviderCooldown, ms
			} else if i := heldIndex(req.Held, p.id, c.id); i >= 0 {
				x.Reason = ExclLeaseHeld
				if i < len(req.HeldUntil) && req.HeldUntil[i] > now {
					x.RemainingMs = req.HeldUntil[i].Sub(now)
				}
			} else {
				out.Candidates = append(out.Candidates, Candidate{Provider: p.id, Connection: c.id, Model: sc.model, Target: sc.target, p: sc.pi, c: ci})
				if stop != nil {
					if stop.stopHere(out.targets) {
						return k + 1
					}
					stop = nil
				}
				continue
			}
		}
		out.exclude(now, &x)
	}
	e.applyAffinity(now, req, out, sc.first, p)
	return -1
}

func (e *Engine) pinnedWindow(now Time, pinned int32, c *connState) int64 {
	if pinned < 0 {
		return 0
	}
	return e.connWindowCooling(now, c)
}

func terminalReason(s ConnStatus) Reason {
	switch s {
	case StatusBanned:
		return ReasonBanned
	case StatusExpired:
		return ReasonAuthError
	case StatusCreditsExhausted:
		return ReasonCreditsExhausted
	}
	return ReasonNone
}

func allowed(list []ConnRef, p, c string) bool {
	return len(list) == 0 || contains(list, p, c)
}

func heldIndex(list []ConnRef, p, c string) int {
	for i, r := range list {
		if r.Provider == p && r.Connection == c {
			return i
		}
	}
	return -1
}

func contains(list []ConnRef, p, c string) bool {
	for _, r := range list {
		if r.Provider == p && r.Connection == c {
			return true
		}
	}
	return false
}

// orderConns orders a provider's connections by its strategy, then puts
// the connections with a free slot first. A peek (selection without
// effects) draws no randomness and moves no cursor.
func (e *Engine) orderConns(now Time, p *provState, model string, buf []int32) []int32 {
	buf = append(buf, p.order...)
	n := len(buf)
	switch p.cfg.Strategy {
	case RoundRobin:
		e.roundRobinOrder(now, p, buf)
	case Random:
		if !e.peek {
			e.rng.Shuffle(n, func(i, j int) { buf[i], buf[j] = buf[j], buf[i] })
		}
	case Weighted:
		if !e.peek {
			e.weightedOrder(buf, func(i int32) int { return p.cfg.Connections[i].Weight })
		}
	case P2C:
		if n >= 2 && !e.peek {
			e.p2cOrder(p, buf)
		}
	case LeastUsed:
		leastUsedOrder(p, buf)
	}
	if p.capped == 0 {
		return buf // no connection has a cap to fill: skip reading each one
	}
	for _, ci := range buf {
		if p.conns[ci].full(model) {
			freeFirst(p, model, buf)
			break
		}
	}
	return buf
}

// roundRobinOrder starts the order at the provider's cursor and, unless
// peeking, moves the cursor on.
func (e *Engine) roundRobinOrder(now Time, p *provState, buf []int32) {
	k := int(p.cursor % uint64(len(buf)))
	slices.Reverse(buf[:k])
	slices.Reverse(buf[k:])
	slices.Reverse(buf)
	if !e.peek {
		p.cursor++
		e.emit(Change{At: now, Kind: ChangeCursor, Provider: p.id, Cursor: p.cursor})
	}
}

// p2cOrder draws two distinct connections and puts the one with fewer
// attempts in flight first, the other second; the others keep their order.
func (e *Engine) p2cOrder(p *provState, buf []int32) {
	n := len(buf)
	i := e.rng.IntN(n)
	j := e.rng.IntN(n - 1)
	if j >= i {
		j++
	}
	a, b := buf[i], buf[j]
	if p.conns[b].inflight < p.conns[a].inflight {
		a, b = b, a
	}
	moveToFront(buf, b)
	moveToFront(buf, a)
}

// leastUsedOrder puts the connection with the fewest uses first, the
// least recently used first among equals.
func leastUsedOrder(p *provState, buf []int32) {
	slices.SortStableFunc(buf, func(x, y int32) int {
		cx, cy := &p.conns[x].st, &p.conns[y].st
		if cx.Uses != cy.Uses {
			return cmp.Compare(cx.Uses, cy.Uses)
		}
		return cmp.Compare(cx.LastUsedAt, cy.LastUsedAt)
	})
}

// freeFirst: docs/admission.md#concurrency-gates: a connection at its
// maxConcurrent cap holds requests in its queue. While a sibling has a free
// slot, that sibling goes first (stable: the strategy's order otherwise): a
// request waits on a full connection only when every connection is full,
// never while another idles (with fill-first, the second key sat unused
// while requests queued on the first for up to maxWaitMs). orderConns
// calls it only when a connection is full.
func freeFirst(p *provState, model string, buf []int32) {
	// With every connection full, the one with the fewest attempts in
	// flight or queued goes first: queued requests spread over the
	// siblings' queues instead of all waiting on the strategy's first
	// (fill-first queued every excess request on k1 while k2 drained).
	slices.SortStableFunc(buf, func(x, y int32) int {
		cx, cy := &p.conns[x], &p.conns[y]
		fx, fy := cx.full(model), cy.full(model)
		switch {
		case fx != fy && fy:
			return -1
		case fx != fy:
			return 1
		case fx:
			return cmp.Compare(cx.inflight, cy.inflight)
		}
		return 0
	})
}

// full: the connection's own concurrency cap, or its cap for model
// (rateLimitOverrides.modelConcurrency), is taken by attempts in flight or
// queued for a slot (every begun attempt until it is recorded).
func (c *connState) full(model string) bool {
	if c.cfg.MaxConcurrent > 0 && c.inflight >= c.cfg.MaxConcurrent {
		return true
	}
	if len(c.cfg.ModelConcurrency) == 0 {
		return false // no per-model cap: skip the lookup, selection asks this of every connection
	}
	n := c.cfg.ModelConcurrency[model]
	return n > 0 && c.byModel[model] >= n
}

// capped: the connection has a cap full can report reached.
func (c *connState) capped() bool {
	return c.cfg.MaxConcurrent > 0 || len(c.cfg.ModelConcurrency) > 0
}

// SetCaps changes a connection's maxConcurrent and modelConcurrency caps
// as the selection reads them (PUT /api/providers changes the gate's live
// copy).
func (e *Engine) SetCaps(ref ConnRef, maxConcurrent int, modelConcurrency map[string]int) error {
	p, c, err := e.conn(ref)
	if err != nil {
		return err
	}
	if c.capped() {
		p.capped--
	}
	c.cfg.MaxConcurrent = max(maxConcurrent, 0)
	c.cfg.ModelConcurrency = maps.Clone(modelConcurrency)
	if c.capped() {
		p.capped++
	}
	return nil
}

func moveToFront(buf []int32, v int32) {
	i := slices.Index(buf, v)
	if i <= 0 {
		return
	}
	copy(buf[1:i+1], buf[:i])
	buf[0] = v
}

// weightedOrder draws an order without replacement, each pick with
// probability proportional to its weight (weight 0 counts as 1).
func (e *Engine) weightedOrder(buf []int32, weight func(int32) int) {
	for i := 0; i < len(buf)-1; i++ {
		total := 0
		for _, v := range buf[i:] {
			total += max(1, weight(v))
		}
		pick := e.rng.IntN(total)
		for j := i; j < len(buf); j++ {
			pick -= max(1, weight(buf[j]))
			if pick < 0 {
				buf[i], buf[j] = buf[j], buf[i]
				break
			}
		}
	}
}

// orderTargets orders a combo's targets by its strategy.
func (e *Engine) orderTargets(now Time, cs *comboState, buf []int32) []int32 {
	n := len(cs.cfg.Targets)
	buf = append(buf, cs.index...)
	switch cs.cfg.Strategy {
	case RoundRobin:
		k := int(cs.cursor % uint64(n))
		slices.Reverse(buf[:k])
		slices.Reverse(buf[k:])
		slices.Reverse(buf)
		if !e.peek {
			cs.cursor++
			e.emit(Change{At: now, Kind: ChangeCursor, Combo: cs.cfg.ID, Cursor: cs.cursor})
		}
	case Random:
		if !e.peek {
			e.rng.Shuffle(n, func(i, j int) { buf[i], buf[j] = buf[j], buf[i] })
		}
	case Weighted:
		if !e.peek {
			e.weightedOrder(buf, func(i int32) int { return cs.cfg.Targets[i].Weight })
		}
	case P2C, LeastUsed:
		load := func(t int32) (inflight int, uses uint64) {
			p := &e.provs[cs.tp[t]]
			for k := range p.conns {
				inflight += p.conns[k].inflight
				uses += p.conns[k].st.Uses
			}
			return
		}
		if cs.cfg.Strategy == LeastUsed {
			slices.SortStableFunc(buf, func(x, y int32) int {
				_, ux := load(x)
				_, uy := load(y)
				switch {
				case ux < uy:
					return -1
				case ux > uy:
					return 1
				}
				return 0
			})
		} else if n >= 2 && !e.peek {
			i := e.rng.IntN(n)
			j := e.rng.IntN(n - 1)
			if j >= i {
				j++
			}
			a, b := buf[i], buf[j]
			la, _ := load(a)
			lb, _ := load(b)
			if lb < la {
				a, b = b, a
			}
			moveToFront(buf, b)
			moveToFront(buf, a)
		}
	}
	return buf
}
