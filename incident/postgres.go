package incident

import (
	"context"
	"database/sql"
	"time"

	_ "github.com/lib/pq" // the postgres driver (store registers it too; explicit here)

	"github.com/breakwater-gw/breakwater/store"
)

// ReadPostgres reads the request log of [from, to) from the database a
// Postgres store writes (table proxy_logs), oldest first. An export is a
// read: it opens one plain connection, no store (no background writers, no
// LISTEN, no migrations).
func ReadPostgres(ctx context.Context, dbURL string, from, to time.Time) ([]store.LogRecord, error) {
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var recs []store.LogRecord
	err = store.ScanAttemptLog(ctx, db, from, to, MaxRecords, func(r store.LogRecord) error {
		recs = append(recs, r)
		return nil
	})
	return recs, err
}
