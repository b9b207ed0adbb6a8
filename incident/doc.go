// Package incident turns a window of the gateway's request log (docs/store.md#request-log)
// into a scenario file (docs/scenarios.md) that replays it: `breakwater incident
// export`.
//
// It owns reading the log (a Postgres request_log table, proxy_logs, or a
// JSONL file of store.LogRecord, one per line), choosing the window, and
// writing a scenario whose upstream rules answer, per provider, connection
// and model, what that connection answered in the window — in order — with
// the recorded client traffic and the recorded final statuses as expects.
//
// It must never: decide anything about resilience (classification and
// every rule stay in model/, the replay runs through sim/), write a
// credential (connections are exported by id only; apiKey and baseURL never
// leave the config), or carry a header or body the store did not already
// keep (records are re-redacted on the way out, as a second line of defence
// for hand-made JSONL files).
package incident
