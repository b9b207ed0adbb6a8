// Package model holds every resilience rule of breakwater as one pure,
// deterministic state machine: the provider circuit breaker, the optional
// provider cooldown window, connection cooldowns and terminal states, model
// lockouts, failure classification, selection and settings.
//
// The model owns decisions, never effects. It has no clock, no goroutines,
// no channels or mutexes, no I/O and no global randomness (TestPurity
// enforces this). Time arrives as an argument (Time, milliseconds on a
// virtual clock) and randomness from an injected, seeded *rand.Rand. The
// production proxy and the discrete-event simulator both wrap the same
// Engine, so they take the same decisions for the same inputs.
//
// # What the caller must do
//
// The shape follows etcd raft's RawNode: the caller drives, the model decides.
//
//  1. Build the engine once: NewEngine(topology, Normalize(settings), rng).
//  2. Per client request: Resolve the model name to a Route, then Select
//     candidates into a reused Selection. With no candidate, Unavailable
//     gives the typed answer (429/503/404 with Retry-After) and WaitDecision
//     says whether a short transient cooldown is worth waiting for.
//  3. Per upstream attempt: Begin(now, candidate) takes the breaker permit
//     (a HALF_OPEN probe when the breaker is half-open) and returns an
//     Attempt; when the attempt ends, Record(now, &attempt, outcome)
//     classifies the outcome and updates every layer, returning the Verdict
//     that says whether to try the next connection, the next target, or stop.
//     Every Begin must be followed by exactly one Record, including for client
//     aborts (OutcomeClientAbort), so probe permits are never left dangling.
//  4. After any call, Changes() returns the typed change records to persist
//     (the store) or trace (the simulator). Snapshot and Restore move the
//     whole state as a plain value.
//
// The Engine is not safe for concurrent use: the proxy serialises access,
// the simulator is single-threaded.
//
// # Layers
//
// Each failure touches only its own layer (docs/classification.md#verdicts): provider-level
// statuses (408, 5xx, transport) count in the breaker; account-level errors
// (401/403/429/quota) cool the connection; per-model errors lock the model on
// that connection; bans, expiry and exhausted credits are terminal and only an
// operator reset or new credentials clear them.
package model
