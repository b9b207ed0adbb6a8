// Package replay plays a scenario file (docs/scenarios.md) against a real
// gateway on the wall clock — `breakwater replay` — and checks the same
// `expect`s the simulator checks, through the client API and the
// management API only.
//
// Without a target it starts what the file describes: a fault upstream
// (faults.Server, the file's `upstream:` rules) and a gateway (proxy.New on
// a loopback listener, memory store) whose providers point at it. With a
// target it drives an operator's running gateway; the rules can then only
// be installed in a `breakwater upstream` given with -upstream.
//
// Every duration of the file and of its settings is divided by the speed
// (Scale). Requests are sent at their offsets, concurrently; operator
// actions run through the management API before the arrivals of their
// instant; an `at:` expect reads GET /api/monitoring/health a little after
// its instant (Options.Settle, at most half the gap to the next scheduled
// event). The conformance test (conformance_test.go) plays library
// scenarios both in the simulator and here and compares every client-visible
// answer and every state read.
//
// replay holds no resilience rule: it only reports what the gateway did.
// It never logs a credential; the management key it generates for an
// in-process gateway is used only on loopback.
package replay
