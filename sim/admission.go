package sim

import (
	"fmt"

	"github.com/breakwater-gw/breakwater/model"
)

// The simulator's admission stage (docs/admission.md#concurrency-gates, docs/admission.md), the virtual-time twin of
// proxy/ratelimit.go and proxy/admission.go: an attempt the flow began first
// passes the composite concurrency gate (model.Admit: global → provider →
// connection → model, quota-share fail-open), then its connection's limiter
// (model.Limiter: pacing, body-declared retry pauses, learned windows), then
// reaches the upstream. The gate comes first, as in the proxy's admit: a
// pacing slot is booked only for an attempt that holds its gate slot. Every
// rule is the model's; this file only keeps the counters and queues and
// schedules the events. A refusal is recorded as a
// local outcome (model.Flow.RecordLocal): neutral for upstream health, the
// flow fails over, and the client gets the typed error if nothing serves.

// admission is the simulator's admission state.
type admission struct {
	lims    map[model.ConnRef]*model.Limiter
	global  model.Slots
	provs   map[string]int // slots in use per provider
	conns   map[model.ConnRef]*gateConn
	waiters []int32           // request ids waiting for the gate, FIFO
	pending map[int32]*queued // request id → its queued attempt
	held    map[int32]heldSlot
	cfg     map[model.ConnRef]*model.ConnectionConfig
	// refused counts each request's locally refused tries: they are flow
	// attempts but not upstream calls (a window's upstreamCalls).
	refused map[int32]int
}

type gateConn struct {
	slots  model.Slots
	models map[string]int // in use per capped model
	queued int
}

// queued is an attempt waiting in the admission stage.
type queued struct {
	a        model.Attempt
	gen      uint32 // invalidates stale timer events
	inGate   bool   // waiting for the gate (else for a limiter slot)
	granted  bool   // the gate handed it a slot; evAdmitGo paces it
	booked   int64  // the limiter slot pace booked (Recheck gives it back on a refusal)
	failOpen bool
	noConn   bool // quota-share with its serialization off (docs/admission.md#concurrency-gates)
	// checked: the selection invariants ran when the attempt entered the
	// queue (selection time); begin must not re-check them at dispatch,
	// when its connection may have started cooling meanwhile (the proxy
	// dispatches such an attempt too: it was selected while eligible).
	checked bool
}

type heldSlot struct {
	ref   model.ConnRef
	model string
}

func (ad *admission) init() {
	ad.lims = map[model.ConnRef]*model.Limiter{}
	ad.conns = map[model.ConnRef]*gateConn{}
	ad.pending = map[int32]*queued{}
	ad.held = map[int32]heldSlot{}
	ad.cfg = map[model.ConnRef]*model.ConnectionConfig{}
	ad.refused = map[int32]int{}
	ad.provs = map[string]int{}
}

func (s *sim) connCfg(ref model.ConnRef) *model.ConnectionConfig {
	if c, ok := s.adm.cfg[ref]; ok {
		return c
	}
	var out *model.ConnectionConfig
	for i := range s.sc.Topology.Providers {
		p := &s.sc.Topology.Providers[i]
		for j := range p.Connections {
			if p.ID == ref.Provider && p.Connections[j].ID == ref.Connection {
				out = &p.Connections[j]
			}
		}
	}
	s.adm.cfg[ref] = out
	return out
}

// capped reports whether any concurrency cap can apply to the connection.
func (s *sim) capped(provider string, c *model.ConnectionConfig) bool {
	return s.set.RequestQueue.GlobalMaxConcurrent > 0 || s.provCap(provider) > 0 ||
		(c != nil && (c.MaxConcurrent > 0 || len(c.ModelConcurrency) > 0))
}

func (s *sim) provCap(provider string) int {
	for i := range s.sc.Topology.Providers {
		if p := &s.sc.Topology.Providers[i]; p.ID == provider {
			return p.MaxConcurrent
		}
	}
	return 0
}

// queueLeft is what is left of the request's queue budget (the connection's
// maxWaitMs from the request's start, cut by its deadline), as in the proxy.
func (s *sim) queueLeft(id int32, c *model.ConnectionConfig) int64 {
	r := &s.reqs[id]
	var o model.ConnOverrides
	if c != nil {
		o.MaxWaitMs = model.Millis(c.MaxWaitMs)
	}
	maxWait, _ := s.set.QueueBudgets(o)
	return min(maxWait-s.now.Sub(r.sentAt), r.flow.Deadline().Sub(s.now))
}

// admit runs an attempt the flow began through the admission stage.
func (s *sim) admit(id int32, a *model.Attempt) {
	if s.adm.lims == nil {
		s.adm.init()
	}
	ref := model.ConnRef{Provider: a.Provider, Connection: a.Connection}
	c := s.connCfg(ref)
	if c != nil && c.EgressIP != "" {
		// The attempt goes out from the connection's egress IP (docs/cooldowns.md#egress-buckets):
		// known before its outcome is recorded, as in the proxy.
		_ = s.eng.SetEgressIP(s.now, ref, c.EgressIP)
		s.drain()
	}
	if !a.Limited && !s.capped(a.Provider, c) {
		s.begin(id, a) // nothing to queue for: the common case costs no allocation
		return
	}
	q := &queued{a: *a}
	q.failOpen, q.noConn = s.set.QuotaShareAdmission(s.quotaShare(id))
	if !s.opts.NoInvariants {
		pre := s.mirror.preBegin(a.Provider, a.Connection)
		s.checkBegin(&pre, a)
		q.checked = true
	}
	s.adm.pending[id] = q
	s.gateAdmit(id, q)
}

// pace: the attempt passed the gate (it holds its slot, or failed open);
// a limited connection's limiter books its dispatch slot. A refusal gives
// the gate slot back.
func (s *sim) pace(id int32, q *queued) {
	if !q.a.Limited {
		s.dispatch(id, q)
		return
	}
	ref := model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}
	c := s.connCfg(ref)
	var lim model.ConnLimits
	if c != nil {
		lim = c.Limits
	}
	d := s.limiter(ref).Reserve(int64(s.now), q.a.Model, lim, s.set.RequestQueue.MaxQueueDepth, s.queueLeft(id, c))
	if d.Code != "" {
		s.release(id)
		s.refuse(id, q, d.Code, max(d.AtMs-int64(s.now), 0))
		return
	}
	q.booked = d.AtMs
	if d.AtMs > int64(s.now) {
		s.traceQueue(id, q, "paced", d.AtMs-int64(s.now))
		s.schedule(id, q, model.Time(d.AtMs), evPaced)
		return
	}
	s.dispatch(id, q)
}

func (s *sim) limiter(ref model.ConnRef) *model.Limiter {
	l := s.adm.lims[ref]
	if l == nil {
		l = &model.Limiter{}
		s.adm.lims[ref] = l
	}
	return l
}

// schedule wakes the queued attempt at t (or when its client gives up).
func (s *sim) schedule(id int32, q *queued, t model.Time, kind evKind) {
	if g := s.reqs[id].giveUpAt; g > 0 && t > g {
		t = g
	}
	q.gen++
	s.heap.push(event{at: t, class: classFlow, kind: kind, idx: id, gen: q.gen})
}

// paced: the booked limiter slot arrived; a pause that began meanwhile holds
// it longer or refuses it at once (model.Limiter.Recheck).
func (s *sim) paced(id int32, gen uint32) {
	q := s.adm.pending[id]
	if q == nil || q.gen != gen || s.gaveUp(id, q) {
		return
	}
	ref := model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}
	d := s.limiter(ref).Recheck(int64(s.now), q.a.Model, s.queueLeft(id, s.connCfg(ref)), q.booked)
	switch {
	case d.Code != "":
		s.release(id)
		s.refuse(id, q, d.Code, d.AtMs-int64(s.now))
	case d.AtMs > int64(s.now):
		s.schedule(id, q, model.Time(d.AtMs), evPaced)
	default:
		s.dispatch(id, q)
	}
}

func (s *sim) gateConn(ref model.ConnRef) *gateConn {
	g := s.adm.conns[ref]
	if g == nil {
		g = &gateConn{models: map[string]int{}}
		if c := s.connCfg(ref); c != nil {
			g.slots.Cap = c.MaxConcurrent
		}
		s.adm.conns[ref] = g
	}
	return g
}

func (s *sim) gateInput(ref model.ConnRef, m string) model.AdmitInput {
	g := s.gateConn(ref)
	in := model.AdmitInput{Global: model.Slots{InUse: s.adm.global.InUse, Cap: s.set.RequestQueue.GlobalMaxConcurrent},
		Provider: model.Slots{InUse: s.adm.provs[ref.Provider], Cap: s.provCap(ref.Provider)}, Connection: g.slots, Queued: g.queued}
	if c := s.connCfg(ref); c != nil && c.ModelConcurrency[m] > 0 {
		in.Model = model.Slots{InUse: g.models[m], Cap: c.ModelConcurrency[m]}
	}
	return in
}

func (s *sim) take(id int32, ref model.ConnRef, m string) {
	g := s.gateConn(ref)
	s.adm.global.InUse++
	s.adm.provs[ref.Provider]++
	g.slots.InUse++
	g.models[m]++
	s.adm.held[id] = heldSlot{ref: ref, model: m}
}

// gateAdmit: the composite concurrency gate (model.Admit).
func (s *sim) gateAdmit(id int32, q *queued) {
	ref := model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}
	in := s.gateInput(ref, q.a.Model)
	in.MaxQueueDepth, in.QueueLeftMs, in.FailOpen, in.NoConnectionCap = s.set.RequestQueue.MaxQueueDepth, s.queueLeft(id, s.connCfg(ref)), q.failOpen, q.noConn
	d := model.Admit(in)
	switch d.Action {
	case model.AdmitGo:
		s.take(id, ref, q.a.Model)
		s.pace(id, q)
	case model.AdmitBypass:
		s.traceQueue(id, q, "fail_open", 0)
		s.pace(id, q)
	case model.AdmitReject:
		s.refuse(id, q, d.Code, 0)
	default:
		q.inGate = true
		s.gateConn(ref).queued++
		s.adm.waiters = append(s.adm.waiters, id)
		s.traceQueue(id, q, "queued", in.QueueLeftMs)
		s.schedule(id, q, s.now.Add(in.QueueLeftMs), evQueueTimeout)
	}
}

// queueTimeout: the gate wait's budget is spent: quota-share proceeds
// without a slot (fail-open), anything else is refused SEMAPHORE_TIMEOUT.
func (s *sim) queueTimeout(id int32, gen uint32) {
	q := s.adm.pending[id]
	if q == nil || q.gen != gen || !q.inGate || q.granted || s.gaveUp(id, q) {
		return
	}
	s.leaveGate(id, q)
	if q.failOpen {
		s.traceQueue(id, q, "fail_open", 0)
		s.pace(id, q)
		return
	}
	s.refuse(id, q, model.CodeSemaphoreTimeout, 1000)
}

func (s *sim) leaveGate(id int32, q *queued) {
	q.inGate = false
	s.gateConn(model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}).queued--
	for i, w := range s.adm.waiters {
		if w == id {
			s.adm.waiters = append(s.adm.waiters[:i], s.adm.waiters[i+1:]...)
			break
		}
	}
}

// release frees the request's gate slot when its attempt ends and hands
// free slots to waiters in FIFO order at once (as the proxy's grantLocked);
// the granted attempts begin from their own event.
func (s *sim) release(id int32) {
	h, ok := s.adm.held[id]
	if !ok {
		return
	}
	delete(s.adm.held, id)
	g := s.gateConn(h.ref)
	s.adm.global.InUse--
	s.adm.provs[h.ref.Provider]--
	g.slots.InUse--
	if g.models[h.model]--; g.models[h.model] <= 0 {
		delete(g.models, h.model)
	}
	kept := s.adm.waiters[:0]
	for _, w := range s.adm.waiters {
		q := s.adm.pending[w]
		ref := model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}
		in := s.gateInput(ref, q.a.Model)
		if in.Global.Free() && in.Provider.Free() && (in.Connection.Free() || q.noConn) && in.Model.Free() {
			q.inGate, q.granted = false, true
			s.gateConn(ref).queued--
			s.take(w, ref, q.a.Model)
			q.gen++
			s.heap.push(event{at: s.now, class: classFlow, kind: evAdmitGo, idx: w, gen: q.gen})
			continue
		}
		kept = append(kept, w)
	}
	s.adm.waiters = kept
}

// admitGo begins an attempt the gate granted a slot.
func (s *sim) admitGo(id int32, gen uint32) {
	q := s.adm.pending[id]
	if q == nil || q.gen != gen || !q.granted {
		return
	}
	s.pace(id, q)
}

// gaveUp: the client left while queued (proxy: the context ends): the
// attempt is recorded as a client abort.
func (s *sim) gaveUp(id int32, q *queued) bool {
	r := &s.reqs[id]
	if r.giveUpAt <= 0 || s.now < r.giveUpAt {
		return false
	}
	if q.inGate {
		s.leaveGate(id, q)
	}
	if q.booked != 0 {
		// Never dispatched: its pacing slot goes back (the proxy's
		// pacers.wait cancels it when the context ends).
		s.limiter(model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}).Cancel(q.booked)
	}
	s.release(id)
	delete(s.adm.pending, id)
	s.unchecked(q)
	_, ans := r.flow.Record(s.now, s.eng, &q.a, model.Outcome{Kind: model.OutcomeClientAbort}, false)
	s.drain()
	// The attempt was begun on this connection, which the gateway names in
	// its answer (and log) whether or not it was dispatched.
	r.lastConn, r.hasLast = model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}, true
	if ans != nil {
		s.answer(id, ans, abortClient)
	} else {
		s.finish(id, 499, "client_abort", lClientAbort, 0)
	}
	return true
}

func (s *sim) dispatch(id int32, q *queued) {
	delete(s.adm.pending, id)
	q.a.Dispatch(s.now) // the herd guard counts from dispatch, not from the queue
	if q.checked {
		s.opts.NoInvariants = true // checked at selection (see queued.checked)
		s.begin(id, &q.a)
		s.opts.NoInvariants = false
		return
	}
	s.begin(id, &q.a)
}

// unchecked undoes the probe bookkeeping of the selection check for an
// attempt that ends without reaching begin/attemptEnd.
func (s *sim) unchecked(q *queued) {
	if q.checked && q.a.Probe() {
		p := s.mirror.prov(q.a.Provider)
		s.mirror.probes[p]--
		s.mirror.takePermit(p, &q.a)
	}
}

// refuse records a local admission refusal and lets the flow go on.
func (s *sim) refuse(id int32, q *queued, code model.Code, retryMs int64) {
	delete(s.adm.pending, id)
	s.adm.refused[id]++
	s.unchecked(q)
	r := &s.reqs[id]
	err := &model.Error{Code: code, Provider: q.a.Provider, Model: q.a.Model, RetryAfterMs: retryMs,
		Message: fmt.Sprintf("admission refused on %s/%s", q.a.Provider, q.a.Connection)}
	s.traceQueue(id, q, string(code), retryMs)
	_, ans := r.flow.RecordLocal(s.now, s.eng, &q.a, err)
	s.drain()
	r.lastConn, r.hasLast = model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}, true
	if ans != nil {
		s.answer(id, ans, abortNone)
		return
	}
	s.step(id)
}

// afterAttempt runs when an attempt ended: what the answer taught the
// connection's limiter (model.Engine.LimiterFeedback), then the gate slot.
func (s *sim) afterAttempt(id int32, a *model.Attempt, o *model.Outcome, v *model.Verdict) {
	if a.Limited && o.Kind == model.OutcomeResponse && s.adm.lims != nil {
		ref := model.ConnRef{Provider: a.Provider, Connection: a.Connection}
		var mw model.ConnOverrides
		if c := s.connCfg(ref); c != nil {
			mw.MaxWaitMs = model.Millis(c.MaxWaitMs)
		}
		maxWait, _ := s.set.QueueBudgets(mw)
		fb := s.eng.LimiterFeedback(s.now, a, o, v, maxWait)
		fb.Apply(s.limiter(ref))
		s.drain()
	}
	if s.adm.held != nil {
		s.release(id)
	}
}

// quotaShare: the request's route is a quota-share combo (docs/admission.md#concurrency-gates).
func (s *sim) quotaShare(id int32) bool {
	r := &s.reqs[id].flow.Route
	if !r.IsCombo() {
		return false
	}
	for i := range s.sc.Topology.Combos {
		if c := &s.sc.Topology.Combos[i]; c.ID == r.Combo {
			return c.Mode == "quota-share"
		}
	}
	return false
}

func (s *sim) traceQueue(id int32, q *queued, what string, ms int64) {
	s.tr.rec()
	s.tr.str("code", what)
	s.scratch = append(append(append(s.scratch[:0], q.a.Provider...), '/'), q.a.Connection...)
	s.tr.bytes("conn", s.scratch)
	s.tr.ev("queue")
	s.tr.str("model", q.a.Model)
	s.tr.int("ms", ms)
	s.tr.int("req", int64(s.reqs[id].id))
	s.tr.end(s.off(s.now))
	s.tr.close()
}
