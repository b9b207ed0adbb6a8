package store

import (
	"context"
	"database/sql"
	"github.com/breakwater-gw/breakwater/model/settings"
	"time"

	"github.com/lib/pq"
)

// The change feed between replicas: every flush appends one state_changes
// row per entity it wrote and NOTIFYs breakwater_state; each replica wakes on
// the notification (or its poll interval), reads the rows after the last seq
// it saw, skips its own, and queues the values for ApplyRemote. A replica
// that fell behind the feed's retention reloads every table instead.

const feedBatch = 5000

func (s *Postgres) feedLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.PollInterval)
	defer t.Stop()
	var notify <-chan *pq.Notification
	if s.listener != nil {
		notify = s.listener.Notify
	}
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case n, ok := <-notify:
			if !ok {
				notify = nil
				break
			}
			if n != nil && n.Channel == leaseChannel {
				s.signalLeases()
				continue
			}
			if n == nil { // reconnected: lease NOTIFYs may have been missed
				s.signalLeases()
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for {
			n, err := s.pollFeed(ctx)
			if err != nil {
				if isUnavailable(err) {
					s.noteDown(err)
				} else {
					s.log.Warn("store: reading the change feed failed", "err", redactErr(err, s.url))
				}
				break
			}
			if n < feedBatch {
				break
			}
		}
		cancel()
	}
}

// pollFeed reads one batch of the feed and queues other replicas' values.
// It returns how many rows it read.
func (s *Postgres) pollFeed(ctx context.Context) (int, error) {
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if reload, err := s.feedBehind(ctx, tx); reload || err != nil {
		return 0, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, version, origin, kind, provider, connection_id, name, exact, payload
		FROM state_changes WHERE seq > $1 ORDER BY seq LIMIT $2`, s.feedSeq, feedBatch)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n, queued := 0, 0
	var layer settings.Layer
	s.m.mu.Lock()
	for rows.Next() {
		var r polledRow
		if err := rows.Scan(&r.seq, &r.version, &r.origin, &r.kind, &r.k.provider, &r.k.conn, &r.k.name, &r.k.exact, &r.payload); err != nil {
			s.m.mu.Unlock()
			return n, err
		}
		n++
		s.feedSeq = r.seq
		if r.origin != s.opts.Origin && s.applyFeedRow(&r, &layer) {
			queued++
		}
	}
	s.m.mu.Unlock()
	if err := rows.Err(); err != nil {
		return n, err
	}
	if layer != nil {
		s.setMu.Lock()
		s.remoteS = layer
		s.setMu.Unlock()
		queued++
	}
	s.noteUp()
	if queued > 0 {
		s.signal()
	}
	return n, nil
}

// feedBehind reports whether the replica had to reload every table (and
// did, in tx) because the rows after the feed position it has read are
// gone. last is the feed sequence's high-water mark: it never goes below a
// seq this replica has read unless the feed was recreated under it
// (`migrate down` + `up`, a restore from a backup). Then the rows after
// feedSeq would never come (or be other rows): reload everything.
func (s *Postgres) feedBehind(ctx context.Context, tx *sql.Tx) (bool, error) {
	var pruned, last int64
	if err := tx.QueryRowContext(ctx, `SELECT pruned_through, (SELECT last_value FROM state_changes_seq_seq)
		FROM state_feed_meta`).Scan(&pruned, &last); err != nil {
		return true, err
	}
	if last < s.feedSeq {
		s.log.Warn("store: the change feed was recreated under this replica (its sequence went back); reloading every table")
		s.m.mu.Lock()
		s.m.forgetVersions()
		s.m.mu.Unlock()
		return true, s.resync(ctx, tx)
	}
	if pruned > s.feedSeq {
		return true, s.resync(ctx, tx)
	}
	return false, nil
}

// polledRow is one row of the change feed as pollFeed reads it.
type polledRow struct {
	seq, version int64
	origin, kind string
	k            key
	payload      []byte
}

// applyFeedRow queues another replica's change (the caller holds s.m.mu);
// a settings change is kept in layer, the last one winning. It reports
// whether an entity change was queued; rows it cannot read are logged and
// skipped.
func (s *Postgres) applyFeedRow(r *polledRow, layer *settings.Layer) bool {
	kd, ok := parseKind(r.kind)
	if !ok {
		s.log.Warn("store: change feed row of unknown kind skipped", "seq", r.seq, "kind", r.kind)
		return false
	}
	k := r.k
	k.kind = kd
	if kd == kindSettings {
		l, err := settings.ParseLayerJSON(r.payload)
		if err != nil {
			s.log.Warn("store: unreadable settings in the change feed skipped", "seq", r.seq, "err", err)
			return false
		}
		*layer = l
		return false
	}
	var v value
	if r.payload != nil {
		var err error
		if v, err = tableOf(kd).decode(k, r.payload); err != nil {
			s.log.Warn("store: unreadable change feed row skipped", "seq", r.seq, "kind", r.kind, "key", keyString(k), "err", err)
			return false
		}
	}
	s.m.enqueueRemote(k, v, r.version)
	return true
}

// resync queues every stored row (and the removal of every lockout or pin
// no longer stored) after this replica fell behind the feed's retention.
func (s *Postgres) resync(ctx context.Context, tx *sql.Tx) error {
	var seq int64
	if err := tx.QueryRowContext(ctx, `SELECT GREATEST(COALESCE((SELECT max(seq) FROM state_changes), 0),
		(SELECT pruned_through FROM state_feed_meta))`).Scan(&seq); err != nil {
		return err
	}
	stored := map[key]bool{}
	type row struct {
		k   key
		ver int64
		v   value
	}
	var all []row
	for _, t := range tables {
		rows, err := tx.QueryContext(ctx, t.selectSQL(false))
		if err != nil {
			return err
		}
		for rows.Next() {
			k, ver, v, err := t.scan(rows)
			if err != nil {
				continue
			}
			stored[k] = true
			all = append(all, row{k, ver, v})
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return err
		}
	}
	var layer settings.Layer
	var raw []byte
	if err := tx.QueryRowContext(ctx, `SELECT value FROM key_value WHERE namespace = $1 AND key = $2`, settingsNamespace, settingsKey).Scan(&raw); err == nil {
		layer, _ = settings.ParseLayerJSON(raw)
	}
	s.m.mu.Lock()
	for _, r := range all {
		s.m.enqueueRemote(r.k, r.v, r.ver)
	}
	for k, e := range s.m.ents {
		if (k.kind == kindLockout || k.kind == kindPin) && e.val.present && !stored[k] {
			s.m.enqueueRemote(k, value{}, seq)
		}
	}
	s.m.mu.Unlock()
	s.feedSeq = seq
	if layer != nil {
		s.setMu.Lock()
		s.remoteS = layer
		s.setMu.Unlock()
	}
	s.log.Info("store: fell behind the change feed; reloaded every table", "rows", len(all))
	s.signal()
	return nil
}
