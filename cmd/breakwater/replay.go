package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/breakwater-gw/breakwater/replay"
	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
)

func init() {
	register("replay", "play scenario files against a real gateway on the wall clock (optionally sped up)", runReplay)
}

// replayOutput is one file's result; Diffs only with -compare.
type replayOutput struct {
	*replay.Result
	Diffs []replay.Diff `json:"diffs,omitempty"`
}

func runReplay(args []string) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: breakwater replay FILE... [-speed N] [-target URL -management-key K [-upstream URL]] [-compare] [-json]")
		fs.PrintDefaults()
	}
	speed := fs.Float64("speed", 1, "divide every duration of the file and its settings by N")
	target := fs.String("target", "", "a running gateway's base URL (default: start one in-process with a fault upstream)")
	mgmtKey := fs.String("management-key", "", "management key of -target (default: env BREAKWATER_ADMIN_KEY)")
	clientKey := fs.String("client-key", "", "client key of -target when it has clientKeys (default: env BREAKWATER_CLIENT_KEY)")
	upstream := fs.String("upstream", "", "with -target: control URL of the `breakwater upstream` its providers point at; the file's rules are installed there")
	clean := fs.Bool("clean", true, "with -target: reset breakers, cooldowns, lockouts and the scenario's connections (terminal state, last error, backoff) first")
	applySettings := fs.Bool("apply-settings", false, "with -target: PATCH the file's (scaled) settings onto the gateway first")
	settle := fs.Duration("settle", 100*time.Millisecond, "read an `at:` expect this long after its instant (at most half the gap to the next event)")
	skipIdle := fs.Bool("skip-idle", true, "in-process: jump over time with no request in flight (the gateway's clock jumps with it)")
	compare := fs.Bool("compare", false, "also play each file in the simulator and fail on any decision that differs")
	sf := addScenarioFlags(fs, "override a setting: path=value (repeatable)")
	asJSON := fs.Bool("json", false, "print results as JSON")
	quiet := fs.Bool("q", false, "print failures only")
	files, code, ok := parseFiles(fs, args)
	if !ok {
		return code
	}
	if *speed <= 0 {
		fmt.Fprintf(os.Stderr, "breakwater replay: -speed must be positive, got %v\n", *speed)
		return 2
	}
	if *target == "" && (*upstream != "" || *mgmtKey != "" || *applySettings) {
		fmt.Fprintln(os.Stderr, "breakwater replay: -upstream, -management-key and -apply-settings go with -target")
		return 2
	}
	opts, ok := sf.options("replay")
	if !ok {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ro := replay.Options{Speed: *speed, Target: *target, ManagementKey: *mgmtKey, ClientKey: *clientKey,
		Upstream: *upstream, Clean: *clean, ApplySettings: *applySettings, Settle: *settle, SkipIdle: *skipIdle}
	exit := 0
	var outs []replayOutput
	for _, file := range files {
		out, code := replayFile(ctx, file, opts, ro, *compare, !*asJSON && !*quiet && isTerminal(os.Stderr))
		exit = max(exit, code)
		if out == nil {
			continue
		}
		outs = append(outs, *out)
		if !*asJSON {
			printReplay(os.Stdout, out, *quiet)
		}
	}
	if *asJSON {
		printJSON(outs)
	}
	return exit
}

// replayFile loads and replays one file, and with compare plays it in
// the simulator too. It returns the result (nil when there is none to
// print) and the exit code it earns.
func replayFile(ctx context.Context, file string, opts scenarios.Options, ro replay.Options, compare, progress bool) (*replayOutput, int) {
	sc, err := scenarios.LoadFile(file, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return nil, 2
	}
	if progress {
		fmt.Fprintf(os.Stderr, "  %s: replaying at %v× …\r", file, ro.Speed)
	}
	res, err := replay.Run(ctx, sc, ro)
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater replay: %s: %v\n", file, err)
		return nil, 2
	}
	out := &replayOutput{Result: res}
	if compare {
		var ob replay.Observed
		if _, err := sim.Run(sc, sim.Options{Observe: ob.Observe()}); err != nil {
			fmt.Fprintf(os.Stderr, "breakwater replay: %s: simulator: %v\n", file, err)
			return nil, 2
		}
		out.Diffs = replay.Compare(&ob, res)
	}
	if !res.Passed || len(out.Diffs) > 0 {
		return out, 1
	}
	return out, 0
}

func printReplay(w io.Writer, out *replayOutput, quiet bool) {
	res := out.Result
	ok := res.Passed && len(out.Diffs) == 0
	if quiet && ok {
		return
	}
	status := "PASS"
	if !ok {
		status = "FAIL"
	}
	fmt.Fprintf(w, "%s %s — %s\n", status, res.File, res.Scenario)
	where := "in-process gateway + fault upstream"
	if res.Target != "" {
		where = res.Target
	}
	fmt.Fprintf(w, "  %s  speed %v×  scenario time %v  wall %v  max lag %v\n", where, res.Speed,
		res.Simulated, res.Wall.Round(time.Millisecond), res.MaxLag.Round(time.Millisecond))
	calls := "unknown"
	if res.Upstream >= 0 {
		calls = strconv.Itoa(res.Upstream)
	}
	fmt.Fprintf(w, "  requests %d  upstream calls %s  expects %d  statuses %s\n", res.Requests, calls, res.Expects, statusCounts(res.Statuses))
	for _, s := range res.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", s)
	}
	for _, s := range res.Skipped {
		fmt.Fprintf(w, "  not checked: %s\n", s)
	}
	printFailures(w, res.File, res.Failures)
	for _, d := range out.Diffs {
		fmt.Fprintf(w, "  DIFFERS from the simulator: %s\n    sim:     %s\n    gateway: %s\n", d.What, d.Sim, d.Gateway)
	}
}
