// Package faults is breakwater's catalog of upstream behaviours: every way
// an LLM upstream answers, fails or misbehaves (statuses with their real
// headers and bodies, latency and jitter, connection resets, silence, slow
// and broken streams, flapping), and the rule engine that says which
// behaviour answers which attempt.
//
// Each behaviour is usable two ways:
//   - as data (Response) that the discrete-event simulator (sim) interprets
//     on virtual time, and
//   - as a real upstream (Server, an http.Handler) for proxy tests,
//     `breakwater replay`, chaos runs and `breakwater upstream`.
//
// Server answers in the OpenAI chat, Anthropic Messages, Gemini and OpenAI
// Responses formats (wire*.go). Every answer is written once, as a chat
// completion (answer.go), and rendered in the attempt's format by the
// gateway's own translations (internal/wire: ChatToMessages and MsgStream,
// ResponseObject and RespStream, ChatToGemini and GemStream), so the fault
// upstream and the gateway agree on every format; only what no real
// upstream sends (malformed events) and the generic error bodies of each
// format (errors.go) are the package's own.
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
