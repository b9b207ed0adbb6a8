package model

// AttemptCut says which bound ends an attempt that runs too long.
type AttemptCut uint8

const (
	// CutAttempt: upstreamTimeouts.attemptMs, an upstream timeout
	// (Outcome{Kind: OutcomeTransport, Transport: TransportAttemptTimeout}).
	CutAttempt AttemptCut = iota
	// CutExecution: requestQueue.executionMaxWaitMs, the gateway's own
	// safety bound (docs/admission.md): RATE_LIMIT_EXECUTION_TIMEOUT, neutral for
	// upstream health (docs/errors.md). Flow.Record takes it as a
	// Report of kind ReportLocalCut with Err ExecutionTimeout().
	CutExecution
	// CutDeadline: requestBudget.deadlineMs; the request's budget is spent
	// (an OutcomeClientAbort at the deadline, which Flow.Record answers as
	// request_budget_exhausted).
	CutDeadline
)

// AttemptBound is how long an attempt may run and which bound that is, the
// one rule both shells time attempts by: attemptMs, cut by the execution
// bound executionMaxWaitMs (execMaxMs, the connection's from
// Settings.QueueBudgets) when that is shorter, and by what is left of the
// request's deadline. The execution bound never cuts below responseHeaderMs:
// it bounds execution, and an upstream still within its header timeout is
// judged by that timer.
func AttemptBound(s *Settings, execMaxMs, deadlineLeftMs int64) (int64, AttemptCut) {
	to := &s.UpstreamTimeouts
	bound, cut := int64(to.AttemptMs), CutAttempt
	if exec := max(execMaxMs, int64(to.ResponseHeaderMs)); exec < bound {
		bound, cut = exec, CutExecution
	}
	if deadlineLeftMs < bound {
		bound, cut = max(deadlineLeftMs, 1), CutDeadline
	}
	return bound, cut
}

// ExecutionTimeout is the error of an attempt cut by the execution bound.
func ExecutionTimeout() *Error {
	return &Error{Code: CodeExecutionTimeout, Message: "the upstream attempt reached the execution bound (requestQueue.executionMaxWaitMs)"}
}
