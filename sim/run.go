package sim

import (
	"cmp"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// Options control one run.
type Options struct {
	// Trace receives the JSON trace lines (nil = none; the hash is computed
	// either way).
	Trace io.Writer
	// Timeline, when set, records what a plot needs.
	Timeline *Timeline
	// Progress is called now and then with the simulated time reached.
	Progress func(simulated time.Duration)
	// NoInvariants skips the per-event safety checks (benchmarks of the
	// bare loop; never in tests).
	NoInvariants bool
	// Observe, when set, receives every finished request and the state at
	// every `at:` expect (observe.go).
	Observe *Observer
}

// Result is one run's outcome.
type Result struct {
	Scenario string `json:"scenario"`
	File     string `json:"file"`
	Seed     uint64 `json:"seed"`
	// Seeds are the derived sub-stream seeds.
	Seeds  map[string]uint64 `json:"seeds"`
	Sets   []string          `json:"sets,omitempty"`
	Passed bool              `json:"passed"`
	// Failures are the expects that did not hold.
	Failures []Failure `json:"failures,omitempty"`
	// Violations are broken invariants.
	Violations []Violation `json:"violations,omitempty"`
	Expects    int         `json:"expects"`
	// Simulated is the virtual time covered; Wall the real time it took;
	// Compression their ratio.
	Simulated   time.Duration  `json:"simulatedNs"`
	Wall        time.Duration  `json:"wallNs"`
	Compression float64        `json:"compression"`
	TraceSHA256 string         `json:"traceSha256"`
	TraceLines  uint64         `json:"traceRecords"`
	Requests    int            `json:"requests"`
	Upstream    int            `json:"upstreamCalls"`
	Statuses    map[int]int    `json:"statuses"`
	Results     map[string]int `json:"results"`
	// Repro is the command that reproduces this run.
	Repro string `json:"repro"`
}

// Failure is an expect that did not hold.
type Failure struct {
	Line     int           `json:"line"`
	At       time.Duration `json:"atNs"`
	What     string        `json:"what"`
	Expected string        `json:"expected"`
	Found    string        `json:"found"`
}

func (f Failure) String() string {
	return fmt.Sprintf("line %d, at %v: %s: expected %s, found %s", f.Line, f.At, f.What, f.Expected, f.Found)
}

// Violation is a broken safety or liveness invariant.
type Violation struct {
	At        time.Duration `json:"atNs"`
	Invariant string        `json:"invariant"`
	Detail    string        `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("at %v: invariant %q: %s", v.At, v.Invariant, v.Detail)
}

// Request results.
const (
	ResultServed      = "served"       // 2xx on the first attempt
	ResultFallback    = "fallback"     // 2xx after another attempt or a wait
	ResultRejected    = "rejected"     // the gateway's own error, no upstream attempt
	ResultFailed      = "failed"       // an upstream error, or a budget spent after attempts
	ResultStreamError = "stream_error" // a stream broke after the client got content
	ResultClientAbort = "client_abort" // the client gave up
)

// label is a request result as an index into resultOrder (counted without
// hashing; the Result maps are filled at the end of the run).
type label uint8

const (
	lServed label = iota
	lFallback
	lRejected
	lFailed
	lStreamError
	lClientAbort
)

func (l label) String() string { return resultOrder[l] }

type request struct {
	id       int32
	item     int32
	sentAt   model.Time
	stream   bool
	giveUpAt model.Time // client timeout; 0 = none
	// flow is the model's request loop (model.Flow): which connection to
	// try, when to wait, what to answer. sim only carries its steps out.
	flow model.Flow
	// lastConn is the last connection attempted (servedBy, also on
	// failure); hasLast once an attempt was recorded.
	lastConn model.ConnRef
	hasLast  bool
	wakeGen  uint32
	free     bool
	// delivered: content chunks the client has (a resume's prefill).
	delivered int64
	// managed: the request presents a lease (lease.go); lease is its claim
	// on the leased connection.
	managed bool
	lease   model.LeaseClaim
}

// abort says why an attempt was cut short by the gateway or the client.
type abort uint8

const (
	abortNone abort = iota
	abortClient
	abortDeadline
)

type attempt struct {
	seq       int64 // attempt number in the run (1-based), for the trace
	req       int32
	a         model.Attempt
	out       model.Outcome
	committed bool
	abort     abort
	execCut   bool // cut by the execution bound (model.AttemptBound): recorded as the gateway's own error
}

// compiled is a response prepared once: lower-case headers and the body.
type compiled struct {
	headers model.HeaderMap
	body    string
}

type sim struct {
	sc    *Scenario
	opts  Options
	eng   *model.Engine
	set   model.Settings
	tm    timers
	start model.Time
	now   model.Time

	heap   eventHeap
	picker *faults.Picker
	comp   map[*faults.Response]*compiled

	traffic, faultsRng, latency *rand.Rand

	reqs     []request
	freeReqs []int32
	atts     []attempt
	freeAtts []int32
	nextReq  int32
	nextAtt  int64
	// per traffic item: requests left to send, and the resolved route (the
	// topology never changes during a run, so Resolve's answer per model
	// name is fixed)
	left     []int
	routes   []model.Route
	routeErr []error

	sel model.Selection
	// held: every leased connection (lease.go), heldUntil when each lease
	// ends (aligned), heldEnd the first of those ends (0 = none); replaced,
	// never mutated (flows share them). outside: the leases clients
	// outside the traffic hold; leases: the named managed clients
	// (leaseOrder: first use).
	held       []model.ConnRef
	heldUntil  []model.Time
	heldEnd    model.Time
	outside    []outsideLease
	leases     map[string]*simLease
	leaseOrder []string
	adm        admission // the admission stage: limiters and the concurrency gate (admission.go)
	// client statuses and results, counted here and copied into the
	// Result's maps at the end
	statusCount [600]int
	resultCount [nResults]int
	scratch     []byte

	tr       *tracer
	res      *Result
	mirror   mirror
	actLayer []settings.NamedLayer

	// expects
	reqExpect map[int32]*reqOutcome
	windows   []windowAgg
	expIdx    []int // state expects by index into sc.Expects

	lastEvent model.Time
	events    uint64
}

type reqOutcome struct {
	done       bool
	status     int
	code       string
	servedBy   string
	attempts   int
	result     string
	retryAfter int64
	at         model.Time
	took       int64 // ms from sent to answered
}

type windowAgg struct {
	exp      *Expect
	statuses map[int]int
	calls    int
	served   map[string]int
	results  map[string]int
	requests int
}

// Run plays a scenario on virtual time.
func Run(sc *Scenario, opts Options) (*Result, error) {
	wall := time.Now()
	s, err := newSim(sc, opts)
	if err != nil {
		return nil, err
	}
	s.loop()
	s.finishRun()
	s.res.Wall = time.Since(wall)
	if s.res.Wall > 0 {
		s.res.Compression = float64(s.res.Simulated) / float64(s.res.Wall)
	}
	sum, err := s.tr.finish()
	s.res.TraceSHA256 = sum
	s.res.TraceLines = s.tr.n
	if err != nil {
		return s.res, fmt.Errorf("writing the trace: %w", err)
	}
	return s.res, nil
}

func newSim(sc *Scenario, opts Options) (*sim, error) {
	start := sc.Start
	if start.IsZero() {
		start = DefaultStart
	}
	eng, err := model.NewEngine(sc.Topology, sc.Settings, newStream(sc.Seed, "engine"))
	if err != nil {
		return nil, fmt.Errorf("%s: topology: %w", sc.File, err)
	}
	s := &sim{sc: sc, opts: opts, eng: eng, set: eng.Settings(), start: model.TimeOf(start),
		picker: faults.NewPicker(sc.Rules), comp: map[*faults.Response]*compiled{},
		traffic: newStream(sc.Seed, "traffic"), faultsRng: newStream(sc.Seed, "faults"),
		latency: newStream(sc.Seed, "latency"), tr: newTracer(opts.Trace),
		reqExpect: map[int32]*reqOutcome{}}
	s.tm = timersOf(&s.set)
	s.now = s.start
	s.mirror.init(&sc.Topology)
	if opts.Timeline != nil {
		opts.Timeline.declare(&sc.Topology)
	}
	s.res = &Result{Scenario: sc.Name, File: sc.File, Seed: sc.Seed, Seeds: DerivedSeeds(sc.Seed), Sets: sc.Sets,
		Statuses: map[int]int{}, Results: map[string]int{}, Expects: len(sc.Expects)}
	s.res.Repro = Repro(sc)
	for i := range sc.Rules {
		r := &sc.Rules[i]
		if r.Respond != nil {
			s.compile(r.Respond)
		}
		for j := range r.Sequence {
			s.compile(&r.Sequence[j])
		}
	}
	s.left = make([]int, len(sc.Traffic))
	s.routes = make([]model.Route, len(sc.Traffic))
	s.routeErr = make([]error, len(sc.Traffic))
	for i, t := range sc.Traffic {
		s.left[i] = max(t.Count, 1)
		s.routes[i], s.routeErr[i] = s.eng.Resolve(t.Model)
		s.heap.push(event{at: s.abs(t.At), class: classFlow, kind: evArrival, idx: int32(i)})
	}
	for i, a := range sc.Actions {
		s.heap.push(event{at: s.abs(a.At), class: classAction, kind: evAction, idx: int32(i)})
	}
	for i := range sc.Expects {
		e := &sc.Expects[i]
		switch e.Kind {
		case ExpectState:
			s.heap.push(event{at: s.abs(e.At), class: classExpect, kind: evExpect, idx: int32(i)})
		case ExpectRequest:
			s.reqExpect[int32(e.Request)] = &reqOutcome{}
		case ExpectWindow:
			s.windows = append(s.windows, windowAgg{exp: e, statuses: map[int]int{}, served: map[string]int{}, results: map[string]int{}})
		}
	}
	s.eng.Changes() // nothing should be pending; start clean
	return s, nil
}

func (s *sim) compile(r *faults.Response) {
	c := &compiled{}
	if len(r.Headers) > 0 {
		c.headers = model.HeaderMap{}
		for k, v := range r.Headers {
			c.headers[strings.ToLower(k)] = v
		}
	}
	if !r.OK() || r.Body != "" {
		c.body = r.ErrorBody()
	}
	s.comp[r] = c
}

func (s *sim) abs(d time.Duration) model.Time { return s.start.Add(d.Milliseconds()) }
func (s *sim) off(t model.Time) int64         { return t.Sub(s.start) }
func (s *sim) offD(t model.Time) time.Duration {
	return time.Duration(t.Sub(s.start)) * time.Millisecond
}

func (s *sim) loop() {
	for s.heap.len() > 0 {
		ev := s.heap.pop()
		s.now = ev.at
		s.lastEvent = ev.at
		s.events++
		switch ev.kind {
		case evAction:
			s.action(int(ev.idx))
		case evArrival:
			s.arrive(int(ev.idx))
		case evAttemptEnd:
			s.attemptEnd(ev.idx)
		case evWake:
			r := &s.reqs[ev.idx]
			if !r.free && r.wakeGen == ev.gen {
				s.wake(ev.idx)
			}
		case evExpect:
			s.expectState(int(ev.idx))
		case evPaced:
			s.paced(ev.idx, ev.gen)
		case evQueueTimeout:
			s.queueTimeout(ev.idx, ev.gen)
		case evAdmitGo:
			s.admitGo(ev.idx, ev.gen)
		}
		if s.opts.Progress != nil && s.events&0xffff == 0 {
			s.opts.Progress(s.offD(s.now))
		}
	}
}

// drain consumes the engine's change records: trace, invariant mirror,
// timeline.
func (s *sim) drain() {
	for _, c := range s.eng.Changes() {
		s.change(&c)
	}
}

func (s *sim) newRequest() int32 {
	var id int32
	if n := len(s.freeReqs); n > 0 {
		id = s.freeReqs[n-1]
		s.freeReqs = s.freeReqs[:n-1]
	} else {
		s.reqs = append(s.reqs, request{})
		id = int32(len(s.reqs) - 1)
	}
	r := &s.reqs[id]
	*r = request{wakeGen: r.wakeGen + 1}
	return id
}

func (s *sim) newAttempt() int32 {
	if n := len(s.freeAtts); n > 0 {
		id := s.freeAtts[n-1]
		s.freeAtts = s.freeAtts[:n-1]
		return id
	}
	s.atts = append(s.atts, attempt{})
	return int32(len(s.atts) - 1)
}

func (s *sim) arrive(item int) {
	t := &s.sc.Traffic[item]
	s.left[item]--
	if s.left[item] > 0 {
		gap := t.Every.Milliseconds()
		if t.Poisson && gap > 0 {
			gap = int64(s.traffic.ExpFloat64() * float64(gap))
		}
		s.heap.push(event{at: s.now.Add(gap), class: classFlow, kind: evArrival, idx: int32(item)})
	}
	id := s.newRequest()
	r := &s.reqs[id]
	s.nextReq++
	r.id = s.nextReq
	r.item = int32(item)
	r.sentAt = s.now
	r.stream = t.Stream
	if t.Timeout > 0 {
		r.giveUpAt = s.now.Add(t.Timeout.Milliseconds())
	}
	s.res.Requests++

	s.tr.rec()
	s.tr.ev("arrive")
	s.tr.str("model", t.Model)
	s.tr.int("req", int64(r.id))
	s.tr.end(s.off(s.now))
	s.tr.close()

	route, err := s.routes[item], s.routeErr[item]
	if err != nil {
		code, status := "", 404
		if me, ok := err.(*model.Error); ok {
			code, status = string(me.Code), me.Code.HTTPStatus()
		}
		s.finish(id, status, code, lRejected, 0)
		return
	}
	r.flow.Reset(s.eng, s.now, route, t.Session, nil) // keeps the pooled request's buffers
	if t.Lease != "" && s.leaseDispatch(id, t) {      // lease.go: refused before any dispatch
		return
	}
	s.step(id)
}

// wake ends a cooldown wait: the client may have given up meanwhile (
// docs/selection.md#waiting-for-a-cooldown: a disconnect during the wait ends it, 499).
func (s *sim) wake(id int32) {
	r := &s.reqs[id]
	if r.giveUpAt > 0 && s.now >= r.giveUpAt {
		s.finish(id, 499, "client_abort", lClientAbort, 0)
		return
	}
	s.step(id)
}

// step asks the request's flow what to do next and does it: begin an
// upstream attempt, wait, or answer the client. Every decision is the
// model's (model.Flow); sim only carries it out on virtual time.
func (s *sim) step(id int32) {
	r := &s.reqs[id]
	// Next selects only when it has something to decide; an empty selection
	// afterwards means it did not (e.g. the deadline was already spent).
	s.sel.Candidates, s.sel.Excluded = s.sel.Candidates[:0], s.sel.Excluded[:0]
	if !r.managed {
		// The leases held now and their ends (docs/leases.md; lease.go), as
		// the proxy gives them before every step.
		r.flow.Held, r.flow.HeldUntil = s.heldNow()
	}
	s.sel.Full = true // the trace lists every candidate and exclusion (a lazy Select would list a prefix)
	st := r.flow.Next(s.now, s.eng, &s.sel)
	s.drain()
	if len(s.sel.Candidates) > 0 || len(s.sel.Excluded) > 0 {
		s.traceSelect(r, &s.sel)
	}
	switch st.Kind {
	case model.StepAttempt:
		if s.passedOver(id, &st.Attempt) { // surface.go: the client's format
			s.step(id)
			return
		}
		if s.nativeResume(id, &st.Attempt) { // surface.go: a native target takes no prefill
			return
		}
		s.admit(id, &st.Attempt) // admission.go: limiter and concurrency gate, then begin
	case model.StepLimitReset:
		s.limitReset(id, st.LastConnection) // spendwall.go
	case model.StepWait:
		r.wakeGen++
		s.tr.rec()
		s.tr.ev("wait")
		s.tr.int("ms", st.WaitMs)
		if st.PriorityWait {
			s.tr.bool("priority", true) // priorityWait: for the first target, not every target
		}
		s.tr.int("req", int64(r.id))
		s.tr.end(s.off(s.now))
		s.tr.close()
		at := s.now.Add(st.WaitMs)
		if r.giveUpAt > 0 && at > r.giveUpAt {
			at = r.giveUpAt // the client leaves during the wait
		}
		s.heap.push(event{at: at, class: classFlow, kind: evWake, idx: id, gen: r.wakeGen})
	default:
		s.answer(id, &st, abortNone)
	}
}

// answer finishes a request with the flow's answer, labelled for the
// scenario's expects (docs/scenarios.md "Results"). Only the client's own
// give-up is sim's knowledge; an attempt cut by the deadline (abortDeadline)
// is answered exactly as the flow says.
func (s *sim) answer(id int32, st *model.Step, ab abort) {
	r := &s.reqs[id]
	code, result := "", lFailed // model.ResultUpstream: the last upstream error
	switch {
	case ab == abortClient:
		code, result = "client_abort", lClientAbort
	case st.Result == model.ResultStreamError:
		// The client already had content: 200, then the SSE error event.
		code, result = string(st.Err.Code), lStreamError
	case st.Err != nil:
		code, result = string(st.Err.Code), lRejected
		if r.flow.Attempts() > 0 {
			result = lFailed // a budget spent after attempts
		}
	default:
		switch st.Result {
		case model.ResultServed:
			result = lServed
		case model.ResultFallback:
			result = lFallback
		}
	}
	s.finish(id, st.Status, code, result, st.RetryAfterMs)
}

// begin carries out an attempt the flow has begun (its breaker permit is
// held): the fault rules say how the upstream behaves, the attempt's
// timeline says what the gateway observes and when.
func (s *sim) begin(id int32, a *model.Attempt) {
	r := &s.reqs[id]
	s.res.Upstream++
	if !s.opts.NoInvariants {
		// The change records of Next (selection refreshes, the probe
		// permit) are applied: the mirror holds the state Begin saw.
		pre := s.mirror.preBegin(a.Provider, a.Connection)
		s.checkBegin(&pre, a)
	}
	at := s.newAttempt()
	x := &s.atts[at]
	s.nextAtt++
	*x = attempt{seq: s.nextAtt, req: id, a: *a}

	resp, rule := s.picker.Pick(time.Duration(s.off(s.now))*time.Millisecond, a.Provider, a.Connection, a.Model, s.faultsRng.Float64)
	lat := resp.Latency.Milliseconds()
	if resp.Jitter > 0 {
		lat += s.latency.Int64N(resp.Jitter.Milliseconds() + 1)
	}
	var rsm resumed
	if a.Resume {
		resp, rsm = resumeResponse(resp, r.delivered) // sim/resume.go
	}
	tl := attemptTimeline(resp, lat, &s.tm, r.stream)
	x.out = s.outcomeOf(&tl, resp)
	endAt := s.cutAttempt(x, r, &tl)
	x.committed = r.stream && !tl.success && tl.firstByte >= 0 && s.now.Add(tl.firstByte) <= endAt
	if x.committed && !a.Resume && nativeFormat(s.sc.Traffic[r.item].Format, s.providerType(a.Provider)) {
		// A native stream's text is not kept: it is never resumed
		// (surface.go), as the gateway marks it on its first event.
		r.flow.ResumeBlocked = true
	}
	if a.Resume || x.committed {
		endAt = s.resumeEnd(r, x, &tl, &rsm, endAt) // sim/resume.go
	}

	s.traceBegin(x, a, r, rule)
	s.heap.push(event{at: endAt, class: classFlow, kind: evAttemptEnd, idx: at})
}

// outcomeOf is what the gateway observes of an upstream answer resp whose
// timeline is tl.
func (s *sim) outcomeOf(tl *timeline, resp *faults.Response) model.Outcome {
	out := model.Outcome{Kind: tl.kind, Transport: tl.transport}
	if tl.kind == model.OutcomeResponse {
		out.Status = resp.StatusOrOK()
		if cp := s.comp[resp]; cp != nil {
			if cp.headers != nil {
				out.Headers = cp.headers
			}
			out.Body = cp.body
		}
	}
	return out
}

// cutAttempt is when the attempt x of r ends: its timeline's end, unless
// the model's attempt bound, the client giving up or the request's
// deadline cuts it first (x's outcome then says so and tl is no success).
func (s *sim) cutAttempt(x *attempt, r *request, tl *timeline) model.Time {
	end := tl.endMs
	// The model's attempt bound, as the proxy times it; the deadline's cut
	// is the flow's deadline event below.
	if cut, at := s.tm.bound.Before(end); cut != model.TimerNone {
		end = at
		tl.success = false
		var local *model.Error
		x.out, local = s.tm.bound.TimerOutcome(cut)
		x.execCut = local != nil && s.tm.bound.Cut == model.CutExecution // recorded as a local cut
	}
	endAt := s.now.Add(end)
	if r.giveUpAt > 0 && endAt > r.giveUpAt {
		endAt, x.abort = r.giveUpAt, abortClient
		x.out = model.Outcome{Kind: model.OutcomeClientAbort}
		tl.success = false
	} else if dl := r.flow.Deadline(); endAt > dl {
		// The whole-request deadline cuts the attempt: neutral for the
		// upstream's health, recorded as an abort (as the proxy does).
		endAt, x.abort = dl, abortDeadline
		x.out = model.Outcome{Kind: model.OutcomeClientAbort}
		tl.success = false
	}
	return endAt
}

// traceBegin traces an attempt begun; rule is the fault rule that chose
// the upstream's behaviour (-1 for none).
func (s *sim) traceBegin(x *attempt, a *model.Attempt, r *request, rule int) {
	s.tr.rec()
	s.tr.int("att", x.seq)
	s.traceConn(a.Provider, a.Connection)
	s.tr.ev("begin")
	s.tr.str("model", a.Model)
	if a.Probe() {
		s.tr.bool("probe", true)
	}
	s.tr.int("req", int64(r.id))
	if a.Resume {
		s.tr.bool("resume", true) // continues the broken stream (sim/resume.go)
	}
	if rule >= 0 {
		s.tr.int("rule", int64(rule))
	}
	if a.SlowLane {
		s.tr.bool("slow", true) // the spend-wall lane header (docs/spendwall.md)
	}
	s.tr.end(s.off(s.now))
	s.tr.close()
}

func (s *sim) attemptEnd(at int32) {
	x := &s.atts[at]
	id := x.req
	r := &s.reqs[id]
	pre := s.mirror.provider(x.a.Provider)
	var v model.Verdict
	var ans *model.Step
	if x.execCut && x.abort == abortNone {
		v, ans = r.flow.Record(s.now, s.eng, &x.a, model.Report{Kind: model.ReportLocalCut, Err: model.ExecutionTimeout(), Committed: x.committed})
	} else {
		v, ans = r.flow.Record(s.now, s.eng, &x.a, model.Report{Outcome: x.out, Committed: x.committed})
	}
	s.drain()
	if !s.opts.NoInvariants {
		s.checkRecord(pre, x, &v)
	}
	s.afterAttempt(id, &x.a, &x.out, &v) // admission.go: limiter feedback, gate slot
	s.tr.rec()
	s.tr.int("att", x.seq)
	if x.committed {
		s.tr.bool("committed", true)
	}
	s.traceConn(x.a.Provider, x.a.Connection)
	s.tr.ev("record")
	s.tr.str("next", v.Next.String())
	s.tr.str("outcome", outcomeLabel(&x.out))
	if v.Reason != model.ReasonNone {
		s.tr.str("reason", v.Reason.String())
	}
	s.tr.int("req", int64(r.id))
	s.tr.end(s.off(s.now))
	s.tr.close()

	r.lastConn, r.hasLast = model.ConnRef{Provider: x.a.Provider, Connection: x.a.Connection}, true
	ab := x.abort
	s.freeAtts = append(s.freeAtts, at)
	if ans != nil {
		s.answer(id, ans, ab)
		return
	}
	s.step(id)
}

func outcomeLabel(o *model.Outcome) string {
	switch o.Kind {
	case model.OutcomeResponse:
		if o.Status >= 0 && o.Status < len(statusText) {
			return statusText[o.Status]
		}
		return strconv.Itoa(o.Status)
	case model.OutcomeTransport:
		return o.Transport.String()
	}
	return o.Kind.String()
}

var statusText = func() []string {
	out := make([]string, 600)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}()

func (s *sim) finish(id int32, status int, code string, result label, retryMs int64) {
	r := &s.reqs[id]
	s.scratch = s.scratch[:0]
	if r.hasLast {
		s.scratch = append(append(append(s.scratch, r.lastConn.Provider...), '/'), r.lastConn.Connection...)
	}
	s.tr.rec()
	attempts := r.flow.Attempts()
	s.tr.int("attempts", int64(attempts))
	if code != "" {
		s.tr.str("code", code)
	}
	s.tr.ev("done")
	s.tr.int("req", int64(r.id))
	s.tr.str("result", result.String())
	if retryMs > 0 {
		s.tr.int("retry", retryMs)
	}
	if len(s.scratch) > 0 {
		s.tr.bytes("served", s.scratch)
	}
	s.tr.int("status", int64(status))
	s.tr.end(s.off(s.now))
	s.tr.close()

	if status >= 0 && status < len(s.statusCount) {
		s.statusCount[status]++
	} else {
		s.res.Statuses[status]++
	}
	s.resultCount[result]++
	served := ""
	if r.hasLast && (len(s.windows) > 0 || len(s.reqExpect) > 0) {
		served = r.lastConn.String()
	}
	if o := s.reqExpect[r.id]; o != nil {
		*o = reqOutcome{done: true, status: status, code: code, servedBy: served, attempts: attempts,
			result: result.String(), retryAfter: retryMs, at: s.now, took: s.now.Sub(r.sentAt)}
	}
	for i := range s.windows {
		w := &s.windows[i]
		if s.off(r.sentAt) >= w.exp.From.Milliseconds() && s.off(r.sentAt) < w.exp.Until.Milliseconds() {
			w.requests++
			w.statuses[status]++
			w.calls += attempts - s.adm.refused[id] // a locally refused try never reached the upstream (admission.go)
			w.results[result.String()]++
			if (result == lServed || result == lFallback) && served != "" {
				w.served[served]++
			}
		}
	}
	if s.opts.Timeline != nil {
		s.opts.Timeline.request(s.off(s.now), int(result))
	}
	if ob := s.opts.Observe; ob != nil && ob.Request != nil {
		ob.Request(RequestObservation{N: int(r.id), SentAt: s.offD(r.sentAt), DoneAt: s.offD(s.now), Status: status,
			ServedBy: r.lastConnString(), Code: code, Result: result.String(), Attempts: attempts, RetryAfterMs: retryMs})
	}
	r.free = true
	r.wakeGen++
	delete(s.adm.refused, id) // the request id is pooled (admission.go)
	s.freeReqs = append(s.freeReqs, id)
}

func (s *sim) traceSelect(r *request, sel *model.Selection) {
	s.tr.rec()
	b := s.scratch[:0]
	for i, c := range sel.Candidates {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, c.Provider...), '/'), c.Connection...)
	}
	s.tr.bytes("cand", b)
	s.tr.ev("select")
	b = b[:0]
	for i, x := range sel.Excluded {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, x.Provider...)
		if x.Connection != "" {
			b = append(append(b, '/'), x.Connection...)
		}
		b = append(append(b, ':'), x.Reason.String()...)
		if x.RemainingMs > 0 {
			b = append(b, ':')
			b = strconv.AppendInt(b, x.RemainingMs, 10)
		}
	}
	if len(b) > 0 {
		s.tr.bytes("excl", b)
	}
	s.scratch = b
	s.tr.int("req", int64(r.id))
	s.tr.end(s.off(s.now))
	s.tr.close()
}

// change traces one model change record and feeds the invariant mirror and
// the timeline.
func (s *sim) change(c *model.Change) {
	switch c.Kind {
	case model.ChangeUsage:
		return // implied by the begin record
	case model.ChangeBreaker:
		s.mirror.breaker(c)
		s.traceBreaker(c)
	case model.ChangeConnection:
		s.mirror.conn(c)
		s.traceConnChange(c)
	case model.ChangeLockout, model.ChangeLockoutRemoved:
		s.traceLockout(c)
	case model.ChangeWindow:
		s.tr.rec()
		s.tr.ev("window")
		s.tr.int("fails", int64(len(c.Window.Failures)))
		s.tr.str("prov", c.Provider)
		s.tr.end(s.off(c.At))
		if c.Window.CoolUntil > c.At {
			s.tr.int("until", s.off(c.Window.CoolUntil))
		}
		s.tr.close()
	case model.ChangePin, model.ChangePinRemoved:
		s.tracePin(c)
	case model.ChangeCursor:
		s.tr.rec()
		if c.Combo != "" {
			s.tr.str("combo", c.Combo)
		}
		s.tr.int("cursor", int64(c.Cursor))
		s.tr.ev("cursor")
		if c.Provider != "" {
			s.tr.str("prov", c.Provider)
		}
		s.tr.end(s.off(c.At))
		s.tr.close()
	}
}

// traceConn writes a record's "conn" field: provider/connection.
func (s *sim) traceConn(provider, connection string) {
	s.scratch = append(append(append(s.scratch[:0], provider...), '/'), connection...)
	s.tr.bytes("conn", s.scratch)
}

func (s *sim) traceBreaker(c *model.Change) {
	s.tr.rec()
	s.tr.ev("breaker")
	s.tr.int("fails", int64(c.Breaker.FailureCount))
	s.tr.str("prov", c.Provider)
	s.tr.str("state", c.Breaker.State.String())
	s.tr.end(s.off(c.At))
	if c.Transition.Changed() {
		s.tr.str("why", c.Transition.Reason)
	}
	s.tr.close()
	if s.opts.Timeline != nil {
		s.opts.Timeline.breaker(c.Provider, s.off(c.At), c.Breaker.State)
	}
}

func (s *sim) traceConnChange(c *model.Change) {
	s.tr.rec()
	s.traceConn(c.Provider, c.Connection)
	if c.Conn.LastErrorType != model.ReasonNone {
		s.tr.str("err", c.Conn.LastErrorType.String())
	}
	s.tr.ev("conn")
	s.tr.int("level", int64(c.Conn.BackoffLevel))
	s.tr.str("status", c.Conn.Status.String())
	s.tr.end(s.off(c.At))
	if c.Conn.RateLimitedUntil > c.At {
		s.tr.int("until", s.off(c.Conn.RateLimitedUntil))
	}
	s.tr.close()
	if s.opts.Timeline != nil {
		s.opts.Timeline.conn(c.Provider+"/"+c.Connection, s.off(c.At), c.Conn.Status, s.off(c.Conn.RateLimitedUntil), c.Conn.RateLimitedUntil > c.At)
	}
}

// traceLockout traces a lockout set (ChangeLockout) or removed.
func (s *sim) traceLockout(c *model.Change) {
	set := c.Kind == model.ChangeLockout
	ev := "lockout"
	if !set {
		ev = "lockout_removed"
	}
	s.tr.rec()
	s.traceConn(c.Provider, c.Connection)
	s.tr.ev(ev)
	if set {
		s.tr.int("fails", int64(c.Lockout.FailureCount))
	}
	s.tr.str("key", c.Lockout.Key.String())
	if set && c.Lockout.Reason != model.ReasonNone {
		s.tr.str("reason", c.Lockout.Reason.String())
	}
	s.tr.end(s.off(c.At))
	if set {
		s.tr.int("until", s.off(c.Lockout.Until))
	}
	s.tr.close()
	if s.opts.Timeline != nil {
		until := c.At
		if set {
			until = c.Lockout.Until
		}
		s.opts.Timeline.lockout(c.Provider+"/"+c.Connection, c.Lockout.Key.String(), s.off(c.At), s.off(until))
	}
}

// tracePin traces a session pin set (ChangePin) or removed. The session
// key is not traced: it stands for a client's session.
func (s *sim) tracePin(c *model.Change) {
	ev := "pin"
	if c.Kind == model.ChangePinRemoved {
		ev = "pin_removed"
	}
	s.tr.rec()
	s.traceConn(c.Pin.Provider, c.Pin.Connection)
	s.tr.ev(ev)
	s.tr.end(s.off(c.At))
	if c.Kind == model.ChangePin {
		s.tr.int("until", s.off(c.Pin.ExpiresAt))
	}
	s.tr.close()
}

// action applies one operator action through the model's operator API.
func (s *sim) action(i int) {
	a := &s.sc.Actions[i]
	err := s.applyAction(a)
	s.tr.rec()
	s.tr.str("action", a.Kind.String())
	s.tr.ev("action")
	s.tr.int("line", int64(a.Line))
	if err != nil {
		s.tr.bool("ok", false)
	}
	if a.Provider != "" {
		s.tr.str("prov", a.Provider)
	}
	s.tr.end(s.off(s.now))
	s.tr.close()
	s.mirror.inAction = true
	s.drain()
	s.mirror.inAction = false
	if err != nil {
		s.res.Failures = append(s.res.Failures, Failure{Line: a.Line, At: s.offD(s.now), What: "action " + a.Kind.String(),
			Expected: "the action to apply", Found: err.Error()})
	}
}

// applyAction carries out an operator action: the first error, if any.
func (s *sim) applyAction(a *Action) error {
	var err error
	switch a.Kind {
	case ActResetBreaker:
		_, err = s.eng.ResetBreakers(s.now, a.Provider)
	case ActClearCooldowns:
		_, err = s.eng.ClearCooldowns(s.now, a.Connections, a.All, a.Provider)
	case ActResetConnection:
		for _, c := range a.Connections {
			if _, e := s.eng.ResetConnection(s.now, c); e != nil && err == nil {
				err = e
			}
		}
	case ActClearLockout:
		if a.All {
			s.eng.ClearAllLockouts(s.now)
		}
		for _, c := range a.Connections {
			if _, e := s.eng.ClearLockout(s.now, c, a.Model); e != nil && err == nil {
				err = e
			}
		}
	case ActConnectionTest:
		err = s.connectionTest(a)
	case ActLeaseAcquire, ActLeaseRelease, ActLeaseRenew:
		s.leaseAction(a)
	case ActSet:
		err = s.setAction(a)
	case ActRateLimit:
		// The gateway's POST /api/rate-limits takes the same model step.
		for _, c := range a.Connections {
			err = cmp.Or(err, s.eng.SetRateLimitProtection(s.now, c, a.Enabled))
		}
	}
	return err
}

// connectionTest checks every connection of each provider named, as the
// gateway's POST /api/providers/{id}/test does, and the fault upstream's
// /models answers each of them.
func (s *sim) connectionTest(a *Action) error {
	var err error
	seen := map[string]bool{}
	for _, c := range a.Connections {
		if seen[c.Provider] {
			continue
		}
		seen[c.Provider] = true
		if e := s.eng.ProviderTested(s.now, c.Provider, s.connIDs(c.Provider)); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// setAction adds the action's settings as a layer above the scenario's.
func (s *sim) setAction(a *Action) error {
	s.actLayer = append(s.actLayer, settings.NamedLayer{Name: fmt.Sprintf("action line %d", a.Line), Tree: a.Settings})
	layers := append(slices.Clone(s.sc.Layers), s.actLayer...)
	set, _, err := settings.Resolve(layers...)
	if err == nil {
		s.eng.UpdateSettings(s.now, set)
		s.set = s.eng.Settings()
		s.tm = timersOf(&s.set)
		s.setGlobalCap()
	}
	return err
}

// Repro is the one command that reproduces a scenario run.
func Repro(sc *Scenario) string {
	var b strings.Builder
	b.WriteString("breakwater sim ")
	b.WriteString(shellQuote(sc.File))
	fmt.Fprintf(&b, " -seed %d", sc.Seed)
	for _, s := range sc.Sets {
		b.WriteString(" -set ")
		b.WriteString(shellQuote(s))
	}
	b.WriteString(" -trace trace.jsonl")
	return b.String()
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '=' || r == ':' || r == ',' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// connIDs lists provider p's connections in topology order.
func (s *sim) connIDs(p string) []string {
	var ids []string
	for _, pc := range s.sc.Topology.Providers {
		if pc.ID == p {
			for _, c := range pc.Connections {
				ids = append(ids, c.ID)
			}
		}
	}
	return ids
}
