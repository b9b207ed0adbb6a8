package proxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Composite concurrency gate (SPEC §4, §5): global → provider → connection →
// model, taken atomically as one; the strictest wins. The admission check is
// model.Admit; the gate around it only counts, queues and wakes.

// gate holds the counters and the wait queue of the composite gate.
type gate struct {
	mu      sync.Mutex
	global  model.Slots
	provs   map[string]*provGate
	waiters []*waiter // FIFO over every connection
}

type provGate struct {
	slots model.Slots
	conns map[string]*connGate
}

type connGate struct {
	slots  model.Slots
	models map[string]*model.Slots // inUse per model; caps from modelCaps
	caps   map[string]int
	queued int
}

type waiter struct {
	pg     *provGate
	cg     *connGate
	model  string
	noConn bool // quota-share with its serialization off: the connection cap does not hold it
	ready  chan struct{}
	done   bool // granted or abandoned
}

func newGate() *gate { return &gate{provs: map[string]*provGate{}} }

// configure sets the caps from the config (and again after PUT
// /api/providers/{id}); counters in use are kept.
func (g *gate) configure(globalCap int, provs []ProviderConfig) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.global.Cap = globalCap
	for _, p := range provs {
		pg := g.provs[p.ID]
		if pg == nil {
			pg = &provGate{conns: map[string]*connGate{}}
			g.provs[p.ID] = pg
		}
		pg.slots.Cap = p.MaxConcurrent
		for _, c := range p.Connections {
			cg := pg.conns[c.ID]
			if cg == nil {
				cg = &connGate{models: map[string]*model.Slots{}}
				pg.conns[c.ID] = cg
			}
			cg.slots.Cap = c.MaxConcurrent
			cg.caps = c.RateLimitOverrides.ModelConcurrency
		}
	}
	g.grantLocked()
}

func (g *gate) setGlobalCap(n int) {
	g.mu.Lock()
	g.global.Cap = n
	g.grantLocked()
	g.mu.Unlock()
}

func (cg *connGate) modelSlots(m string) model.Slots {
	s := model.Slots{Cap: cg.caps[m]}
	if ms := cg.models[m]; ms != nil {
		s.InUse = ms.InUse
	}
	return s
}

func (g *gate) input(pg *provGate, cg *connGate, m string) model.AdmitInput {
	return model.AdmitInput{Global: g.global, Provider: pg.slots, Connection: cg.slots, Model: cg.modelSlots(m), Queued: cg.queued}
}

func (g *gate) take(pg *provGate, cg *connGate, m string) {
	g.global.InUse++
	pg.slots.InUse++
	cg.slots.InUse++
	if cg.caps[m] > 0 {
		ms := cg.models[m]
		if ms == nil {
			ms = &model.Slots{}
			cg.models[m] = ms
		}
		ms.InUse++
	}
}

// slot is a held admission; release it exactly once.
type slot struct {
	g     *gate
	pg    *provGate
	cg    *connGate
	model string
	held  bool
}

func (s *slot) release() {
	if s == nil || !s.held {
		return
	}
	s.held = false
	g := s.g
	g.mu.Lock()
	g.global.InUse--
	s.pg.slots.InUse--
	s.cg.slots.InUse--
	if ms := s.cg.models[s.model]; ms != nil && s.cg.caps[s.model] > 0 {
		ms.InUse--
		if ms.InUse <= 0 {
			delete(s.cg.models, s.model)
		}
	}
	if len(g.waiters) > 0 {
		g.grantLocked()
	}
	g.mu.Unlock()
}

// grantLocked wakes every waiter whose layers now all have a free slot, in
// FIFO order.
func (g *gate) grantLocked() {
	kept := g.waiters[:0]
	for _, w := range g.waiters {
		if w.done {
			continue
		}
		in := g.input(w.pg, w.cg, w.model)
		if in.Global.Free() && in.Provider.Free() && (in.Connection.Free() || w.noConn) && in.Model.Free() {
			g.take(w.pg, w.cg, w.model)
			w.cg.queued--
			w.done = true
			close(w.ready)
			continue
		}
		kept = append(kept, w)
	}
	clear(g.waiters[len(kept):])
	g.waiters = kept
}

// admitError is a typed admission refusal with how long the request waited.
type admitError struct {
	err    *model.Error
	waited time.Duration
}

// acquire takes the composite gate for one candidate, waiting at most
// queueLeft. It returns the held slot (nil held when failing open), or a
// typed error.
func (g *gate) acquire(ctx context.Context, provider, connection, modelID string, maxQueueDepth int, queueLeft time.Duration, failOpen, noConnCap bool) (*slot, *admitError) {
	g.mu.Lock()
	pg := g.provs[provider]
	var cg *connGate
	if pg != nil {
		cg = pg.conns[connection]
	}
	if cg == nil {
		g.mu.Unlock()
		return &slot{}, nil // not configured: no caps
	}
	in := g.input(pg, cg, modelID)
	in.MaxQueueDepth, in.QueueLeftMs, in.FailOpen, in.NoConnectionCap = maxQueueDepth, queueLeft.Milliseconds(), failOpen, noConnCap
	d := model.Admit(in)
	switch d.Action {
	case model.AdmitGo:
		g.take(pg, cg, modelID)
		g.mu.Unlock()
		return &slot{g: g, pg: pg, cg: cg, model: modelID, held: true}, nil
	case model.AdmitBypass:
		g.mu.Unlock()
		return &slot{}, nil
	case model.AdmitReject:
		g.mu.Unlock()
		return nil, &admitError{err: admissionError(d, provider, connection, modelID, maxQueueDepth, queueLeft)}
	}
	w := &waiter{pg: pg, cg: cg, model: modelID, noConn: noConnCap, ready: make(chan struct{})}
	cg.queued++
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()

	start := time.Now()
	t := time.NewTimer(queueLeft)
	defer t.Stop()
	var cause error
	select {
	case <-w.ready:
		return &slot{g: g, pg: pg, cg: cg, model: modelID, held: true}, nil
	case <-t.C:
	case <-ctx.Done():
		cause = ctx.Err()
	}
	g.mu.Lock()
	if w.done { // granted while we gave up: keep it
		g.mu.Unlock()
		return &slot{g: g, pg: pg, cg: cg, model: modelID, held: true}, nil
	}
	w.done = true
	cg.queued--
	g.mu.Unlock()
	waited := time.Since(start)
	if failOpen {
		return &slot{}, nil
	}
	if cause != nil {
		return nil, &admitError{err: &model.Error{Code: model.CodeSemaphoreTimeout, Provider: provider, Model: modelID,
			Message: "client went away while queued"}, waited: waited}
	}
	return nil, &admitError{err: &model.Error{Code: model.CodeSemaphoreTimeout, Provider: provider, Model: modelID,
		RetryAfterMs: 1000, Message: fmt.Sprintf("no free slot on %s/%s for %s within the queue budget (%s); blocked by the %s cap",
			provider, connection, modelID, queueLeft.Round(time.Millisecond), d.Blocking)}, waited: waited}
}

func admissionError(d model.AdmitDecision, provider, connection, modelID string, depth int, queueLeft time.Duration) *model.Error {
	e := &model.Error{Code: d.Code, Provider: provider, Model: modelID}
	switch d.Code {
	case model.CodeSemaphoreQueueFull, model.CodeRateLimitQueueFull:
		e.Message = fmt.Sprintf("queue for %s/%s is full (maxQueueDepth %d); blocked by the %s cap", provider, connection, depth, d.Blocking)
	default:
		e.RetryAfterMs = 1000
		e.Message = fmt.Sprintf("queue budget spent before a slot on %s/%s freed up; blocked by the %s cap", provider, connection, d.Blocking)
	}
	return e
}

// snapshot reports the slots in use and the queue depth of every
// connection (for health and metrics).
func (g *gate) snapshot(fn func(provider, connection string, inUse, queued int)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for pid, pg := range g.provs {
		for cid, cg := range pg.conns {
			fn(pid, cid, cg.slots.InUse, cg.queued)
		}
	}
}

// quotaShareAdmission: how the gate treats this request's quota-share combo
// (model.Settings.QuotaShareAdmission, SPEC §4).
func (rs *reqState) quotaShareAdmission() (failOpen, noConnCap bool) {
	r := &rs.flow.Route
	qs := false
	if r.IsCombo() {
		c := rs.g.view().combos[r.Combo]
		qs = c != nil && c.Mode == "quota-share"
	}
	return rs.s.QuotaShareAdmission(qs)
}
