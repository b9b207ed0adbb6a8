package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"
)

// pgLeases runs every lease operation as one READ COMMITTED transaction
// that first expires overdue leases (locking them in id order, so two
// sweeps never deadlock) and then decides with row locks. The unique partial
// indexes are the last word: a racing insert that loses gets a unique
// violation, which is mapped to the typed conflict. Time is the database's
// (now() of the transaction), so replicas with skewed clocks agree.
type pgLeases struct {
	db *sql.DB
}

const leaseCols = `id, lease_owner_hash, api_key_id, provider, connection_id, model, generation, state,
	acquired_at, renewed_at, expires_at, ended_at, COALESCE(end_reason, '')`

func scanLease(sc scanner) (Lease, error) {
	var l Lease
	var ended sql.NullTime
	var state string
	err := sc.Scan(&l.ID, &l.OwnerHash, &l.APIKeyID, &l.Provider, &l.Connection, &l.Model, &l.Generation, &state,
		&l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &ended, &l.EndReason)
	l.State = LeaseState(state)
	if ended.Valid {
		l.EndedAt = ended.Time.UTC()
	}
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt = l.AcquiredAt.UTC(), l.RenewedAt.UTC(), l.ExpiresAt.UTC()
	return l, err
}

// leaseTx runs fn in a transaction after the expiry sweep, retrying on
// serialization failures and deadlocks; fn gets the transaction's now.
func (p *pgLeases) leaseTx(ctx context.Context, fn func(tx *sql.Tx, now time.Time) error) error {
	var err error
	for attempt := 0; attempt < leaseConflictRetries; attempt++ {
		err = p.once(ctx, fn)
		var pe *pq.Error
		if errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01") {
			continue
		}
		break
	}
	if err == nil {
		return nil
	}
	var lc *LeaseConflict
	if errors.As(err, &lc) || errors.Is(err, ErrLeaseStale) || errors.Is(err, errUniqueRace) {
		return err
	}
	if isUnavailable(err) {
		return fmt.Errorf("lease: %w: %v", ErrStoreUnavailable, err)
	}
	return fmt.Errorf("lease: %w", err)
}

func (p *pgLeases) once(ctx context.Context, fn func(tx *sql.Tx, now time.Time) error) error {
	ctx, cancel := context.WithTimeout(ctx, leaseTxAttemptTimeout)
	defer cancel()
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// One round trip for the transaction's now(), the expiry sweep and the
	// NOTIFY that tells the other replicas to reload their lease copies
	// (delivered only if the transaction commits): a data-modifying WITH
	// runs to completion whether or not it is read, and now() is the
	// transaction's start time in both.
	var now time.Time
	if err := tx.QueryRowContext(ctx, `WITH swept AS (
		UPDATE exclusive_connection_leases
		SET state = 'EXPIRED', end_reason = $1, ended_at = now()
		WHERE id IN (SELECT id FROM exclusive_connection_leases
		             WHERE state = 'ACTIVE' AND expires_at <= now() ORDER BY id FOR UPDATE)
		RETURNING 1)
		SELECT now() FROM (SELECT pg_notify($2, '')) AS n`, EndTTLExpired, leaseChannel).Scan(&now); err != nil {
		return err
	}
	now = now.UTC()
	if err := fn(tx, now); err != nil {
		return err
	}
	return tx.Commit()
}

// leaseChannel is NOTIFYed by every committed lease operation; each
// replica's gateway reloads its copy of the active leases on it
// (Postgres.LeaseUpdates), so another replica's new lease is routed around
// within a notification's latency rather than a refresh period.
const leaseChannel = "breakwater_leases"

var errUniqueRace = errors.New("lease: unique index race")

func isUniqueViolation(err error) bool {
	var pe *pq.Error
	return errors.As(err, &pe) && pe.Code == "23505"
}

func activeWhere(ctx context.Context, tx *sql.Tx, where string, args ...any) (*Lease, error) {
	row := tx.QueryRowContext(ctx, `SELECT `+leaseCols+` FROM exclusive_connection_leases WHERE state = 'ACTIVE' AND `+where+` FOR UPDATE`, args...)
	l, err := scanLease(row)
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// ownerAndConn reads, locked, the owner's active lease and the active lease
// on provider/connection.
func ownerAndConn(ctx context.Context, tx *sql.Tx, h, provider, conn string) (own, held *Lease, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+leaseCols+` FROM exclusive_connection_leases
		WHERE state = 'ACTIVE' AND (lease_owner_hash = $1 OR (provider = $2 AND connection_id = $3))
		ORDER BY id FOR UPDATE`, h, provider, conn)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, nil, err
		}
		if l.OwnerHash == h {
			own = &l
		}
		if l.Provider == provider && l.Connection == conn {
			held = &l
		}
	}
	return own, held, rows.Err()
}

func (p *pgLeases) Acquire(ctx context.Context, r AcquireRequest) (Lease, LeaseResult, error) {
	h := HashOwner(r.Owner)
	ttl := ClampLeaseTTL(r.TTL)
	var out Lease
	var res LeaseResult
	err := p.raceRetried(ctx, func(tx *sql.Tx, now time.Time) error {
		out, res = Lease{}, ""
		// The owner's active lease and the connection's, in one locked
		// read (at most two rows; one when the owner holds this one).
		own, held, err := ownerAndConn(ctx, tx, h, r.Provider, r.Connection)
		if err != nil {
			return err
		}
		if own != nil {
			if own.APIKeyID == r.APIKeyID && own.Provider == r.Provider && own.Connection == r.Connection {
				out, err = scanLease(tx.QueryRowContext(ctx, `UPDATE exclusive_connection_leases
						SET renewed_at = $2, expires_at = $3, model = CASE WHEN $4 = '' THEN model ELSE $4 END
						WHERE id = $1 RETURNING `+leaseCols, own.ID, now, now.Add(ttl), r.Model))
				res = LeaseReused
				return err
			}
			return &LeaseConflict{Kind: OwnerAlreadyActive, Lease: *own}
		}
		if held != nil {
			return &LeaseConflict{Kind: ConnectionBusy, ExpiresAt: held.ExpiresAt}
		}
		out, err = scanLease(tx.QueryRowContext(ctx, `INSERT INTO exclusive_connection_leases
				(lease_owner_hash, api_key_id, provider, connection_id, model, generation, state, acquired_at, renewed_at, expires_at)
				VALUES ($1, $2, $3, $4, $5,
				        (SELECT COALESCE(max(generation), 0) + 1 FROM exclusive_connection_leases WHERE lease_owner_hash = $1),
				        'ACTIVE', $6, $6, $7)
				RETURNING `+leaseCols, h, r.APIKeyID, r.Provider, r.Connection, r.Model, now, now.Add(ttl)))
		if isUniqueViolation(err) {
			return errUniqueRace
		}
		res = LeaseAcquired
		return err
	})
	if lost, raced := err.(*raceLost); raced {
		return Lease{}, "", lost.conflict
	}
	return out, res, err
}

// raceLost is a lease change that lost the unique-index race every time.
type raceLost struct{ conflict *LeaseConflict }

func (r *raceLost) Error() string { return r.conflict.Error() }

// raceRetried runs a lease change (fn, in one transaction) and runs it
// again when another transaction took the owner or the connection between
// its check and its insert (errUniqueRace): the next run maps that to the
// typed conflict, or succeeds if that lease is already gone. fn starts
// from scratch each time. A change that keeps losing the race is a
// raceLost holding the connection-busy conflict.
func (p *pgLeases) raceRetried(ctx context.Context, fn func(tx *sql.Tx, now time.Time) error) error {
	for attempt := 0; ; attempt++ {
		err := p.leaseTx(ctx, fn)
		if !errors.Is(err, errUniqueRace) {
			return err
		}
		if attempt >= leaseConflictRetries {
			return &raceLost{&LeaseConflict{Kind: ConnectionBusy, ExpiresAt: time.Now().Add(time.Second)}}
		}
	}
}

func (p *pgLeases) Renew(ctx context.Context, owner, apiKeyID string, gen int64, ttl time.Duration) (Lease, error) {
	h := HashOwner(owner)
	var out Lease
	err := p.leaseTx(ctx, func(tx *sql.Tx, now time.Time) error {
		var err error
		out, err = scanLease(tx.QueryRowContext(ctx, `UPDATE exclusive_connection_leases
			SET renewed_at = $4, expires_at = $5
			WHERE lease_owner_hash = $1 AND generation = $2 AND api_key_id = $3 AND state = 'ACTIVE'
			RETURNING `+leaseCols, h, gen, apiKeyID, now, now.Add(ClampLeaseTTL(ttl))))
		if err == sql.ErrNoRows {
			return ErrLeaseStale
		}
		return err
	})
	return out, err
}

func (p *pgLeases) Release(ctx context.Context, owner, apiKeyID string, gen int64, reason string) (Lease, error) {
	h := HashOwner(owner)
	if reason == "" {
		reason = EndOwnerExit
	}
	var out Lease
	err := p.leaseTx(ctx, func(tx *sql.Tx, now time.Time) error {
		var err error
		out, err = scanLease(tx.QueryRowContext(ctx, `UPDATE exclusive_connection_leases
			SET state = 'RELEASED', end_reason = $4, ended_at = $5
			WHERE lease_owner_hash = $1 AND generation = $2 AND api_key_id = $3 AND state = 'ACTIVE'
			RETURNING `+leaseCols, h, gen, apiKeyID, reason, now))
		if err != sql.ErrNoRows {
			return err
		}
		// Releasing a released lease is idempotent.
		out, err = scanLease(tx.QueryRowContext(ctx, `SELECT `+leaseCols+` FROM exclusive_connection_leases
			WHERE lease_owner_hash = $1 AND generation = $2 AND api_key_id = $3 AND state = 'RELEASED'
			ORDER BY id DESC LIMIT 1`, h, gen, apiKeyID))
		if err == sql.ErrNoRows {
			return ErrLeaseStale
		}
		return err
	})
	return out, err
}

func (p *pgLeases) Transition(ctx context.Context, owner, apiKeyID string, gen int64, provider, conn, reason string) (Lease, LeaseResult, error) {
	h := HashOwner(owner)
	var out Lease
	var res LeaseResult
	err := p.raceRetried(ctx, func(tx *sql.Tx, now time.Time) error {
		out, res = Lease{}, ""
		own, err := activeWhere(ctx, tx, `lease_owner_hash = $1`, h)
		if err != nil {
			return err
		}
		if own == nil || own.Generation != gen || own.APIKeyID != apiKeyID {
			return ErrLeaseStale
		}
		if own.Provider == provider && own.Connection == conn {
			out, res = *own, LeaseReused
			return nil
		}
		held, err := activeWhere(ctx, tx, `provider = $1 AND connection_id = $2`, provider, conn)
		if err != nil {
			return err
		}
		if held != nil {
			return &LeaseConflict{Kind: ConnectionBusy, ExpiresAt: held.ExpiresAt}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE exclusive_connection_leases SET state = 'INVALIDATED', end_reason = $2, ended_at = $3
				WHERE id = $1`, own.ID, reason, now); err != nil {
			return err
		}
		out, err = scanLease(tx.QueryRowContext(ctx, `INSERT INTO exclusive_connection_leases
				(lease_owner_hash, api_key_id, provider, connection_id, model, generation, state, acquired_at, renewed_at, expires_at)
				VALUES ($1, $2, $3, $4, $5, $6, 'ACTIVE', $7, $7, $8) RETURNING `+leaseCols,
			h, apiKeyID, provider, conn, own.Model, gen, now, now.Add(own.TTL())))
		if isUniqueViolation(err) {
			return errUniqueRace
		}
		res = LeaseTransitioned
		return err
	})
	if lost, raced := err.(*raceLost); raced {
		return Lease{}, "", lost.conflict
	}
	return out, res, err
}

func (p *pgLeases) Status(ctx context.Context, owner string) (Lease, bool, error) {
	l, err := scanLease(p.db.QueryRowContext(ctx, `SELECT `+leaseCols+` FROM exclusive_connection_leases
		WHERE lease_owner_hash = $1 AND state = 'ACTIVE' AND expires_at > now()`, HashOwner(owner)))
	if err == sql.ErrNoRows {
		return Lease{}, false, nil
	}
	if err != nil {
		if isUnavailable(err) {
			return Lease{}, false, fmt.Errorf("lease: %w: %v", ErrStoreUnavailable, err)
		}
		return Lease{}, false, fmt.Errorf("lease: %w", err)
	}
	return l, true, nil
}

func (p *pgLeases) Active(ctx context.Context) ([]Lease, error) {
	rows, err := p.db.QueryContext(ctx, `SELECT `+leaseCols+` FROM exclusive_connection_leases
		WHERE state = 'ACTIVE' AND expires_at > now() ORDER BY provider, connection_id`)
	if err != nil {
		if isUnavailable(err) {
			return nil, fmt.Errorf("lease: %w: %v", ErrStoreUnavailable, err)
		}
		return nil, fmt.Errorf("lease: %w", err)
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, fmt.Errorf("lease: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		if isUnavailable(err) {
			return nil, fmt.Errorf("lease: %w: %v", ErrStoreUnavailable, err)
		}
		return nil, err
	}
	return out, nil
}
