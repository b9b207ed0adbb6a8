// Package chaos runs bounded chaos, soak and heap runs against a real
// breakwater gateway and checks invariants while they run.
//
// A run starts the gateway in-process (proxy.New on a loopback listener) or
// targets one that is already running, starts fault upstreams (package
// faults, on loopback listeners), drives bounded load (closed-loop workers
// and an open-loop rate, JSON and streaming requests), flips faults on a
// schedule (a YAML file, or a seeded random mix), samples the management
// API and the upstreams' counters, and checks:
//
//   - every client request ends within its deadline with a success or a
//     typed error; none hangs, none is lost, no stream ends without [DONE]
//     or an explicit error event;
//   - a breaker opens within its threshold when a whole provider fails, and
//     after the faults stop every breaker, cooldown and lockout serves again
//     within a bound derived from the settings;
//   - a 429 storm never moves a breaker, one bad key never cools its
//     siblings, one bad model never cools its connection;
//   - a restart restores the state and changes no later decision;
//   - no goroutine or file-descriptor leak (in-process).
//
// The package owns measuring and judging, never a resilience rule: every
// expectation is derived from the settings the gateway reports
// (GET /api/resilience) and the faults the run injected. It uses only the
// gateway's exported API (proxy.LoadConfig, proxy.New, Handler, Serve,
// Shutdown, Close) and HTTP.
//
// Everything stays on loopback: the client and the fault upstreams refuse
// any non-loopback address, and every loop is bounded in count and time.
package chaos
