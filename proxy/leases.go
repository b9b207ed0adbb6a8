package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/store"
)

// Exclusive session leases (docs/leases.md, docs/leases.md#the-database-arbitrates, docs/leases.md): the gateway
// side. The store's Leases is the arbiter (Postgres: the database; memory:
// this process); leaseMgr keeps an in-memory copy of the active leases so the
// fence before every managed dispatch and the lease_held exclusion of
// everyone else cost a map lookup, not a database round trip. The copy is
// updated at once by this replica's own operations and refreshed from the
// arbiter at most every leaseRefreshEvery (other replicas' operations); a
// fence that fails against the copy is re-checked against the arbiter
// before the client is refused, so a lease acquired on another replica
// works at once.

// leaseRefreshEvery bounds how stale another replica's lease can be in this
// replica's copy (the lease_held exclusion of non-owners, and a release or
// transition made elsewhere).
const leaseRefreshEvery = time.Second

// leaseArbiter is a store that arbitrates leases (package store's Memory
// and Postgres).
type leaseArbiter interface {
	Leases() store.Leases
}

type leaseMgr struct {
	g   *Gateway
	arb store.Leases
	// managed: client key id → it may hold leases (scope lease:exclusive
	// and a non-empty allowedConnections).
	managed map[string]bool

	mu         sync.Mutex // serialises writers of snap
	snap       atomic.Pointer[leaseSnap]
	version    atomic.Uint64 // bumped by every local write
	refreshing atomic.Bool
	lastLoad   atomic.Int64 // unix ms of the last load from the arbiter
}

// leaseSnap is an immutable view of the active leases.
type leaseSnap struct {
	byOwner map[string]model.LeaseRow // owner hash → lease
	byConn  map[model.ConnRef]model.Time
	held    []model.ConnRef // every leased connection (shared; read only)
	until   []model.Time    // aligned with held: when each lease ends
	minExp  model.Time      // the first expiry (0 = none): rebuild then
}

func newLeaseMgr(ctx context.Context, g *Gateway) *leaseMgr {
	m := &leaseMgr{g: g, managed: map[string]bool{}}
	if la, ok := g.store.(leaseArbiter); ok && la.Leases() != nil {
		m.arb = la.Leases()
	} else {
		// A store without an arbiter (a bare StateStore): the
		// process arbitrates, with the store package's rules.
		m.arb = store.NewMemory(store.MemoryOptions{Now: g.now}).Leases()
	}
	for _, k := range g.cfg.ClientKeys {
		m.managed[k.ID] = slices.Contains(k.Scopes, model.LeaseScope) && len(k.AllowedConnections) > 0
	}
	m.snap.Store(&leaseSnap{})
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.load(lctx); err != nil {
		g.log.Warn("loading active leases failed; the lease copy starts empty and refreshes on use", "err", err)
	}
	if lu, ok := g.store.(leaseNotifier); ok {
		go m.follow(lu.LeaseUpdates(), g.stopPump)
	}
	return m
}

// leaseNotifier is a store that says when a lease changed on any replica
// (Postgres: NOTIFY from every committed lease operation).
type leaseNotifier interface {
	LeaseUpdates() <-chan struct{}
}

// follow reloads the copy whenever the store says a lease changed, so a
// lease taken on another replica is routed around by this one within a
// notification's latency instead of up to leaseRefreshEvery. The periodic
// refresh in current stays as the backstop.
func (m *leaseMgr) follow(updates <-chan struct{}, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-updates:
		}
		for try := 0; try < 3; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			v := m.version.Load()
			err := m.load(ctx)
			cancel()
			if err != nil {
				m.g.log.Debug("reloading the lease copy failed", "err", err)
				break
			}
			if m.version.Load() == v { // not superseded by a local write
				break
			}
		}
	}
}

// hashOwner is the stored form of an owner token (the store hashes the
// same way).
func hashOwner(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(h[:])
}

func rowOf(l store.Lease) model.LeaseRow {
	return model.LeaseRow{OwnerHash: l.OwnerHash, APIKeyID: l.APIKeyID, Conn: model.ConnRef{Provider: l.Provider, Connection: l.Connection},
		Generation: l.Generation, ExpiresAt: model.TimeOf(l.ExpiresAt)}
}

func buildSnap(now model.Time, rows map[string]model.LeaseRow) *leaseSnap {
	s := &leaseSnap{byOwner: make(map[string]model.LeaseRow, len(rows)), byConn: make(map[model.ConnRef]model.Time, len(rows))}
	for h, r := range rows {
		if r.ExpiresAt <= now {
			continue
		}
		s.byOwner[h] = r
		s.byConn[r.Conn] = r.ExpiresAt
		s.held = append(s.held, r.Conn)
		if s.minExp == 0 || r.ExpiresAt < s.minExp {
			s.minExp = r.ExpiresAt
		}
	}
	// Sorted for a stable order; until is built after the sort, aligned
	// with held (Flow.HeldUntil): sorting held alone gave each connection
	// another lease's end (a wrong Retry-After and log).
	slices.SortFunc(s.held, func(a, b model.ConnRef) int {
		if c := strings.Compare(a.Provider, b.Provider); c != 0 {
			return c
		}
		return strings.Compare(a.Connection, b.Connection)
	})
	for _, c := range s.held {
		s.until = append(s.until, s.byConn[c])
	}
	return s
}

// load replaces the copy with the arbiter's active leases, unless a local
// write happened meanwhile (that copy is newer; the next refresh retries).
func (m *leaseMgr) load(ctx context.Context) error {
	v := m.version.Load()
	ls, err := m.arb.Active(ctx)
	if err != nil {
		return err
	}
	rows := make(map[string]model.LeaseRow, len(ls))
	for _, l := range ls {
		rows[l.OwnerHash] = rowOf(l)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastLoad.Store(m.g.now().UnixMilli())
	if m.version.Load() != v {
		return nil
	}
	m.snap.Store(buildSnap(m.g.modelNow(), rows))
	return nil
}

// current returns the copy at now: expired leases dropped, and a refresh
// from the arbiter started in the background when the copy is old.
func (m *leaseMgr) current(now model.Time) *leaseSnap {
	s := m.snap.Load()
	if s.minExp != 0 && s.minExp <= now {
		m.mu.Lock()
		if s = m.snap.Load(); s.minExp != 0 && s.minExp <= now {
			s = buildSnap(now, s.byOwner)
			m.snap.Store(s)
		}
		m.mu.Unlock()
	}
	if int64(now)-m.lastLoad.Load() >= leaseRefreshEvery.Milliseconds() && m.refreshing.CompareAndSwap(false, true) {
		go func() {
			defer m.refreshing.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := m.load(ctx); err != nil {
				m.lastLoad.Store(m.g.now().UnixMilli()) // back off for one period
				m.g.log.Debug("refreshing the lease copy failed", "err", err)
			}
		}()
	}
	return s
}

// put records one lease this replica wrote (acquired, renewed, moved).
func (m *leaseMgr) put(l store.Lease) {
	m.edit(func(rows map[string]model.LeaseRow) { rows[l.OwnerHash] = rowOf(l) })
}

// drop forgets an owner's lease (released, or the arbiter has none).
func (m *leaseMgr) drop(ownerHash string) {
	m.edit(func(rows map[string]model.LeaseRow) { delete(rows, ownerHash) })
}

func (m *leaseMgr) edit(f func(map[string]model.LeaseRow)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.version.Add(1)
	old := m.snap.Load()
	rows := make(map[string]model.LeaseRow, len(old.byOwner)+1)
	for h, r := range old.byOwner {
		rows[h] = r
	}
	f(rows)
	m.snap.Store(buildSnap(m.g.modelNow(), rows))
}

// heldFor is the Held list of a request that presents no lease: every
// leased connection. The slice is shared: read only.
func (m *leaseMgr) heldFor(now model.Time) []model.ConnRef {
	return m.current(now).held
}

// heldUntilFor is heldFor with when each lease ends (aligned slices).
func (m *leaseMgr) heldUntilFor(now model.Time) ([]model.ConnRef, []model.Time) {
	s := m.current(now)
	return s.held, s.until
}

// fence checks a claim against the copy: the hot path before every
// managed upstream attempt (no I/O, no allocation).
func (m *leaseMgr) fence(now model.Time, c *model.LeaseClaim) model.Fence {
	s := m.current(now)
	row, ok := s.byOwner[c.OwnerHash]
	if !ok {
		return model.CheckFence(now, nil, c)
	}
	return model.CheckFence(now, &row, c)
}

// verify checks a claim against the copy and, when that fails, against
// the arbiter (a lease made, renewed or moved on another replica), and
// returns the owner's lease when the fence holds. An arbiter that cannot
// answer is an error wrapping store.ErrStoreUnavailable: fail closed.
func (m *leaseMgr) verify(ctx context.Context, owner string, c *model.LeaseClaim) (model.LeaseRow, model.Fence, error) {
	now := m.g.modelNow()
	s := m.current(now)
	if row, ok := s.byOwner[c.OwnerHash]; ok {
		if f := model.CheckFence(now, &row, c); f == model.FenceValid {
			return row, f, nil
		}
	}
	l, ok, err := m.arb.Status(ctx, owner)
	if err != nil {
		return model.LeaseRow{}, 0, err
	}
	if !ok {
		m.drop(c.OwnerHash)
		return model.LeaseRow{}, model.CheckFence(now, nil, c), nil
	}
	m.put(l)
	row := rowOf(l)
	return row, model.CheckFence(now, &row, c), nil
}
