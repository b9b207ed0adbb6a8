package model

import (
	"strconv"
	"strings"
	"time"
)

// Spend wall of subscription accounts (docs/spendwall.md, wire names docs/spendwall.md#wire-names).
//
// A subscription provider answers a spend wall with a 429 whose unified
// rate-limit status is `rejected`. Two opt-in behaviours per connection
// (ConnectionConfig.SpendWall):
//
//   - session limit reset: the shell asks the provider's usage endpoint and,
//     when a reset is available, requests it; the model decides when to ask
//     (StepLimitReset) and what the answer means (Flow.LimitResetDone);
//   - low-priority lane: accept the slow-lane offer and retry the SAME
//     connection at once with the lane request header; every attempt on the
//     connection carries it (Attempt.SlowLane) until the announced reset plus
//     a grace.
//
// The intercepted 429 never reaches classification: no cooldown, no backoff
// change, breaker neutral. The lane and its timers live here; the shells
// only add the header, wait and call the endpoints. Lane state is process
// memory per connection (docs/spendwall.md): it is not part of State, so it is never
// persisted, replicated or restored.

// SpendWallConfig is a connection's opt-in (config key `spendWall`).
type SpendWallConfig struct {
	// SlowLane accepts the provider's low-priority lane offer.
	SlowLane bool `json:"slowLane,omitempty"`
	// LimitReset asks the usage endpoint for a session limit reset first.
	LimitReset bool `json:"limitReset,omitempty"`
}

// Enabled reports whether either behaviour is on.
func (c SpendWallConfig) Enabled() bool { return c.SlowLane || c.LimitReset }

// Spend-wall timers (docs/spendwall.md). They are the provider's protocol, not
// operator tuning, so they are constants rather than settings.
const (
	slowLaneGraceMs          = 60 * second    // the lane outlives the announced reset by this
	slowLaneReacceptBlockMs  = 10 * minute    // after a lane ended on waiting too long
	slowRetryAfterDefaultMs  = 20 * second    // slot_busy / 529 without a slow retry-after
	slowRetryAfterMinMs      = 5 * second     //
	slowRetryAfterMaxMs      = 600 * second   //
	slowRetryJitter          = 0.30           // ± fraction, from the engine's seeded rand
	slowMaxWaitDefaultMs     = 20 * minute    // total slot_busy waiting per request
	slowMaxWaitMinMs         = 1 * minute     //
	slowMaxWaitMaxMs         = 6 * hour       //
	slowLaneTimeoutMarginMs  = 5 * second     // a wait must end this long before the request deadline
	slowLaneWindowMs         = 5 * hour       // the provider's window; a lane without a stated reset lasts this
	budgetMemoMaxMs          = 8 * 24 * hour  // budget_exhausted is remembered at most this long
	budgetMemoDefaultMs      = 24 * hour      // ... and this long when no reset was announced
	limitResetMemoDefaultMs  = 7 * 24 * hour  // already_used / not_offered without next_available_at
	limitResetMemoMaxMs      = 30 * 24 * hour // cap on a stated next_available_at
	limitResetFailurePauseMs = 15 * minute    // any failure of the reset calls
)

// Wire names of the anthropic spend wall (docs/spendwall.md#wire-names).
const (
	headerUnifiedStatus      = "anthropic-ratelimit-unified-status"
	headerUnifiedReset       = "anthropic-ratelimit-unified-reset"
	headerSlowOffer          = "anthropic-ratelimit-unified-slow-offer"
	headerSlowStatus         = "anthropic-ratelimit-unified-slow-status"
	headerSlowRetryAfter     = "anthropic-ratelimit-unified-slow-retry-after"
	headerSlowMaxWait        = "anthropic-ratelimit-unified-slow-max-wait"
	headerSlowBudgetReset    = "anthropic-ratelimit-unified-slow-budget-reset"
	headerOverageInUse       = "anthropic-ratelimit-unified-overage-in-use"
	HeaderUsageLimit         = "anthropic-usage-limit" // the lane request header
	UsageLimitSlow           = "slow"                  // its value
	LimitResetProgram        = "juniper_tide"          // the usage block and the reset program
	unifiedStatusRejected    = "rejected"
	slowOfferTreatment       = "treatment"
	overageInUseTrue         = "true"
	maxSpendHeaderValueBytes = 64
)

// SlowStatus is a response's `...-unified-slow-status`.
type SlowStatus uint8

const (
	SlowNone            SlowStatus = iota // header absent
	SlowActive                            // the lane serves
	SlowNotNeeded                         // no wall right now; the lane is kept
	SlowSlotBusy                          // no slot free: wait and retry
	SlowWeeklyLimit                       // ends the lane
	SlowBudgetExhausted                   // ends the lane; remembered until the budget reset
	SlowOff                               // ends the lane
	SlowIneligible                        // ends the lane
	SlowUnknown                           // a value this version does not know: the lane is kept
)

var slowStatusNames = enumNames{"", "active", "not_needed", "slot_busy", "weekly_limit", "budget_exhausted", "off", "ineligible", "unknown"}

func (s SlowStatus) String() string               { return slowStatusNames.name(uint8(s), "SlowStatus") }
func (s SlowStatus) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// endsLane reports whether the status ends the lane with the response taking
// the normal cooldown path.
func (s SlowStatus) endsLane() bool {
	return s == SlowWeeklyLimit || s == SlowBudgetExhausted || s == SlowOff || s == SlowIneligible
}

// SpendSignal is what one response's spend-wall headers say: the typed input
// the model decides on. ReadSpendSignal builds it from the anthropic wire
// names; another provider's adapter may fill it from its own.
type SpendSignal struct {
	Rejected     bool       // unified status `rejected`: the spend wall
	Offer        bool       // slow-lane offer `treatment`
	Status       SlowStatus // slow-lane status of a lane response
	RetryAfterMs int64      // slow retry-after; 0 = not stated
	MaxWaitMs    int64      // slow max-wait; 0 = not stated
	Reset        Time       // the 5-hour window's reset; 0 = not stated
	BudgetReset  Time       // the slow budget's reset; 0 = not stated
	Overage      bool       // paid overage in use
}

// ReadSpendSignal parses the spend-wall headers at now. Unparseable values
// count as absent: a garbled header never starts or ends a lane by itself.
func ReadSpendSignal(h Headers, now Time) SpendSignal {
	var s SpendSignal
	if h == nil {
		return s
	}
	s.Rejected = headerIs(h, headerUnifiedStatus, unifiedStatusRejected)
	s.Offer = headerIs(h, headerSlowOffer, slowOfferTreatment)
	s.Overage = headerIs(h, headerOverageInUse, overageInUseTrue)
	if v := spendHeader(h, headerSlowStatus); v != "" {
		if x, err := slowStatusNames.parse(v, "slow status"); err == nil && x != 0 {
			s.Status = SlowStatus(x)
		} else {
			s.Status = SlowUnknown
		}
	}
	s.RetryAfterMs = parseSpendSeconds(spendHeader(h, headerSlowRetryAfter))
	s.MaxWaitMs = parseSpendSeconds(spendHeader(h, headerSlowMaxWait))
	s.Reset = parseSpendInstant(spendHeader(h, headerUnifiedReset), now)
	s.BudgetReset = parseSpendInstant(spendHeader(h, headerSlowBudgetReset), now)
	return s
}

func spendHeader(h Headers, name string) string {
	v := strings.TrimSpace(h.Get(name))
	if len(v) > maxSpendHeaderValueBytes {
		return ""
	}
	return strings.ToLower(v)
}

func headerIs(h Headers, name, want string) bool { return spendHeader(h, name) == want }

// parseSpendSeconds reads a non-negative number of seconds (integer or
// decimal) as milliseconds; 0 when absent or malformed.
func parseSpendSeconds(v string) int64 {
	if v == "" {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || f != f || f > 1e9 {
		return 0
	}
	return int64(f * 1000)
}

// parseSpendInstant reads an absolute instant: Unix seconds (the provider's
// form) or RFC 3339; 0 when absent or malformed.
func parseSpendInstant(v string, now Time) Time {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 || n > 1e11 {
			return 0
		}
		return Time(n * 1000)
	}
	if t, err := time.Parse(time.RFC3339, strings.ToUpper(v)); err == nil {
		return Time(t.UnixMilli())
	}
	return 0
}

// LaneState is one connection's spend-wall memory (docs/spendwall.md).
type LaneState struct {
	// Active while the lane runs; it ends lazily at Until.
	Active bool `json:"active"`
	Reset  Time `json:"reset,omitempty"` // the window reset the lane was accepted for
	Until  Time `json:"until,omitempty"` // Reset + slowLaneGraceMs
	// BlockedUntil: no lane accept before (after waiting too long).
	BlockedUntil Time `json:"blockedUntil,omitempty"`
	// BudgetUntil: budget_exhausted remembered; no lane accept before.
	BudgetUntil Time `json:"budgetUntil,omitempty"`
	// ResetMemoUntil: no limit-reset call before (already_used, not_offered).
	ResetMemoUntil Time `json:"resetMemoUntil,omitempty"`
	// ResetPausedUntil: no limit-reset call before (a failed call).
	ResetPausedUntil Time `json:"resetPausedUntil,omitempty"`
}

// refresh ends an expired lane (lazy: no timer).
func (l *LaneState) refresh(now Time) {
	if l.Active && now >= l.Until {
		l.Active = false
	}
}

func (l *LaneState) end() { l.Active = false }

// acceptable reports whether a lane offer may be taken at now.
func (l *LaneState) acceptable(now Time, cfg SpendWallConfig, sig *SpendSignal) bool {
	return cfg.SlowLane && sig.Offer && !sig.Overage && now >= l.BlockedUntil && now >= l.BudgetUntil &&
		(sig.Reset == 0 || sig.Reset > now)
}

// accept starts the lane for the window sig announces.
func (l *LaneState) accept(now Time, sig *SpendSignal) {
	reset := sig.Reset
	if reset == 0 || reset.Sub(now) > slowLaneWindowMs {
		// No (or an implausible) reset: the lane lasts one window at most,
		// so it can never outlive the provider's own period.
		reset = now.Add(slowLaneWindowMs)
	}
	l.Active, l.Reset, l.Until = true, reset, reset.Add(slowLaneGraceMs)
}

func (l *LaneState) resetAllowed(now Time, cfg SpendWallConfig) bool {
	return cfg.LimitReset && now >= l.ResetMemoUntil && now >= l.ResetPausedUntil
}

// SpendWall returns a connection's lane state at now (lazily refreshed).
func (e *Engine) SpendWall(now Time, ref ConnRef) (LaneState, error) {
	_, c, err := e.conn(ref)
	if err != nil {
		return LaneState{}, err
	}
	c.lane.refresh(now)
	return c.lane, nil
}

// LimitResetOutcome is what the session limit reset calls came to.
type LimitResetOutcome uint8

const (
	// LimitResetFailed: any failure (transport, status, body); pauses 15 min.
	LimitResetFailed LimitResetOutcome = iota
	// LimitResetDone: `result: reset`; retry the same connection at full speed.
	LimitResetDone
	// LimitResetNotLimited: the provider says the account is not limited;
	// retry the same connection at full speed once.
	LimitResetNotLimited
	// LimitResetAlreadyUsed: memoised until next_available_at.
	LimitResetAlreadyUsed
	// LimitResetNotOffered: memoised until next_available_at.
	LimitResetNotOffered
)

var limitResetNames = enumNames{"failed", "reset", "not_limited", "already_used", "not_offered"}

func (o LimitResetOutcome) String() string {
	return limitResetNames.name(uint8(o), "LimitResetOutcome")
}
func (o LimitResetOutcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// ParseLimitResetResult maps the reset endpoint's `result` to an outcome;
// an unknown value is a failure.
func ParseLimitResetResult(s string) LimitResetOutcome {
	if x, err := limitResetNames.parse(strings.ToLower(strings.TrimSpace(s)), "result"); err == nil && x != 0 {
		return LimitResetOutcome(x)
	}
	return LimitResetFailed
}

// LimitResetResult is the shell's report of the usage / reset calls.
type LimitResetResult struct {
	Outcome LimitResetOutcome
	// NextAvailableAt is when a reset may be asked for again; 0 = not stated.
	NextAvailableAt Time
}
