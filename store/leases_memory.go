package store

import (
	"context"
	"slices"
	"sync"
	"time"
)

// memLeases is the memory store's arbiter: the process decides, under one
// mutex, with the same rules as the Postgres transactions.
type memLeases struct {
	mu   sync.Mutex
	now  func() time.Time
	rows []Lease
	next int64
}

func newMemLeases(now func() time.Time) *memLeases {
	if now == nil {
		now = time.Now
	}
	return &memLeases{now: now}
}

// expire is the sweep every operation runs first.
func (m *memLeases) expire(now time.Time) {
	for i := range m.rows {
		r := &m.rows[i]
		if r.State == LeaseActive && !r.ExpiresAt.After(now) {
			r.State, r.EndReason, r.EndedAt = LeaseExpired, EndTTLExpired, now
		}
	}
}

func (m *memLeases) active(pred func(*Lease) bool) *Lease {
	for i := range m.rows {
		if m.rows[i].State == LeaseActive && pred(&m.rows[i]) {
			return &m.rows[i]
		}
	}
	return nil
}

func (m *memLeases) Acquire(_ context.Context, r AcquireRequest) (Lease, LeaseResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UTC()
	m.expire(now)
	h := HashOwner(r.Owner)
	ttl := ClampLeaseTTL(r.TTL)
	if own := m.active(func(l *Lease) bool { return l.OwnerHash == h }); own != nil {
		if own.APIKeyID == r.APIKeyID && own.Provider == r.Provider && own.Connection == r.Connection {
			own.RenewedAt, own.ExpiresAt = now, now.Add(ttl)
			if r.Model != "" {
				own.Model = r.Model
			}
			return *own, LeaseReused, nil
		}
		return Lease{}, "", &LeaseConflict{Kind: OwnerAlreadyActive, Lease: *own}
	}
	if held := m.active(func(l *Lease) bool { return l.Provider == r.Provider && l.Connection == r.Connection }); held != nil {
		return Lease{}, "", &LeaseConflict{Kind: ConnectionBusy, ExpiresAt: held.ExpiresAt}
	}
	var gen int64
	for _, l := range m.rows {
		if l.OwnerHash == h {
			gen = max(gen, l.Generation)
		}
	}
	m.next++
	l := Lease{ID: m.next, OwnerHash: h, APIKeyID: r.APIKeyID, Provider: r.Provider, Connection: r.Connection,
		Model: r.Model, Generation: gen + 1, State: LeaseActive, AcquiredAt: now, RenewedAt: now, ExpiresAt: now.Add(ttl)}
	m.rows = append(m.rows, l)
	m.gc(now)
	return l, LeaseAcquired, nil
}

// gc forgets ended rows older than a day, keeping each owner's latest row
// so generations keep increasing.
func (m *memLeases) gc(now time.Time) {
	if len(m.rows) < 1024 {
		return
	}
	latest := map[string]int64{}
	for _, l := range m.rows {
		latest[l.OwnerHash] = max(latest[l.OwnerHash], l.Generation)
	}
	m.rows = slices.DeleteFunc(m.rows, func(l Lease) bool {
		return l.State != LeaseActive && now.Sub(l.EndedAt) > 24*time.Hour && l.Generation < latest[l.OwnerHash]
	})
}

func (m *memLeases) Renew(_ context.Context, owner, apiKeyID string, gen int64, ttl time.Duration) (Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UTC()
	m.expire(now)
	h := HashOwner(owner)
	l := m.active(func(l *Lease) bool { return l.OwnerHash == h && l.Generation == gen && l.APIKeyID == apiKeyID })
	if l == nil {
		return Lease{}, ErrLeaseStale
	}
	l.RenewedAt, l.ExpiresAt = now, now.Add(ClampLeaseTTL(ttl))
	return *l, nil
}

func (m *memLeases) Release(_ context.Context, owner, apiKeyID string, gen int64, reason string) (Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UTC()
	m.expire(now)
	h := HashOwner(owner)
	if reason == "" {
		reason = EndOwnerExit
	}
	if l := m.active(func(l *Lease) bool { return l.OwnerHash == h && l.Generation == gen && l.APIKeyID == apiKeyID }); l != nil {
		l.State, l.EndReason, l.EndedAt = LeaseReleased, reason, now
		return *l, nil
	}
	for i := len(m.rows) - 1; i >= 0; i-- {
		if l := m.rows[i]; l.OwnerHash == h && l.Generation == gen && l.APIKeyID == apiKeyID && l.State == LeaseReleased {
			return l, nil
		}
	}
	return Lease{}, ErrLeaseStale
}

func (m *memLeases) Transition(_ context.Context, owner, apiKeyID string, gen int64, provider, conn, reason string) (Lease, LeaseResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UTC()
	m.expire(now)
	h := HashOwner(owner)
	own := m.active(func(l *Lease) bool { return l.OwnerHash == h })
	if own == nil || own.Generation != gen || own.APIKeyID != apiKeyID {
		return Lease{}, "", ErrLeaseStale
	}
	if own.Provider == provider && own.Connection == conn {
		return *own, LeaseReused, nil
	}
	if held := m.active(func(l *Lease) bool { return l.Provider == provider && l.Connection == conn }); held != nil {
		return Lease{}, "", &LeaseConflict{Kind: ConnectionBusy, ExpiresAt: held.ExpiresAt}
	}
	ttl := own.TTL()
	own.State, own.EndReason, own.EndedAt = LeaseInvalidated, reason, now
	m.next++
	l := Lease{ID: m.next, OwnerHash: h, APIKeyID: apiKeyID, Provider: provider, Connection: conn, Model: own.Model,
		Generation: gen, State: LeaseActive, AcquiredAt: now, RenewedAt: now, ExpiresAt: now.Add(ttl)}
	m.rows = append(m.rows, l)
	return l, LeaseTransitioned, nil
}

func (m *memLeases) Status(_ context.Context, owner string) (Lease, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UTC()
	h := HashOwner(owner)
	l := m.active(func(l *Lease) bool { return l.OwnerHash == h && l.ExpiresAt.After(now) })
	if l == nil {
		return Lease{}, false, nil
	}
	return *l, true, nil
}

func (m *memLeases) Active(_ context.Context) ([]Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UTC()
	var out []Lease
	for _, l := range m.rows {
		if l.State == LeaseActive && l.ExpiresAt.After(now) {
			out = append(out, l)
		}
	}
	return out, nil
}
