package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/internal/pgtest"
)

// leaseStores runs a test against both arbiters: the memory store (the
// process decides) and Postgres (the database decides).
func leaseStores(t *testing.T, f func(t *testing.T, l Leases, expire func())) {
	t.Run("memory", func(t *testing.T) {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var mu sync.Mutex
		m := NewMemory(MemoryOptions{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
		f(t, m.Leases(), func() { mu.Lock(); now = now.Add(MaxLeaseTTL + time.Second); mu.Unlock() })
	})
	t.Run("postgres", func(t *testing.T) {
		s := openPG(t, pgtest.NewDB(t), func(o *PostgresOptions) { o.NoSubscribe = true })
		f(t, s.Leases(), func() {
			if _, err := s.DB().Exec(`UPDATE exclusive_connection_leases SET expires_at = now() - interval '1 second', renewed_at = now() - interval '2 seconds' WHERE state = 'ACTIVE'`); err != nil {
				t.Fatal(err)
			}
		})
	})
}

const ownerA, ownerB = "vlo_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "vlo_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

func TestLeaseLifecycle(t *testing.T) {
	// docs/leases.md / docs/leases.md: acquire, reuse, one connection per owner and
	// one owner per connection, renew, release (idempotent), stale fences,
	// generation increments, expiry in the operation's transaction.
	leaseStores(t, func(t *testing.T, l Leases, expire func()) {
		ctx := ctxT(t)
		a, res, err := l.Acquire(ctx, AcquireRequest{Owner: ownerA, APIKeyID: "team-a", Provider: "glm", Connection: "k1", Model: "glm-5"})
		if err != nil || res != LeaseAcquired || a.Generation != 1 || a.State != LeaseActive || a.TTL() != DefaultLeaseTTL {
			t.Fatalf("acquire: %+v %v %v", a, res, err)
		}
		if a.OwnerHash != HashOwner(ownerA) || a.OwnerHash == ownerA {
			t.Fatal("owner token not hashed")
		}
		again, res, err := l.Acquire(ctx, AcquireRequest{Owner: ownerA, APIKeyID: "team-a", Provider: "glm", Connection: "k1", TTL: 5 * time.Second})
		if err != nil || res != LeaseReused || again.ID != a.ID || again.TTL() != 5*time.Second {
			t.Fatalf("reacquire: %+v %v %v", again, res, err)
		}
		var lc *LeaseConflict
		if _, _, err := l.Acquire(ctx, AcquireRequest{Owner: ownerA, APIKeyID: "team-a", Provider: "glm", Connection: "k2"}); !errors.As(err, &lc) || lc.Kind != OwnerAlreadyActive || lc.Lease.ID != a.ID {
			t.Fatalf("owner on a second connection: %v", err)
		}
		if _, _, err := l.Acquire(ctx, AcquireRequest{Owner: ownerB, APIKeyID: "team-b", Provider: "glm", Connection: "k1"}); !errors.As(err, &lc) || lc.Kind != ConnectionBusy || lc.ExpiresAt.IsZero() {
			t.Fatalf("second owner on a held connection: %v", err)
		}
		if _, err := l.Renew(ctx, ownerA, "team-a", 2, time.Minute); !errors.Is(err, ErrLeaseStale) {
			t.Fatalf("renew with a wrong generation: %v", err)
		}
		if _, err := l.Renew(ctx, ownerA, "team-b", 1, time.Minute); !errors.Is(err, ErrLeaseStale) {
			t.Fatalf("renew with a wrong key: %v", err)
		}
		if r, err := l.Renew(ctx, ownerA, "team-a", 1, time.Hour); err != nil || r.TTL() != MaxLeaseTTL {
			t.Fatalf("renew (clamped to 30 min): %+v %v", r, err)
		}
		if st, ok, err := l.Status(ctx, ownerA); err != nil || !ok || st.Connection != "k1" {
			t.Fatalf("status: %+v %v %v", st, ok, err)
		}
		moved, res, err := l.Transition(ctx, ownerA, "team-a", 1, "glm", "k2", EndHealthOrCooldown)
		if err != nil || res != LeaseTransitioned || moved.Generation != 1 || moved.Connection != "k2" {
			t.Fatalf("transition: %+v %v %v", moved, res, err)
		}
		if act, err := l.Active(ctx); err != nil || len(act) != 1 || act[0].Connection != "k2" {
			t.Fatalf("active after transition: %+v %v", act, err)
		}
		rel, err := l.Release(ctx, ownerA, "team-a", 1, EndOwnerExit)
		if err != nil || rel.State != LeaseReleased {
			t.Fatalf("release: %+v %v", rel, err)
		}
		if _, err := l.Release(ctx, ownerA, "team-a", 1, EndOwnerExit); err != nil {
			t.Fatalf("second release is idempotent: %v", err)
		}
		b, _, err := l.Acquire(ctx, AcquireRequest{Owner: ownerA, APIKeyID: "team-a", Provider: "glm", Connection: "k1"})
		if err != nil || b.Generation != 2 {
			t.Fatalf("next lease of the owner: %+v %v, want generation 2", b, err)
		}
		// Expiry runs inside the next operation: the connection is free.
		expire()
		if _, ok, _ := l.Status(ctx, ownerA); ok {
			t.Fatal("expired lease still active")
		}
		c, res, err := l.Acquire(ctx, AcquireRequest{Owner: ownerB, APIKeyID: "team-b", Provider: "glm", Connection: "k1"})
		if err != nil || res != LeaseAcquired || c.Generation != 1 {
			t.Fatalf("acquire after expiry: %+v %v %v", c, res, err)
		}
		if _, err := l.Renew(ctx, ownerA, "team-a", 2, 0); !errors.Is(err, ErrLeaseStale) {
			t.Fatalf("renew an expired lease: %v", err)
		}
	})
}

func TestLeaseRaceExactlyOneWins(t *testing.T) {
	// docs/store.md#replicas: two replicas racing for one connection — exactly
	// one acquires, the other gets ConnectionBusy; and one owner racing for
	// two connections gets at most one. Many rounds.
	url := pgtest.NewDB(t)
	s1 := openPG(t, url, func(o *PostgresOptions) { o.NoSubscribe = true })
	s2 := openPG(t, url, func(o *PostgresOptions) { o.NoSubscribe = true })
	arbiters := []Leases{s1.Leases(), s2.Leases()}
	ctx := ctxT(t)
	for round := 0; round < 40; round++ {
		conn := fmt.Sprintf("k%d", round)
		var wins, busy atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("vlo_round%02d_racer%d_%s", round, i, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
				_, _, err := arbiters[i%2].Acquire(ctx, AcquireRequest{Owner: owner, APIKeyID: "k", Provider: "glm", Connection: conn})
				var lc *LeaseConflict
				switch {
				case err == nil:
					wins.Add(1)
				case errors.As(err, &lc) && lc.Kind == ConnectionBusy:
					busy.Add(1)
				default:
					t.Errorf("round %d: %v", round, err)
				}
			}()
		}
		// The same owner on two connections at once, through both replicas.
		var ownerWins atomic.Int32
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, err := arbiters[i].Acquire(ctx, AcquireRequest{Owner: fmt.Sprintf("vlo_solo%02d", round), APIKeyID: "k", Provider: "other", Connection: fmt.Sprintf("c%d_%d", round, i)})
				var lc *LeaseConflict
				if err == nil {
					ownerWins.Add(1)
				} else if !errors.As(err, &lc) || lc.Kind != OwnerAlreadyActive {
					t.Errorf("round %d owner race: %v", round, err)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 || busy.Load() != 3 || ownerWins.Load() != 1 {
			t.Fatalf("round %d: %d won, %d busy, owner won %d times; want 1, 3, 1", round, wins.Load(), busy.Load(), ownerWins.Load())
		}
	}
}

func TestLeaseUniqueIndexesHoldWhateverTheCode(t *testing.T) {
	// The database, not the code, guarantees one ACTIVE lease per connection
	// and per owner: a direct insert that breaks it is refused.
	s := openPG(t, pgtest.NewDB(t), func(o *PostgresOptions) { o.NoSubscribe = true })
	if _, _, err := s.Leases().Acquire(ctxT(t), AcquireRequest{Owner: ownerA, APIKeyID: "k", Provider: "glm", Connection: "k1"}); err != nil {
		t.Fatal(err)
	}
	ins := `INSERT INTO exclusive_connection_leases (lease_owner_hash, api_key_id, provider, connection_id, generation, state, acquired_at, renewed_at, expires_at)
		VALUES ($1, 'k', 'glm', $2, 9, 'ACTIVE', now(), now(), now() + interval '1 hour')`
	if _, err := s.DB().Exec(ins, HashOwner(ownerB), "k1"); !isUniqueViolation(err) {
		t.Fatalf("second ACTIVE lease on a connection: %v", err)
	}
	if _, err := s.DB().Exec(ins, HashOwner(ownerA), "k2"); !isUniqueViolation(err) {
		t.Fatalf("second ACTIVE lease of an owner: %v", err)
	}
	if _, err := s.DB().Exec(ins, ownerA, "k3"); err == nil {
		t.Fatal("a raw owner token was accepted as a hash")
	}
}

func TestLeasesFailClosedWhileDatabaseDown(t *testing.T) {
	// docs/leases.md#the-database-arbitrates: with Postgres, lease operations fail closed while the
	// database is down (typed ErrStoreUnavailable), and work again after.
	url := pgtest.NewDB(t)
	px := pgtest.NewProxy(t, url)
	s := openPG(t, px.URL(url), func(o *PostgresOptions) { o.NoSubscribe = true })
	l := s.Leases()
	px.SetDown(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := l.Acquire(ctx, AcquireRequest{Owner: ownerA, APIKeyID: "k", Provider: "glm", Connection: "k1"}); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("acquire while down: %v", err)
	}
	if _, _, err := l.Status(ctx, ownerA); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("status while down: %v", err)
	}
	px.SetDown(false)
	eventually(t, "acquire after the outage", func() bool {
		_, _, err := l.Acquire(ctx, AcquireRequest{Owner: ownerA, APIKeyID: "k", Provider: "glm", Connection: "k1"})
		return err == nil
	})
}
