// Package proxy is breakwater's production gateway: the OpenAI-compatible
// client API, the upstream executor, admission control, SSE streaming with
// watchdogs, the management API and Prometheus metrics.
//
// It owns the wall clock, goroutines, sockets and the store; it never owns a
// resilience rule. Every decision — classification, cooldowns, breakers,
// lockouts, selection order, typed "unavailable" answers, whether to wait for
// a cooldown — is a call into package model. The proxy executes those
// decisions, measures what happened (an upstream status, a transport error, a
// stalled stream, a client that went away) and reports it back with
// Engine.Record. There is no `if status == 429` here.
//
// The Engine is not safe for concurrent use. The gateway guards it with one
// mutex held only for the short model calls, never across I/O, and drains
// Engine.Changes under the same lock; a background goroutine hands the
// drained records to the StateStore.
//
// Every Engine.Begin is followed by exactly one Engine.Record, on every path
// (client abort, local queue timeout, panic), so half-open probe permits never
// dangle.
//
// The request loop is the model's Flow, the same one the simulator drives:
// Flow.Next says which connection to try (the attempt already begun), when
// to wait for a short cooldown and what to answer; the shell runs pacing and
// admission, calls the upstream, feeds stream events to model.Watchdog and
// reports each outcome with Flow.Record.
//
// Two small pure functions live here until the model grows them:
// admission.go's model.Admit (the composite concurrency gate's check) and
// ratelimit.go's model.Pace (per-connection pacing). Both carry table tests and are
// listed in docs/gateway.md.
package proxy
