package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/internal/pgtest"
)

// schemaDump lists the public schema: tables and columns with types,
// defaults and nullability, indexes with their definitions, constraints and
// sequences — what up → down → up must reproduce exactly.
func schemaDump(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT table_name || '.' || column_name || ' ' || data_type || ' null=' || is_nullable || ' default=' || COALESCE(column_default, '')
		   FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position`,
		`SELECT tablename || ' ' || indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY tablename, indexname`,
		`SELECT table_name || ' ' || constraint_name || ' ' || constraint_type FROM information_schema.table_constraints
		   WHERE table_schema = 'public' AND constraint_type <> 'CHECK' ORDER BY table_name, constraint_name`,
		`SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
		   WHERE contype = 'c' AND connamespace = 'public'::regnamespace ORDER BY 1`,
		`SELECT sequence_name FROM information_schema.sequences WHERE sequence_schema = 'public' ORDER BY 1`,
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			b.WriteString(s + "\n")
		}
		rows.Close()
	}
	return b.String()
}

func TestMigrationsUpDownUp(t *testing.T) {
	// docs/testing.md#postgres-in-tests: every down undoes its up exactly — up →
	// down → up gives the same schema, and down leaves nothing behind.
	db, g := newEmptyMigrator(t)
	latest, err := Latest()
	if err != nil || latest < 3 {
		t.Fatalf("latest migration: %d %v", latest, err)
	}
	if err := g.Up(); err != nil {
		t.Fatal(err)
	}
	if err := g.Up(); err != nil {
		t.Fatalf("up when up to date must be success: %v", err)
	}
	if v, dirty, err := g.Version(); err != nil || v != latest || dirty {
		t.Fatalf("version after up: %d %v %v", v, dirty, err)
	}
	first := schemaDump(t, db)
	for _, table := range []string{"domain_circuit_breakers", "provider_connections", "model_lockouts", "key_value",
		"session_affinity_pins", "exclusive_connection_leases", "proxy_logs", "state_changes"} {
		if !strings.Contains(first, table+".") {
			t.Errorf("table %s missing from the schema", table)
		}
	}
	// Step down one at a time, then all the way.
	if err := g.Down(1); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := g.Version(); v != latest-1 {
		t.Fatalf("version after one step down: %d", v)
	}
	if err := g.Down(0); err != nil {
		t.Fatal(err)
	}
	if left := schemaDump(t, db); strings.TrimSpace(strings.ReplaceAll(left, "schema_migrations", "")) != "" &&
		!onlyMigrationsTable(left) {
		t.Fatalf("down left objects behind:\n%s", left)
	}
	if err := g.Up(); err != nil {
		t.Fatal(err)
	}
	if again := schemaDump(t, db); again != first {
		t.Fatalf("schema after up → down → up differs:\n--- first\n%s\n--- again\n%s", first, again)
	}
}

func onlyMigrationsTable(dump string) bool {
	for _, l := range strings.Split(strings.TrimSpace(dump), "\n") {
		if !strings.Contains(l, "schema_migrations") {
			return false
		}
	}
	return true
}

func TestMigrateDirtyStopsWithTheFix(t *testing.T) {
	// A dirty version is never forced automatically: Up stops with a
	// *DirtyError that names the command to run; Force is explicit.
	db, g := newEmptyMigrator(t)
	if err := g.Down(0); err != nil { // creates schema_migrations
		t.Fatal(err)
	}
	if err := g.Up(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE schema_migrations SET dirty = true, version = 2`); err != nil {
		t.Fatal(err)
	}
	err := g.Up()
	var de *DirtyError
	if !errors.As(err, &de) || de.Version != 2 || !strings.Contains(err.Error(), "breakwater migrate force 2") {
		t.Fatalf("up on a dirty schema: %v", err)
	}
	if v, dirty, err := g.Version(); err != nil || v != 2 || !dirty {
		t.Fatalf("the dirty flag must stay until forced: %d %v %v", v, dirty, err)
	}
	if err := g.Force(3); err != nil {
		t.Fatal(err)
	}
	if err := g.Up(); err != nil {
		t.Fatalf("up after force: %v", err)
	}
	if v, dirty, _ := g.Version(); dirty || v == 0 {
		t.Fatalf("after force: %d dirty=%v", v, dirty)
	}
}

func TestOpenWithMigrate(t *testing.T) {
	// `serve` with a postgres URL applies migrations at start (docs/cli.md);
	// doing it twice (or from two replicas) is harmless.
	url := pgtest.NewEmptyDB(t)
	for i := 0; i < 2; i++ {
		s := openPG(t, url, func(o *PostgresOptions) { o.Migrate = true })
		if _, err := s.Load(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// newEmptyMigrator opens an empty database (no schema_migrations yet)
// and a migrator on it, both closed when the test ends.
func newEmptyMigrator(t *testing.T) (*sql.DB, *Migrator) {
	t.Helper()
	db, err := sql.Open("postgres", pgtest.NewEmptyDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g, err := NewMigrator(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return db, g
}

func newMigratedDB(t *testing.T) (*sql.DB, *Migrator) {
	t.Helper()
	db, g := newEmptyMigrator(t)
	if err := g.Up(); err != nil {
		t.Fatal(err)
	}
	return db, g
}

func TestMigrateAheadOfBinaryRefused(t *testing.T) {
	// docs/store.md "Schema": a database migrated by a newer breakwater
	// (version past this binary's latest) stops up and down with a
	// *VersionError that says so, instead of golang-migrate's "file does not
	// exist", and changes nothing.
	db, g := newMigratedDB(t)
	latest, _ := Latest()
	if _, err := db.Exec(`UPDATE schema_migrations SET version = $1`, latest+5); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{"up": g.Up, "down": func() error { return g.Down(1) }, "down all": func() error { return g.Down(0) },
		"force": func() error { return g.Force(int(latest)) }, "force 0": func() error { return g.Force(0) }} {
		err := f()
		var ve *VersionError
		if !errors.As(err, &ve) || ve.Version != latest+5 || !strings.Contains(err.Error(), "newer breakwater") {
			t.Fatalf("%s on a schema ahead of the binary: %v", name, err)
		}
	}
	if v, dirty, _ := g.Version(); v != latest+5 || dirty {
		t.Fatalf("the version must stay: %d dirty=%v", v, dirty)
	}
}

func TestMigrateDownMoreThanAppliedChangesNothing(t *testing.T) {
	// docs/store.md "Schema": down N with fewer than N migrations applied
	// is a *StepsError and rolls back nothing (golang-migrate alone rolls
	// back what it can, then fails with "limit N short"); down at version 0
	// says there is nothing to roll back.
	db, g := newMigratedDB(t)
	latest, _ := Latest()
	before := schemaDump(t, db)
	err := g.Down(int(latest) + 2)
	var se *StepsError
	if !errors.As(err, &se) || se.Applied != int(latest) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("down past version 0: %v", err)
	}
	if v, _, _ := g.Version(); v != latest || schemaDump(t, db) != before {
		t.Fatalf("a refused down changed the schema (version %d)", v)
	}
	if err := g.Down(0); err != nil {
		t.Fatal(err)
	}
	if err := g.Down(1); !errors.As(err, &se) || se.Applied != 0 || !strings.Contains(err.Error(), "nothing to roll back") {
		t.Fatalf("down at version 0: %v", err)
	}
	if err := g.Down(0); err != nil {
		t.Fatalf("down -all at version 0 is success: %v", err)
	}
}

func TestMigrateForceOnlyKnownVersions(t *testing.T) {
	// docs/store.md "Schema": force takes 0 (none applied) or a migration of
	// this binary; any other version would leave a schema every later
	// command refuses. force 0 records "nothing applied", so up works.
	db, g := newMigratedDB(t)
	latest, _ := Latest()
	if err := g.Force(int(latest) + 1); err == nil || !strings.Contains(err.Error(), "cannot force version") {
		t.Fatalf("force past latest: %v", err)
	}
	if v, _, _ := g.Version(); v != latest {
		t.Fatalf("a refused force changed the version to %d", v)
	}
	if err := g.Down(0); err != nil {
		t.Fatal(err)
	}
	if err := g.Force(0); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("force 0 must record no version: %d rows, %v", n, err)
	}
	if err := g.Up(); err != nil {
		t.Fatalf("up after force 0: %v", err)
	}
}

func TestMigrateFailureNamesTheErrorNotTheSQL(t *testing.T) {
	// docs/store.md "Schema": a migration that fails leaves the schema dirty
	// and says so with the fix; the message carries the database's error,
	// not the whole migration file.
	_, g := newMigratedDB(t)
	if err := g.Force(0); err != nil { // lie: the tables exist
		t.Fatal(err)
	}
	err := g.Up()
	if err == nil || strings.Contains(err.Error(), "CREATE TABLE") || !strings.Contains(err.Error(), "already exists") ||
		!strings.Contains(err.Error(), "breakwater migrate force 1") {
		t.Fatalf("failed migration: %v", err)
	}
}
