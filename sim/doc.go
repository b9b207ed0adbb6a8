// Package sim is breakwater's discrete-event simulator: a virtual clock, an
// event heap, seeded random streams, simulated clients and simulated
// upstreams (the faults rules), driving the SAME model.Engine the proxy
// drives, through the same calls in the same order a gateway makes them
// (Resolve → Select → Unavailable / WaitDecision → Begin → Record → Verdict).
//
// What sim owns: time (model.Time, milliseconds), event order, the timeline
// of each simulated upstream attempt (latency, chunks, stalls, cuts — the
// shell's timers: responseHeaderMs, streamIdleMs, attemptMs), the request
// loop's budgets (requestBudget, waitForCooldown, comboCooldownWait), the
// canonical trace and its SHA-256, invariant checks and the expects of a
// scenario.
//
// What sim must never do: decide anything about a status, a body or a
// header. Every such decision is the model's (classification, cooldowns,
// breaker, lockouts, selection, typed errors); sim only turns the upstream
// behaviour into a model.Outcome and follows the Verdict. There is no
// `if status == 429` here, and a test greps for it.
//
// Determinism: one seed is split into named sub-streams (traffic, faults,
// latency, engine) with derived seeds, so adding a fault rule does not
// perturb traffic. Events at one instant run in a fixed order: operator
// actions, then request arrivals and upstream events (in scheduling order),
// then the expects of that instant. The trace hash is computed over a
// compact canonical encoding of every decision, whether or not JSON lines
// are written, and is identical for the same file, seed and settings on any
// machine.
package sim
