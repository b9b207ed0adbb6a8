package model

// Gate is the composite concurrency gate (docs/admission.md#concurrency-gates)
// as one pure state machine: the slots in use on every layer (global →
// provider → connection → model), each connection's queue depth, and the
// FIFO wait queue over every connection. Admit decides for one request;
// Gate keeps what Admit looks at, takes and frees the slots, and hands
// free slots to waiters in FIFO order. Both shells drive this one type, so
// they count, queue and wake alike: the gateway under its mutex, parking
// each waiter on a channel and a timer; the simulator scheduling an event
// per grant and per queue timeout. Neither keeps a counter of its own.
//
// A waiter is named by an id the shell picks, unique among its waiters.
// Time is not the gate's business: the shell ends a wait whose queue budget
// ran out (Leave, then GateWaitExpired).
type Gate struct {
	global  Slots
	provs   map[string]*gateProv
	waiters []gateWaiter
	grants  []GateGrant // the last grant list, reused
}

type gateProv struct {
	slots Slots
	conns map[string]*gateConn
}

type gateConn struct {
	slots  Slots
	models map[string]int // in use per capped model
	caps   map[string]int // per-model caps (0 = none)
	queued int
}

type gateWaiter struct {
	id     uint64
	p      *gateProv
	c      *gateConn
	model  string
	noConn bool
}

// GateHold is one admission held on the gate; release it exactly once with
// Gate.Release. The zero value holds nothing (a bypass, or a connection the
// gate does not know).
type GateHold struct {
	p       *gateProv
	c       *gateConn
	model   string
	inModel bool // the model layer counted it (its cap was set)
}

// Held reports whether h holds slots.
func (h GateHold) Held() bool { return h.c != nil }

// GateGrant is a waiter the gate let in: its slots are taken (Hold).
type GateGrant struct {
	ID   uint64
	Hold GateHold
}

// GateRequest is one attempt at the gate.
type GateRequest struct {
	Conn          ConnRef
	Model         string
	MaxQueueDepth int   // 0 = unbounded
	QueueLeftMs   int64 // what is left of the request's queue budget
	// FailOpen and NoConnectionCap are Settings.QuotaShareAdmission's.
	FailOpen, NoConnectionCap bool
}

// NewGate returns a gate with no caps and nothing in use.
func NewGate() *Gate { return &Gate{provs: map[string]*gateProv{}} }

// SetGlobalCap sets requestQueue.globalMaxConcurrent (0 = none). Slots in
// use are kept; call Grant to let in the waiters a raised cap admits.
func (g *Gate) SetGlobalCap(n int) { g.global.Cap = n }

// GlobalCap is the global cap the gate runs with.
func (g *Gate) GlobalCap() int { return g.global.Cap }

func (g *Gate) prov(id string) *gateProv {
	p := g.provs[id]
	if p == nil {
		p = &gateProv{conns: map[string]*gateConn{}}
		g.provs[id] = p
	}
	return p
}

// SetProviderCap sets a provider's maxConcurrent (0 = none); see SetGlobalCap.
func (g *Gate) SetProviderCap(provider string, n int) { g.prov(provider).slots.Cap = n }

// SetConnectionCaps makes the connection known to the gate and sets its
// maxConcurrent and per-model caps (0 / absent = none); see SetGlobalCap.
// The gate keeps models (the shell must not change it afterwards).
func (g *Gate) SetConnectionCaps(ref ConnRef, maxConcurrent int, models map[string]int) {
	p := g.prov(ref.Provider)
	c := p.conns[ref.Connection]
	if c == nil {
		c = &gateConn{models: map[string]int{}}
		p.conns[ref.Connection] = c
	}
	c.slots.Cap, c.caps = maxConcurrent, models
}

func (g *Gate) input(p *gateProv, c *gateConn, model string) AdmitInput {
	in := AdmitInput{Global: g.global, Provider: p.slots, Connection: c.slots, Queued: c.queued}
	if n := c.caps[model]; n > 0 {
		in.Model = Slots{InUse: c.models[model], Cap: n}
	}
	return in
}

func (g *Gate) take(p *gateProv, c *gateConn, model string) GateHold {
	g.global.InUse++
	p.slots.InUse++
	c.slots.InUse++
	h := GateHold{p: p, c: c, model: model}
	if c.caps[model] > 0 {
		c.models[model]++
		h.inModel = true
	}
	return h
}

// Enter runs one attempt through the gate (Admit). AdmitGo: the slots are
// taken (the hold). AdmitWait: the attempt waits as id, in FIFO order,
// until Release or Grant lets it in or the shell ends the wait (Leave).
// AdmitReject / AdmitBypass: nothing is held. A connection the gate does
// not know has no caps: it goes at once and holds nothing.
func (g *Gate) Enter(id uint64, r GateRequest) (AdmitDecision, GateHold) {
	p := g.provs[r.Conn.Provider]
	var c *gateConn
	if p != nil {
		c = p.conns[r.Conn.Connection]
	}
	if c == nil {
		return AdmitDecision{Action: AdmitGo}, GateHold{}
	}
	in := g.input(p, c, r.Model)
	in.MaxQueueDepth, in.QueueLeftMs, in.FailOpen, in.NoConnectionCap = r.MaxQueueDepth, r.QueueLeftMs, r.FailOpen, r.NoConnectionCap
	d := Admit(in)
	switch d.Action {
	case AdmitGo:
		return d, g.take(p, c, r.Model)
	case AdmitWait:
		c.queued++
		g.waiters = append(g.waiters, gateWaiter{id: id, p: p, c: c, model: r.Model, noConn: r.NoConnectionCap})
	}
	return d, GateHold{}
}

// Leave ends the wait of id (its queue budget ran out, or its client went
// away). It reports false when id was not waiting: the gate granted it
// already, and the shell holds that grant.
func (g *Gate) Leave(id uint64) bool {
	for i := range g.waiters {
		if w := &g.waiters[i]; w.id == id {
			w.c.queued--
			n := len(g.waiters) - 1
			copy(g.waiters[i:], g.waiters[i+1:])
			g.waiters[n] = gateWaiter{} // drop the pointers
			g.waiters = g.waiters[:n]
			return true
		}
	}
	return false
}

// GateWaitExpired is what a wait whose queue budget ran out becomes
// (docs/admission.md#concurrency-gates): a quota-share request that fails
// open proceeds without a slot, anything else is refused SEMAPHORE_TIMEOUT.
func GateWaitExpired(failOpen bool) AdmitDecision {
	if failOpen {
		return AdmitDecision{Action: AdmitBypass}
	}
	return AdmitDecision{Action: AdmitReject, Code: CodeSemaphoreTimeout}
}

// RetryAfterMs is the retry hint of a gate refusal: a spent queue budget
// (SEMAPHORE_TIMEOUT) suggests a second; a full queue suggests nothing.
func (d AdmitDecision) RetryAfterMs() int64 {
	if d.Action == AdmitReject && d.Code == CodeSemaphoreTimeout {
		return 1000
	}
	return 0
}

// Release frees a hold's slots and lets waiters in (Grant). Releasing the
// zero hold does nothing. The returned list is valid until the gate's next
// call.
func (g *Gate) Release(h GateHold) []GateGrant {
	if h.c == nil {
		return nil
	}
	g.global.InUse--
	h.p.slots.InUse--
	h.c.slots.InUse--
	if h.inModel {
		h.c.models[h.model]-- // kept at 0: only capped models have an entry (bounded by the config)
	}
	if len(g.waiters) == 0 {
		return nil
	}
	return g.Grant()
}

// Grant takes slots for every waiter whose layers now all have one free,
// in FIFO order (a waiter that still cannot go does not hold back the
// ones behind it on other connections), and returns them. The returned
// list is valid until the gate's next call.
func (g *Gate) Grant() []GateGrant {
	g.grants = g.grants[:0]
	kept := g.waiters[:0]
	for _, w := range g.waiters {
		in := g.input(w.p, w.c, w.model)
		if in.Global.Free() && in.Provider.Free() && (in.Connection.Free() || w.noConn) && in.Model.Free() {
			w.c.queued--
			g.grants = append(g.grants, GateGrant{ID: w.id, Hold: g.take(w.p, w.c, w.model)})
			continue
		}
		kept = append(kept, w)
	}
	clear(g.waiters[len(kept):])
	g.waiters = kept
	return g.grants
}

// Each reports every known connection's slots in use and queue depth (for
// health and metrics), in no particular order.
func (g *Gate) Each(fn func(ref ConnRef, inUse, queued int)) {
	for pid, p := range g.provs {
		for cid, c := range p.conns {
			fn(ConnRef{Provider: pid, Connection: cid}, c.slots.InUse, c.queued)
		}
	}
}

// Prune forgets the connections not in conns and the providers not in
// provs, once nothing holds or waits for their slots (a reload removed
// them; one still busy stays, idle, until a later Prune).
func (g *Gate) Prune(provs map[string]bool, conns map[ConnRef]bool) {
	for pid, p := range g.provs {
		for cid, c := range p.conns {
			if !conns[ConnRef{Provider: pid, Connection: cid}] && c.slots.InUse == 0 && c.queued == 0 {
				delete(p.conns, cid)
			}
		}
		if !provs[pid] && len(p.conns) == 0 && p.slots.InUse == 0 {
			delete(g.provs, pid)
		}
	}
}
