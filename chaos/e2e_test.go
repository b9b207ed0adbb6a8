package chaos

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/proxy"
)

// exampleConfig loads examples/chaos.yaml, the config `make chaos` uses.
func exampleConfig(t *testing.T) *proxy.Config {
	t.Helper()
	cfg, _, err := proxy.LoadConfig("../examples/chaos.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// e2eSchedule exercises every fault-specific invariant and a restart in a
// few seconds.
const e2eSchedule = `
name: e2e
duration: 6s
load: {workers: 3, rate: 30, streamRatio: 0.3}
faults:
  - {name: alpha 503, at: 300ms, until: 2500ms, match: {provider: alpha}, respond: {status: 503}}
  - {name: gamma 429 storm, at: 500ms, until: 3s, match: {provider: gamma}, respond: {status: 429, headers: {Retry-After: "1"}}}
  - {name: bad key beta/b1, at: 2500ms, until: 5s, match: {provider: beta, connection: b1}, respond: {status: 500}}
  - {name: bad model alpha/m2, at: 3s, until: 5500ms, match: {provider: alpha, model: m2}, respond: {use: model-not-found-404}}
  - {name: restart, at: 4s, action: restart}
`

func mustSchedule(t *testing.T, cfg *proxy.Config, src string) *Schedule {
	t.Helper()
	topo, err := cfg.Topology()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSchedule("test.yaml", []byte(src), &topo)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func statusOf(rep *Report, name string) Result {
	for _, r := range rep.Invariants {
		if r.Name == name {
			return r
		}
	}
	return Result{Name: name, Status: "missing"}
}

func logReport(t *testing.T, rep *Report) {
	var b bytes.Buffer
	rep.Summary(&b)
	t.Log("\n" + b.String())
}

// TestChaosEndToEnd: a short chaos run against the real in-process gateway
// with real fault upstreams holds every invariant, and each fault-specific
// check was exercised (not skipped). It runs first and alone (no
// t.Parallel), so the goroutine and file-descriptor counts are its own.
func TestChaosEndToEnd(t *testing.T) {
	cfg := exampleConfig(t)
	rep, err := Run(context.Background(), Options{Config: cfg, Schedule: mustSchedule(t, cfg, e2eSchedule), Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed || t.Failed() {
		logReport(t, rep)
		t.Fatal("the chaos run failed")
	}
	for _, name := range []string{"breaker-opens-within-threshold", "429-never-opens-breaker", "bad-key-spares-siblings",
		"bad-model-spares-connection", "liveness", "restart-restores-state", "no-goroutine-leak", "no-fd-leak", "requests-accounted"} {
		if r := statusOf(rep, name); r.Status != Pass {
			logReport(t, rep)
			t.Errorf("%s: %s (%s), want it exercised and passing", name, r.Status, r.Detail)
		}
	}
	// The JSON report says when everything served again (docs/chaos.md
	// "liveness (bound and its reasons, recovery time, ...)").
	if l := rep.Liveness; l == nil || l.RecoveredAtMs < 0 || l.RecoveredAtMs > rep.FaultPhaseMs+l.BoundMs {
		t.Errorf("liveness in the report: %+v, want the recovery time", rep.Liveness)
	}
	if rep.Requests.Finished < 50 {
		t.Errorf("only %d requests: the load did not run", rep.Requests.Finished)
	}
	if len(rep.Timeline.Points) == 0 || len(rep.Timeline.Buckets) == 0 {
		t.Error("the report has no timeline")
	}
	svg := rep.SVG()
	if !strings.Contains(svg, "<svg") || !strings.Contains(svg, "alpha") {
		t.Error("the picture does not draw the run")
	}
	if d := rep.WallMs; d > int64(60*time.Second/time.Millisecond) {
		t.Errorf("the run took %d ms: every loop must stop by itself", d)
	}
}

// cancelOnWrite cancels the run at the second progress line (1 s in) of
// a phase.
type cancelOnWrite struct {
	phase  string
	cancel context.CancelFunc
	n      int
}

func (c *cancelOnWrite) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.phase) {
		if c.n++; c.n == 2 {
			c.cancel()
		}
	}
	return len(p), nil
}

// TestChaosInterruptedReportsWhatRan pins the chaos command's Ctrl-C /
// SIGTERM behaviour: a run cancelled mid-fault-phase stops at once and
// returns a report of what ran, marked interrupted and never passing;
// requests the stop cut short are "aborted", not violations, and the
// whole-run checks are skipped. Without it the run returned only
// "context canceled" (no report) and cut requests counted as lost.
func TestChaosInterruptedReportsWhatRan(t *testing.T) {
	cfg := exampleConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, Options{Config: cfg, Schedule: mustSchedule(t, cfg, e2eSchedule), Seed: 3, NoLeakCheck: true,
		Progress: &cancelOnWrite{phase: "faults", cancel: cancel}})
	if err != nil {
		t.Fatalf("interrupted run: err = %v, want a report of what ran", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the interrupted run took %v to stop", el)
	}
	if rep.Interrupted == "" || rep.Passed || rep.Verdict() != "INTERRUPTED" {
		t.Errorf("interrupted %q passed %v verdict %s, want an interrupted, not passing report", rep.Interrupted, rep.Passed, rep.Verdict())
	}
	if rep.Requests.Sent == 0 || rep.Requests.Sent != rep.Requests.Finished {
		t.Errorf("requests %d sent, %d finished: want what ran, each with an outcome", rep.Requests.Sent, rep.Requests.Finished)
	}
	if n := rep.Requests.ByKind["violation"]; n > 0 {
		logReport(t, rep)
		t.Errorf("%d violations: requests cut by the stop must be aborted, not violations", n)
	}
	if r := statusOf(rep, "liveness"); r.Status != Skip {
		t.Errorf("liveness %s (%s), want skip after an interrupt", r.Status, r.Detail)
	}
}
