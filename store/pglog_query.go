package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// ScanAttemptLog reads the request log table (proxy_logs) written by a
// Postgres store for [since, until), OLDEST first, and hands each record to
// fn. It is the read side of incident export: it needs only a *sql.DB (no
// store, no background writers, no migrations), reads in keyset pages so a
// long window never holds one huge result, and stops with fn's error. max
// bounds the records read (0 = no bound); reaching it returns ErrLogTooLarge.
func ScanAttemptLog(ctx context.Context, db *sql.DB, since, until time.Time, max int, fn func(LogRecord) error) error {
	const page = 5000
	var (
		lastTS time.Time
		lastID int64
		first  = true
		n      int
	)
	for {
		// (ts, id) keyset: the index on ts serves it, and rows written with
		// the same timestamp keep their insertion order.
		rows, err := db.QueryContext(ctx, `SELECT id, ts, request_id, provider, connection_id, model, status, latency_ms,
			COALESCE(first_byte_ms, 0), error_type, reason, COALESCE(egress_ip, ''), headers, error_body, route
			FROM proxy_logs
			WHERE ts >= $1 AND ts < $2 AND ($3 OR (ts, id) > ($4, $5))
			ORDER BY ts, id LIMIT $6`, since, until, first, lastTS, lastID, page)
		if err != nil {
			return fmt.Errorf("reading the request log: %w", err)
		}
		got := 0
		for rows.Next() {
			var r LogRecord
			var hb []byte
			var id int64
			if err := rows.Scan(&id, &r.Time, &r.RequestID, &r.Provider, &r.Connection, &r.Model, &r.Status, &r.LatencyMs,
				&r.FirstByteMs, &r.ErrorType, &r.Reason, &r.EgressIP, &hb, &r.ErrorBody, &r.Route); err != nil {
				rows.Close()
				return fmt.Errorf("reading the request log: %w", err)
			}
			if len(hb) > 2 {
				if err := json.Unmarshal(hb, &r.Headers); err != nil {
					rows.Close()
					return fmt.Errorf("reading the request log: row %d: headers: %w", id, err)
				}
			}
			r.Time = r.Time.UTC()
			lastTS, lastID, first = r.Time, id, false
			got++
			n++
			if max > 0 && n > max {
				rows.Close()
				return fmt.Errorf("%w: more than %d records in the window", ErrLogTooLarge, max)
			}
			if err := fn(r); err != nil {
				rows.Close()
				return err
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("reading the request log: %w", err)
		}
		if got < page {
			return nil
		}
	}
}

// ErrLogTooLarge says a request log window holds more records than the
// reader was allowed to read.
var ErrLogTooLarge = errLogTooLarge{}

type errLogTooLarge struct{}

func (errLogTooLarge) Error() string { return "request log window too large" }
