package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"

	"github.com/breakwater-gw/breakwater/model"
)

// PostgresOptions tune a Postgres store; the zero value is the production
// default.
type PostgresOptions struct {
	// FlushInterval is how often dirty entities are written (default
	// 200 ms): at most one write per entity per interval.
	FlushInterval time.Duration
	// PollInterval is how often the change feed is read when no NOTIFY
	// came (default 500 ms). NOTIFY usually wakes readers at once.
	PollInterval time.Duration
	// Origin names this replica in the change feed (default host-pid-random).
	Origin string
	// Migrate applies the embedded migrations at Open (serve does).
	Migrate bool
	// NoSubscribe disables reading other replicas' changes.
	NoSubscribe bool
	// FeedRetention is how long change-feed rows are kept (default 10 min).
	// A replica that falls further behind reloads everything.
	FeedRetention time.Duration
	// LogBuffer bounds the request-log records waiting to be written
	// (default 20 000); past it the oldest are dropped and counted.
	LogBuffer int
	// MaxConns bounds the connection pool (default 8; the LISTEN connection
	// is one more).
	MaxConns int
	// Logger receives warnings (default slog.Default()). Messages never
	// carry the database URL.
	Logger *slog.Logger
}

func (o *PostgresOptions) defaults() {
	if o.FlushInterval <= 0 {
		o.FlushInterval = 200 * time.Millisecond
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 500 * time.Millisecond
	}
	if o.Origin == "" {
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		o.Origin = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if o.FeedRetention <= 0 {
		o.FeedRetention = 10 * time.Minute
	}
	if o.LogBuffer <= 0 {
		o.LogBuffer = 20_000
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 8
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Postgres is the Postgres-backed store (see the package doc).
type Postgres struct {
	db   *sql.DB
	url  string // never logged
	opts PostgresOptions
	log  *slog.Logger
	m    *mirror

	flushMu sync.Mutex // one flush at a time (background or Flush)
	leases  *pgLeases
	reqlog  *pgLog

	updates chan struct{}
	// leaseUpdates: a lease changed somewhere (NOTIFY breakwater_leases).
	leaseUpdates chan struct{}
	feedMu       sync.Mutex
	feedSeq      int64          // last change-feed seq read
	setMu        sync.Mutex     // guards remoteSettings
	remoteS      settings.Layer // saved settings from another replica, not yet taken

	up            atomic.Bool
	written       atomic.Int64
	flushes       atomic.Int64
	remoteApplied atomic.Int64
	lastErr       atomic.Value // string

	stop     chan struct{}
	wg       sync.WaitGroup
	closed   atomic.Bool
	kick     chan struct{}
	listener *pq.Listener

	// beforeWrite runs in Flush between taking the dirty entities and
	// writing them (nil outside tests): a test puts another replica's value
	// into that window.
	beforeWrite func()
}

var _ Store = (*Postgres)(nil)

// OpenPostgres connects to the database at url, applies the migrations if
// o.Migrate, and starts the background writer and feed reader. It fails
// (wrapping ErrStoreUnavailable) when the database cannot be reached: the
// shell decides whether to retry or to start on an empty state.
func OpenPostgres(ctx context.Context, url string, o PostgresOptions) (*Postgres, error) {
	o.defaults()
	db, err := sql.Open("postgres", url)
	if err != nil {
		return nil, fmt.Errorf("store: %w", redactErr(err, url))
	}
	db.SetMaxOpenConns(o.MaxConns)
	db.SetMaxIdleConns(max(1, o.MaxConns/2))
	db.SetConnMaxIdleTime(time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: %w: %v", ErrStoreUnavailable, redactErr(err, url))
	}
	if o.Migrate {
		if err := MigrateUp(ctx, db); err != nil {
			db.Close()
			return nil, err
		}
	}
	s := &Postgres{db: db, url: url, opts: o, log: o.Logger.With("component", "store"), m: newMirror(true),
		updates: make(chan struct{}, 1), leaseUpdates: make(chan struct{}, 1), stop: make(chan struct{}), kick: make(chan struct{}, 1)}
	s.up.Store(true)
	s.leases = &pgLeases{db: db}
	s.reqlog = newPGLog(s, o.LogBuffer)
	s.wg.Add(2)
	go s.flushLoop()
	go s.reqlog.loop()
	if !o.NoSubscribe {
		s.listener = pq.NewListener(url, 100*time.Millisecond, maxRetryWait, func(ev pq.ListenerEventType, err error) {
			switch {
			case err != nil && ev == pq.ListenerEventConnectionAttemptFailed:
				s.noteDown(err)
			case ev == pq.ListenerEventReconnected:
				// The database is back: write what waited, and read what
				// the other replicas wrote meanwhile.
				select {
				case s.kick <- struct{}{}:
				default:
				}
			}
		})
		if err := s.listener.Listen(feedChannel); err != nil {
			s.log.Warn("store: LISTEN failed, relying on polling", "err", redactErr(err, url))
		}
		if err := s.listener.Listen(leaseChannel); err != nil {
			s.log.Warn("store: LISTEN for lease changes failed", "err", redactErr(err, url))
		}
		s.wg.Add(1)
		go s.feedLoop()
	}
	return s, nil
}

// DB returns the connection pool (tests and the migrate command).
func (s *Postgres) DB() *sql.DB { return s.db }

// Origin is this replica's name in the change feed.
func (s *Postgres) Origin() string { return s.opts.Origin }

func (s *Postgres) Apply(changes []model.Change) {
	if len(changes) == 0 {
		return
	}
	s.m.mu.Lock()
	s.m.apply(changes)
	s.m.mu.Unlock()
}

func (s *Postgres) Leases() Leases { return s.leases }

func (s *Postgres) Updates() <-chan struct{} { return s.updates }

// LeaseUpdates signals that a replica (this one included) committed a lease
// operation, or that the LISTEN connection came back: a copy of the active
// leases should be reloaded (Leases().Active). Coalescing: one pending
// signal at most.
func (s *Postgres) LeaseUpdates() <-chan struct{} { return s.leaseUpdates }

func (s *Postgres) signalLeases() {
	select {
	case s.leaseUpdates <- struct{}{}:
	default:
	}
}

func (s *Postgres) signal() {
	select {
	case s.updates <- struct{}{}:
	default:
	}
}

func (s *Postgres) ApplyRemote(e *model.Engine, now model.Time) (RemoteResult, error) {
	var res RemoteResult
	s.setMu.Lock()
	res.Settings, s.remoteS = s.remoteS, nil
	s.setMu.Unlock()
	n, err := s.m.applyRemote(e, now)
	res.Applied = n
	s.remoteApplied.Add(int64(n))
	return res, err
}

func (s *Postgres) Health() Health {
	h := Health{Kind: "postgres", Up: s.up.Load(), Pending: s.m.pending(), Written: s.written.Load(),
		Flushes: s.flushes.Load(), RemoteApplied: s.remoteApplied.Load(), LogDropped: s.reqlog.dropped.Load()}
	if v, ok := s.lastErr.Load().(string); ok {
		h.LastError = v
	}
	return h
}

func (s *Postgres) noteDown(err error) {
	msg := redactErr(err, s.url).Error()
	s.lastErr.Store(msg)
	if s.up.Swap(false) {
		s.log.Warn("store: database unreachable; keeping changes in memory and retrying", "err", msg)
	}
}

func (s *Postgres) noteUp() {
	if !s.up.Swap(true) {
		s.log.Info("store: database reachable again; writing pending changes")
	}
}

// maxRetryWait caps the flusher's backoff while the database is down; a
// reconnect of the LISTEN connection wakes it at once anyway.
const maxRetryWait = 2 * time.Second

// flushLoop writes dirty entities every FlushInterval, backing off
// exponentially (up to maxRetryWait) while the database is unreachable, and
// prunes the change feed now and then.
func (s *Postgres) flushLoop() {
	defer s.wg.Done()
	wait := s.opts.FlushInterval
	lastPrune := time.Now()
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.Flush(ctx)
		if err == nil && time.Since(lastPrune) > time.Minute {
			lastPrune = time.Now()
			if err := s.pruneFeed(ctx); err != nil {
				s.log.Warn("store: pruning the change feed failed", "err", redactErr(err, s.url))
			}
		}
		cancel()
		if err != nil {
			wait = min(max(2*wait, s.opts.FlushInterval), maxRetryWait)
		} else {
			wait = s.opts.FlushInterval
		}
		t.Reset(wait)
	}
}

// Flush writes every entity accepted so far in one transaction.
func (s *Postgres) Flush(ctx context.Context) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.m.mu.Lock()
	batch := s.m.takeDirty()
	s.m.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	if s.beforeWrite != nil {
		s.beforeWrite()
	}
	res, err := s.writeBatch(ctx, batch)
	if err != nil {
		s.m.mu.Lock()
		s.m.requeue(batch)
		s.m.mu.Unlock()
		if isUnavailable(err) {
			s.noteDown(err)
			return fmt.Errorf("store: flush: %w: %v", ErrStoreUnavailable, redactErr(err, s.url))
		}
		s.lastErr.Store(redactErr(err, s.url).Error())
		s.log.Error("store: flush failed", "err", redactErr(err, s.url))
		return fmt.Errorf("store: flush: %w", redactErr(err, s.url))
	}
	s.noteUp()
	s.written.Add(int64(res.written))
	s.flushes.Add(1)
	s.m.mu.Lock()
	s.m.flight = 0
	for i := range batch {
		e, ok := s.m.ents[batch[i].key]
		if ok {
			e.flushing = false
		}
		if !ok || e.base > res.version {
			continue // a newer value from another replica is already here
		}
		e.base = res.version
		if f, ok := res.finals[batch[i].key]; ok {
			e.anc = f.clone()
		} else {
			e.anc = value{} // a removal of what was never stored
		}
	}
	for _, a := range res.merged {
		if e, ok := s.m.ents[a.key]; ok && e.base == res.version {
			if r, ok := s.m.remote[a.key]; !ok || r.version <= res.version {
				s.m.remote[a.key] = remoteValue{val: a.final, version: res.version, merge: true, anc: a.local}
			}
		}
	}
	s.m.mu.Unlock()
	for _, p := range res.problems {
		s.log.Warn("store: overwrote an unreadable row", "table", p.Table, "key", p.Key, "err", p.Err)
	}
	if len(res.merged) > 0 {
		s.signal()
	}
	return nil
}

// Close stops the background work and writes everything pending, retrying
// until ctx ends.
func (s *Postgres) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.wg.Wait()
	if s.listener != nil {
		s.listener.Close()
	}
	var err error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if err = s.Flush(ctx); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			// A stop during an outage: say what is lost (the caller may
			// report only its own flush error), never the URL.
			n := s.m.pending()
			s.reqlog.mu.Lock()
			logN := len(s.reqlog.buf)
			s.reqlog.mu.Unlock()
			s.log.Error("store: stopping with state not written; the database did not answer before the deadline",
				"changes", n, "requestLogRecords", logN, "err", err)
			s.db.Close()
			return fmt.Errorf("store: close: %d change(s) and %d request-log record(s) not written: %w", n, logN, err)
		case <-time.After(wait):
		}
	}
	logErr := s.reqlog.drain(ctx)
	s.db.Close()
	if logErr != nil {
		return fmt.Errorf("store: close: request log: %w", logErr)
	}
	return nil
}

// isUnavailable tells a database that cannot be reached from an error the
// database returned: pq errors of the connection, operator-intervention
// and resource classes, and every error that is not a pq error at all
// (network, EOF, bad connection, deadline).
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pe *pq.Error
	if errors.As(err, &pe) {
		switch pe.Code.Class() {
		case "08", "57", "53", "58":
			return true
		}
		return false
	}
	return true
}

// redactErr removes the connection URL (and so any password) from an error.
func redactErr(err error, url string) error {
	if err == nil || url == "" {
		return err
	}
	msg := err.Error()
	if !containsFold(msg, url) {
		return err
	}
	return errors.New(replaceAllFold(msg, url, "[database URL]"))
}
