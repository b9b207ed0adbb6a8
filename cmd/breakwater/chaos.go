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

func runChaos(args []string) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), chaosUsage)
		fs.PrintDefaults()
	}
	configPath := fs.String("config", "", "gateway config file (YAML, docs/config.md)")
	mode := fs.String("mode", "chaos", "chaos, soak or heap")
	duration := fs.Duration("duration", 0, "chaos: the fault phase (default: the schedule's, else 20s); soak: each rate step (default 30s)")
	schedulePath := fs.String("schedule", "", "chaos: schedule file (default: a random mix of faults from -seed)")
	seed := fs.Uint64("seed", 0, "seed of the random schedule, the load's choices and the fault probabilities (default: the schedule's, else 1)")
	jsonOut := fs.String("json", "", "write the JSON report here")
	reportOut := fs.String("report", "", "write a picture of the run here (.html or .svg)")
	target := fs.String("target", "", "base URL of a running gateway (loopback); default: start one in-process")
	mgmtKey := fs.String("management-key", "", "management key of the gateway (default: the config's)")
	clientKey := fs.String("client-key", "", "client key (default: the config's first clientKeys entry)")
	workers := fs.Int("workers", 0, "closed-loop workers (chaos; default: the schedule's, else 4)")
	rates := fs.String("rate", "", "open-loop requests/s (chaos default 40; soak: one rate or a ramp 500,1000,2000; default 200)")
	maxInFlight := fs.Int("max-in-flight", 0, "bound on requests in flight (default 256; soak 1024)")
	streamRatio := fs.Float64("stream-ratio", chaos.DefaultStreamRatio, "share of streaming requests (chaos: else the schedule's; soak default 0)")
	timeout := fs.Duration("timeout", 0, "client deadline per request (default requestBudget.deadlineMs + 2s)")
	sample := fs.Duration("sample", 0, "sampling interval of health and resources (chaos 100ms, soak 1s)")
	p95 := fs.Float64("p95-added-ms", 5, "soak: bound on p95 added latency (gateway − direct), ms")
	errRate := fs.Float64("max-error-rate", 0.001, "soak: bound on the share of failed requests")
	warmup := fs.Duration("warmup", 0, "soak: per-step warm-up excluded from the numbers (default 2s)")
	streams := fs.Int("streams", 500, "heap: concurrent SSE streams")
	perStream := fs.Int("heap-per-stream-kb", 64, "heap: bound on the gateway's live heap per open stream, KiB")
	hold := fs.Duration("stream-hold", 0, "heap: how long each stream lasts (default 8s)")
	noLeak := fs.Bool("no-leak-check", false, "skip the goroutine and file-descriptor leak checks")
	quiet := fs.Bool("q", false, "print only the verdict and failures")
	logLevel := fs.String("log-level", "error", "gateway log level (in-process): debug, info, warn, error")
	if code, ok := parseFlagsOnly(fs, args, "the gateway config is given with -config FILE, the schedule with -schedule FILE"); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *configPath == "" {
		fs.Usage()
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "breakwater chaos: "+format+"\n", a...)
		return 2
	}
	// Explicit values must make sense: a flag is never silently replaced
	// by its default.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"duration", *duration}, {"timeout", *timeout}, {"sample", *sample}, {"warmup", *warmup}, {"stream-hold", *hold}} {
		if set[d.name] && d.v <= 0 {
			return fail("-%s: want a positive duration, got %v", d.name, d.v)
		}
	}
	switch {
	case set["streams"] && *streams < 1:
		return fail("-streams: want at least 1, got %d", *streams)
	case set["heap-per-stream-kb"] && *perStream < 1:
		return fail("-heap-per-stream-kb: want at least 1, got %d", *perStream)
	case *p95 <= 0:
		return fail("-p95-added-ms: want a positive bound, got %v", *p95)
	case *errRate < 0 || *errRate > 1:
		return fail("-max-error-rate: want a fraction in [0, 1], got %v", *errRate)
	case *schedulePath != "" && *mode != "chaos":
		return fail("-schedule: a schedule is for -mode chaos (soak and heap inject no faults)")
	}
	// The outputs are checked before anything runs: a run must not end
	// with nowhere to write its report.
	if *reportOut != "" {
		switch strings.ToLower(filepath.Ext(*reportOut)) {
		case ".html", ".htm", ".svg":
		default:
			return fail("-report: want a .html or .svg file, got %q", *reportOut)
		}
	}
	for _, out := range []struct{ flag, path string }{{"-json", *jsonOut}, {"-report", *reportOut}} {
		if err := writablePath(out.path); err != nil {
			return fail("%s: %v", out.flag, err)
		}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*logLevel)); err != nil {
		return fail("-log-level: %v", err)
	}
	environ := os.Environ()
	cfg, warnings, err := proxy.LoadConfig(*configPath, environ)
	if err != nil {
		printConfigError(err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	for _, w := range warnings {
		log.Warn(w)
	}
	var rateList []float64
	if *rates != "" {
		for _, s := range strings.Split(*rates, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || v <= 0 {
				return fail("-rate: want a positive number or a comma-separated list, got %q", *rates)
			}
			rateList = append(rateList, v)
		}
	}
	var progress io.Writer
	// docs/cli.md: progress on a terminal, quiet otherwise or with -json.
	if isTerminal(os.Stderr) && !*quiet && *jsonOut == "" {
		progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var rep *chaos.Report
	switch *mode {
	case "chaos":
		o := chaos.Options{Config: cfg, Environ: environ, Target: *target, ManagementKey: *mgmtKey, ClientKey: *clientKey,
			Duration: *duration, Seed: *seed, SampleEvery: *sample, NoLeakCheck: *noLeak, Logger: log, Progress: progress}
		if *schedulePath != "" {
			topo, err := cfg.Topology()
			if err != nil {
				printConfigError(err)
				return 2
			}
			su := cfg.Store.URL
			env := chaos.RunEnv{Duration: *duration, Target: *target != "",
				Postgres: *target == "" && store.IsPostgresURL(su)}
			s, err := chaos.LoadScheduleFor(*schedulePath, &topo, &env)
			if err != nil {
				for _, line := range strings.Split(err.Error(), "\n") {
					fmt.Fprintln(os.Stderr, line)
				}
				return 2
			}
			o.Schedule = s
		}
		if set["workers"] {
			o.Load.Workers = workers
		}
		if len(rateList) > 1 {
			return fail("-rate: a ramp of rates is for -mode soak")
		}
		if len(rateList) == 1 {
			o.Load.Rate = &rateList[0]
		}
		if set["max-in-flight"] {
			o.Load.MaxInFlight = maxInFlight
		}
		if set["stream-ratio"] {
			o.Load.StreamRatio = streamRatio
		}
		o.Load.Timeout = *timeout
		rep, err = chaos.Run(ctx, o)
	case "soak":
		o := chaos.SoakOptions{Config: cfg, Environ: environ, Target: *target, ManagementKey: *mgmtKey, ClientKey: *clientKey,
			Rates: rateList, Duration: *duration, Warmup: *warmup, MaxInFlight: *maxInFlight, P95AddedMs: *p95,
			MaxErrorRate: *errRate, SampleEvery: *sample, Timeout: *timeout, Seed: *seed, NoLeakCheck: *noLeak, Logger: log, Progress: progress}
		if set["stream-ratio"] {
			o.StreamRatio = *streamRatio
		}
		rep, err = chaos.RunSoak(ctx, o)
	case "heap":
		if *target != "" {
			return fail("-mode heap measures the in-process gateway's heap: it does not take -target")
		}
		rep, err = chaos.RunHeap(ctx, chaos.HeapOptions{Config: cfg, Environ: environ, Streams: *streams,
			PerStreamBound: int64(*perStream) << 10, Hold: *hold, Timeout: *timeout, NoLeakCheck: *noLeak, Logger: log, Progress: progress})
	default:
		return fail("-mode: want chaos, soak or heap, got %q", *mode)
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
		return fail("%v", err)
	}
	if *quiet {
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
	if *jsonOut != "" {
		if err := rep.WriteJSON(*jsonOut); err != nil {
			return fail("-json: %v", err)
		}
	}
	if *reportOut != "" {
		if err := rep.WritePicture(*reportOut); err != nil {
			return fail("-report: %v", err)
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
