package replay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
)

// Every library scenario is compared: the simulator (virtual time) and a
// real in-process gateway with a fault upstream (wall clock, idle time
// skipped, speed 1, so no duration is scaled) must make the same
// decisions. conformanceLong holds the files compared only by
// `make test-long` (BREAKWATER_CONFORMANCE_LONG=1), with why; notCompared
// would hold a file that cannot be compared at all, with why (none is).
// docs/replay.md lists them.
var (
	conformanceLong = map[string]string{
		"failover-slow-first-token.yaml": "about 30 s of wall time: its first tokens are slow on purpose, and latency in flight is real time",
		"flapping-primary.yaml":          "about 60 s of wall time: three minutes of steady traffic, never idle long enough to skip",
	}
	notCompared = map[string]string{}
)

// conformanceFiles lists the library, sorted.
func conformanceFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "scenarios", "library", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no library scenarios: %v", err)
	}
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	return files
}

// TestConformanceListsNameLibraryFiles pins that the lists of files left to
// the long run or left out name existing library files, so a renamed
// scenario cannot silently drop out of the comparison.
func TestConformanceListsNameLibraryFiles(t *testing.T) {
	files := conformanceFiles(t)
	for _, m := range []map[string]string{conformanceLong, notCompared} {
		for f, why := range m {
			if !slices.Contains(files, f) {
				t.Errorf("%s is listed (%q) but is no library scenario", f, why)
			}
			if why == "" {
				t.Errorf("%s is listed without a reason", f)
			}
		}
	}
}

// TestConformanceSimVsGateway pins "one model, two shells, the same
// decisions": for every library scenario, every request's status,
// servedBy, attempts, code and result, and every state read at an `at:`
// expect, are the same in the simulator (virtual time) and through a real
// gateway and fault upstream (wall clock), and both pass the file's
// expects. A difference fails the case at once: a real gateway that
// decides otherwise once is a divergence, whatever a second run says.
func TestConformanceSimVsGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("wall-clock replays: skipped with -short")
	}
	// The replays mostly wait on the wall clock (the whole run takes a few
	// CPU seconds), so they run concurrently beyond -parallel (GOMAXPROCS,
	// 2 on a small machine): each case's outcome is collected here and
	// reported by its subtest.
	long := os.Getenv("BREAKWATER_CONFORMANCE_LONG") != ""
	var files []string
	for _, f := range conformanceFiles(t) {
		if _, ok := notCompared[f]; ok {
			continue
		}
		if _, ok := conformanceLong[f]; ok && !long {
			continue
		}
		files = append(files, f)
	}
	outs := make([]chan caseOutcome, len(files))
	sem := make(chan struct{}, conformanceConcurrency)
	for i, f := range files {
		outs[i] = make(chan caseOutcome, 1)
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			outs[i] <- runConformanceCase(f, 1)
		}()
	}
	for i, f := range files {
		t.Run(f, func(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, sc, Options{Speed: speed, SkipIdle: true})
	if err != nil {
		o.fatal = err.Error()
		return o
	}
	for _, f := range res.Failures {
		o.problems = append(o.problems, fmt.Sprintf("gateway: line %d at %v: %s: expected %s, found %s", f.Line, f.At, f.What, f.Expected, f.Found))
	}
	if len(ob.Requests) == 0 || len(res.RequestLog) != len(ob.Requests) {
		o.problems = append(o.problems, fmt.Sprintf("requests: sim %d, gateway %d", len(ob.Requests), len(res.RequestLog)))
	}
	for _, d := range Compare(&ob, res) {
		o.problems = append(o.problems, fmt.Sprintf("differs: %s", d))
	}
	o.logs = append(o.logs, fmt.Sprintf("%s at %v×: %d requests, %d state reads, wall %v, max lag %v", file, speed, len(res.RequestLog), len(res.States), res.Wall.Round(time.Millisecond), res.MaxLag))
	return o
}
