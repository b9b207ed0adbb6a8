// Package store persists the resilience model's state (package model) and
// the few things the database arbitrates: saved settings, session affinity
// pins, exclusive session leases and the request log.
//
// Two implementations share one interface, Store:
//
//   - Memory, the embedded default: the process is the only arbiter and state
//     dies with it.
//   - Postgres: state is written behind (coalesced per entity, at most one
//     write per entity per flush interval), fail-open while the database is
//     unreachable, restored at start, and shared between replicas through a
//     change feed (state_changes + LISTEN/NOTIFY, with a poll as a backstop).
//     Leases are the exception: they are transactions that fail closed
//     (ErrStoreUnavailable) while the database is down.
//
// What the shell must do (the proxy; the simulator needs none of this):
//
//  1. At start: st, err := s.Load(ctx); a *LoadError lists rows that were
//     skipped (corrupt or unknown) and is not fatal; then RestoreEngine(e, st).
//  2. After every engine call, under the same lock that serialises the
//     engine: s.Apply(e.Changes()). Apply never blocks on I/O.
//  3. When <-s.Updates() fires (another replica changed something), take the
//     engine lock and call s.ApplyRemote(e, now).
//  4. On shutdown: s.Close(ctx) flushes everything Apply accepted.
//
// The package never decides anything about resilience: rules live in model.
// It never logs or returns a credential, a lease owner token or a session id
// (only their SHA-256), and never holds a lock while doing I/O on the
// decision path. docs/store.md describes the schema, the conflict rules and
// the benchmark figures.
package store
