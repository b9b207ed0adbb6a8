package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/breakwater-gw/breakwater/chaos"
	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/store"
)

func init() {
	register("chaos", "bounded chaos / soak / heap run against a real gateway, with invariants and a report", runChaos)
}

const chaosUsage = `usage: breakwater chaos -config FILE [-mode chaos|soak|heap] [-duration D] [-schedule FILE] [-seed N]
                       [-json OUT.json] [-report OUT.html|OUT.svg] [-target URL] [flags]

Starts the gateway in-process from FILE (or targets one already running with -target), serves
every demo:// provider from its own fault upstream on a loopback port, drives bounded load,
injects faults on the schedule (a YAML file, or a seeded random mix), and checks invariants
all along. Prints a summary; exit 0 when every invariant holds, 1 when one fails, 2 on bad
input. Everything stays on 127.0.0.1. See docs/chaos.md.

modes:
  chaos  faults on a schedule, then a liveness phase (default)
  soak   a fixed request rate (or a ramp: -rate 500,1000,2000) with p95 added-latency,
         error-rate and flat-memory thresholds
  heap   N concurrent SSE streams through the gateway; heap per stream and return to baseline

flags:`

// chaosFlags are the chaos command's flags.
type chaosFlags struct {
	configPath, mode, schedulePath, jsonOut, reportOut *string
	target, mgmtKey, clientKey, rates, logLevel        *string
	duration, timeout, sample, warmup, hold            *time.Duration
	seed                                               *uint64
	workers, maxInFlight, streams, perStream           *int
	streamRatio, p95, errRate                          *float64
	noLeak, quiet                                      *bool
	set                                                map[string]bool // the flags given
}

func addChaosFlags(fs *flag.FlagSet) *chaosFlags {
	return &chaosFlags{
		configPath:   fs.String("config", "", "gateway config file (YAML, docs/config.md)"),
		mode:         fs.String("mode", "chaos", "chaos, soak or heap"),
		duration:     fs.Duration("duration", 0, "chaos: the fault phase (default: the schedule's, else 20s); soak: each rate step (default 30s)"),
		schedulePath: fs.String("schedule", "", "chaos: schedule file (default: a random mix of faults from -seed)"),
		seed:         fs.Uint64("seed", 0, "seed of the random schedule, the load's choices and the fault probabilities (default: the schedule's, else 1)"),
		jsonOut:      fs.String("json", "", "write the JSON report here"),
		reportOut:    fs.String("report", "", "write a picture of the run here (.html or .svg)"),
		target:       fs.String("target", "", "base URL of a running gateway (loopback); default: start one in-process"),
		mgmtKey:      fs.String("management-key", "", "management key of the gateway (default: the config's)"),
		clientKey:    fs.String("client-key", "", "client key (default: the config's first clientKeys entry)"),
		workers:      fs.Int("workers", 0, "closed-loop workers (chaos; default: the schedule's, else 4)"),
		rates:        fs.String("rate", "", "open-loop requests/s (chaos default 40; soak: one rate or a ramp 500,1000,2000; default 200)"),
		maxInFlight:  fs.Int("max-in-flight", 0, "bound on requests in flight (default 256; soak 1024)"),
		streamRatio:  fs.Float64("stream-ratio", chaos.DefaultStreamRatio, "share of streaming requests (chaos: else the schedule's; soak default 0)"),
		timeout:      fs.Duration("timeout", 0, "client deadline per request (default requestBudget.deadlineMs + 2s)"),
		sample:       fs.Duration("sample", 0, "sampling interval of health and resources (chaos 100ms, soak 1s)"),
		p95:          fs.Float64("p95-added-ms", 5, "soak: bound on p95 added latency (gateway − direct), ms"),
		errRate:      fs.Float64("max-error-rate", 0.001, "soak: bound on the share of failed requests"),
		warmup:       fs.Duration("warmup", 0, "soak: per-step warm-up excluded from the numbers (default 2s)"),
		streams:      fs.Int("streams", 500, "heap: concurrent SSE streams"),
		perStream:    fs.Int("heap-per-stream-kb", 64, "heap: bound on the gateway's live heap per open stream, KiB"),
		hold:         fs.Duration("stream-hold", 0, "heap: how long each stream lasts (default 8s)"),
		noLeak:       fs.Bool("no-leak-check", false, "skip the goroutine and file-descriptor leak checks"),
		quiet:        fs.Bool("q", false, "print only the verdict and failures"),
		logLevel:     fs.String("log-level", "error", "gateway log level (in-process): debug, info, warn, error"),
	}
}

// chaosFail reports bad input to the chaos command; it returns exit code 2.
func chaosFail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "breakwater chaos: "+format+"\n", a...)
	return 2
}

func runChaos(args []string) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), chaosUsage)
		fs.PrintDefaults()
	}
	f := addChaosFlags(fs)
	if code, ok := parseFlagsOnly(fs, args, "the gateway config is given with -config FILE, the schedule with -schedule FILE"); !ok {
		return code
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if *f.configPath == "" {
		fs.Usage()
		return 2
	}
	lv, code, ok := f.check()
	if !ok {
		return code
	}
	environ := os.Environ()
	cfg, warnings, err := proxy.LoadConfig(*f.configPath, environ)
	if err != nil {
		printConfigError(err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	for _, w := range warnings {
		log.Warn(w)
	}
	rateList, err := parseRates(*f.rates)
	if err != nil {
		return chaosFail("%v", err)
	}
	var progress io.Writer
	// docs/cli.md: progress on a terminal, quiet otherwise or with -json.
	if isTerminal(os.Stderr) && !*f.quiet && *f.jsonOut == "" {
		progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run := chaosRun{f: f, cfg: cfg, environ: environ, log: log, progress: progress, rates: rateList}
	rep, code, err := run.run(ctx)
	if rep == nil && err == nil {
		return code
	}
	if err != nil && ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "breakwater chaos: interrupted before the run got going (%v); nothing to report\n", err)
		return exitInterrupted
	}
	if err != nil {
		if ces := proxy.ConfigErrors(err); len(ces) > 0 {
			printConfigError(err)
			return 2
		}
		return chaosFail("%v", err)
	}
	return f.finish(rep)
}

// check rejects flag values that make no sense and outputs that could
// not be written, before anything runs, and parses the log level.
func (f *chaosFlags) check() (lv slog.Level, code int, ok bool) {
	// Explicit values must make sense: a flag is never silently replaced
	// by its default.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"duration", *f.duration}, {"timeout", *f.timeout}, {"sample", *f.sample}, {"warmup", *f.warmup}, {"stream-hold", *f.hold}} {
		if f.set[d.name] && d.v <= 0 {
			return lv, chaosFail("-%s: want a positive duration, got %v", d.name, d.v), false
		}
	}
	switch {
	case f.set["streams"] && *f.streams < 1:
		return lv, chaosFail("-streams: want at least 1, got %d", *f.streams), false
	case f.set["heap-per-stream-kb"] && *f.perStream < 1:
		return lv, chaosFail("-heap-per-stream-kb: want at least 1, got %d", *f.perStream), false
	case *f.p95 <= 0:
		return lv, chaosFail("-p95-added-ms: want a positive bound, got %v", *f.p95), false
	case *f.errRate < 0 || *f.errRate > 1:
		return lv, chaosFail("-max-error-rate: want a fraction in [0, 1], got %v", *f.errRate), false
	case *f.schedulePath != "" && *f.mode != "chaos":
		return lv, chaosFail("-schedule: a schedule is for -mode chaos (soak and heap inject no faults)"), false
	}
	// The outputs are checked before anything runs: a run must not end
	// with nowhere to write its report.
	if *f.reportOut != "" {
		switch strings.ToLower(filepath.Ext(*f.reportOut)) {
		case ".html", ".htm", ".svg":
		default:
			return lv, chaosFail("-report: want a .html or .svg file, got %q", *f.reportOut), false
		}
	}
	for _, out := range []struct{ flag, path string }{{"-json", *f.jsonOut}, {"-report", *f.reportOut}} {
		if err := writablePath(out.path); err != nil {
			return lv, chaosFail("%s: %v", out.flag, err), false
		}
	}
	if err := lv.UnmarshalText([]byte(*f.logLevel)); err != nil {
		return lv, chaosFail("-log-level: %v", err), false
	}
	return lv, 0, true
}

// parseRates reads -rate: one rate or a comma-separated ramp.
func parseRates(rates string) ([]float64, error) {
	if rates == "" {
		return nil, nil
	}
	var out []float64
	for _, s := range strings.Split(rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("-rate: want a positive number or a comma-separated list, got %q", rates)
		}
		out = append(out, v)
	}
	return out, nil
}

// chaosRun is what a run of the chaos command is made from.
type chaosRun struct {
	f        *chaosFlags
	cfg      *proxy.Config
	environ  []string
	log      *slog.Logger
	progress io.Writer
	rates    []float64
}

// run runs the mode the flags ask for. Bad input found on the way ends
// it with no report, no error and the exit code.
func (c *chaosRun) run(ctx context.Context) (*chaos.Report, int, error) {
	f := c.f
	switch *f.mode {
	case "chaos":
		o, code, ok := c.chaosOptions()
		if !ok {
			return nil, code, nil
		}
		rep, err := chaos.Run(ctx, o)
		return rep, 0, err
	case "soak":
		o := chaos.SoakOptions{Config: c.cfg, Environ: c.environ, Target: *f.target, ManagementKey: *f.mgmtKey, ClientKey: *f.clientKey,
			Rates: c.rates, Duration: *f.duration, Warmup: *f.warmup, MaxInFlight: *f.maxInFlight, P95AddedMs: *f.p95,
			MaxErrorRate: *f.errRate, SampleEvery: *f.sample, Timeout: *f.timeout, Seed: *f.seed, NoLeakCheck: *f.noLeak, Logger: c.log, Progress: c.progress}
		if f.set["stream-ratio"] {
			o.StreamRatio = *f.streamRatio
		}
		rep, err := chaos.RunSoak(ctx, o)
		return rep, 0, err
	case "heap":
		if *f.target != "" {
			return nil, chaosFail("-mode heap measures the in-process gateway's heap: it does not take -target"), nil
		}
		rep, err := chaos.RunHeap(ctx, chaos.HeapOptions{Config: c.cfg, Environ: c.environ, Streams: *f.streams,
			PerStreamBound: int64(*f.perStream) << 10, Hold: *f.hold, Timeout: *f.timeout, NoLeakCheck: *f.noLeak, Logger: c.log, Progress: c.progress})
		return rep, 0, err
	default:
		return nil, chaosFail("-mode: want chaos, soak or heap, got %q", *f.mode), nil
	}
}

// chaosOptions builds a chaos-mode run from the flags: the schedule file
// when given, and the load settings given explicitly.
func (c *chaosRun) chaosOptions() (o chaos.Options, code int, ok bool) {
	f := c.f
	o = chaos.Options{Config: c.cfg, Environ: c.environ, Target: *f.target, ManagementKey: *f.mgmtKey, ClientKey: *f.clientKey,
		Duration: *f.duration, Seed: *f.seed, SampleEvery: *f.sample, NoLeakCheck: *f.noLeak, Logger: c.log, Progress: c.progress}
	if *f.schedulePath != "" {
		s, code, ok := c.schedule()
		if !ok {
			return o, code, false
		}
		o.Schedule = s
	}
	if f.set["workers"] {
		o.Load.Workers = f.workers
	}
	if len(c.rates) > 1 {
		return o, chaosFail("-rate: a ramp of rates is for -mode soak"), false
	}
	if len(c.rates) == 1 {
		o.Load.Rate = &c.rates[0]
	}
	if f.set["max-in-flight"] {
		o.Load.MaxInFlight = f.maxInFlight
	}
	if f.set["stream-ratio"] {
		o.Load.StreamRatio = f.streamRatio
	}
	o.Load.Timeout = *f.timeout
	return o, 0, true
}

// schedule loads the -schedule file, checked against the config's
// topology and what this run can do.
func (c *chaosRun) schedule() (*chaos.Schedule, int, bool) {
	f := c.f
	topo, err := c.cfg.Topology()
	if err != nil {
		printConfigError(err)
		return nil, 2, false
	}
	su := c.cfg.Store.URL
	env := chaos.RunEnv{Duration: *f.duration, Target: *f.target != "",
		Postgres: *f.target == "" && store.IsPostgresURL(su)}
	s, err := chaos.LoadScheduleFor(*f.schedulePath, &topo, &env)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, line)
		}
		return nil, 2, false
	}
	return s, 0, true
}

// finish prints the report, writes the files asked for and returns the
// exit code the verdict gives.
func (f *chaosFlags) finish(rep *chaos.Report) int {
	if *f.quiet {
		fmt.Printf("breakwater %s: %s\n", rep.Mode, rep.Verdict())
		if rep.Interrupted != "" {
			fmt.Printf("  interrupted: %s\n", rep.Interrupted)
		}
		for _, r := range rep.Invariants {
			if r.Status == chaos.Fail {
				fmt.Printf("  FAIL %s: %s\n", r.Name, r.Detail)
			}
		}
	} else {
		rep.Summary(os.Stdout)
	}
	if *f.jsonOut != "" {
		if err := rep.WriteJSON(*f.jsonOut); err != nil {
			return chaosFail("-json: %v", err)
		}
	}
	if *f.reportOut != "" {
		if err := rep.WritePicture(*f.reportOut); err != nil {
			return chaosFail("-report: %v", err)
		}
	}
	if rep.Interrupted != "" {
		return exitInterrupted
	}
	if !rep.Passed {
		return 1
	}
	return 0
}

// writablePath says why a report could not be written at path ("" is
// fine: no report).
func writablePath(path string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory", path)
		}
		return nil
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("cannot write %s: %s is not a directory", path, dir)
	}
	return nil
}

// exitInterrupted is the exit code of a run stopped by Ctrl-C or SIGTERM
// (128 + SIGINT, the shell's convention): it proved nothing either way.
const exitInterrupted = 130
