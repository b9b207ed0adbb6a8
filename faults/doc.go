// Package faults is breakwater's catalog of upstream behaviours: every way
// an LLM upstream answers, fails or misbehaves (statuses with their real
// headers and bodies, latency and jitter, connection resets, silence, slow
// and broken streams, flapping), and the rule engine that says which
// behaviour answers which attempt.
//
// Each behaviour is usable two ways:
//   - as data (Response) that the discrete-event simulator (sim) interprets
//     on virtual time, and
//   - as a real OpenAI-compatible upstream (Server, an http.Handler) for proxy
//     tests, `breakwater replay`, chaos runs and `breakwater upstream`.
//
// Rules follow the `upstream:` section of a scenario file (docs/scenarios.md):
// each rule matches provider / connection / model, is active in a half-open
// window [from, until), and answers with `respond` or a `sequence` (one item
// per attempt the rule answers, the last repeating). The LAST matching rule
// wins; with no match the answer is 200 OK with no latency.
//
// The package owns behaviour, never decisions: it does not classify what it
// sends (that is model's job) and it never reads a wall clock except inside
// Server, which is the one place real time and I/O happen.
package faults
