package model

import (
	"fmt"
	"time"
)

// Time is an instant on the virtual clock: milliseconds since the Unix epoch.
// The model never reads a clock; every entry point takes the current Time from
// its caller (the proxy's wall clock or the simulator's event heap).
type Time int64

// TimeOf converts a time.Time into the model's millisecond instant.
func TimeOf(t time.Time) Time { return Time(t.UnixMilli()) }

// Std converts the instant back to a time.Time in UTC.
func (t Time) Std() time.Time { return time.UnixMilli(int64(t)).UTC() }

// Add returns t plus ms milliseconds.
func (t Time) Add(ms int64) Time { return t + Time(ms) }

// Sub returns t-u in milliseconds.
func (t Time) Sub(u Time) int64 { return int64(t - u) }

// enumNames implements String/MarshalText/UnmarshalText for the small
// enumerations below, so every name used in the API, the trace and the
// database is spelled in exactly one place.
type enumNames []string

func (n enumNames) name(v uint8, kind string) string {
	if int(v) < len(n) {
		return n[v]
	}
	return fmt.Sprintf("%s(%d)", kind, v)
}

func (n enumNames) parse(s, kind string) (uint8, error) {
	for i, name := range n {
		if name == s {
			return uint8(i), nil
		}
	}
	return 0, fmt.Errorf("unknown %s %q (want one of %v)", kind, s, []string(n))
}

// Profile is a provider's connection profile; it selects default thresholds.
type Profile uint8

const (
	ProfileAPIKey Profile = iota
	ProfileOAuth
	ProfileLocal
)

var profileNames = enumNames{"apikey", "oauth", "local"}

func (p Profile) String() string               { return profileNames.name(uint8(p), "Profile") }
func (p Profile) MarshalText() ([]byte, error) { return []byte(p.String()), nil }
func (p *Profile) UnmarshalText(b []byte) error {
	return parseInto(profileNames, b, "profile", (*uint8)(p))
}

// ParseProfile parses "apikey", "oauth" or "local".
func ParseProfile(s string) (Profile, error) {
	v, err := profileNames.parse(s, "profile")
	return Profile(v), err
}

func parseInto(n enumNames, b []byte, kind string, dst *uint8) error {
	v, err := n.parse(string(b), kind)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// BreakerState is the provider circuit breaker's state.
type BreakerState uint8

const (
	Closed BreakerState = iota
	Degraded
	Open
	HalfOpen
)

var breakerStateNames = enumNames{"CLOSED", "DEGRADED", "OPEN", "HALF_OPEN"}

func (s BreakerState) String() string               { return breakerStateNames.name(uint8(s), "BreakerState") }
func (s BreakerState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
func (s *BreakerState) UnmarshalText(b []byte) error {
	return parseInto(breakerStateNames, b, "breaker state", (*uint8)(s))
}

// ConnStatus is a connection's status as shown to operators (docs/names.md).
type ConnStatus uint8

const (
	StatusActive ConnStatus = iota
	StatusCooldown
	StatusBanned
	StatusExpired
	StatusCreditsExhausted
)

var connStatusNames = enumNames{"active", "cooldown", "banned", "expired", "credits_exhausted"}

func (s ConnStatus) String() string               { return connStatusNames.name(uint8(s), "ConnStatus") }
func (s ConnStatus) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
func (s *ConnStatus) UnmarshalText(b []byte) error {
	return parseInto(connStatusNames, b, "connection status", (*uint8)(s))
}

// Terminal reports whether the status is only cleared by an operator reset or
// new credentials.
func (s ConnStatus) Terminal() bool { return s >= StatusBanned }

// Reason is a verdict's or lockout's reason (docs/names.md).
type Reason uint8

const (
	ReasonNone Reason = iota
	ReasonRateLimitExceeded
	ReasonQuotaExhausted
	ReasonConcurrencyLimited
	ReasonModelCapacity
	ReasonServerError
	ReasonAuthError
	ReasonNotFound
	ReasonForbidden
	ReasonQualityFailure
	ReasonRequestScoped
	ReasonCreditsExhausted
	ReasonBanned
	ReasonRequestRejected
	ReasonStreamStall
	ReasonClientAbort
	ReasonLocalQueue
	ReasonUnknown
	ReasonSpendWall // a spend-wall 429 the lane or a limit reset absorbed (docs/spendwall.md)
)

var reasonNames = enumNames{"", "rate_limit_exceeded", "quota_exhausted", "concurrency_limited",
	"model_capacity", "server_error", "auth_error", "not_found", "forbidden", "quality_failure",
	"request_scoped", "credits_exhausted", "banned", "request_rejected", "stream_stall",
	"client_abort", "local_queue", "unknown", "spend_wall"}

func (r Reason) String() string               { return reasonNames.name(uint8(r), "Reason") }
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }
func (r *Reason) UnmarshalText(b []byte) error {
	return parseInto(reasonNames, b, "reason", (*uint8)(r))
}

// ParseReason parses a reason name.
func ParseReason(s string) (Reason, error) {
	v, err := reasonNames.parse(s, "reason")
	return Reason(v), err
}

// transient reports whether a lockout with this reason is a short, self-healing
// timer worth waiting for (docs/selection.md#waiting-for-a-cooldown): never quota, auth or not-found.
func (r Reason) transient() bool {
	switch r {
	case ReasonQuotaExhausted, ReasonAuthError, ReasonNotFound, ReasonCreditsExhausted,
		ReasonBanned, ReasonForbidden:
		return false
	}
	return true
}

// Scope says which layer a failure belongs to.
type Scope uint8

const (
	ScopeNone Scope = iota
	ScopeRequest
	ScopeConnection
	ScopeModelFamily
	ScopeExactModel
	ScopeModel // the bare model id (404), also what a rule's "model" scope means
	ScopeProvider
)

var scopeNames = enumNames{"", "request", "connection", "family", "exact", "model", "provider"}

func (s Scope) String() string                { return scopeNames.name(uint8(s), "Scope") }
func (s Scope) MarshalText() ([]byte, error)  { return []byte(s.String()), nil }
func (s *Scope) UnmarshalText(b []byte) error { return parseInto(scopeNames, b, "scope", (*uint8)(s)) }

// ParseScope parses a scope name.
func ParseScope(s string) (Scope, error) {
	v, err := scopeNames.parse(s, "scope")
	return Scope(v), err
}

// FailureKind is the kind of a provider-level failure carried into the breaker
// so that cooldownByKind works on every path.
type FailureKind uint8

const (
	KindNone FailureKind = iota
	KindTimeout
	KindServerError
	KindTransport
	numFailureKinds // not a kind: how many there are
)

var failureKindNames = enumNames{"", "timeout", "server_error", "transport"}

func (k FailureKind) String() string               { return failureKindNames.name(uint8(k), "FailureKind") }
func (k FailureKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }
func (k *FailureKind) UnmarshalText(b []byte) error {
	return parseInto(failureKindNames, b, "failure kind", (*uint8)(k))
}

// parseFailureKind parses "timeout", "server_error" or "transport".
func parseFailureKind(s string) (FailureKind, error) {
	v, err := failureKindNames.parse(s, "failure kind")
	if err == nil && v == 0 {
		return 0, fmt.Errorf("unknown failure kind %q", s)
	}
	return FailureKind(v), err
}

// Exclusion is the layer that kept a connection or target out of a selection
// (docs/names.md).
type Exclusion uint8

const (
	ExclNone Exclusion = iota
	ExclCircuitOpen
	ExclProviderCooldown
	ExclConnectionCooldown
	ExclModelLockout
	ExclTerminal
	ExclLeaseHeld
	ExclConcurrencyFull
	ExclNotAllowed // outside the client key's allowedConnections or a pinned target
	ExclNoModel    // the provider does not serve the model
	// ExclTried: this request already tried the connection (it failed, or
	// was refused); the flow moves on. Seen only in the flow's own steps
	// (debug log, traces): an answer is judged on a selection without it.
	ExclTried
)

var exclusionNames = enumNames{"", "circuit_open", "provider_cooldown", "connection_cooldown",
	"model_lockout", "terminal", "lease_held", "concurrency_full", "not_allowed", "no_model", "tried"}

func (e Exclusion) String() string               { return exclusionNames.name(uint8(e), "Exclusion") }
func (e Exclusion) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// Timer reports whether the exclusion ends by itself at a known instant.
func (e Exclusion) Timer() bool {
	switch e {
	case ExclCircuitOpen, ExclProviderCooldown, ExclConnectionCooldown, ExclModelLockout:
		return true
	}
	return false
}
