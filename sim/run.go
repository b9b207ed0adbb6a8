package sim

import (
	"fmt"
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

type request struct {
	id          int32
	item        int32
	sentAt      model.Time
	route       model.Route
	stream      bool
	giveUpAt    model.Time // client timeout; 0 = none
	deadline    model.Time // requestBudget.deadlineMs
	attempts    int
	waits       int
	waitedMs    int64
	tried       []model.ConnRef
	skipTargets []int
	retriedSame bool
	last        model.Verdict
	hasLast     bool
	lastConn    model.ConnRef
	wakeGen     uint32
	free        bool
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
	cand      model.Candidate
	out       model.Outcome
	committed bool
	abort     abort
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
	// per traffic item: requests left to send
	left []int

	sel     model.Selection
	selAll  model.Selection
	mreq    model.Request
	scratch []byte

	tr       *tracer
	res      *Result
	mirror   mirror
	actLayer []model.NamedLayer

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
	for i, t := range sc.Traffic {
		s.left[i] = max(t.Count, 1)
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
	*r = request{tried: r.tried[:0], skipTargets: r.skipTargets[:0], wakeGen: r.wakeGen + 1}
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
	r.deadline = s.now.Add(int64(s.set.RequestBudget.DeadlineMs))
	s.res.Requests++

	s.tr.rec("arrive")
	s.tr.ev("arrive")
	s.tr.str("model", kModel, t.Model)
	s.tr.int("req", kReq, int64(r.id))
	s.tr.end(s.off(s.now))
	s.tr.close()

	route, err := s.eng.Resolve(t.Model)
	if err != nil {
		code, status := "", 404
		if me, ok := err.(*model.Error); ok {
			code, status = string(me.Code), me.Code.HTTPStatus()
		}
		s.finish(id, status, code, ResultRejected, 0)
		return
	}
	r.route = route
	s.dispatch(id)
}

func (s *sim) wake(id int32) {
	r := &s.reqs[id]
	if r.giveUpAt > 0 && s.now >= r.giveUpAt {
		s.finish(id, 499, "client_abort", ResultClientAbort, 0)
		return
	}
	s.dispatch(id)
}

// dispatch selects the next candidate for a request and begins an attempt,
// or waits, or answers.
func (s *sim) dispatch(id int32) {
	r := &s.reqs[id]
	s.mreq.Route = r.route
	s.mreq.Skip = r.tried
	s.eng.Select(s.now, &s.mreq, &s.sel)
	s.drain()
	cand := -1
	for i := range s.sel.Candidates {
		if !slices.Contains(r.skipTargets, s.sel.Candidates[i].Target) {
			cand = i
			break
		}
	}
	s.traceSelect(r, &s.sel)
	if cand < 0 {
		s.noCandidate(id)
		return
	}
	if r.attempts >= s.set.RequestBudget.MaxAttempts {
		s.finish(id, model.CodeBudgetExhausted.HTTPStatus(), string(model.CodeBudgetExhausted), ResultFailed, 0)
		return
	}
	s.begin(id, s.sel.Candidates[cand])
}

// noCandidate: nothing left to try. Wait for a short transient cooldown
// when the settings allow it (SPEC §4b), else answer.
func (s *sim) noCandidate(id int32) {
	r := &s.reqs[id]
	sel := &s.sel
	if len(r.tried) > 0 || len(r.skipTargets) > 0 {
		// After a wait every connection is fair game again: judge the wait
		// on the full picture.
		s.mreq.Route = r.route
		s.mreq.Skip = nil
		s.eng.Select(s.now, &s.mreq, &s.selAll)
		s.drain()
		sel = &s.selAll
	}
	budgetLeft := r.deadline.Sub(s.now)
	if r.giveUpAt > 0 {
		budgetLeft = min(budgetLeft, r.giveUpAt.Sub(s.now))
	}
	var waitMs int64
	var ok bool
	if r.route.IsCombo() {
		w := &s.set.ComboCooldownWait
		waitMs, ok = model.WaitDecision(s.now, sel, w.Enabled, int64(w.MaxWaitMs), r.waits, w.MaxAttempts,
			min(budgetLeft, int64(w.BudgetMs)-r.waitedMs))
	} else {
		w := &s.set.WaitForCooldown
		waitMs, ok = model.WaitDecision(s.now, sel, w.Enabled, int64(w.MaxRetryWaitSec)*1000, r.waits, w.MaxRetries,
			min(budgetLeft, int64(w.BudgetMs)-r.waitedMs))
	}
	if ok {
		r.waits++
		r.waitedMs += waitMs
		r.tried = r.tried[:0]
		r.skipTargets = r.skipTargets[:0]
		r.retriedSame = false
		r.wakeGen++
		s.tr.rec("wait")
		s.tr.ev("wait")
		s.tr.int("ms", kMs, waitMs)
		s.tr.int("req", kReq, int64(r.id))
		s.tr.end(s.off(s.now))
		s.tr.close()
		s.heap.push(event{at: s.now.Add(waitMs), class: classFlow, kind: evWake, idx: id, gen: r.wakeGen})
		return
	}
	unavail := model.Unavailable(s.now, &r.route, sel)
	if r.hasLast {
		// Attempts were made: the client gets the last upstream error.
		status := clientStatus(&r.last)
		retry := r.last.ClientRetryAfterMs
		if retry == 0 && unavail != nil {
			retry = unavail.RetryAfterMs
		}
		s.finish(id, status, "", ResultFailed, retry)
		return
	}
	if unavail == nil {
		// Candidates exist but every one is of a skipped target.
		unavail = &model.Error{Code: model.CodeAllTargetsSkipped}
	}
	s.finish(id, unavail.Code.HTTPStatus(), string(unavail.Code), ResultRejected, unavail.RetryAfterMs)
}

func (s *sim) begin(id int32, c model.Candidate) {
	r := &s.reqs[id]
	pre := s.mirror.preBegin(c.Provider, c.Connection)
	a, err := s.eng.Begin(s.now, c)
	s.drain()
	if err != nil {
		// The breaker refused between Select and Begin: not an attempt.
		s.tr.rec("begin_refused")
		s.tr.str("conn", kConn, c.Provider+"/"+c.Connection)
		s.tr.ev("begin_refused")
		s.tr.int("req", kReq, int64(r.id))
		s.tr.end(s.off(s.now))
		s.tr.close()
		r.tried = append(r.tried, model.ConnRef{Provider: c.Provider, Connection: c.Connection})
		s.dispatch(id)
		return
	}
	r.attempts++
	s.res.Upstream++
	if !s.opts.NoInvariants {
		s.checkBegin(&pre, &a)
	}
	at := s.newAttempt()
	x := &s.atts[at]
	s.nextAtt++
	*x = attempt{seq: s.nextAtt, req: id, a: a, cand: c}

	resp, rule := s.picker.Pick(time.Duration(s.off(s.now))*time.Millisecond, c.Provider, c.Connection, c.Model, s.faultsRng.Float64)
	lat := resp.Latency.Milliseconds()
	if resp.Jitter > 0 {
		lat += s.latency.Int64N(resp.Jitter.Milliseconds() + 1)
	}
	tl := attemptTimeline(resp, lat, &s.tm)
	end := tl.endMs
	x.out = model.Outcome{Kind: tl.kind, Transport: tl.transport}
	if tl.kind == model.OutcomeResponse {
		x.out.Status = resp.StatusOrOK()
		if cp := s.comp[resp]; cp != nil {
			if cp.headers != nil {
				x.out.Headers = cp.headers
			}
			x.out.Body = cp.body
		}
	}
	if end > s.tm.attempt {
		end = s.tm.attempt
		x.out = model.Outcome{Kind: model.OutcomeTransport, Transport: model.TransportAttemptTimeout}
		tl.success = false
	}
	endAt := s.now.Add(end)
	if r.giveUpAt > 0 && endAt > r.giveUpAt {
		endAt, x.abort = r.giveUpAt, abortClient
		x.out = model.Outcome{Kind: model.OutcomeClientAbort}
		tl.success = false
	} else if endAt > r.deadline {
		endAt, x.abort = r.deadline, abortDeadline
		x.out = model.Outcome{Kind: model.OutcomeClientAbort}
		tl.success = false
	}
	x.committed = r.stream && !tl.success && tl.firstByte >= 0 && s.now.Add(tl.firstByte) <= endAt

	s.tr.rec("begin")
	s.tr.int("att", kAtt, x.seq)
	s.scratch = append(append(append(s.scratch[:0], c.Provider...), '/'), c.Connection...)
	s.tr.bytes("conn", kConn, s.scratch)
	s.tr.ev("begin")
	s.tr.str("model", kModel, c.Model)
	if a.Probe() {
		s.tr.bool("probe", kProbe, true)
	}
	s.tr.int("req", kReq, int64(r.id))
	if rule >= 0 {
		s.tr.int("rule", kRule, int64(rule))
	}
	s.tr.end(s.off(s.now))
	s.tr.close()
	s.heap.push(event{at: endAt, class: classFlow, kind: evAttemptEnd, idx: at})
}

func (s *sim) attemptEnd(at int32) {
	x := &s.atts[at]
	id := x.req
	r := &s.reqs[id]
	pre := s.mirror.provider(x.cand.Provider)
	v := s.eng.Record(s.now, &x.a, x.out)
	s.drain()
	if !s.opts.NoInvariants {
		s.checkRecord(pre, x, &v)
	}
	s.tr.rec("record")
	s.tr.int("att", kAtt, x.seq)
	if x.committed {
		s.tr.bool("committed", kCommitted, true)
	}
	s.scratch = append(append(append(s.scratch[:0], x.cand.Provider...), '/'), x.cand.Connection...)
	s.tr.bytes("conn", kConn, s.scratch)
	s.tr.ev("record")
	s.tr.str("next", kNext, v.Next.String())
	s.tr.str("outcome", kOutcome, outcomeLabel(&x.out))
	if v.Reason != model.ReasonNone {
		s.tr.str("reason", kReason, v.Reason.String())
	}
	s.tr.int("req", kReq, int64(r.id))
	s.tr.end(s.off(s.now))
	s.tr.close()

	r.last, r.hasLast = v, true
	r.lastConn = model.ConnRef{Provider: x.cand.Provider, Connection: x.cand.Connection}
	ref := model.ConnRef{Provider: x.cand.Provider, Connection: x.cand.Connection}
	target := x.cand.Target
	committed, ab := x.committed, x.abort
	s.freeAtts = append(s.freeAtts, at)

	switch {
	case ab == abortClient:
		s.finish(id, 499, "client_abort", ResultClientAbort, 0)
		return
	case ab == abortDeadline:
		s.finish(id, model.CodeBudgetExhausted.HTTPStatus(), string(model.CodeBudgetExhausted), ResultFailed, 0)
		return
	case v.Next == model.NextDone:
		res := ResultServed
		if r.attempts > 1 || r.waits > 0 {
			res = ResultFallback
		}
		s.finish(id, v.ClientStatus, "", res, 0)
		return
	case committed:
		// The client already has content: no fail-over, an SSE error event.
		s.finish(id, 200, "stream_interrupted", ResultStreamError, 0)
		return
	}
	switch v.Next {
	case model.NextStop:
		s.finish(id, clientStatus(&v), "", ResultFailed, v.ClientRetryAfterMs)
		return
	case model.NextTarget:
		r.tried = append(r.tried, ref)
		r.skipTargets = append(r.skipTargets, target)
	case model.NextRetry:
		// Before commit the attempt may be re-opened once on the same
		// account (SPEC §6); after that the connection is skipped.
		if r.retriedSame {
			r.tried = append(r.tried, ref)
		}
		r.retriedSame = true
	default:
		r.tried = append(r.tried, ref)
	}
	s.dispatch(id)
}

// clientStatus is the status a client gets for an upstream failure the
// verdict passes on; outcomes without one (stalls, transport) are a 502.
func clientStatus(v *model.Verdict) int {
	if v.ClientStatus > 0 {
		return v.ClientStatus
	}
	return 502
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

func (s *sim) finish(id int32, status int, code, result string, retryMs int64) {
	r := &s.reqs[id]
	s.scratch = s.scratch[:0]
	if r.hasLast {
		s.scratch = append(append(append(s.scratch, r.lastConn.Provider...), '/'), r.lastConn.Connection...)
	}
	s.tr.rec("done")
	s.tr.int("attempts", kAttempts, int64(r.attempts))
	if code != "" {
		s.tr.str("code", kCode, code)
	}
	s.tr.ev("done")
	s.tr.int("req", kReq, int64(r.id))
	s.tr.str("result", kResult, result)
	if retryMs > 0 {
		s.tr.int("retry", kRetry, retryMs)
	}
	if len(s.scratch) > 0 {
		s.tr.bytes("served", kServed, s.scratch)
	}
	s.tr.int("status", kStatus, int64(status))
	s.tr.end(s.off(s.now))
	s.tr.close()

	s.res.Statuses[status]++
	s.res.Results[result]++
	served := ""
	if r.hasLast && (len(s.windows) > 0 || len(s.reqExpect) > 0) {
		served = r.lastConn.String()
	}
	if o := s.reqExpect[r.id]; o != nil {
		*o = reqOutcome{done: true, status: status, code: code, servedBy: served, attempts: r.attempts,
			result: result, retryAfter: retryMs, at: s.now}
	}
	for i := range s.windows {
		w := &s.windows[i]
		if s.off(r.sentAt) >= w.exp.From.Milliseconds() && s.off(r.sentAt) < w.exp.Until.Milliseconds() {
			w.requests++
			w.statuses[status]++
			w.calls += r.attempts
			w.results[result]++
			if (result == ResultServed || result == ResultFallback) && served != "" {
				w.served[served]++
			}
		}
	}
	if s.opts.Timeline != nil {
		s.opts.Timeline.request(s.off(s.now), result)
	}
	r.free = true
	r.wakeGen++
	s.freeReqs = append(s.freeReqs, id)
}

func (s *sim) traceSelect(r *request, sel *model.Selection) {
	s.tr.rec("select")
	b := s.scratch[:0]
	for i, c := range sel.Candidates {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, c.Provider...), '/'), c.Connection...)
	}
	s.tr.bytes("cand", kCand, b)
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
		s.tr.bytes("excl", kExcl, b)
	}
	s.scratch = b
	s.tr.int("req", kReq, int64(r.id))
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
		s.tr.rec("breaker")
		s.tr.ev("breaker")
		s.tr.int("fails", kFails, int64(c.Breaker.FailureCount))
		s.tr.str("prov", kProv, c.Provider)
		s.tr.str("state", kState, c.Breaker.State.String())
		s.tr.end(s.off(c.At))
		if c.Transition.Changed() {
			s.tr.str("why", kWhy, c.Transition.Reason)
		}
		s.tr.close()
		if s.opts.Timeline != nil {
			s.opts.Timeline.breaker(c.Provider, s.off(c.At), c.Breaker.State)
		}
	case model.ChangeConnection:
		s.mirror.conn(c)
		s.scratch = append(append(append(s.scratch[:0], c.Provider...), '/'), c.Connection...)
		s.tr.rec("conn")
		s.tr.bytes("conn", kConn, s.scratch)
		if c.Conn.LastErrorType != model.ReasonNone {
			s.tr.str("err", kErr, c.Conn.LastErrorType.String())
		}
		s.tr.ev("conn")
		s.tr.int("level", kLevel, int64(c.Conn.BackoffLevel))
		s.tr.str("status", kStatus, c.Conn.Status.String())
		s.tr.end(s.off(c.At))
		if c.Conn.RateLimitedUntil > c.At {
			s.tr.int("until", kUntil, s.off(c.Conn.RateLimitedUntil))
		}
		s.tr.close()
		if s.opts.Timeline != nil {
			s.opts.Timeline.conn(c.Provider+"/"+c.Connection, s.off(c.At), c.Conn.Status, s.off(c.Conn.RateLimitedUntil), c.Conn.RateLimitedUntil > c.At)
		}
	case model.ChangeLockout, model.ChangeLockoutRemoved:
		s.scratch = append(append(append(s.scratch[:0], c.Provider...), '/'), c.Connection...)
		ev := "lockout"
		if c.Kind == model.ChangeLockoutRemoved {
			ev = "lockout_removed"
		}
		s.tr.rec(ev)
		s.tr.bytes("conn", kConn, s.scratch)
		s.tr.ev(ev)
		if c.Kind == model.ChangeLockout {
			s.tr.int("fails", kFails, int64(c.Lockout.FailureCount))
		}
		s.tr.str("key", kKey, c.Lockout.Key.String())
		if c.Kind == model.ChangeLockout && c.Lockout.Reason != model.ReasonNone {
			s.tr.str("reason", kReason, c.Lockout.Reason.String())
		}
		s.tr.end(s.off(c.At))
		if c.Kind == model.ChangeLockout {
			s.tr.int("until", kUntil, s.off(c.Lockout.Until))
		}
		s.tr.close()
		if s.opts.Timeline != nil {
			until := c.At
			if c.Kind == model.ChangeLockout {
				until = c.Lockout.Until
			}
			s.opts.Timeline.lockout(c.Provider+"/"+c.Connection, c.Lockout.Key.String(), s.off(c.At), s.off(until))
		}
	case model.ChangeWindow:
		s.tr.rec("window")
		s.tr.ev("window")
		s.tr.int("fails", kFails, int64(len(c.Window.Failures)))
		s.tr.str("prov", kProv, c.Provider)
		s.tr.end(s.off(c.At))
		if c.Window.CoolUntil > c.At {
			s.tr.int("until", kUntil, s.off(c.Window.CoolUntil))
		}
		s.tr.close()
	case model.ChangeCursor:
		s.tr.rec("cursor")
		if c.Combo != "" {
			s.tr.str("combo", kCombo, c.Combo)
		}
		s.tr.int("cursor", kCursor, int64(c.Cursor))
		s.tr.ev("cursor")
		if c.Provider != "" {
			s.tr.str("prov", kProv, c.Provider)
		}
		s.tr.end(s.off(c.At))
		s.tr.close()
	}
}

// action applies one operator action through the model's operator API.
func (s *sim) action(i int) {
	a := &s.sc.Actions[i]
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
		for _, c := range a.Connections {
			if e := s.eng.ConnectionTestPassed(s.now, c); e != nil && err == nil {
				err = e
			}
		}
	case ActSet:
		s.actLayer = append(s.actLayer, model.NamedLayer{Name: fmt.Sprintf("action line %d", a.Line), Tree: a.Settings})
		layers := append(slices.Clone(s.sc.Layers), s.actLayer...)
		var set model.Settings
		set, _, err = model.Resolve(layers...)
		if err == nil {
			s.eng.UpdateSettings(s.now, set)
			s.set = s.eng.Settings()
			s.tm = timersOf(&s.set)
		}
	}
	s.tr.rec("action")
	s.tr.str("action", kAction, a.Kind.String())
	s.tr.ev("action")
	s.tr.int("line", kLine, int64(a.Line))
	if err != nil {
		s.tr.bool("ok", kOK, false)
	}
	if a.Provider != "" {
		s.tr.str("prov", kProv, a.Provider)
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
