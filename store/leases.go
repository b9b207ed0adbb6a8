package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Exclusive session leases (docs/leases.md, docs/leases.md#the-database-arbitrates, docs/leases.md). The store is
// the arbiter: with Postgres every operation is one transaction that first
// expires overdue leases, and the unique partial indexes make two ACTIVE
// leases on one connection, or of one owner, impossible; while the database
// is down every operation fails closed with ErrStoreUnavailable. With the
// memory store the process arbitrates under a mutex. Owner tokens are hashed
// (SHA-256 hex) on the way in and never stored or returned.

// Leases is the lease arbiter. The HTTP endpoint (POST
// /api/v1/session-leases) maps its results and errors to responses.
type Leases interface {
	// Acquire takes the connection for the owner, renews the owner's lease
	// in place when it already holds this connection with this key
	// (LeaseReused), or fails with a *LeaseConflict.
	Acquire(ctx context.Context, r AcquireRequest) (Lease, LeaseResult, error)
	// Renew extends an active lease matching owner, generation and key;
	// otherwise ErrLeaseStale.
	Renew(ctx context.Context, owner, apiKeyID string, generation int64, ttl time.Duration) (Lease, error)
	// Release ends a lease (idempotent for an already released one);
	// otherwise ErrLeaseStale. reason is OWNER_EXIT or CLIENT_CANCELLED.
	Release(ctx context.Context, owner, apiKeyID string, generation int64, reason string) (Lease, error)
	// Transition moves the owner's lease, same generation, to another
	// connection (health or cooldown moved it), ending the old row with
	// reason.
	Transition(ctx context.Context, owner, apiKeyID string, generation int64, provider, connection, reason string) (Lease, LeaseResult, error)
	// Status returns the owner's active, unexpired lease, if any.
	Status(ctx context.Context, owner string) (Lease, bool, error)
	// Active lists every active, unexpired lease (selection excludes their
	// connections for other owners with reason lease_held).
	Active(ctx context.Context) ([]Lease, error)
}

// AcquireRequest asks for one connection.
type AcquireRequest struct {
	Owner      string // the raw owner token; only its hash is kept
	APIKeyID   string
	Provider   string
	Connection string
	Model      string
	TTL        time.Duration // 0 = default; clamped (ClampLeaseTTL)
}

// Lease is one lease row. It carries the owner's hash, never the token.
type Lease struct {
	ID         int64      `json:"id"`
	OwnerHash  string     `json:"-"`
	APIKeyID   string     `json:"apiKeyId"`
	Provider   string     `json:"provider"`
	Connection string     `json:"connection"`
	Model      string     `json:"model,omitempty"`
	Generation int64      `json:"generation"`
	State      LeaseState `json:"state"`
	AcquiredAt time.Time  `json:"acquiredAt"`
	RenewedAt  time.Time  `json:"renewedAt"`
	ExpiresAt  time.Time  `json:"expiresAt"`
	EndedAt    time.Time  `json:"endedAt,omitzero"`
	EndReason  string     `json:"endReason,omitempty"`
}

// TTL is the lease's current time to live from its last renewal.
func (l Lease) TTL() time.Duration { return l.ExpiresAt.Sub(l.RenewedAt) }

// LeaseState is a lease row's state.
type LeaseState string

const (
	LeaseActive      LeaseState = "ACTIVE"
	LeaseReleased    LeaseState = "RELEASED"
	LeaseExpired     LeaseState = "EXPIRED"
	LeaseInvalidated LeaseState = "INVALIDATED"
)

// LeaseResult says how an operation succeeded.
type LeaseResult string

const (
	LeaseAcquired     LeaseResult = "ACQUIRED"
	LeaseReused       LeaseResult = "REUSED"
	LeaseRenewed      LeaseResult = "RENEWED"
	LeaseReleasedRes  LeaseResult = "RELEASED"
	LeaseTransitioned LeaseResult = "TRANSITIONED"
)

// End reasons (docs/leases.md).
const (
	EndTTLExpired         = "TTL_EXPIRED"
	EndOwnerExit          = "OWNER_EXIT"
	EndClientCancelled    = "CLIENT_CANCELLED"
	EndHealthOrCooldown   = "HEALTH_OR_COOLDOWN"
	EndConnectionInelig   = "CONNECTION_INELIGIBLE"
	EndModelIneligible    = "MODEL_INELIGIBLE"
	EndQuotaUnavailable   = "QUOTA_UNAVAILABLE"
	EndAuthorizationChg   = "AUTHORIZATION_CHANGED"
	EndManagedKeyRevoked  = "MANAGED_KEY_REVOKED"
	DefaultLeaseTTL       = 120 * time.Second
	MinLeaseTTL           = time.Second
	MaxLeaseTTL           = 30 * time.Minute
	leaseConflictRetries  = 5
	leaseTxAttemptTimeout = 5 * time.Second
)

// ClampLeaseTTL applies the default (0) and the [1 s, 30 min] clamp.
func ClampLeaseTTL(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultLeaseTTL
	}
	return min(max(d, MinLeaseTTL), MaxLeaseTTL)
}

// ErrLeaseStale means no active lease matches owner, generation and key.
var ErrLeaseStale = errors.New("lease stale")

// LeaseConflictKind says why an acquire or transition was refused.
type LeaseConflictKind string

const (
	// OwnerAlreadyActive: the owner holds another lease (Lease is it).
	OwnerAlreadyActive LeaseConflictKind = "OWNER_ALREADY_ACTIVE"
	// ConnectionBusy: another owner holds the connection until ExpiresAt.
	ConnectionBusy LeaseConflictKind = "CONNECTION_BUSY"
)

// LeaseConflict is a typed refusal. For ConnectionBusy only the holder's
// expiry is given (never another owner's identity).
type LeaseConflict struct {
	Kind      LeaseConflictKind
	Lease     Lease     // OwnerAlreadyActive: the owner's own active lease
	ExpiresAt time.Time // ConnectionBusy: when the holder's lease ends
}

func (c *LeaseConflict) Error() string {
	if c.Kind == ConnectionBusy {
		return fmt.Sprintf("lease conflict: %s until %s", c.Kind, c.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("lease conflict: %s", c.Kind)
}

// RetryAfter is how long until the holder's lease ends (ConnectionBusy).
func (c *LeaseConflict) RetryAfter(now time.Time) time.Duration {
	return max(0, c.ExpiresAt.Sub(now))
}

// HashOwner is the stored form of an owner token: its SHA-256 hex.
func HashOwner(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(h[:])
}
