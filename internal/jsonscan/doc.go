// Package jsonscan reads the common OpenAI chat-completions stream chunk
// without encoding/json and without allocating: the fast path of
// model.ParseStreamEvent, which the stream watchdogs call on every SSE event.
//
// It owns no rule: what an event means (useful bytes, reasoning, tool calls,
// finish reasons, errors) is model's, and model's full decoder is the
// reference. ChatChunk must answer exactly as that decoder would or not at
// all (ok false); model's FuzzScanChatChunk holds it to that. It must stay
// pure (no I/O, clock, goroutines or global state; model's
// TestPurityOfHelpers pins its imports), never allocate, and never panic or
// read out of bounds on any input.
package jsonscan
