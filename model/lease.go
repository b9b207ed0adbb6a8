package model

import (
	"fmt"
	"strconv"
	"strings"
)

// Exclusive session leases (docs/leases.md, docs/leases.md#the-database-arbitrates, docs/leases.md): the pure part.
// The proxy mints owner tokens (crypto/rand) and hashes them (SHA-256); the
// store arbitrates acquire / renew / transition. What is decided here, so
// the proxy and the simulator decide it alike: the wire forms of the owner
// and the generation, the TTL clamp, the fence before every managed
// dispatch, the capacity answer and its Retry-After.

// Lease wire constants.
const (
	// LeaseOwnerPrefix starts every owner token: bwl_ + 43 base64url
	// characters (256 random bits, unpadded).
	LeaseOwnerPrefix = "bwl_"
	// leaseOwnerLen is the full length of an owner token.
	leaseOwnerLen = len(LeaseOwnerPrefix) + 43
	// MaxLeaseGeneration is the largest generation the wire accepts: the
	// largest integer a JSON number (an IEEE double) holds exactly, 2^53-1.
	MaxLeaseGeneration = 1<<53 - 1

	DefaultLeaseTTLMs = 120_000   // acquire / renew without ttlMs
	MinLeaseTTLMs     = 1_000     // clamp floor
	MaxLeaseTTLMs     = 1_800_000 // clamp ceiling (30 min)

	// LeaseScope is the client key scope that makes a key managed.
	LeaseScope = "lease:exclusive"
)

// Lease error codes (docs/leases.md HTTP mapping). Their type is lease_error.
const (
	CodeLeaseContextRequired  Code = "LEASE_CONTEXT_REQUIRED"
	CodeLeaseContextInvalid   Code = "LEASE_CONTEXT_INVALID"
	CodeLeaseKeyConfig        Code = "LEASE_KEY_CONFIGURATION_INVALID"
	CodeLeaseRequired         Code = "LEASE_REQUIRED"
	CodeLeaseFenceStale       Code = "LEASE_FENCE_STALE"
	CodeLeaseConnMismatch     Code = "LEASE_CONNECTION_MISMATCH"
	CodeLeaseAuthMismatch     Code = "LEASE_AUTHORIZATION_MISMATCH"
	CodeLeaseCapacity         Code = "LEASE_CAPACITY_UNAVAILABLE"
	CodeLeaseStoreUnavailable Code = "LEASE_STORE_UNAVAILABLE"
	CodeLeaseUnsupportedMedia Code = "LEASE_UNSUPPORTED_MEDIA_TYPE"
	LeaseErrorType                 = "lease_error"
	LeaseWaitingState              = "WAITING_FOR_CAPACITY"
	LeaseNoFreeEligibleReason      = "NO_FREE_ELIGIBLE_CONNECTION"
	leaseRetryAfterMaxSeconds      = 3600
)

func (c Code) isLease() bool { return strings.HasPrefix(string(c), "LEASE_") }

// LeaseHTTPStatus is the HTTP status of a lease error code.
func LeaseHTTPStatus(c Code) int {
	switch c {
	case CodeLeaseContextRequired, CodeLeaseContextInvalid:
		return 400
	case CodeLeaseKeyConfig, CodeLeaseAuthMismatch:
		return 403
	case CodeLeaseRequired, CodeLeaseFenceStale, CodeLeaseConnMismatch:
		return 409
	case CodeLeaseUnsupportedMedia:
		return 415
	case CodeLeaseCapacity:
		return 429
	case CodeLeaseStoreUnavailable:
		return 503
	}
	return 500
}

// LeaseError is a typed lease refusal (the proxy writes it as the OpenAI
// envelope with type lease_error).
type LeaseError struct {
	Code    Code
	Message string
}

func (e *LeaseError) Error() string { return string(e.Code) + ": " + e.Message }

func leaseErr(c Code, format string, a ...any) *LeaseError {
	return &LeaseError{Code: c, Message: fmt.Sprintf(format, a...)}
}

// ParseLeaseOwner checks an owner token's form: bwl_ and 43 base64url
// characters. The message never echoes the value (it is a secret, and a
// wrong one may be another client's).
func ParseLeaseOwner(s string) error {
	if s == "" {
		return leaseErr(CodeLeaseContextRequired, "the lease owner is required")
	}
	if len(s) != leaseOwnerLen || s[:len(LeaseOwnerPrefix)] != LeaseOwnerPrefix {
		return leaseErr(CodeLeaseContextInvalid, "the lease owner must be %s followed by 43 base64url characters", LeaseOwnerPrefix)
	}
	for i := len(LeaseOwnerPrefix); i < len(s); i++ {
		if !isBase64URL(s[i]) {
			return leaseErr(CodeLeaseContextInvalid, "the lease owner must be %s followed by 43 base64url characters", LeaseOwnerPrefix)
		}
	}
	return nil
}

func isBase64URL(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// ParseLeaseGeneration parses a generation: ^[1-9]\d*$ and at most 2^53-1
// (docs/leases.md). Leading zeros, signs, spaces, exponents and fractions
// are refused, so one generation has exactly one spelling.
func ParseLeaseGeneration(s string) (int64, error) {
	if s == "" {
		return 0, leaseErr(CodeLeaseContextRequired, "the lease generation is required")
	}
	bad := func() (int64, error) {
		return 0, leaseErr(CodeLeaseContextInvalid, "the lease generation must be a positive integer without leading zeros, at most %d", int64(MaxLeaseGeneration))
	}
	if len(s) > 16 || s[0] < '1' || s[0] > '9' { // 2^53-1 has 16 digits
		return bad()
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return bad()
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > MaxLeaseGeneration {
		return bad()
	}
	return n, nil
}

// ClampLeaseTTLMs applies the default (0 = absent) and the [1 s, 30 min]
// clamp; a negative TTL is bad input.
func ClampLeaseTTLMs(ms int64) (int64, error) {
	switch {
	case ms < 0:
		return 0, leaseErr(CodeLeaseContextInvalid, "ttlMs must not be negative")
	case ms == 0:
		return DefaultLeaseTTLMs, nil
	}
	return min(max(ms, MinLeaseTTLMs), MaxLeaseTTLMs), nil
}

// LeaseRow is what the fence needs of the owner's active lease.
type LeaseRow struct {
	OwnerHash  string
	APIKeyID   string
	Conn       ConnRef
	Generation int64
	ExpiresAt  Time
}

// LeaseClaim is what a managed request presents: the hash of its owner
// token, the generation, the client key it came with, and (for a dispatch)
// the connection it is about to use.
type LeaseClaim struct {
	OwnerHash  string
	Generation int64
	APIKeyID   string
	Conn       ConnRef // zero = not a dispatch (status / renew)
}

// Fence is the fence check's answer (docs/leases.md assertFence).
type Fence uint8

const (
	FenceValid Fence = iota
	FenceRequired
	FenceStale
	FenceAuthorizationMismatch
	FenceConnectionMismatch
)

var fenceNames = enumNames{"VALID", "REQUIRED", "STALE", "AUTHORIZATION_MISMATCH", "CONNECTION_MISMATCH"}

func (f Fence) String() string { return fenceNames.name(uint8(f), "Fence") }

// Code is the lease error code a failed fence answers with ("" for VALID).
// A token presented with another client key is refused as a permission
// problem; the order of the checks is docs/leases.md's.
func (f Fence) Code() Code {
	switch f {
	case FenceRequired:
		return CodeLeaseRequired
	case FenceStale:
		return CodeLeaseFenceStale
	case FenceAuthorizationMismatch:
		return CodeLeaseAuthMismatch
	case FenceConnectionMismatch:
		return CodeLeaseConnMismatch
	}
	return ""
}

// Message is the client-facing text of a failed fence (never an owner or a
// connection id).
func (f Fence) Message() string {
	switch f {
	case FenceRequired:
		return "no active lease for this owner; acquire one"
	case FenceStale:
		return "the lease generation is not the current one"
	case FenceAuthorizationMismatch:
		return "this lease belongs to another API key"
	case FenceConnectionMismatch:
		return "the request would use a connection the lease does not hold"
	}
	return "lease fence refused"
}

// Refusal is the lease error of a failed fence.
func (f Fence) Refusal() *LeaseError { return &LeaseError{Code: f.Code(), Message: f.Message()} }

// CheckFence runs before every managed dispatch: row is the owner's active
// lease (nil = none). An expired row is no lease. It allocates nothing.
func CheckFence(now Time, row *LeaseRow, c *LeaseClaim) Fence {
	switch {
	case row == nil || row.ExpiresAt <= now || row.OwnerHash != c.OwnerHash:
		return FenceRequired
	case row.Generation != c.Generation:
		return FenceStale
	case row.APIKeyID != c.APIKeyID:
		return FenceAuthorizationMismatch
	case c.Conn != (ConnRef{}) && row.Conn != c.Conn:
		return FenceConnectionMismatch
	}
	return FenceValid
}

// RenewLease is a renew's decision (docs/leases.md#lifecycle): the owner's
// active lease (row; nil = none) is extended to now + ttlMs (clamped) when
// the claim's fence holds, generation unchanged; otherwise the fence says
// why it is refused, in the order the gateway answers a refused renew
// with. The gateway's store arbitrates the same match (owner, generation,
// key of an active lease); the simulator, its own arbiter, calls this.
func RenewLease(now Time, row *LeaseRow, c *LeaseClaim, ttlMs int64) Fence {
	claim := *c
	claim.Conn = ConnRef{} // a renew is not a dispatch
	if f := CheckFence(now, row, &claim); f != FenceValid {
		return f
	}
	ms, err := ClampLeaseTTLMs(ttlMs)
	if err != nil {
		ms = DefaultLeaseTTLMs
	}
	row.ExpiresAt = now.Add(ms)
	return FenceValid
}

// LeaseRetryAfterSeconds is the 429's Retry-After: the seconds until the
// earliest relevant lease expiry, rounded up and clamped to [1, 3600]; 1
// when unknown (earliest 0).
// leaseRetryAfterMs is LeaseRetryAfterSeconds for a time left, in ms.
func leaseRetryAfterMs(now Time, leftMs int64) int64 {
	if leftMs <= 0 {
		return LeaseRetryAfterSeconds(now, 0) * 1000
	}
	return LeaseRetryAfterSeconds(now, now.Add(leftMs)) * 1000
}

func LeaseRetryAfterSeconds(now, earliest Time) int64 {
	if earliest == 0 {
		return 1
	}
	ms := earliest.Sub(now)
	return min(max((ms+999)/1000, 1), leaseRetryAfterMaxSeconds)
}

// LeaseCapacity counts, in a selection made with the other owners' leased
// connections as Request.Held, the eligible connections (healthy by every
// rule, leased or not) and the free ones (eligible and not leased).
func LeaseCapacity(sel *Selection) (eligible, free int) {
	free = len(sel.Candidates)
	eligible = free
	for i := range sel.Excluded {
		if sel.Excluded[i].Reason == ExclLeaseHeld {
			eligible++
		}
	}
	return eligible, free
}

// LeaseAcquireRoute checks that a route can be leased: a lease owns one
// connection, so a combo (a fan-out over targets) is refused before any
// dispatch (docs/leases.md "managed combos").
func LeaseAcquireRoute(r *Route) error {
	if e := leaseRouteErr(r); e != nil {
		return e
	}
	return nil
}

func leaseRouteErr(r *Route) *LeaseError {
	if r.IsCombo() {
		return leaseErr(CodeLeaseContextInvalid, "model %q is a combo; a lease holds one connection, so name a provider model", r.Name)
	}
	return nil
}
