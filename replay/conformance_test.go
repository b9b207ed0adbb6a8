package replay

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
)

// conformance lists the library scenarios played both in the simulator and
// against a real gateway (DESIGN "one model, two shells"; CONTRACTS §4
// "same decisions"), each with the speed-up that keeps its decisions off
// timing knife-edges. docs/replay.md lists the scenarios left out and why.
var conformance = []struct {
	file  string
	speed float64
	pins  string // what it covers
}{
	{"failover-one-500.yaml", 4, "SPEC §2 fail-over on a 500, connection cooldown 3 s, success clears"},
	{"failover-reset-before-headers.yaml", 4, "SPEC §1 transport failure counts, deduplicated; fail-over"},
	{"failover-429-retry-after.yaml", 4, "SPEC §2 429 + Retry-After: fail over at once, cool for exactly the hint"},
	{"failover-malformed-chunk.yaml", 4, "SPEC §6 output validation: a malformed chunk fails over"},
	{"contracts-example.yaml", 4, "CONTRACTS §4 example: cooldown fail-over, combo fall-back, operator reset-breaker"},
	{"wait-never-bridges-breaker.yaml", 4, "SPEC §1/§4b breaker OPEN on a combo target, never waited across"},
	{"backoff-escalates-across-requests.yaml", 4, "SPEC does-better 1: backoff escalates across requests"},
	{"local-404-lockout.yaml", 4, "SPEC §3 model lockout of a local 404, combo moves on"},
	{"emergency-fallback.yaml", 4, "SPEC §11.7 emergency fallback, terminal credits_exhausted"},
	{"wait-for-cooldown.yaml", 1, "SPEC §4b waitForCooldown re-selects after a short cooldown; a long Retry-After is not waited"},
	{"thundering-herd.yaml", 4, "SPEC §2 thundering-herd guard: concurrent failures escalate once"},
	{"concurrency-limit-429.yaml", 4, "SPEC §2 concurrency-limited 429: 1 s cooldown, backoff kept, breaker-neutral"},
	{"failover-stream-cut-committed.yaml", 4, "SPEC §6 a stream cut after commit ends with the model's SSE error code, never replayed"},
	{"stall-cooldown-opt-in.yaml", 4, "SPEC §6 streamStallCooldown opt-in: a stall cools the connection"},
	{"quota-share-fail-open.yaml", 4, "SPEC §4 quota-share combo fails open on its queue budget; the same cap is hard for ordinary requests"},
	{"composite-gate-caps.yaml", 4, "SPEC §4 composite gate: provider and per-model caps, SEMAPHORE_TIMEOUT, neutral for health"},
	{"rate-limit-protection.yaml", 4, "SPEC §5 rpm / minTimeMs pacing, apikey safety net, learned x-ratelimit-* pause"},
	{"egress-bucket-siblings.yaml", 4, "SPEC §7 egress-bucketed 429 cools siblings on the same configured egress IP"},
	{"lease-held-routed-around.yaml", 4, "SPEC §2d traffic without a lease is routed around leased connections (lease_held)"},
	{"spendwall-slot-busy.yaml", 4, "SPEC §2b slow lane: slot_busy waits and retries the same connection, nothing cools"},
	{"spendwall-limit-reset.yaml", 16, "SPEC §2b session limit reset first, memoised; then the lane"},
	{"execution-bound.yaml", 2, "SPEC §5 / §11.4 the execution bound cuts a stream: RATE_LIMIT_EXECUTION_TIMEOUT, neutral for health"},
	{"failover-stream-cut.yaml", 2, "SPEC §6 a cut answer fails over before commit (a buffered client's whole answer, a stream's first chunks)"},
	{"failover-stall.yaml", 4, "SPEC §6 a stall before content is retried once on the same account, then fails over, never cooling it"},
	{"gate-before-pacing.yaml", 1, "SPEC §4 / §5 the gate before pacing: a gate refusal books no rpm slot"},
	{"all-excluded-answers.yaml", 4, "SPEC §4b / §11.4 the typed answers when every target is excluded, by route and reason"},
	{"surface-embeddings-pass-over.yaml", 4, "client surfaces: embeddings pass over an anthropic-type target; Messages to it are served"},
	{"surface-messages-stream-cut-committed.yaml", 4, "client surfaces: a Messages / Responses stream cut after content ends with the format's error event"},
}

// TestConformanceSimVsGateway pins CONTRACTS §4 ("the same decisions"): for
// each scenario above, every request's status, servedBy, attempts, code and
// result, and every state read at an `at:` expect, are the same in the
// simulator (virtual time) and through a real gateway and fault upstream
// (wall clock, sped up), and both pass the file's expects.
func TestConformanceSimVsGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("wall-clock replays: skipped with -short")
	}
	// The replays mostly wait on the wall clock (the whole run takes a few
	// CPU seconds), so they run concurrently beyond -parallel (GOMAXPROCS,
	// 2 on a small machine): each case's outcome is collected here and
	// reported by its subtest.
	outs := make([]chan caseOutcome, len(conformance))
	sem := make(chan struct{}, conformanceConcurrency)
	for i, c := range conformance {
		outs[i] = make(chan caseOutcome, 1)
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			outs[i] <- runConformanceCase(c.file, c.speed)
		}()
	}
	for i, c := range conformance {
		t.Run(c.file, func(t *testing.T) {
			o := <-outs[i]
			for _, l := range o.logs {
				t.Log(l)
			}
			if o.fatal != "" {
				t.Fatal(o.fatal)
			}
			for _, p := range o.problems {
				t.Error(p)
			}
		})
	}
}

// conformanceConcurrency bounds the replays running at once.
const conformanceConcurrency = 8

type caseOutcome struct {
	logs     []string
	problems []string
	fatal    string
}

// runConformanceCase plays one file in the simulator and through the
// in-process gateway and lists every difference.
func runConformanceCase(file string, speed float64) (o caseOutcome) {
	sc, err := scenarios.LoadFile(filepath.Join("..", "scenarios", "library", file), scenarios.Options{})
	if err != nil {
		o.fatal = err.Error()
		return o
	}
	var ob Observed
	sres, err := sim.Run(sc, sim.Options{Observe: ob.Observe()})
	if err != nil {
		o.fatal = err.Error()
		return o
	}
	if !sres.Passed {
		o.fatal = fmt.Sprintf("the simulator fails %s: %v %v", file, sres.Failures, sres.Violations)
		return o
	}
	// Wall-clock runs share the machine with the rest of the suite (and
	// with each other), so one scheduling hiccup may move a boundary. A
	// real divergence reproduces: a case fails only when a second run
	// differs too.
	var res *Result
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, err = Run(ctx, sc, Options{Speed: speed})
		cancel()
		if err != nil {
			o.fatal = err.Error()
			return o
		}
		var problems []string
		for _, f := range res.Failures {
			problems = append(problems, fmt.Sprintf("gateway: line %d at %v: %s: expected %s, found %s", f.Line, f.At, f.What, f.Expected, f.Found))
		}
		if len(ob.Requests) == 0 || len(res.RequestLog) != len(ob.Requests) {
			problems = append(problems, fmt.Sprintf("requests: sim %d, gateway %d", len(ob.Requests), len(res.RequestLog)))
		}
		for _, d := range Compare(&ob, res) {
			problems = append(problems, fmt.Sprintf("differs: %s", d))
		}
		if len(problems) == 0 {
			break
		}
		if try == 2 {
			o.problems = problems
			break
		}
		o.logs = append(o.logs, fmt.Sprintf("run 1 differed (max lag %v); running again: %s", res.MaxLag, strings.Join(problems, "; ")))
	}
	o.logs = append(o.logs, fmt.Sprintf("%s at %v×: %d requests, %d state reads, wall %v, max lag %v", file, speed, len(res.RequestLog), len(res.States), res.Wall.Round(time.Millisecond), res.MaxLag))
	return o
}
