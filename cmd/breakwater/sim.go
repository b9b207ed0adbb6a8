package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
)

func init() {
	register("sim", "play scenario files in the discrete-event simulator (virtual time)", runSim)
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// scenarioFlags are the flags sim and replay share: -seed and -set.
type scenarioFlags struct {
	seed *string
	sets stringList
}

func addScenarioFlags(fs *flag.FlagSet, setHelp string) *scenarioFlags {
	f := &scenarioFlags{seed: fs.String("seed", "", "override every file's seed")}
	fs.Var(&f.sets, "set", setHelp)
	return f
}

// options turns the flags into loader options; a bad -seed is reported on
// stderr under cmd's name and gives ok=false (exit 2).
func (f *scenarioFlags) options(cmd string) (scenarios.Options, bool) {
	opts := scenarios.Options{Sets: f.sets}
	if *f.seed != "" {
		v, err := strconv.ParseUint(*f.seed, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "breakwater %s: -seed wants a non-negative integer, got %q\n", cmd, *f.seed)
			return opts, false
		}
		opts.Seed = &v
	}
	return opts, true
}

// parseInterspersed parses flags that may come before or after the
// positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseFlagsOnly parses the flags of a command that takes no positional
// argument: a stray one is refused with a message naming it and hint, never
// ignored. code is the exit code when ok is false (0 for -h).
func parseFlagsOnly(fs *flag.FlagSet, args []string, hint string) (code int, ok bool) {
	extra, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if len(extra) > 0 {
		fmt.Fprintf(os.Stderr, "breakwater %s: unexpected argument %q (%s)\n", fs.Name(), extra[0], hint)
		return 2, false
	}
	return 0, true
}

// parseFiles parses a command that takes files and flags in any order;
// with no file it prints the usage. code is the exit code when ok is
// false (0 for -h).
func parseFiles(fs *flag.FlagSet, args []string) (files []string, code int, ok bool) {
	files, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0, false
		}
		return nil, 2, false
	}
	if len(files) == 0 {
		fs.Usage()
		return nil, 2, false
	}
	return files, 0, true
}

// printJSON prints v as indented JSON on stdout.
func printJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// simCmd is one run of `breakwater sim` over its files.
type simCmd struct {
	opts              scenarios.Options
	files             []string
	traceOut, plotOut []string // one per file, nil without -trace / -plot
	asJSON, quiet     bool
	progress          bool
}

func runSim(args []string) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: breakwater sim FILE... [-seed N] [-set key=value]... [-trace OUT.jsonl] [-plot OUT.svg|OUT.html] [-json]")
		fs.PrintDefaults()
	}
	sf := addScenarioFlags(fs, "override a setting: path=value (repeatable), e.g. providerBreaker.apikey.failureThreshold=5")
	tracePath := fs.String("trace", "", "write the canonical JSON-lines trace here (one file per scenario when several)")
	plotPath := fs.String("plot", "", "write a timeline plot here (.svg or .html)")
	asJSON := fs.Bool("json", false, "print results as JSON")
	quiet := fs.Bool("q", false, "print failures only")
	files, code, ok := parseFiles(fs, args)
	if !ok {
		return code
	}
	opts, ok := sf.options("sim")
	if !ok {
		return 2
	}
	if *plotPath != "" && !strings.HasSuffix(*plotPath, ".svg") && !strings.HasSuffix(*plotPath, ".html") {
		fmt.Fprintf(os.Stderr, "breakwater sim: -plot wants a .svg or .html file, got %q\n", *plotPath)
		return 2
	}
	c := &simCmd{opts: opts, files: files, asJSON: *asJSON, quiet: *quiet,
		progress: !*asJSON && isTerminal(os.Stderr),
		traceOut: perFileNames(*tracePath, files), plotOut: perFileNames(*plotPath, files)}
	var results []*sim.Result
	exit := 0
	for i := range files {
		res, code, stop := c.runFile(i)
		exit = max(exit, code)
		if stop {
			return code
		}
		if res == nil {
			continue
		}
		results = append(results, res)
		if !c.asJSON {
			c.print(i, res)
		}
	}
	if c.asJSON {
		printJSON(results)
	}
	return exit
}

// runFile loads and runs file i, writing its trace and plot. code is
// the worst exit code it met; stop means the command ends here with
// code (a trace file that cannot be created). A nil result has nothing
// to print.
func (c *simCmd) runFile(i int) (res *sim.Result, code int, stop bool) {
	file := c.files[i]
	sc, err := scenarios.LoadFile(file, c.opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return nil, 2, false
	}
	for _, w := range sc.Warnings {
		if !c.quiet && !c.asJSON {
			fmt.Fprintf(os.Stderr, "warning: %s\n", w)
		}
	}
	var runOpts sim.Options
	var traceFile *os.File
	if c.traceOut != nil {
		traceFile, err = os.Create(c.traceOut[i])
		if err != nil {
			fmt.Fprintf(os.Stderr, "breakwater sim: %v\n", err)
			return nil, 2, true
		}
		runOpts.Trace = traceFile
	}
	if c.plotOut != nil {
		runOpts.Timeline = sim.NewTimeline()
	}
	if c.progress {
		runOpts.Progress = func(d time.Duration) {
			fmt.Fprintf(os.Stderr, "\r  %s: simulated %v   ", file, d.Truncate(time.Second))
		}
	}
	res, err = sim.Run(sc, runOpts)
	if c.progress {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	if traceFile != nil {
		if cerr := traceFile.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater sim: %s: %v\n", file, err)
		code = 2
		if res == nil {
			return nil, code, false
		}
	}
	if runOpts.Timeline != nil {
		if err := writePlot(c.plotOut[i], runOpts.Timeline, res); err != nil {
			fmt.Fprintf(os.Stderr, "breakwater sim: %v\n", err)
			code = 2
		}
	}
	if !res.Passed {
		code = max(code, 1)
	}
	return res, code, false
}

// print prints file i's result and, when several files ran, which
// derived trace and plot names are its.
func (c *simCmd) print(i int, res *sim.Result) {
	printResult(os.Stdout, res, c.quiet)
	if len(c.files) > 1 && !c.quiet {
		// derived names: say which file is whose
		if c.traceOut != nil {
			fmt.Printf("  trace written to %s\n", c.traceOut[i])
		}
		if c.plotOut != nil {
			fmt.Printf("  plot written to %s\n", c.plotOut[i])
		}
	}
}

// perFileNames names one output per scenario when several files run
// (OUT-<file name>.ext). Two files with the same name (a/x.yaml, b/x.yaml, or
// one file given twice) get OUT-x.ext, OUT-x-2.ext..., so no run overwrites
// another's trace or plot. nil when out is "".
func perFileNames(out string, files []string) []string {
	if out == "" {
		return nil
	}
	names := make([]string, len(files))
	if len(files) == 1 {
		names[0] = out
		return names
	}
	ext := filepath.Ext(out)
	stem := strings.TrimSuffix(out, ext)
	used := map[string]bool{}
	for i, file := range files {
		base := stem + "-" + strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
		name := base + ext
		for k := 2; used[name]; k++ {
			name = base + "-" + strconv.Itoa(k) + ext
		}
		used[name] = true
		names[i] = name
	}
	return names
}

func writePlot(path string, tl *sim.Timeline, res *sim.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if strings.HasSuffix(path, ".html") {
		err = tl.WriteHTML(f, res)
	} else {
		err = tl.WriteSVG(f, res)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func printResult(w io.Writer, res *sim.Result, quiet bool) {
	status := "PASS"
	if !res.Passed {
		status = "FAIL"
	}
	if quiet && res.Passed {
		return
	}
	fmt.Fprintf(w, "%s %s — %s\n", status, res.File, res.Scenario)
	var seeds []string
	for _, n := range sim.Streams {
		seeds = append(seeds, fmt.Sprintf("%s=%d", n, res.Seeds[n]))
	}
	fmt.Fprintf(w, "  seed %d (%s)\n", res.Seed, strings.Join(seeds, " "))
	if len(res.Sets) > 0 {
		fmt.Fprintf(w, "  set %s\n", strings.Join(res.Sets, " "))
	}
	fmt.Fprintf(w, "  simulated %v  wall %v  compression %s  requests %d  upstream calls %d  expects %d\n",
		res.Simulated, res.Wall.Round(time.Microsecond), ratio(res.Compression), res.Requests, res.Upstream, res.Expects)
	// Over the canonical binary encoding of the records (docs/sim.md), so
	// it is the same with or without -trace; not the JSONL file's bytes.
	fmt.Fprintf(w, "  trace sha256 %s (%d records)\n", res.TraceSHA256, res.TraceLines)
	fmt.Fprintf(w, "  statuses %s\n", statusCounts(res.Statuses))
	printFailures(w, res.File, res.Failures)
	for _, v := range res.Violations {
		fmt.Fprintf(w, "  VIOLATION %s\n", v)
	}
	if !res.Passed {
		fmt.Fprintf(w, "  reproduce: %s\n", res.Repro)
	}
}

// statusCounts lists how many answers had each status, "N×STATUS" in
// status order.
func statusCounts(statuses map[int]int) string {
	var st []string
	for _, c := range slices.Sorted(maps.Keys(statuses)) {
		st = append(st, fmt.Sprintf("%d×%d", statuses[c], c))
	}
	return strings.Join(st, " ")
}

// printFailures prints each failed expect with what it wanted and found.
func printFailures(w io.Writer, file string, fs []sim.Failure) {
	for _, f := range fs {
		fmt.Fprintf(w, "  FAILED %s:%d at %v: %s\n    expected: %s\n    found:    %s\n", file, f.Line, f.At, f.What, f.Expected, f.Found)
	}
}

func ratio(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.1fM×", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk×", r/1e3)
	}
	return fmt.Sprintf("%.1f×", r)
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
