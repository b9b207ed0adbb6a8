package model

// TimerPlan is one upstream attempt's timer plan (docs/budget.md#attempt-bound):
// the whole attempt's bound (AttemptBound: attemptMs, the execution bound,
// the request's deadline) and the phase running now, whose budget counts
// from the phase's start or its last progress: the response headers
// (responseHeaderMs), then, for a non-streaming body, the first content
// (firstContentMs) and the idle time between reads (streamIdleMs). A
// stream's body phases are the stream watchdogs' (Watchdog).
//
// Both shells time attempts by it: the gateway arms one wall-clock timer
// at Next and asks Due when it fires (progress only moves Last, so a
// silent upstream is caught by time, not only when bytes arrive); the
// simulator asks Before with the instant the upstream's next event comes.
// Instants are relative to the attempt's start, in one unit the shell
// picks (the gateway counts nanoseconds, the simulator milliseconds).
type TimerPlan struct {
	End    int64      // the whole attempt's bound
	Cut    AttemptCut // which bound End is
	Last   int64      // the running phase's start or last progress
	Budget int64      // the running phase's budget; 0 = no phase running
	Body   bool       // the running phase is the body's (else the headers')
}

// TimerExpiry is what ran out.
type TimerExpiry uint8

const (
	TimerNone   TimerExpiry = iota
	TimerBound              // the whole attempt's bound (TimerPlan.Cut says which)
	TimerHeader             // responseHeaderMs: a transport header timeout
	TimerBody               // firstContentMs / streamIdleMs: a stalled body
)

// HeaderPlan is the plan an attempt starts with: bound end (which cut)
// and the response-header phase (headerBudget; 0 = none).
func HeaderPlan(end int64, cut AttemptCut, headerBudget int64) TimerPlan {
	return TimerPlan{End: end, Cut: cut, Budget: max(headerBudget, 0)}
}

// Due reports what ran out at now, or, when nothing did, the next instant
// to look again. The whole attempt's bound wins a tie with a phase.
func (p TimerPlan) Due(now int64) (TimerExpiry, int64) {
	if now >= p.End {
		return TimerBound, p.End
	}
	next := p.End
	if p.Budget > 0 {
		due := p.Last + p.Budget
		if now >= due {
			if p.Body {
				return TimerBody, due
			}
			return TimerHeader, due
		}
		next = min(next, due)
	}
	return TimerNone, next
}

// Before reports whether a timer ends the attempt before an event at t
// (the upstream's answer or next byte) can: the first that runs out, and
// when. A timer due at t itself fires first, as the gateway's timer would,
// and the whole attempt's bound wins a tie with a phase (as in Due).
func (p TimerPlan) Before(t int64) (TimerExpiry, int64) {
	x, at := TimerNone, t
	if p.Budget > 0 {
		if due := p.Last + p.Budget; due <= t {
			x, at = TimerHeader, due
			if p.Body {
				x = TimerBody
			}
		}
	}
	if p.End <= t && (x == TimerNone || p.End <= at) {
		x, at = TimerBound, p.End
	}
	return x, at
}

// TimerOutcome is the outcome of an attempt a timer ended
// (docs/budget.md#attempt-bound): a header timeout or attemptMs is an
// upstream timeout (transport), a stalled body is OutcomeStall, and the
// gateway's own bounds are neutral: the execution bound is
// RATE_LIMIT_EXECUTION_TIMEOUT, the request deadline request_budget_exhausted.
// The error is the local cause to record with (nil for an upstream one).
func (p TimerPlan) TimerOutcome(x TimerExpiry) (Outcome, *Error) {
	switch x {
	case TimerHeader:
		return Outcome{Kind: OutcomeTransport, Transport: TransportHeaderTimeout}, nil
	case TimerBody:
		return Outcome{Kind: OutcomeStall}, nil
	case TimerBound:
		switch p.Cut {
		case CutExecution:
			return Outcome{Kind: OutcomeLocalQueue}, ExecutionTimeout()
		case CutDeadline:
			return Outcome{Kind: OutcomeClientAbort}, &Error{Code: CodeBudgetExhausted, Message: "the request deadline (requestBudget.deadlineMs) was reached"}
		}
		return Outcome{Kind: OutcomeTransport, Transport: TransportAttemptTimeout}, nil
	}
	return Outcome{}, nil
}
