package model

import "slices"

// Flow is one client request's way through the model: which connection to
// try next, when to wait for a short cooldown instead of failing, and what to
// answer. The proxy and the simulator drive the same Flow, so they fail over,
// wait and answer identically (docs/README.md#one-model-two-shells).
//
// The shell loops:
//
//	f := eng.StartFlow(now, route, session, allowed)
//	for {
//	    step := f.Next(now, eng, &sel)
//	    switch step.Kind {
//	    case StepAttempt: outcome := call upstream with step.Attempt
//	                      f.Record(now, eng, &step.Attempt,
//	                          model.Report{Outcome: outcome, Committed: committed})
//	    case StepWait:    sleep step.WaitMs (a client abort ends the request: 499)
//	    case StepAnswer:  answer the client; done
//	    }
//	}
type Flow struct {
	Route   Route
	Session string
	Allowed []ConnRef
	// Held: connections other owners' exclusive leases hold (docs/leases.md);
	// the shell sets it after StartFlow.
	Held      []ConnRef
	HeldUntil []Time // aligned with Held: when each lease ends (0 = unknown)

	start, deadline Time
	attempts        int
	waits           int
	waitedMs        int64
	tried           []ConnRef
	skipTargets     []int
	unfit           []int  // targets whose provider type cannot express the request (ReportUnsupported); kept across waits
	unsupported     *Error // the first of those refusals: the answer when no upstream answered
	unsupportedConn ConnRef
	tooLong         []string // models that refused the request for its length (NextModel); kept across waits
	tooLongWindow   int      // the largest known context window among them (0 = unknown)
	prefer          preferState
	emergency       bool
	grace           int // attempts allowed past the budget (the emergency fallback's one)
	last            Verdict
	hasLast         bool
	local           *Error // the admission queue's refusal of the last attempt (ReportLocal); nil after an upstream answer
	lastConn        ConnRef
	answer          Step
	answered        bool
	sw              spendFlow // spend-wall lane / limit reset (docs/spendwall.md)
	// ResumeBlocked (set by the shell): a broken stream of this request
	// cannot be resumed (a tool call reached the client, or the request's
	// format has no prefill); model/resume.go.
	ResumeBlocked bool
	rs            resumeFlow
}

// StepKind says what the shell must do next.
type StepKind uint8

const (
	StepAttempt StepKind = iota // call the upstream with Step.Attempt, then Flow.Record
	StepWait                    // wait Step.WaitMs, then Flow.Next again
	StepAnswer                  // answer the client with Step's status; the flow is over
	// StepLimitReset: call the usage / reset endpoints of Step.LastConnection
	// (docs/spendwall.md), then Flow.LimitResetDone.
	StepLimitReset
)

var stepKindNames = enumNames{"attempt", "wait", "answer", "limit_reset"}

func (k StepKind) String() string               { return stepKindNames.name(uint8(k), "StepKind") }
func (k StepKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Result classifies an answered request.
type Result uint8

const (
	ResultServed      Result = iota // first attempt served it
	ResultFallback                  // served after a fail-over or a wait
	ResultUpstream                  // the client gets the last upstream error
	ResultRejected                  // a typed gateway error (Step.Err)
	ResultStreamError               // committed stream failed: an SSE error event ends it
)

var resultNames = enumNames{"served", "fallback", "upstream_error", "rejected", "stream_error"}

func (r Result) String() string               { return resultNames.name(uint8(r), "Result") }
func (r Result) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Step is the flow's instruction to the shell.
type Step struct {
	Kind StepKind
	// PriorityWait: this StepWait is a priority combo's wait for its first
	// target (priorityWait), not a cooldown wait of every target. (Beside
	// Kind: it fits the padding, and a Step is copied on every answer.)
	PriorityWait bool
	Attempt      Attempt // StepAttempt: already begun (the breaker permit is held)
	WaitMs       int64   // StepWait
	// StepAnswer: the client status, and either a typed gateway error (Err)
	// or the last upstream answer (Result ResultUpstream / ResultServed).
	// With ResultStreamError, Err is the SSE error event that ended the
	// committed stream (StreamErrorCode).
	Status       int
	Result       Result
	Err          *Error
	RetryAfterMs int64 // Retry-After for the answer, 0 = none
	// Verdict is the last attempt's verdict, when there was one.
	Verdict Verdict
	// LastConnection served (or last failed) the request.
	LastConnection ConnRef
}

// StartFlow begins a request's flow at now; its whole-request budget
// (requestBudget.maxAttempts, deadlineMs) starts with it.
func (e *Engine) StartFlow(now Time, route Route, session string, allowed []ConnRef) Flow {
	var f Flow
	e.StartFlowIn(&f, now, route, session, allowed)
	return f
}

// StartFlowIn is StartFlow written into *f in place: a Flow is large, and
// one returned by value is built in a temporary, then copied.
func (e *Engine) StartFlowIn(f *Flow, now Time, route Route, session string, allowed []ConnRef) {
	*f = Flow{}
	f.Route, f.Session, f.Allowed, f.start = route, session, allowed, now
	f.deadline = now.Add(int64(e.settings.RequestBudget.DeadlineMs))
}

// Reset starts f anew like StartFlow but keeps its buffers, so a shell that
// pools flows makes no allocation per request.
func (f *Flow) Reset(e *Engine, now Time, route Route, session string, allowed []ConnRef) {
	tried, skip, unfit, tooLong := f.tried[:0], f.skipTargets[:0], f.unfit[:0], f.tooLong[:0]
	*f = e.StartFlow(now, route, session, allowed)
	f.tried, f.skipTargets, f.unfit, f.tooLong = tried, skip, unfit, tooLong
}

// Deadline is the instant the whole-request budget ends; no attempt may run
// past it.
func (f *Flow) Deadline() Time { return f.deadline }

// Attempts is how many upstream attempts the flow made.
func (f *Flow) Attempts() int { return f.attempts }

// Waits is how many cooldown waits the flow made.
func (f *Flow) Waits() int { return f.waits }

// Next decides the next step at now. sel is the caller's reused selection
// buffer; after Next it holds the last selection made, in full when the
// caller set sel.Full (for tracing), else possibly a prefix
// (docs/model.md#lazy-selection).
func (f *Flow) Next(now Time, e *Engine, sel *Selection) Step {
	if f.answered {
		return f.answer
	}
	if f.rs.active {
		return f.resumeNext(now, e, sel)
	}
	if f.sw.pending != spendNone {
		if st, ok := f.spendNext(now, e); ok {
			return st
		}
	}
	for {
		if now >= f.deadline {
			return *f.finish(Step{Kind: StepAnswer, Result: ResultRejected,
				Err: &Error{Code: CodeBudgetExhausted, Message: "the request's deadline was spent"}})
		}
		req := Request{Route: f.Route, Allowed: f.Allowed, Skip: f.tried, Session: f.Session, Held: f.Held, HeldUntil: f.HeldUntil}
		e.Select(now, &req, sel)
		ci := f.firstFit(sel)
		if sel.Partial() && (ci < 0 || len(f.tooLong) > 0) {
			// The flow looks past the selection's first target (a lazy
			// Select, docs/model.md#lazy-selection): list the rest.
			e.SelectRest(now, &req, sel)
			ci = f.firstFit(sel)
		}
		if f.prefer.armed && (ci < 0 || sel.Candidates[ci].Target != f.prefer.target) {
			if st, wait := f.preferFirst(now, e, sel); wait {
				return st
			}
			continue // select again: the first target is ready now, or the downgrade stands
		}
		if ci >= 0 && len(f.tooLong) > 0 {
			ci = f.largerWindow(e, sel, ci)
		}
		if ci < 0 {
			return f.noCandidate(now, e, sel)
		}
		if f.attempts >= e.settings.RequestBudget.MaxAttempts+f.grace {
			return *f.finish(Step{Kind: StepAnswer, Result: ResultRejected,
				Err: &Error{Code: CodeBudgetExhausted, Message: "the request's attempt budget was spent"}})
		}
		c := sel.Candidates[ci]
		a, err := e.Begin(now, c)
		if err != nil {
			// The breaker refused between Select and Begin (its probe
			// budget went to another request): not an attempt.
			f.tried = append(f.tried, ConnRef{c.Provider, c.Connection})
			continue
		}
		f.attempts++
		return Step{Kind: StepAttempt, Attempt: a}
	}
}

// firstFit is the index of the first candidate the flow may try: not of a
// skipped or unfit target, nor of a model that refused the request for its
// length; -1 when none.
func (f *Flow) firstFit(sel *Selection) int {
	return slices.IndexFunc(sel.Candidates, func(c Candidate) bool {
		return !slices.Contains(f.skipTargets, c.Target) && !slices.Contains(f.unfit, c.Target) &&
			!slices.Contains(f.tooLong, c.Model)
	})
}

// noCandidate: nothing left to try. Wait for a short transient cooldown when
// the settings allow it (docs/selection.md#waiting-for-a-cooldown), fall back to the emergency target
// (docs/api.md#operator-actions), else answer.
func (f *Flow) noCandidate(now Time, e *Engine, sel *Selection) Step {
	f.reselect(now, e, sel)
	if waitMs, ok := f.waitDecision(now, e, sel); ok {
		f.waits++
		f.waitedMs += waitMs
		f.tried = f.tried[:0]
		f.skipTargets = f.skipTargets[:0]
		return Step{Kind: StepWait, WaitMs: waitMs}
	}
	unavail := Unavailable(now, &f.Route, sel)
	if f.toEmergency(e, sel) {
		return f.Next(now, e, sel)
	}
	return f.answerUnavailable(unavail)
}

// reselect judges what is left on the full picture: after a wait every
// connection is fair game again, but never a target that cannot express
// the request nor a model that refused it for its length.
func (f *Flow) reselect(now Time, e *Engine, sel *Selection) {
	if len(f.tried) > 0 || len(f.skipTargets) > 0 {
		// After a wait every connection is fair game again: judge the wait
		// on the full picture.
		req := Request{Route: f.Route, Allowed: f.Allowed, Session: f.Session, Held: f.Held, HeldUntil: f.HeldUntil}
		e.SelectAll(now, &req, sel)
	}
	if len(f.unfit) > 0 {
		// A target that cannot express the request is no candidate: what
		// is left is judged (wait, answer) as if it were not in the route.
		sel.Candidates = slices.DeleteFunc(sel.Candidates, func(c Candidate) bool { return slices.Contains(f.unfit, c.Target) })
	}
	if len(f.tooLong) > 0 {
		// Never the model that refused the request for its length again,
		// not even after a wait.
		sel.Candidates = slices.DeleteFunc(sel.Candidates, func(c Candidate) bool { return slices.Contains(f.tooLong, c.Model) })
	}
}

// waitDecision is WaitDecision with the route's wait settings
// (comboCooldownWait or waitForCooldown) and what the flow has spent.
func (f *Flow) waitDecision(now Time, e *Engine, sel *Selection) (int64, bool) {
	budgetLeft := f.deadline.Sub(now)
	// A wait only serves the attempt after it: with the attempt budget
	// spent the client gets its answer (and Retry-After) now, not after a
	// wait that cannot end in an attempt.
	canAttempt := f.attempts < e.settings.RequestBudget.MaxAttempts
	if f.Route.IsCombo() {
		w := &e.settings.ComboCooldownWait
		return WaitDecision(now, sel, w.Enabled && canAttempt, int64(w.MaxWaitMs), f.waits, w.MaxAttempts,
			min(budgetLeft, int64(w.BudgetMs)-f.waitedMs))
	}
	w := &e.settings.WaitForCooldown
	return WaitDecision(now, sel, w.Enabled && canAttempt, int64(w.MaxRetryWaitSec)*1000, f.waits, w.MaxRetries,
		min(budgetLeft, int64(w.BudgetMs)-f.waitedMs))
}

// toEmergency switches the flow to the emergency fallback target
// (docs/api.md#operator-actions) when it is enabled, not yet used and
// nothing of the route is left. It reports whether it did.
func (f *Flow) toEmergency(e *Engine, sel *Selection) bool {
	ef := &e.settings.EmergencyFallback
	if !ef.Enabled || f.emergency || ef.Target == "" || len(sel.Candidates) != 0 {
		return false
	}
	r, err := e.Resolve(ef.Target)
	if err != nil || r.Name == f.Route.Name {
		return false
	}
	f.emergency = true
	if f.attempts >= e.settings.RequestBudget.MaxAttempts {
		// The fallback is tried instead of failing (docs/api.md#operator-actions),
		// once, even when waits and failures spent the attempt
		// budget; the deadline still holds.
		f.grace = 1
	}
	f.Route = r
	f.tried = f.tried[:0]
	f.skipTargets = f.skipTargets[:0]
	f.unfit = f.unfit[:0] // target numbers of the old route
	return true
}

// answerUnavailable ends a flow nothing is left to try: the local refusal,
// the last upstream error, the unsupported type, or unavail.
func (f *Flow) answerUnavailable(unavail *Error) Step {
	if f.hasLast && f.local != nil {
		// The last try was refused by the local admission queue (docs/admission.md,
		// docs/errors.md): the client gets that typed error, never a made-up 502.
		return *f.finish(Step{Kind: StepAnswer, Result: ResultRejected, Err: f.local, RetryAfterMs: f.local.RetryAfterMs})
	}
	if f.hasLast {
		// Attempts were made: the client gets the last upstream error.
		st := upstreamStatus(&f.last)
		retry := f.last.ClientRetryAfterMs
		if retry == 0 && unavail != nil && (st == 429 || st == 503) {
			// When to come back belongs to a "come back later" answer
			// (docs/api.md); a 404 that locked the model gets none.
			retry = unavail.RetryAfterMs
		}
		return *f.finish(Step{Kind: StepAnswer, Status: st, Result: ResultUpstream, RetryAfterMs: retry})
	}
	if f.unsupported != nil && (unavail == nil || unavail.Code == CodeNoExecutableTargets) {
		// No upstream answered and what is left cannot express the request.
		f.lastConn = f.unsupportedConn
		return *f.finish(Step{Kind: StepAnswer, Result: ResultRejected, Err: f.unsupported})
	}
	if unavail == nil {
		// Candidates exist but every one belongs to a skipped target.
		unavail = &Error{Code: CodeAllTargetsSkipped, Message: "every remaining target was skipped"}
	}
	return *f.finish(Step{Kind: StepAnswer, Result: ResultRejected, Err: unavail, RetryAfterMs: unavail.RetryAfterMs})
}

// ReportKind names how an attempt ended, as the shell saw it; each kind
// says which Report fields it reads.
type ReportKind uint8

const (
	// ReportOutcome: the upstream answered, failed or the client went away
	// (Outcome, Committed).
	ReportOutcome ReportKind = iota
	// ReportLocal: the shell's admission queue refused the attempt before it
	// reached the upstream (RATE_LIMIT_QUEUE_TIMEOUT / _FULL, SEMAPHORE_*):
	// neutral for upstream health and not a use of the connection; the flow
	// moves on, and if nothing else serves the client gets Err
	// (docs/admission.md, docs/errors.md).
	ReportLocal
	// ReportLocalCut: ReportLocal for an attempt the gateway cut itself after
	// it reached the upstream (the execution bound, AttemptBound's
	// CutExecution); Committed says whether the client had bytes of the
	// answer, which then ends with the bound's stream error.
	ReportLocalCut
	// ReportUnsupported: the shell found the attempt's provider type cannot
	// express the request (a native wire format lacks a field the request
	// uses), before any upstream call. It is no attempt and says nothing of
	// upstream health: the attempt is released neutrally and uncounted, and
	// the flow moves to the next target, which may be of a type that can (a
	// combo of an anthropic and an openai target serves a logprobs request).
	// If nothing serves, the client gets the last upstream error when there
	// was one, else Err (400 unsupported_by_provider_type)
	// (docs/surfaces.md). Record returns no answer: call Next.
	ReportUnsupported
	// ReportCut: the shell cut the attempt for a cause of its own that ends
	// the whole request (the gateway shutting down): neutral for upstream
	// health, as a client abort is, and the client gets Err instead of a 499
	// (the typed error, or the SSE error event that ends a Committed stream).
	ReportCut
)

var reportKindNames = enumNames{"outcome", "local", "local_cut", "unsupported", "cut"}

func (k ReportKind) String() string { return reportKindNames.name(uint8(k), "ReportKind") }

// Report is what the shell tells the flow about how one attempt it began
// ended. Kind tags which of the other fields count. The attempt itself is
// Record's own argument: escape analysis does not tell a struct's fields
// apart, and Outcome and Err are kept by the flow, so an attempt pointer
// beside them would move the caller's Step to the heap on every attempt.
type Report struct {
	Kind    ReportKind
	Outcome Outcome // ReportOutcome
	Err     *Error  // every kind but ReportOutcome
	// Committed: some byte of the answer already reached the client; a
	// committed stream is never replayed (ReportOutcome, ReportLocalCut,
	// ReportCut).
	Committed bool
}

// Record reports how attempt a (a Step.Attempt of this flow) ended
// (docs/selection.md). It returns the verdict and, when the flow is over,
// the answer (otherwise nil: call Next).
func (f *Flow) Record(now Time, e *Engine, a *Attempt, r Report) (Verdict, *Step) {
	switch r.Kind {
	case ReportLocal:
		e.unuse(now, a) // it never reached the upstream: not a use (least-used, p2c)
		return f.recordLocal(now, e, a, r.Err, false)
	case ReportLocalCut:
		return f.recordLocal(now, e, a, r.Err, r.Committed)
	case ReportUnsupported:
		f.recordUnsupported(now, e, a, r.Err)
		return Verdict{}, nil
	case ReportCut:
		return f.recordCut(now, e, a, r.Err, r.Committed)
	}
	return f.recordOutcome(now, e, a, r.Outcome, r.Committed)
}

// recordOutcome is ReportOutcome: the spend wall sees the outcome first
// (docs/spendwall.md), then the engine classifies it.
func (f *Flow) recordOutcome(now Time, e *Engine, a *Attempt, o Outcome, committed bool) (Verdict, *Step) {
	if v, ok := f.spendWallRecord(now, e, a, o, committed); ok {
		f.last, f.hasLast = v, true
		return v, nil
	}
	return f.record(now, e, a, o, committed)
}

// record is recordOutcome's normal path: the engine classifies the outcome.
func (f *Flow) record(now Time, e *Engine, a *Attempt, o Outcome, committed bool) (Verdict, *Step) {
	v := e.Record(now, a, o)
	f.last, f.hasLast = v, true
	f.local = nil
	committed = committed || a.Resume // a resume attempt writes into the client's open stream
	ref := ConnRef{a.Provider, a.Connection}
	f.lastConn = ref
	switch {
	case v.Next == NextDone:
		f.resumeDone()
		res := ResultServed
		if f.attempts > 1 || f.waits > 0 {
			res = ResultFallback
		}
		f.finish(Step{Kind: StepAnswer, Status: v.ClientStatus, Result: res})
		return v, &f.answer
	case o.Kind == OutcomeClientAbort && now >= f.deadline:
		// The shell cut the attempt at the request's deadline: the budget
		// is spent, not the client gone (docs/errors.md). A committed stream
		// ends with that as its SSE error event.
		err := &Error{Code: CodeBudgetExhausted, Message: "the request deadline (requestBudget.deadlineMs) was reached"}
		if committed {
			f.finish(Step{Kind: StepAnswer, Status: 200, Result: ResultStreamError, Err: err})
		} else {
			f.finish(Step{Kind: StepAnswer, Result: ResultRejected, Err: err})
		}
		return v, &f.answer
	case o.Kind == OutcomeClientAbort:
		f.finish(Step{Kind: StepAnswer, Status: 499, Result: ResultUpstream})
		return v, &f.answer
	case committed && f.resumeRecord(e, a, o):
		return v, nil // model/resume.go: Next continues the stream elsewhere
	case committed:
		code, msg := StreamErrorCode(o)
		f.finish(Step{Kind: StepAnswer, Status: 200, Result: ResultStreamError, Err: &Error{Code: code, Message: msg}})
		return v, &f.answer
	}
	switch v.Next {
	case NextStop:
		f.finish(Step{Kind: StepAnswer, Status: upstreamStatus(&v), Result: ResultUpstream, RetryAfterMs: v.ClientRetryAfterMs})
		return v, &f.answer
	case NextTarget:
		f.tried = append(f.tried, ref)
		f.skipTargets = append(f.skipTargets, f.targetOf(a))
	case NextModel:
		f.refusedForLength(e, a)
	case NextRetry:
		// A watchdog abort before anything reached the client: the next
		// attempt goes to another connection or target, never back to the
		// one that just stalled (it would most likely stall again).
		f.tried = append(f.tried, ref)
	default:
		f.tried = append(f.tried, ref)
		f.armPrefer(e, a, &v)
	}
	return v, nil
}

// recordLocal is ReportLocal and ReportLocalCut: recorded as a neutral
// local outcome, and err, not the last upstream error, answers when nothing
// else serves.
func (f *Flow) recordLocal(now Time, e *Engine, a *Attempt, err *Error, committed bool) (Verdict, *Step) {
	v, ans := f.recordOutcome(now, e, a, Outcome{Kind: OutcomeLocalQueue}, committed)
	f.local = err
	if ans != nil && err != nil && ans.Result == ResultUpstream && ans.Err == nil {
		f.answer = Step{Kind: StepAnswer, Result: ResultRejected, Err: err, RetryAfterMs: err.RetryAfterMs,
			Status: err.Code.HTTPStatus(), Verdict: v, LastConnection: f.lastConn}
		return v, &f.answer
	}
	return v, ans
}

// recordUnsupported is ReportUnsupported: the attempt is undone (no use,
// no count, the flow's last answer kept) and its target marked unfit.
func (f *Flow) recordUnsupported(now Time, e *Engine, a *Attempt, err *Error) {
	last, hasLast, local, lastConn := f.last, f.hasLast, f.local, f.lastConn
	e.unuse(now, a)                                    // not a use of the connection (least-used, p2c)
	e.Record(now, a, Outcome{Kind: OutcomeLocalQueue}) // frees the in-flight count and any probe permit
	f.last, f.hasLast, f.local, f.lastConn = last, hasLast, local, lastConn
	f.attempts--
	f.unfit = append(f.unfit, a.Target)
	if f.unsupported == nil {
		// The first such connection: named by the answer when nothing
		// else is (no upstream answered, no other exclusion).
		f.unsupported, f.unsupportedConn = err, ConnRef{a.Provider, a.Connection}
	}
}

// recordCut is ReportCut: recorded as a client abort, answered with err.
func (f *Flow) recordCut(now Time, e *Engine, a *Attempt, err *Error, committed bool) (Verdict, *Step) {
	v, _ := f.recordOutcome(now, e, a, Outcome{Kind: OutcomeClientAbort}, committed)
	st := Step{Kind: StepAnswer, Result: ResultRejected, Err: err, RetryAfterMs: err.RetryAfterMs}
	if committed {
		st.Status, st.Result = 200, ResultStreamError
	}
	f.finish(st)
	return v, &f.answer
}

// targetOf is the combo target index an attempt ran for.
func (f *Flow) targetOf(a *Attempt) int { return a.Target }

// finish makes s the flow's answer and returns it, in place: a Step is
// large, and the served path needs no copy of it.
func (f *Flow) finish(s Step) *Step {
	s.Verdict = f.last
	s.LastConnection = f.lastConn
	if s.Err != nil && s.Status == 0 {
		s.Status = s.Err.Code.HTTPStatus()
	}
	f.answer, f.answered = s, true
	return &f.answer
}

// upstreamStatus is the status a client gets for an upstream failure the
// verdict passes on; outcomes without one (stalls) are a 502.
func upstreamStatus(v *Verdict) int {
	if v.ClientStatus > 0 {
		return v.ClientStatus
	}
	return 502
}
