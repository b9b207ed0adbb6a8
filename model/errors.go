package model

import (
	"fmt"
	"slices"
)

// Code is a stable error code of the gateway itself (docs/errors.md).
type Code string

const (
	CodeCircuitOpen           Code = "provider_circuit_open"
	CodeRateLimit             Code = "rate_limit_error"
	CodeModelCooldown         Code = "model_cooldown"
	CodeAllTargetsSkipped     Code = "ALL_TARGETS_SKIPPED"
	CodeAllTargetsCooling     Code = "all_targets_cooling_down"
	CodeNoExecutableTargets   Code = "no_executable_targets"
	CodeSemaphoreQueueFull    Code = "SEMAPHORE_QUEUE_FULL"
	CodeRateLimitQueueFull    Code = "RATE_LIMIT_QUEUE_FULL"
	CodeSemaphoreTimeout      Code = "SEMAPHORE_TIMEOUT"
	CodeRateLimitQueueTimeout Code = "RATE_LIMIT_QUEUE_TIMEOUT"
	CodeExecutionTimeout      Code = "RATE_LIMIT_EXECUTION_TIMEOUT"
	CodeBudgetExhausted       Code = "request_budget_exhausted"
	CodeModelNotFound         Code = "model_not_found"
	CodeInvalidModel          Code = "invalid_model"
	// CodeUnsupportedByProviderType: no target's provider type can express
	// the request (a native wire format lacks a field it uses).
	CodeUnsupportedByProviderType Code = "unsupported_by_provider_type"
	// CodeShuttingDown: the gateway is shutting down and cut the request
	// (its drain ran out of time, or a cooldown wait was left): 503, come
	// back (to another replica) at once.
	CodeShuttingDown Code = "gateway_shutting_down"
	// CodeClientClosed is logged and counted when the client went away
	// (499, nginx's client-closed-request); nobody is there to read it.
	CodeClientClosed Code = "client_closed_request"
)

// HTTPStatus is the status the gateway answers with for a code.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeRateLimit, CodeModelCooldown, CodeSemaphoreQueueFull, CodeRateLimitQueueFull:
		return 429
	case CodeNoExecutableTargets, CodeModelNotFound:
		return 404
	case CodeExecutionTimeout:
		return 504
	case CodeInvalidModel, CodeUnsupportedByProviderType:
		return 400
	case CodeClientClosed:
		return 499
	}
	if c.isLease() {
		return LeaseHTTPStatus(c)
	}
	return 503
}

// Type is the OpenAI-shaped error type for a code.
func (c Code) Type() string {
	if c.isLease() {
		return LeaseErrorType
	}
	switch c.HTTPStatus() {
	case 429:
		return "rate_limit_error"
	case 404:
		return "not_found_error"
	case 400:
		return "invalid_request_error"
	}
	return "server_error"
}

// Error is a typed error of the gateway itself. None of these counts
// against upstream health.
type Error struct {
	Code     Code   `json:"code"`
	Message  string `json:"message"`
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	// RetryAfterMs is when to come back; 0 = unknown (no Retry-After).
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
	// Excluded lists what kept each target out (all_targets_cooling_down).
	Excluded []Excluded `json:"excluded,omitempty"`
}

func (e *Error) Error() string {
	if e.Message != "" {
		return string(e.Code) + ": " + e.Message
	}
	return string(e.Code)
}

// RetryAfterSeconds is the Retry-After header value: whole seconds rounded
// up, at least 1; 0 means send no header.
func (e *Error) RetryAfterSeconds() int64 {
	if e.RetryAfterMs <= 0 {
		return 0
	}
	return max(1, (e.RetryAfterMs+999)/1000)
}

// Unavailable turns a selection with no candidate into the typed answer of
// docs/selection.md#waiting-for-a-cooldown and docs/errors.md, with Retry-After whenever a recovery time is known.
// It returns nil when the selection has candidates.
func Unavailable(now Time, r *Route, sel *Selection) *Error {
	if len(sel.Candidates) > 0 {
		return nil
	}
	model := r.Model
	if r.IsCombo() {
		model = r.Combo
	}
	if len(sel.Excluded) == 0 {
		return &Error{Code: CodeNoExecutableTargets, Model: model, Message: fmt.Sprintf("no executable target for %q", r.Name)}
	}
	var t exclusionTally
	t.count(sel.Excluded)
	n := len(sel.Excluded)
	if t.unfit == n {
		return noTargetServes(r, model, sel.Excluded)
	}
	if t.leased > 0 && t.leased+t.never == n {
		// Everything that could serve is held by other clients' exclusive
		// leases (docs/leases.md): a wait state, not a failure; retry when the
		// first lease ends (clamped like the lease endpoint's answer). The
		// rest (banned, not allowed to this key) would never serve, so it
		// does not turn the wait into a skip.
		return &Error{Code: CodeLeaseCapacity, Provider: r.Provider, Model: model,
			RetryAfterMs: leaseRetryAfterMs(now, t.leaseEnd),
			Message:      fmt.Sprintf("every connection that can serve %s is held by another client's exclusive lease", r.Name)}
	}
	retry := t.retryAfterMs(now, r, sel)
	if !r.IsCombo() {
		return t.singleUnavailable(r, model, n, retry)
	}
	return t.comboUnavailable(r, model, sel.Excluded, retry)
}

// exclusionTally counts a selection's exclusions by what they mean for the
// answer (docs/selection.md#waiting-for-a-cooldown, docs/errors.md).
type exclusionTally struct {
	timers, transient, circuit, locks, others, leased, unfit int
	// docs/selection.md#waiting-for-a-cooldown: an exclusion after an auth or not-found error is a skip,
	// not a time to come back at. For a single-model route that holds for a
	// cooling connection only: a model lockout keeps its time (429
	// model_cooldown, docs/errors.md). For a combo it holds for lockouts too.
	noEndConn, noEndLock, nonTransient int
	leaseEnd                           int64 // ms until the first lease_held exclusion ends (0 = unknown)
	knownEndSingle, knownEndCombo      int64 // ms until the first timer with an end to come back at
	never                              int   // exclusions that will not serve by waiting: unfit or terminal
}

// earliest keeps in *cur the smallest positive ms.
func earliest(cur *int64, ms int64) {
	if ms > 0 && (*cur == 0 || ms < *cur) {
		*cur = ms
	}
}

func (t *exclusionTally) count(excl []Excluded) {
	for _, x := range excl {
		switch x.Reason {
		case ExclNotAllowed, ExclNoModel:
			t.unfit++
			t.never++
		case ExclTerminal:
			t.never++
		}
		t.countEnds(&x)
		t.countKind(&x)
	}
}

// countEnds tallies which exclusions have a time to come back at.
func (t *exclusionTally) countEnds(x *Excluded) {
	noEnd := x.LockReason == ReasonAuthError || x.LockReason == ReasonNotFound
	switch {
	case x.Reason == ExclConnectionCooldown && noEnd:
		t.noEndConn++
	case x.Reason == ExclModelLockout && noEnd:
		t.noEndLock++
		earliest(&t.knownEndSingle, x.RemainingMs)
	case x.Reason.Timer():
		earliest(&t.knownEndSingle, x.RemainingMs)
		earliest(&t.knownEndCombo, x.RemainingMs)
	}
	if (x.Reason == ExclConnectionCooldown || x.Reason == ExclModelLockout) && !x.LockReason.transient() {
		t.nonTransient++
	}
}

// countKind tallies the exclusion by kind: a lease, a resilience timer
// (breaker, lockout, cooldown) or anything else.
func (t *exclusionTally) countKind(x *Excluded) {
	switch {
	case x.Reason == ExclLeaseHeld:
		t.leased++
		t.others++
		if x.RemainingMs > 0 && (t.leaseEnd == 0 || x.RemainingMs < t.leaseEnd) {
			t.leaseEnd = x.RemainingMs
		}
	case x.Reason == ExclCircuitOpen:
		t.circuit++
		t.timers++
	case x.Reason == ExclModelLockout:
		t.locks++
		t.timers++
		if x.LockReason.transient() {
			t.transient++
		}
	case x.Reason == ExclConnectionCooldown:
		t.timers++
		if x.LockReason.transient() {
			t.transient++
		}
	case x.Reason.Timer():
		t.timers++
	default:
		t.others++
	}
}

// retryAfterMs is when to come back: the selection's earliest end, unless
// an auth or not-found exclusion makes it a skip, then only a known end.
func (t *exclusionTally) retryAfterMs(now Time, r *Route, sel *Selection) int64 {
	retry := int64(0)
	if sel.Earliest > 0 {
		retry = sel.Earliest.Sub(now)
	}
	if !r.IsCombo() && t.noEndConn > 0 {
		retry = t.knownEndSingle // Retry-After only when an exclusion has a known end
	}
	if r.IsCombo() && t.noEndConn+t.noEndLock > 0 {
		retry = t.knownEndCombo
	}
	return retry
}

// noTargetServes is the answer when nothing is eligible and no timer is
// involved: the client key may use none of the connections, or no target
// serves the model (docs/errors.md).
func noTargetServes(r *Route, model string, excl []Excluded) *Error {
	why := "no configured target serves the model"
	if slices.ContainsFunc(excl, func(x Excluded) bool { return x.Reason == ExclNotAllowed }) {
		why = "the client key is not allowed on any connection that serves it"
	}
	return &Error{Code: CodeNoExecutableTargets, Model: model,
		Message: fmt.Sprintf("no executable target for %q: %s", r.Name, why)}
}

// singleUnavailable is the answer for a single-model route, whose n
// exclusions are all connections of one provider.
func (t *exclusionTally) singleUnavailable(r *Route, model string, n int, retry int64) *Error {
	switch {
	case t.circuit == n:
		return &Error{Code: CodeCircuitOpen, Provider: r.Provider, Model: model, RetryAfterMs: retry,
			Message: fmt.Sprintf("provider %s circuit breaker is open", r.Provider)}
	case t.timers == 0:
		return &Error{Code: CodeAllTargetsSkipped, Provider: r.Provider, Model: model,
			Message: fmt.Sprintf("no connection of %s can serve %s (terminal or not allowed)", r.Provider, r.Model)}
	case t.noEndConn == t.timers && t.others == 0:
		return &Error{Code: CodeAllTargetsSkipped, Provider: r.Provider, Model: model,
			Message: fmt.Sprintf("every connection of %s is cooling down after an authentication or not-found error", r.Provider)}
	case t.locks == t.timers && t.others == 0:
		return &Error{Code: CodeModelCooldown, Provider: r.Provider, Model: model, RetryAfterMs: retry,
			Message: fmt.Sprintf("all credentials for model %s are cooling down", r.Model)}
	case t.others == 0:
		// docs/errors.md: every connection cooling (a quota reset included),
		// no wait allowed: 429 with the first end.
		return &Error{Code: CodeRateLimit, Provider: r.Provider, Model: model, RetryAfterMs: retry,
			Message: fmt.Sprintf("all connections of %s are cooling down", r.Provider)}
	}
	return &Error{Code: CodeAllTargetsSkipped, Provider: r.Provider, Model: model, RetryAfterMs: retry,
		Message: fmt.Sprintf("every connection of %s is excluded", r.Provider)}
}

// comboUnavailable is the answer for a combo (docs/selection.md#combos): it
// names every exclusion.
func (t *exclusionTally) comboUnavailable(r *Route, model string, excl []Excluded, retry int64) *Error {
	switch {
	case t.timers == 0:
		return &Error{Code: CodeAllTargetsSkipped, Model: model,
			Message: "all targets were skipped by pre-dispatch filters"}
	case r.weighted:
		// A weighted pool that lost every target with a resilience timer
		// among the exclusions (docs/selection.md#waiting-for-a-cooldown, docs/selection.md#combos).
		return &Error{Code: CodeAllTargetsCooling, Model: model, RetryAfterMs: retry, Excluded: excl,
			Message: "all targets are cooling down"}
	case t.transient == t.timers:
		// Short transient timers only: the caller may wait (comboCooldownWait);
		// when it does not, the answer is a 429 with the earliest expiry.
		return &Error{Code: CodeRateLimit, Model: model, RetryAfterMs: retry, Excluded: excl,
			Message: "all targets are cooling down"}
	case t.nonTransient == t.timers:
		// quota_exhausted / auth_error / not_found only (docs/selection.md#waiting-for-a-cooldown):
		// skipped, with Retry-After only when one of them has a known end
		// (a quota reset). Beside a breaker or provider cooldown, the
		// answer is the cooling one below, with the timers' first end.
		return &Error{Code: CodeAllTargetsSkipped, Model: model, RetryAfterMs: retry, Excluded: excl,
			Message: "all targets were skipped: quota exhausted, authentication or not-found errors"}
	case t.others == 0:
		return &Error{Code: CodeAllTargetsCooling, Model: model, RetryAfterMs: retry, Excluded: excl,
			Message: "all targets are cooling down"}
	}
	return &Error{Code: CodeAllTargetsSkipped, Model: model, RetryAfterMs: retry, Excluded: excl,
		Message: "all targets were skipped by pre-dispatch filters"}
}

// WaitDecision is the cooldown-aware retry rule of docs/selection.md#waiting-for-a-cooldown: wait for the
// earliest transient expiry instead of failing, within the budgets.
func WaitDecision(now Time, sel *Selection, enabled bool, maxWaitMs int64, attempt, maxAttempts int, budgetLeftMs int64) (waitMs int64, ok bool) {
	if !enabled || sel.EarliestTransient == 0 || len(sel.Candidates) > 0 {
		return 0, false
	}
	waitMs = sel.EarliestTransient.Sub(now)
	if waitMs <= 0 || waitMs > maxWaitMs || attempt >= maxAttempts || budgetLeftMs < waitMs {
		return 0, false
	}
	return waitMs, true
}
