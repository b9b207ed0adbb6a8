package proxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Composite concurrency gate (docs/admission.md#concurrency-gates): global →
// provider → connection → model, taken atomically as one; the strictest
// wins. Its counters, queue and wake-up order are model.Gate's, the same
// the simulator drives; this shell only holds the lock, parks a waiter on
// a channel and a timer, and reports.

// gate is model.Gate under a mutex, with one channel per parked waiter.
type gate struct {
	mu      sync.Mutex
	m       *model.Gate
	nextID  uint64
	waiters map[uint64]*waiter
	waiting func(int) // Options.Waiting: a parked waiter waits on purpose
}

// waiter is one parked acquire; ready closes when the gate granted it.
type waiter struct {
	ready chan struct{}
	hold  model.GateHold
}

func newGate(waiting func(int)) *gate {
	return &gate{m: model.NewGate(), waiters: map[uint64]*waiter{}, waiting: waiting}
}

// configure sets the caps from the config (and again after PUT
// /api/providers/{id}); counters in use are kept.
func (g *gate) configure(globalCap int, provs []ProviderConfig) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m.SetGlobalCap(globalCap)
	for _, p := range provs {
		g.m.SetProviderCap(p.ID, p.MaxConcurrent)
		for _, c := range p.Connections {
			g.m.SetConnectionCaps(model.ConnRef{Provider: p.ID, Connection: c.ID}, c.MaxConcurrent, c.RateLimitOverrides.ModelConcurrency)
		}
	}
	g.wakeLocked(g.m.Grant())
}

func (g *gate) setGlobalCap(n int) {
	g.mu.Lock()
	g.m.SetGlobalCap(n)
	g.wakeLocked(g.m.Grant())
	g.mu.Unlock()
}

// wakeLocked hands granted holds to their parked waiters.
func (g *gate) wakeLocked(grants []model.GateGrant) {
	for _, gr := range grants {
		if w := g.waiters[gr.ID]; w != nil {
			delete(g.waiters, gr.ID)
			w.hold = gr.Hold
			close(w.ready)
		}
	}
}

// slot is a held admission; release it exactly once.
type slot struct {
	g    *gate
	hold model.GateHold
}

func (s *slot) release() {
	if !s.hold.Held() {
		return
	}
	h := s.hold
	s.hold = model.GateHold{}
	g := s.g
	g.mu.Lock()
	g.wakeLocked(g.m.Release(h))
	g.mu.Unlock()
}

// admitError is a typed admission refusal.
type admitError struct {
	err *model.Error
}

// acquire takes the composite gate for one candidate, waiting at most
// queueLeft. It returns the held slot (holding nothing when failing open)
// and how long it was parked (0 when the gate answered at once, read on
// no clock), or a typed error. The slot is a value: the caller keeps it
// on its stack.
func (g *gate) acquire(ctx context.Context, provider, connection, modelID string, maxQueueDepth int, queueLeft time.Duration, failOpen, noConnCap bool, rep *deadlineReport) (slot, time.Duration, *admitError) {
	r := model.GateRequest{Conn: model.ConnRef{Provider: provider, Connection: connection}, Model: modelID,
		MaxQueueDepth: maxQueueDepth, QueueLeftMs: queueLeft.Milliseconds(), FailOpen: failOpen, NoConnectionCap: noConnCap}
	g.mu.Lock()
	g.nextID++
	id := g.nextID
	d, h := g.m.Enter(id, r)
	switch d.Action {
	case model.AdmitGo, model.AdmitBypass:
		g.mu.Unlock()
		return slot{g: g, hold: h}, 0, nil
	case model.AdmitReject:
		g.mu.Unlock()
		return slot{}, 0, &admitError{err: admissionError(d, provider, connection, modelID, maxQueueDepth, queueLeft)}
	}
	w := &waiter{ready: make(chan struct{})}
	g.waiters[id] = w
	g.mu.Unlock()

	g.waiting(1)
	defer g.waiting(-1)
	start := time.Now()
	if rep != nil {
		defer rep.end(false) // granted, the client gone, or a bypass: the attempt goes on
	}
	granted, cause := g.park(ctx, w, queueLeft, rep)
	if granted {
		return slot{g: g, hold: w.hold}, time.Since(start), nil
	}
	g.mu.Lock()
	if !g.m.Leave(id) { // granted while we gave up: keep it
		g.mu.Unlock()
		<-w.ready
		return slot{g: g, hold: w.hold}, time.Since(start), nil
	}
	delete(g.waiters, id)
	g.mu.Unlock()
	waited := time.Since(start)
	x := model.GateWaitExpired(failOpen)
	if x.Action == model.AdmitBypass {
		return slot{}, waited, nil
	}
	if cause != nil {
		return slot{}, waited, &admitError{err: &model.Error{Code: x.Code, Provider: provider, Model: modelID,
			Message: "client went away while queued"}}
	}
	if rep != nil {
		rep.end(true) // the budget ran out and refuses it: the flow step after the refusal is owed
	}
	return slot{}, waited, &admitError{err: &model.Error{Code: x.Code, Provider: provider, Model: modelID,
		RetryAfterMs: x.RetryAfterMs(), Message: fmt.Sprintf("no free slot on %s/%s for %s within the queue budget (%s); blocked by the %s cap",
			provider, connection, modelID, queueLeft.Round(time.Millisecond), d.Blocking)}}
}

// park waits for w's grant at most queueLeft; cause is the context's
// error when the client went away first. With Options.Deadlines (rep, nil
// otherwise) the queue budget is reported due at its instant on the
// gateway's clock, and runs out on that clock; the caller ends the report
// (fired only when the budget refuses the attempt: a quota-share bypass
// goes on to the upstream with no flow step between).
func (g *gate) park(ctx context.Context, w *waiter, queueLeft time.Duration, rep *deadlineReport) (granted bool, cause error) {
	t := time.NewTimer(queueLeft)
	defer t.Stop()
	if rep != nil {
		rep.arm(rep.in(queueLeft))
	}
	for {
		select {
		case <-w.ready:
			return true, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
		if rep == nil {
			return false, nil
		}
		if early := rep.early(); early > 0 {
			t.Reset(early) // the reporting shell's clock has not reached it yet
			continue
		}
		return false, nil
	}
}

func admissionError(d model.AdmitDecision, provider, connection, modelID string, depth int, queueLeft time.Duration) *model.Error {
	e := &model.Error{Code: d.Code, Provider: provider, Model: modelID}
	switch d.Code {
	case model.CodeSemaphoreQueueFull, model.CodeRateLimitQueueFull:
		e.Message = fmt.Sprintf("queue for %s/%s is full (maxQueueDepth %d); blocked by the %s cap", provider, connection, depth, d.Blocking)
	default:
		e.RetryAfterMs = d.RetryAfterMs()
		e.Message = fmt.Sprintf("queue budget spent before a slot on %s/%s freed up; blocked by the %s cap", provider, connection, d.Blocking)
	}
	return e
}

// snapshot reports the slots in use and the queue depth of every
// connection (for health and metrics).
func (g *gate) snapshot(fn func(provider, connection string, inUse, queued int)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m.Each(func(ref model.ConnRef, inUse, queued int) { fn(ref.Provider, ref.Connection, inUse, queued) })
}

// quotaShareAdmission: how the gate treats this request's quota-share combo
// (model.Settings.QuotaShareAdmission, docs/admission.md#concurrency-gates).
func (rs *reqState) quotaShareAdmission() (failOpen, noConnCap bool) {
	r := &rs.flow.Route
	qs := false
	if r.IsCombo() {
		c := rs.g.view().combos[r.Combo]
		qs = c != nil && c.Mode == "quota-share"
	}
	return rs.s.QuotaShareAdmission(qs)
}
