package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
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
	return fmt.Errorf("migrations: %w", err)
}

// Up applies every pending migration; being up to date is success.
func (g *Migrator) Up() error { return g.wrap(g.m.Up()) }

// Down rolls back n migrations (n <= 0: all of them).
func (g *Migrator) Down(n int) error {
	if n <= 0 {
		return g.wrap(g.m.Down())
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
// dirty flag. Only ever an explicit operator command.
func (g *Migrator) Force(version int) error { return g.wrap(g.m.Force(version)) }

// Latest is the newest migration version embedded in the binary.
func Latest() (uint, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return 0, err
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, err
	}
	for {
		n, err := src.Next(v)
		if err != nil {
			return v, nil
		}
		v = n
	}
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
