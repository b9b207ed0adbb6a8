package sim

import (
	"fmt"
	"slices"

	"github.com/breakwater-gw/breakwater/model"
)

// The simulator's admission stage (docs/admission.md#concurrency-gates,
// docs/admission.md#pacing), driving the same model steps as the gateway's
// proxy/admission.go and proxy/ratelimit.go: an attempt the flow began first
// passes the composite concurrency gate (model.Gate: global → provider →
// connection → model, FIFO wake-ups, quota-share fail-open), then its connection's limiter
// (model.Limiter: pacing, body-declared retry pauses, learned windows), then
// reaches the upstream. The gate comes first, as in the proxy's admit: a
// pacing slot is booked only for an attempt that holds its gate slot. Every
// rule, counter and queue is the model's; this file only schedules the
// events. A refusal is recorded as a
// local outcome (model.ReportLocal): neutral for upstream health, the
// flow fails over, and the client gets the typed error if nothing serves.

// admission is the simulator's admission state.
type admission struct {
	lims    map[model.ConnRef]*model.Limiter
	gate    *model.Gate              // waiters are request ids
	pending map[int32]*queued        // request id → its queued attempt
	held    map[int32]model.GateHold // request id → its gate slots
	cfg     map[model.ConnRef]*model.ConnectionConfig
	// refused counts each request's locally refused tries: they are flow
	// attempts but not upstream calls (a window's upstreamCalls).
	refused map[int32]int
	// settable: a settings action may set a global cap during the run, so
	// every attempt is counted on the gate from the start (the gateway
	// counts them all: a cap set later holds the ones in flight).
	settable bool
}

// queued is an attempt waiting in the admission stage.
type queued struct {
	a        model.Attempt
	gen      uint32         // invalidates stale timer events
	inGate   bool           // waiting for the gate (else for a limiter slot)
	granted  bool           // the gate handed it a slot; evAdmitGo paces it
	pw       model.PaceWait // its place in the connection's limiter
	failOpen bool
	noConn   bool // quota-share with its serialization off (docs/admission.md#concurrency-gates)
	// checked: the selection invariants ran when the attempt entered the
	// queue (selection time); begin must not re-check them at dispatch,
	// when its connection may have started cooling meanwhile (the proxy
	// dispatches such an attempt too: it was selected while eligible).
	checked bool
}

func (ad *admission) init(topo *model.Topology, globalCap int, actions []Action) {
	ad.lims = map[model.ConnRef]*model.Limiter{}
	ad.pending = map[int32]*queued{}
	ad.held = map[int32]model.GateHold{}
	ad.cfg = map[model.ConnRef]*model.ConnectionConfig{}
	ad.refused = map[int32]int{}
	ad.settable = slices.ContainsFunc(actions, func(a Action) bool { return a.Kind == ActSet })
	ad.gate = model.NewGate()
	ad.gate.SetGlobalCap(globalCap)
	for i := range topo.Providers {
		p := &topo.Providers[i]
		ad.gate.SetProviderCap(p.ID, p.MaxConcurrent)
		for j := range p.Connections {
			c := &p.Connections[j]
			ad.gate.SetConnectionCaps(model.ConnRef{Provider: p.ID, Connection: c.ID}, c.MaxConcurrent, c.ModelConcurrency)
		}
	}
}

// setGlobalCap follows a settings change: a raised cap lets waiters in at
// once, as in the gateway.
func (s *sim) setGlobalCap() {
	if s.adm.gate == nil {
		return
	}
	s.adm.gate.SetGlobalCap(s.set.RequestQueue.GlobalMaxConcurrent)
	s.granted(s.adm.gate.Grant())
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

// capped reports whether any concurrency cap can apply to the connection
// during the run; the others skip the gate (nothing to count or queue for).
func (s *sim) capped(provider string, c *model.ConnectionConfig) bool {
	return s.set.RequestQueue.GlobalMaxConcurrent > 0 || s.adm.settable || s.provCap(provider) > 0 ||
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
		s.adm.init(&s.sc.Topology, s.set.RequestQueue.GlobalMaxConcurrent, s.sc.Actions)
	}
	if s.leaseFenceRefuses(id, a) { // lease.go: before every managed dispatch
		return
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
	var st model.PaceStep
	q.pw, st = s.limiter(ref).Enter(int64(s.now), q.a.Model, lim, s.set.RequestQueue.MaxQueueDepth, s.queueLeft(id, c))
	if !st.Go && st.Code == "" {
		s.traceQueue(id, q, "paced", st.WakeAtMs-int64(s.now))
	}
	s.paceStep(id, q, st)
}

// paceStep does what the limiter said (model.PaceStep): dispatch, wake up
// later, or refuse (giving the gate slot back).
func (s *sim) paceStep(id int32, q *queued, st model.PaceStep) {
	switch {
	case st.Code != "":
		s.release(id)
		s.refuse(id, q, st.Code, st.RetryAfterMs)
	case !st.Go:
		s.schedule(id, q, model.Time(st.WakeAtMs), evPaced)
	default:
		s.dispatch(id, q)
	}
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
// it longer or refuses it at once (model.Limiter.Wake).
func (s *sim) paced(id int32, gen uint32) {
	q := s.adm.pending[id]
	if q == nil || q.gen != gen || s.gaveUp(id, q) {
		return
	}
	ref := model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}
	s.paceStep(id, q, s.limiter(ref).Wake(int64(s.now), q.a.Model, q.pw))
}

// gateAdmit: the composite concurrency gate (model.Admit).
func (s *sim) gateAdmit(id int32, q *queued) {
	ref := model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}
	left := s.queueLeft(id, s.connCfg(ref))
	d, h := s.adm.gate.Enter(uint64(id), model.GateRequest{Conn: ref, Model: q.a.Model, MaxQueueDepth: s.set.RequestQueue.MaxQueueDepth,
		QueueLeftMs: left, FailOpen: q.failOpen, NoConnectionCap: q.noConn})
	switch d.Action {
	case model.AdmitGo:
		if h.Held() {
			s.adm.held[id] = h
		}
		s.pace(id, q)
	case model.AdmitBypass:
		s.traceQueue(id, q, "fail_open", 0)
		s.pace(id, q)
	case model.AdmitReject:
		s.refuse(id, q, d.Code, d.RetryAfterMs())
	default:
		q.inGate = true
		s.traceQueue(id, q, "queued", left)
		s.schedule(id, q, s.now.Add(left), evQueueTimeout)
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
	d := model.GateWaitExpired(q.failOpen)
	if d.Action == model.AdmitBypass {
		s.traceQueue(id, q, "fail_open", 0)
		s.pace(id, q)
		return
	}
	s.refuse(id, q, d.Code, d.RetryAfterMs())
}

func (s *sim) leaveGate(id int32, q *queued) {
	q.inGate = false
	s.adm.gate.Leave(uint64(id))
}

// release frees the request's gate slot when its attempt ends; the gate
// hands free slots to waiters in FIFO order at once (model.Gate.Release),
// and the granted attempts begin from their own event.
func (s *sim) release(id int32) {
	h, ok := s.adm.held[id]
	if !ok {
		return
	}
	delete(s.adm.held, id)
	s.granted(s.adm.gate.Release(h))
}

// granted schedules the attempts the gate let in.
func (s *sim) granted(grants []model.GateGrant) {
	for _, g := range grants {
		w := int32(g.ID)
		q := s.adm.pending[w]
		q.inGate, q.granted = false, true
		s.adm.held[w] = g.Hold
		q.gen++
		s.heap.push(event{at: s.now, class: classFlow, kind: evAdmitGo, idx: w, gen: q.gen})
	}
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
	if q.a.Limited {
		// Never dispatched: its pacing slot goes back (model.Limiter.Leave,
		// as the gateway's pacers.waitFrom when the context ends).
		s.limiter(model.ConnRef{Provider: q.a.Provider, Connection: q.a.Connection}).Leave(q.pw)
	}
	s.release(id)
	delete(s.adm.pending, id)
	s.unchecked(q)
	_, ans := r.flow.Record(s.now, s.eng, &q.a, model.Report{Outcome: model.Outcome{Kind: model.OutcomeClientAbort}})
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
	if s.leaseFenceRefuses(id, &q.a) { // again after queueing: the lease may have changed meanwhile
		s.unchecked(q)
		if s.adm.held != nil {
			s.release(id)
		}
		return
	}
	if s.leasedWhileQueued(id, q) {
		return
	}
	q.a.Dispatch(s.now) // the herd guard counts from dispatch, not from the queue
	if q.checked {
		s.opts.NoInvariants = true // checked at selection (see queued.checked)
		s.begin(id, &q.a)
		s.opts.NoInvariants = false
		return
	}
	s.begin(id, &q.a)
}

// leasedWhileQueued: an attempt of a request without a lease whose
// connection was leased while it queued is refused locally
// (model.LeasedWhileQueued, the proxy's leasedWhileQueued). The gate slot
// is freed first: the gateway releases it before the flow's next step.
func (s *sim) leasedWhileQueued(id int32, q *queued) bool {
	if s.reqs[id].managed {
		return false
	}
	held, until := s.heldNow()
	err := model.LeasedWhileQueued(s.now, &q.a, held, until)
	if err == nil {
		return false
	}
	s.adm.refused[id]++
	s.unchecked(q)
	if s.adm.held != nil {
		s.release(id)
	}
	s.refuseWith(id, q, err)
	return true
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
	err := &model.Error{Code: code, Provider: q.a.Provider, Model: q.a.Model, RetryAfterMs: retryMs,
		Message: fmt.Sprintf("admission refused on %s/%s", q.a.Provider, q.a.Connection)}
	s.refuseWith(id, q, err)
}

// refuseWith records the local refusal err of a queued attempt (already
// off the queue) and lets the flow go on.
func (s *sim) refuseWith(id int32, q *queued, err *model.Error) {
	r := &s.reqs[id]
	s.traceQueue(id, q, string(err.Code), err.RetryAfterMs)
	_, ans := r.flow.Record(s.now, s.eng, &q.a, model.Report{Kind: model.ReportLocal, Err: err})
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
	s.traceConn(q.a.Provider, q.a.Connection)
	s.tr.ev("queue")
	s.tr.str("model", q.a.Model)
	s.tr.int("ms", ms)
	s.tr.int("req", int64(s.reqs[id].id))
	s.tr.end(s.off(s.now))
	s.tr.close()
}
