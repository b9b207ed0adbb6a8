package model

import "fmt"

// The spend wall inside a request's Flow (docs/spendwall.md). Flow.Record hands every
// outcome to spendWallRecord first; when it intercepts one (a lane accept, a
// limit-reset attempt, a slot_busy wait) the attempt is released neutrally
// and the flow remembers what to do next, which Next then returns:
//
//	StepLimitReset  the shell calls the usage / reset endpoints of
//	                Step.LastConnection and reports with LimitResetDone
//	StepWait        slot_busy / 529 on the lane: wait, then ...
//	StepAttempt     ... retry the SAME connection (with the lane header when
//	                the lane is active: Attempt.SlowLane)
//
// These lane attempts do not count against requestBudget.maxAttempts (the
// lane is bounded by its own max-wait and the request deadline) and the
// waits are not cooldown waits.

type spendPending uint8

const (
	spendNone  spendPending = iota
	spendReset              // StepLimitReset until LimitResetDone
	spendWait               // StepWait, then spendRetry
	spendRetry              // StepAttempt on the same connection
)

// spendFlow is a Flow's spend-wall memory for one request.
type spendFlow struct {
	pending    spendPending
	cand       Candidate // the connection to retry
	waitMs     int64
	held       Attempt // the intercepted attempt, while the limit reset runs
	heldOut    Outcome
	heldSig    SpendSignal
	resetTried bool // one limit-reset round per request
	busy       bool // slot_busy seen: busySince is when the waiting began
	busySince  Time
}

// spendWallRecord intercepts a spend-wall outcome. It reports ok=false when
// the outcome takes the normal path (Engine.Record).
func (f *Flow) spendWallRecord(now Time, e *Engine, a *Attempt, o Outcome, committed bool) (Verdict, bool) {
	if committed || o.Kind != OutcomeResponse || a == nil || a.done || !e.relocate(a) {
		return Verdict{}, false
	}
	c := &e.provs[a.p].conns[a.c]
	cfg := c.cfg.SpendWall
	if !cfg.Enabled() {
		return Verdict{}, false
	}
	sig := ReadSpendSignal(o.Headers, now)
	lane := &c.lane
	lane.refresh(now)
	if a.SlowLane {
		return f.laneResponse(now, e, a, o, &sig, lane)
	}
	if o.Status != 429 || !sig.Rejected {
		return Verdict{}, false
	}
	if lane.Active && cfg.SlowLane {
		// Another request accepted the lane while this one was in flight.
		return f.intercept(now, e, a, o, "spend wall: lane already active, retrying on it"), true
	}
	if lane.resetAllowed(now, cfg) && !f.sw.resetTried {
		f.sw.resetTried = true
		f.sw.held, f.sw.heldOut, f.sw.heldSig = *a, o, sig
		v := f.intercept(now, e, a, o, "spend wall: asking for a session limit reset")
		f.sw.pending = spendReset
		return v, true
	}
	if lane.acceptable(now, cfg, &sig) {
		lane.accept(now, &sig)
		return f.intercept(now, e, a, o, "spend wall: low-priority lane accepted"), true
	}
	return Verdict{}, false
}

// laneResponse judges a response to an attempt that carried the lane header.
func (f *Flow) laneResponse(now Time, e *Engine, a *Attempt, o Outcome, sig *SpendSignal, lane *LaneState) (Verdict, bool) {
	switch {
	case sig.Overage || sig.Status.endsLane() || (lane.Active && sig.Reset > lane.Reset):
		// Paid overage, a lane-ending status, or a new 5-hour window: the
		// lane ends and this response takes the normal path.
		lane.end()
		if sig.Status == SlowBudgetExhausted {
			memo := int64(budgetMemoDefaultMs)
			if r := sig.BudgetReset; r > now {
				memo = r.Sub(now)
			} else if r := sig.Reset; r > now {
				memo = r.Sub(now)
			}
			lane.BudgetUntil = now.Add(min(memo, budgetMemoMaxMs))
		}
		return Verdict{}, false
	case (sig.Status == SlowSlotBusy && o.Status == 429) || o.Status == 529:
		if !f.sw.busy {
			f.sw.busy, f.sw.busySince = true, now
		}
		wait := slowRetryWait(sig.RetryAfterMs, e.rng.Float64())
		maxWait := clampMs(sig.MaxWaitMs, slowMaxWaitDefaultMs, slowMaxWaitMinMs, slowMaxWaitMaxMs)
		end := now.Add(wait)
		if end.Sub(f.sw.busySince) <= maxWait && end <= f.deadline.Add(-slowLaneTimeoutMarginMs) {
			v := f.intercept(now, e, a, o, fmt.Sprintf("spend wall: lane slot busy, retrying in %d ms", wait))
			f.sw.pending, f.sw.waitMs = spendWait, wait
			return v, true
		}
		// Waited as long as allowed: the lane ends, re-accepting is blocked
		// for a while, and this response is classified normally.
		lane.end()
		lane.BlockedUntil = now.Add(slowLaneReacceptBlockMs)
		return Verdict{}, false
	}
	return Verdict{}, false // active / not_needed / none: the lane stays
}

// slowRetryWait is the server's slow retry-after (default 20 s) clamped to
// 5–600 s, with ±30 % jitter from u ∈ [0, 1).
func slowRetryWait(statedMs int64, u float64) int64 {
	base := clampMs(statedMs, slowRetryAfterDefaultMs, slowRetryAfterMinMs, slowRetryAfterMaxMs)
	return int64(float64(base) * (1 - slowRetryJitter + 2*slowRetryJitter*u))
}

// clampMs is stated (def when 0) clamped into [lo, hi].
func clampMs(stated, def, lo, hi int64) int64 {
	if stated <= 0 {
		return def
	}
	return min(max(stated, lo), hi)
}

// intercept releases the attempt neutrally (its breaker permit is freed, no
// layer changes) and queues a retry of the same connection.
func (f *Flow) intercept(now Time, e *Engine, a *Attempt, o Outcome, msg string) Verdict {
	f.sw.cand = Candidate{Provider: a.Provider, Connection: a.Connection, Model: a.Model, Target: a.Target,
		p: a.p, c: a.c, session: f.Session}
	e.Record(now, a, Outcome{Kind: OutcomeClientAbort})
	f.sw.pending = spendRetry
	f.lastConn = ConnRef{a.Provider, a.Connection}
	return Verdict{Reason: ReasonSpendWall, Next: NextRetry, ClientStatus: o.Status, Message: msg}
}

// spendNext returns the queued spend-wall step, if any.
func (f *Flow) spendNext(now Time, e *Engine) (Step, bool) {
	switch f.sw.pending {
	case spendReset:
		return Step{Kind: StepLimitReset, LastConnection: ConnRef{f.sw.cand.Provider, f.sw.cand.Connection}}, true
	case spendWait:
		f.sw.pending = spendRetry
		return Step{Kind: StepWait, WaitMs: f.sw.waitMs}, true
	case spendRetry:
		f.sw.pending = spendNone
		if now >= f.deadline {
			return Step{}, false
		}
		p, ci, ok := e.locate(f.sw.cand.p, f.sw.cand.c, f.sw.cand.Provider, f.sw.cand.Connection)
		if !ok {
			return Step{}, false // removed by UpdateTopology: normal selection
		}
		f.sw.cand.p, f.sw.cand.c = p, ci
		c := &e.provs[p].conns[ci]
		if c.st.Status.Terminal() {
			return Step{}, false // an operator or a sibling made it terminal meanwhile
		}
		a, err := e.Begin(now, f.sw.cand)
		if err != nil {
			return Step{}, false // the breaker refused: normal selection
		}
		f.attempts++
		return Step{Kind: StepAttempt, Attempt: a}, true
	}
	return Step{}, false
}

// LimitResetDone reports the usage / reset calls a StepLimitReset asked for.
// Like Record it returns the verdict and, when the flow is over, the answer
// (otherwise nil: call Next).
func (f *Flow) LimitResetDone(now Time, e *Engine, r LimitResetResult) (Verdict, *Step) {
	if f.answered {
		return f.last, &f.answer
	}
	if f.sw.pending != spendReset {
		return Verdict{Reason: ReasonUnknown, Next: NextStop, Message: "limit reset: none was asked for"}, nil
	}
	f.sw.pending = spendNone
	p, ci, ok := e.locate(f.sw.cand.p, f.sw.cand.c, f.sw.cand.Provider, f.sw.cand.Connection)
	if !ok {
		return Verdict{Reason: ReasonUnknown, Next: NextStop, Message: "limit reset: the connection was removed from the topology"}, nil
	}
	f.sw.cand.p, f.sw.cand.c = p, ci
	c := &e.provs[p].conns[ci]
	lane, cfg := &c.lane, c.cfg.SpendWall
	lane.refresh(now)
	memo := func() {
		d := int64(limitResetMemoDefaultMs)
		if r.NextAvailableAt > now {
			d = min(r.NextAvailableAt.Sub(now), limitResetMemoMaxMs)
		}
		lane.ResetMemoUntil = now.Add(d)
	}
	switch r.Outcome {
	case LimitResetDone, LimitResetNotLimited:
		if r.Outcome == LimitResetDone && r.NextAvailableAt > now {
			lane.ResetMemoUntil = now.Add(min(r.NextAvailableAt.Sub(now), limitResetMemoMaxMs))
		}
		f.sw.pending = spendRetry // full speed: the lane is not active
		return Verdict{Reason: ReasonSpendWall, Next: NextRetry, ClientStatus: 429,
			Message: "spend wall: session limit reset, retrying at full speed"}, nil
	case LimitResetAlreadyUsed, LimitResetNotOffered:
		memo()
	default:
		lane.ResetPausedUntil = now.Add(limitResetFailurePauseMs)
	}
	sig := f.sw.heldSig
	if lane.acceptable(now, cfg, &sig) {
		lane.accept(now, &sig)
		f.sw.pending = spendRetry
		return Verdict{Reason: ReasonSpendWall, Next: NextRetry, ClientStatus: 429,
			Message: "spend wall: low-priority lane accepted"}, nil
	}
	// Neither a reset nor the lane: the 429 takes the normal cooldown path,
	// classified now. The held copy is detached (its permit and in-flight
	// count were released at interception).
	held, out := f.sw.held, f.sw.heldOut
	held.done, held.detached = false, true
	held.Permit = Permit{Generation: held.Permit.Generation}
	f.sw.held, f.sw.heldOut = Attempt{}, Outcome{}
	return f.record(now, e, &held, out, false)
}
