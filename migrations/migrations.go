// Package migrations holds breakwater's SQL schema as golang-migrate files
// (NNNNNN_name.up.sql / .down.sql), embedded so the single binary can apply
// them (`breakwater migrate`, or the Postgres store at start).
//
// It owns the schema and nothing else: no Go code reads or writes these
// tables here (package store does). Every up file has a down file that undoes
// it exactly; TestMigrationsUpDownUp in package store checks that up → down →
// up gives the same schema.
package migrations

import "embed"

// FS holds every migration file, for golang-migrate's iofs source.
//
//go:embed *.sql
var FS embed.FS
