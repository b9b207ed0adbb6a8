package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Store persists model state and the other durable things of the gateway.
// Every method is safe for concurrent use.
type Store interface {
	// Load returns the persisted model state (raw: use RestoreEngine, which
	// keeps only its durable part). A *LoadError names rows that were
	// skipped; the returned state is still valid. It also primes the store's
	// view of what is persisted, so call it once, before Apply.
	Load(ctx context.Context) (model.State, error)
	// Apply accepts change records from the engine. It copies them into an
	// in-memory buffer coalesced by entity and returns at once; it never
	// blocks on I/O.
	Apply(changes []model.Change)
	// Flush writes everything accepted so far. With Postgres down it returns
	// an error wrapping ErrStoreUnavailable and keeps the changes.
	Flush(ctx context.Context) error
	// Close stops background work and flushes; an error means some accepted
	// changes could not be written before ctx ended.
	Close(ctx context.Context) error

	// SaveSettings replaces the saved settings layer (PATCH /api/resilience)
	// synchronously; LoadSettings returns it (empty when none was saved).
	SaveSettings(ctx context.Context, l settings.Layer) error
	LoadSettings(ctx context.Context) (settings.Layer, error)

	// Leases returns the exclusive session lease arbiter (docs/leases.md, docs/leases.md#the-database-arbitrates).
	Leases() Leases

	// LogAttempt queues one upstream attempt for the request log (
	// docs/store.md#request-log); it never blocks. RecentAttempts reads the log back (incident
	// export), newest first; LastEgressIPs returns the last known egress IP
	// of each connection of a provider since a time (docs/classification.md).
	LogAttempt(rec LogRecord)
	RecentAttempts(ctx context.Context, q LogQuery) ([]LogRecord, error)
	LastEgressIPs(ctx context.Context, provider string, since time.Time) (map[string]string, error)

	// Updates signals that other replicas changed state; ApplyRemote then
	// folds their changes into the engine (call it under the engine lock).
	// The memory store never signals.
	Updates() <-chan struct{}
	ApplyRemote(e *model.Engine, now model.Time) (RemoteResult, error)

	// Health reports the store's condition for /api/monitoring/health and
	// metrics.
	Health() Health
}

// RemoteResult says what ApplyRemote changed.
type RemoteResult struct {
	// Applied counts entities whose value came from (or was merged with)
	// another replica.
	Applied int
	// Settings is the saved settings layer when another replica saved a new
	// one; nil otherwise. The shell re-resolves its settings with it.
	Settings settings.Layer
}

// Health is a snapshot of the store's condition.
type Health struct {
	Kind    string `json:"kind"` // "memory" or "postgres"
	Up      bool   `json:"up"`   // the last database round trip succeeded
	Pending int    `json:"pending"`
	// Written counts entity rows written since start; Flushes counts flush
	// transactions that committed.
	Written int64 `json:"written"`
	Flushes int64 `json:"flushes"`
	// RemoteApplied counts entities taken from other replicas.
	RemoteApplied int64 `json:"remoteApplied"`
	// LogDropped counts request-log records dropped because the buffer was
	// full (the database was down for long), or because the database refused
	// them (each such record is logged as a warning).
	LogDropped int64  `json:"logDropped"`
	LastError  string `json:"lastError,omitempty"`
}

// IsPostgresURL reports whether u names a Postgres database (the two
// schemes lib/pq takes), the one kind of store.url besides memory.
func IsPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// ErrStoreUnavailable means the database could not be reached. Model state
// keeps being accepted in memory (fail-open); leases fail closed with it.
var ErrStoreUnavailable = errors.New("store unavailable")

// LoadError lists the rows Load skipped. The rest of the state was loaded.
type LoadError struct {
	Problems []RowProblem
}

// RowProblem is one skipped row: its table, its key and what was wrong.
type RowProblem struct {
	Table string
	Key   string
	Err   error
}

func (p RowProblem) String() string { return fmt.Sprintf("%s[%s]: %v", p.Table, p.Key, p.Err) }

func (e *LoadError) Error() string {
	parts := make([]string, 0, min(len(e.Problems), 5))
	for i, p := range e.Problems {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("... %d more", len(e.Problems)-5))
			break
		}
		parts = append(parts, p.String())
	}
	return fmt.Sprintf("load: skipped %d row(s): %s", len(e.Problems), strings.Join(parts, "; "))
}

// SessionHash is the opaque session key to give the model (model.Request
// Session, model.Pin Session): the SHA-256 hex of provider ":" session. It is
// the only form in which a session id is kept.
func SessionHash(provider, session string) string {
	h := sha256.Sum256([]byte(provider + ":" + session))
	return hex.EncodeToString(h[:])
}

// RestoreEngine restores a loaded state into an engine the way a restart
// must: only the durable part (in-flight attempts and probe permits died with
// the old process, so a HALF_OPEN breaker gets its probe budget back).
// Records the topology does not know are skipped and reported in a
// *model.RestoreError.
func RestoreEngine(e *model.Engine, st model.State) error {
	set := e.Settings()
	return e.Restore(st.Durable(&set, profileFunc(e)))
}

func profileFunc(e *model.Engine) func(string) model.Profile {
	profiles := map[string]model.Profile{}
	for _, p := range e.Topology().Providers {
		profiles[p.ID] = p.Profile
	}
	return func(id string) model.Profile { return profiles[id] }
}
