package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

const (
	feedChannel = "breakwater_state"
	// flushLockKey serialises every state write of every replica
	// (pg_advisory_xact_lock), so change-feed seq order is commit order.
	flushLockKey = 0x6277_7374_6174_65 // "bwstate"
)

type batchResult struct {
	version  int64
	written  int
	finals   map[key]value // what was stored per entity
	merged   []mergedEntry
	problems []RowProblem
}

// mergedEntry is an entity whose write met a concurrent value: final was
// stored, local is what this replica had when the flush started.
type mergedEntry struct {
	key          key
	final, local value
}

type feedRow struct {
	Kind       string `json:"kind"`
	Provider   string `json:"provider"`
	Connection string `json:"connection_id"`
	Name       string `json:"name"`
	Exact      bool   `json:"exact"`
	Payload    any    `json:"payload"`
}

func feedKey(k key) feedRow {
	r := feedRow{Kind: k.kind.String(), Provider: k.provider, Connection: k.conn, Name: k.name, Exact: k.exact}
	return r
}

// writeBatch writes a batch of dirty entities in one transaction: per
// table it reads the rows' versions, writes straight through the values
// that descend from what is stored, merges the concurrent ones (merge.go),
// then appends the change feed and notifies.
func (s *Postgres) writeBatch(ctx context.Context, batch []entry) (batchResult, error) {
	res := batchResult{finals: make(map[key]value, len(batch))}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return res, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(flushLockKey)); err != nil {
		return res, err
	}
	if err := tx.QueryRowContext(ctx, `SELECT nextval('state_version_seq')`).Scan(&res.version); err != nil {
		return res, err
	}
	byKind := map[kind][]entry{}
	for _, e := range batch {
		byKind[e.key.kind] = append(byKind[e.key.kind], e)
	}
	var feed []feedRow
	for _, t := range tables {
		if es := byKind[t.kind]; len(es) > 0 {
			rows, err := s.writeTable(ctx, tx, t, es, &res)
			if err != nil {
				return res, err
			}
			feed = append(feed, rows...)
		}
	}
	if len(feed) > 0 {
		if err := s.appendFeed(ctx, tx, res.version, feed); err != nil {
			return res, err
		}
	}
	return res, tx.Commit()
}

// writeTable writes the batch's entries es of table t: each merged with
// what another replica stored since its base version (three-way), upserted
// or deleted. It records the finals, merges and count in res and returns
// the change feed rows.
func (s *Postgres) writeTable(ctx context.Context, tx *sql.Tx, t *tableDef, es []entry, res *batchResult) ([]feedRow, error) {
	cur, problems, err := s.current(ctx, tx, t, es)
	if err != nil {
		return nil, err
	}
	res.problems = append(res.problems, problems...)
	var ups, dels []map[string]any
	var feed []feedRow
	for _, e := range es {
		final := e.val
		c, exists := cur[e.key]
		switch {
		case !exists && !final.present:
			continue // removing what was never stored
		case exists && c.ok && c.version != e.base:
			final = merge3(t.kind, e.anc, e.val, c.val)
			if !equalVal(t.kind, final, e.val) {
				res.merged = append(res.merged, mergedEntry{key: e.key, final: final, local: e.val})
			}
		}
		res.finals[e.key] = final
		fr := feedKey(e.key)
		if final.present {
			row, err := t.row(e.key, final)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", t.table, keyString(e.key), err)
			}
			ups = append(ups, row)
			if fr.Payload, err = t.payload(final); err != nil {
				return nil, err
			}
		} else {
			dels = append(dels, t.keyJSON(e.key))
		}
		feed = append(feed, fr)
	}
	if err := s.execRows(ctx, tx, t, ups, dels, res.version); err != nil {
		return nil, err
	}
	res.written += len(ups) + len(dels)
	return feed, nil
}

// execRows upserts ups and deletes dels (rows as JSON) in table t, one
// statement each.
func (s *Postgres) execRows(ctx context.Context, tx *sql.Tx, t *tableDef, ups, dels []map[string]any, version int64) error {
	if len(ups) > 0 {
		b, err := json.Marshal(ups)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, t.upsertSQL(), string(b), version, s.opts.Origin); err != nil {
			return fmt.Errorf("%s upsert: %w", t.table, err)
		}
	}
	if len(dels) > 0 {
		b, err := json.Marshal(dels)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, t.deleteSQL(), string(b)); err != nil {
			return fmt.Errorf("%s delete: %w", t.table, err)
		}
	}
	return nil
}

func (s *Postgres) appendFeed(ctx context.Context, tx *sql.Tx, version int64, feed []feedRow) error {
	b, err := json.Marshal(feed)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO state_changes (version, origin, kind, provider, connection_id, name, exact, payload)
		SELECT $2, $3, r.kind, r.provider, r.connection_id, r.name, r.exact, r.payload
		FROM jsonb_to_recordset($1::jsonb) AS r(kind text, provider text, connection_id text, name text, exact boolean, payload jsonb)`,
		string(b), version, s.opts.Origin); err != nil {
		return fmt.Errorf("state_changes insert: %w", err)
	}
	_, err = tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, feedChannel, fmt.Sprint(version))
	return err
}

type currentRow struct {
	version int64
	val     value
	ok      bool // decoded; a corrupt row is overwritten
}

// current reads the stored versions and values of a batch's rows.
func (s *Postgres) current(ctx context.Context, tx *sql.Tx, t *tableDef, es []entry) (map[key]currentRow, []RowProblem, error) {
	keys := make([]map[string]any, len(es))
	for i, e := range es {
		keys[i] = t.keyJSON(e.key)
	}
	b, err := json.Marshal(keys)
	if err != nil {
		return nil, nil, err
	}
	rows, err := tx.QueryContext(ctx, t.selectSQL(true), string(b))
	if err != nil {
		return nil, nil, fmt.Errorf("%s select: %w", t.table, err)
	}
	defer rows.Close()
	out := make(map[key]currentRow, len(es))
	var problems []RowProblem
	for rows.Next() {
		k, ver, v, err := t.scan(rows)
		if err != nil {
			problems = append(problems, RowProblem{Table: t.table, Key: keyString(k), Err: err})
			out[k] = currentRow{version: ver}
			continue
		}
		out[k] = currentRow{version: ver, val: v, ok: true}
	}
	return out, problems, rows.Err()
}

// Load reads every table in one consistent snapshot, replaces the store's
// view with it and returns the model state. Unreadable rows are reported in
// a *LoadError and skipped.
func (s *Postgres) Load(ctx context.Context) (model.State, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return model.State{}, s.wrapRead(err)
	}
	defer tx.Rollback()
	var seq int64
	if err := tx.QueryRowContext(ctx, `SELECT GREATEST(COALESCE((SELECT max(seq) FROM state_changes), 0),
		(SELECT pruned_through FROM state_feed_meta))`).Scan(&seq); err != nil {
		return model.State{}, s.wrapRead(err)
	}
	type loaded struct {
		k   key
		ver int64
		v   value
	}
	var all []loaded
	var problems []RowProblem
	for _, t := range tables {
		rows, err := tx.QueryContext(ctx, t.selectSQL(false))
		if err != nil {
			return model.State{}, s.wrapRead(err)
		}
		for rows.Next() {
			k, ver, v, err := t.scan(rows)
			if err != nil {
				problems = append(problems, RowProblem{Table: t.table, Key: keyString(k), Err: err})
				continue
			}
			all = append(all, loaded{k, ver, v})
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return model.State{}, s.wrapRead(err)
		}
	}
	if err := tx.Commit(); err != nil {
		return model.State{}, s.wrapRead(err)
	}
	s.m.mu.Lock()
	clear(s.m.ents)
	clear(s.m.dirty)
	s.m.dirty = s.m.dirty[:0]
	clear(s.m.remote)
	for _, l := range all {
		e := s.m.get(l.k)
		e.val, e.base, e.anc = l.v, l.ver, l.v.clone()
		if l.k.kind == kindLockout {
			s.m.get(key{kind: kindConn, provider: l.k.provider, conn: l.k.conn}).val.present = true
		}
	}
	st := s.m.state()
	s.m.mu.Unlock()
	s.feedMu.Lock()
	s.feedSeq = seq
	s.feedMu.Unlock()
	s.noteUp()
	if len(problems) > 0 {
		for _, p := range problems {
			s.log.Warn("store: skipped an unreadable row", "table", p.Table, "key", p.Key, "err", p.Err)
		}
		return st, &LoadError{Problems: problems}
	}
	return st, nil
}

func (s *Postgres) wrapRead(err error) error {
	if isUnavailable(err) {
		s.noteDown(err)
		return fmt.Errorf("store: %w: %v", ErrStoreUnavailable, redactErr(err, s.url))
	}
	return fmt.Errorf("store: %w", redactErr(err, s.url))
}

// pruneFeed forgets change-feed rows older than FeedRetention.
func (s *Postgres) pruneFeed(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `WITH d AS (DELETE FROM state_changes WHERE created_at < now() - $1 * interval '1 millisecond' RETURNING seq)
		UPDATE state_feed_meta SET pruned_through = GREATEST(pruned_through, (SELECT max(seq) FROM d))
		WHERE EXISTS (SELECT 1 FROM d)`, s.opts.FeedRetention.Milliseconds())
	return err
}

// SaveSettings writes the saved settings layer and tells the other replicas.
func (s *Postgres) SaveSettings(ctx context.Context, l settings.Layer) error {
	b, err := layerJSON(l)
	if err != nil {
		return err
	}
	err = func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(flushLockKey)); err != nil {
			return err
		}
		var version int64
		if err := tx.QueryRowContext(ctx, `SELECT nextval('state_version_seq')`).Scan(&version); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO key_value (namespace, key, value, updated_at, updated_by)
			VALUES ($1, $2, $3::jsonb, now(), $4)
			ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by`,
			settingsNamespace, settingsKey, string(b), s.opts.Origin); err != nil {
			return err
		}
		if err := s.appendFeed(ctx, tx, version, []feedRow{{Kind: kindSettings.String(), Name: settingsKey, Payload: json.RawMessage(b)}}); err != nil {
			return err
		}
		return tx.Commit()
	}()
	if err != nil {
		return s.wrapRead(err)
	}
	return nil
}

// LoadSettings returns the saved settings layer (empty when none).
func (s *Postgres) LoadSettings(ctx context.Context) (settings.Layer, error) {
	var raw []byte
	err := s.db.QueryRowContext(ctx, `SELECT value FROM key_value WHERE namespace = $1 AND key = $2`, settingsNamespace, settingsKey).Scan(&raw)
	if err == sql.ErrNoRows {
		return settings.Layer{}, nil
	}
	if err != nil {
		return nil, s.wrapRead(err)
	}
	l, err := settings.ParseLayerJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("store: key_value[%s/%s]: %w", settingsNamespace, settingsKey, err)
	}
	return l, nil
}

// PrunePins deletes stored pins that expired before the given instant (the
// model drops expired pins lazily, so rows of sessions never seen again
// would otherwise stay).
func (s *Postgres) PrunePins(ctx context.Context, before time.Time) (int64, error) {
	r, err := s.db.ExecContext(ctx, `DELETE FROM session_affinity_pins WHERE expires_at < $1`, before)
	if err != nil {
		return 0, s.wrapRead(err)
	}
	n, _ := r.RowsAffected()
	return n, nil
}
