// Package sim is breakwater's discrete-event simulator: a virtual clock, an
// event heap, seeded random streams, simulated clients and simulated
// upstreams (the faults rules), driving the SAME model the proxy drives.
// The request loop is model.Flow (StartFlow → Next → attempt / wait /
// answer → Record), exactly as in the proxy, so both make the same
// decisions by construction.
//
// What sim owns: time (model.Time, milliseconds), event order, the timeline
// of each simulated upstream attempt (latency, chunks, stalls, cuts — the
// shell's timers: responseHeaderMs, attemptMs, and feeding the model's
// stream watchdogs), the client's patience (a give-up is recorded as
// model.OutcomeClientAbort and answered 499), whether a stream is committed,
// the canonical trace and its SHA-256, invariant checks and the expects of a
// scenario.
//
// What sim must never do: decide anything about a status, a body or a
// header, or about the request loop (which connection next, when to wait,
// budgets, what to answer). Every such decision is the model's; sim only
// turns the upstream behaviour into a model.Outcome and carries out the
// flow's steps. There is no `if status == 429` here and no call to Select,
// Begin, Record or WaitDecision; tests grep for both.
//
// Determinism: one seed is split into named sub-streams (traffic, faults,
// latency, engine) with derived seeds, so adding a fault rule does not
// perturb traffic. Events at one instant run in a fixed order: operator
// actions, then request arrivals and upstream events (in scheduling order),
// then the expects of that instant. The trace hash is the SHA-256 of the
// canonical JSON lines (computed whether or not they are written, so it is
// what sha256sum of a -trace file gives) and is identical for the same file,
// seed and settings on any machine.
package sim
