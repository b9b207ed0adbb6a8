package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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
	files, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(files) == 0 {
		fs.Usage()
		return 2
	}
	opts, ok := sf.options("sim")
	if !ok {
		return 2
	}
	if *plotPath != "" && !strings.HasSuffix(*plotPath, ".svg") && !strings.HasSuffix(*plotPath, ".html") {
		fmt.Fprintf(os.Stderr, "breakwater sim: -plot wants a .svg or .html file, got %q\n", *plotPath)
		return 2
	}
	progress := !*asJSON && isTerminal(os.Stderr)
	traceOut, plotOut := perFileNames(*tracePath, files), perFileNames(*plotPath, files)
	var results []*sim.Result
	exit := 0
	for i, file := range files {
		sc, err := scenarios.LoadFile(file, opts)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%v\n", err)
			exit = max(exit, 2)
			continue
		}
		for _, w := range sc.Warnings {
			if !*quiet && !*asJSON {
				fmt.Fprintf(os.Stderr, "warning: %s\n", w)
			}
		}
		var runOpts sim.Options
		var traceFile *os.File
		if *tracePath != "" {
			traceFile, err = os.Create(traceOut[i])
			if err != nil {
				fmt.Fprintf(os.Stderr, "breakwater sim: %v\n", err)
				return 2
			}
			runOpts.Trace = traceFile
		}
		if *plotPath != "" {
			runOpts.Timeline = sim.NewTimeline()
		}
		if progress {
			runOpts.Progress = func(d time.Duration) {
				fmt.Fprintf(os.Stderr, "\r  %s: simulated %v   ", file, d.Truncate(time.Second))
			}
		}
		res, err := sim.Run(sc, runOpts)
		if progress {
			fmt.Fprint(os.Stderr, "\r\033[K")
		}
		if traceFile != nil {
			if cerr := traceFile.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "breakwater sim: %s: %v\n", file, err)
			exit = max(exit, 2)
			if res == nil {
				continue
			}
		}
		if runOpts.Timeline != nil {
			if err := writePlot(plotOut[i], runOpts.Timeline, res); err != nil {
				fmt.Fprintf(os.Stderr, "breakwater sim: %v\n", err)
				exit = max(exit, 2)
			}
		}
		if !res.Passed {
			exit = max(exit, 1)
		}
		results = append(results, res)
		if !*asJSON {
			printResult(os.Stdout, res, *quiet)
			if len(files) > 1 && !*quiet {
				// derived names: say which file is whose
				if traceOut != nil {
					fmt.Printf("  trace written to %s\n", traceOut[i])
				}
				if plotOut != nil {
					fmt.Printf("  plot written to %s\n", plotOut[i])
				}
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(results)
	}
	return exit
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
	codes := make([]int, 0, len(res.Statuses))
	for c := range res.Statuses {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var st []string
	for _, c := range codes {
		st = append(st, fmt.Sprintf("%d×%d", res.Statuses[c], c))
	}
	fmt.Fprintf(w, "  statuses %s\n", strings.Join(st, " "))
	for _, f := range res.Failures {
		fmt.Fprintf(w, "  FAILED %s:%d at %v: %s\n    expected: %s\n    found:    %s\n", res.File, f.Line, f.At, f.What, f.Expected, f.Found)
	}
	for _, v := range res.Violations {
		fmt.Fprintf(w, "  VIOLATION %s\n", v)
	}
	if !res.Passed {
		fmt.Fprintf(w, "  reproduce: %s\n", res.Repro)
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
