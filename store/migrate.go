package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/breakwater-gw/breakwater/migrations"
)

// DirtyError means a migration failed part-way: the schema is at Version but
// possibly half applied. Nothing here forces it clean; an operator fixes the
// schema and runs `breakwater migrate force N`.
type DirtyError struct{ Version uint }

func (e *DirtyError) Error() string {
	return fmt.Sprintf("database schema is dirty at version %d: a migration failed part-way. "+
		"Repair the schema by hand (see the migration files), then run "+
		"`breakwater migrate force %d -database URL` (or the version it really is at) and migrate again", e.Version, e.Version)
}

// VersionError means the database records a migration version this binary
// does not have: most often a newer breakwater migrated it (Version >
// Latest). Nothing is run; the newer binary (or its `migrate down`) is the
// way back.
type VersionError struct{ Version, Latest uint }

func (e *VersionError) Error() string {
	if e.Version > e.Latest {
		return fmt.Sprintf("database schema is at version %d, newer than this binary's latest migration %d: "+
			"a newer breakwater migrated it. Run that newer breakwater, or roll the schema back to %d with its "+
			"`breakwater migrate down`; this binary changes nothing", e.Version, e.Latest, e.Latest)
	}
	return fmt.Sprintf("database schema is at version %d, which is not a migration of this binary (latest %d); "+
		"this binary changes nothing. Run `breakwater migrate force N -database URL` with the version the schema "+
		"really is at (0 = none applied)", e.Version, e.Latest)
}

// StepsError means a down of more steps than are applied; nothing was
// rolled back (golang-migrate would roll back what it can and then fail).
type StepsError struct {
	Want, Applied int
	Version       uint
}

func (e *StepsError) Error() string {
	if e.Applied == 0 {
		return "nothing to roll back: no migration is applied (version 0)"
	}
	return fmt.Sprintf("cannot roll back %d migrations: only %d are applied (version %d); nothing was changed. "+
		"Use `down %d` or `down -all`", e.Want, e.Applied, e.Version, e.Applied)
}

// Migrator runs the embedded migrations on one dedicated connection of a
// pool (golang-migrate's WithConnection), so closing it never closes the
// pool. Close it when done.
type Migrator struct {
	m    *migrate.Migrate
	conn *sql.Conn
}

// NewMigrator takes a dedicated connection from db.
func NewMigrator(ctx context.Context, db *sql.DB) (*Migrator, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w: %v", ErrStoreUnavailable, err)
	}
	drv, err := postgres.WithConnection(ctx, conn, &postgres.Config{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "postgres", drv)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return &Migrator{m: m, conn: conn}, nil
}

// Close releases the dedicated connection.
func (g *Migrator) Close() error {
	_, dbErr := g.m.Close()
	if dbErr != nil {
		return dbErr
	}
	return nil
}

func (g *Migrator) wrap(err error) error {
	if err == nil || errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	var d migrate.ErrDirty
	if errors.As(err, &d) {
		return &DirtyError{Version: uint(d.Version)}
	}
	// A failed migration: golang-migrate's message carries the whole SQL
	// file; say what failed and what state it left instead.
	var de database.Error
	if errors.As(err, &de) {
		msg := de.Err
		if msg == "" {
			msg = "migration failed"
		}
		if v, dirty, verr := g.m.Version(); verr == nil && dirty {
			return fmt.Errorf("migrations: %s: %w; %v", msg, de.OrigErr, &DirtyError{Version: v})
		}
		return fmt.Errorf("migrations: %s: %w", msg, de.OrigErr)
	}
	return fmt.Errorf("migrations: %w", err)
}

// check refuses to run anything on a dirty schema or on a version this
// binary does not have, and reports how many migrations are applied.
func (g *Migrator) check() (applied int, v uint, err error) {
	raw, dirty, err := g.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, g.wrap(err)
	}
	v = raw
	if dirty {
		return 0, v, &DirtyError{Version: v}
	}
	known, err := versions()
	if err != nil {
		return 0, v, fmt.Errorf("migrations: %w", err)
	}
	if !slices.Contains(known, v) {
		return 0, v, &VersionError{Version: v, Latest: known[len(known)-1]}
	}
	for _, k := range known {
		if k <= v {
			applied++
		}
	}
	return applied, v, nil
}

// Up applies every pending migration; being up to date is success.
func (g *Migrator) Up() error {
	if _, _, err := g.check(); err != nil {
		return err
	}
	return g.wrap(g.m.Up())
}

// Down rolls back n migrations (n <= 0: all of them). Asking for more steps
// than are applied is a *StepsError and rolls back nothing.
func (g *Migrator) Down(n int) error {
	applied, v, err := g.check()
	if err != nil {
		return err
	}
	if n <= 0 {
		return g.wrap(g.m.Down())
	}
	if n > applied {
		return &StepsError{Want: n, Applied: applied, Version: v}
	}
	return g.wrap(g.m.Steps(-n))
}

// Version is the applied version (0 with none) and whether it is dirty.
func (g *Migrator) Version() (uint, bool, error) {
	v, dirty, err := g.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	return v, dirty, err
}

// Force sets the recorded version without running anything, clearing the
// dirty flag. Only ever an explicit operator command. version is 0 (no
// migration applied) or a migration of this binary; anything else would
// leave a version that every later command refuses.
//
// A database a newer breakwater migrated (a version past this binary's
// latest) is refused like every other command refuses it: forcing it back
// would record a schema this binary did not build.
func (g *Migrator) Force(version int) error {
	known, err := versions()
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if cur, _, err := g.m.Version(); err == nil && cur > known[len(known)-1] {
		return &VersionError{Version: cur, Latest: known[len(known)-1]}
	}
	if version == 0 || version == -1 {
		return g.wrap(g.m.Force(-1)) // golang-migrate's "nothing applied"
	}
	if version < 0 || !slices.Contains(known, uint(version)) {
		return fmt.Errorf("migrations: cannot force version %d: this binary's migrations are %s (0 = none applied)",
			version, versionList(known))
	}
	return g.wrap(g.m.Force(version))
}

// versions lists the embedded migration versions in order.
func versions() ([]uint, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, err
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return nil, err
	}
	out := []uint{v}
	for {
		n, err := src.Next(v)
		if err != nil {
			return out, nil
		}
		out = append(out, n)
		v = n
	}
}

func versionList(vs []uint) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}

// Latest is the newest migration version embedded in the binary.
func Latest() (uint, error) {
	vs, err := versions()
	if err != nil {
		return 0, err
	}
	return vs[len(vs)-1], nil
}

// MigrateUp applies the embedded migrations to db (Open with Migrate).
func MigrateUp(ctx context.Context, db *sql.DB) error {
	g, err := NewMigrator(ctx, db)
	if err != nil {
		return err
	}
	defer g.Close()
	return g.Up()
}
