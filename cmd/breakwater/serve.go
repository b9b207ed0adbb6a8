package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/breakwater-gw/breakwater/internal/suggest"
	"github.com/breakwater-gw/breakwater/model/settings"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/store"
)

func init() {
	register("serve", "run the gateway (-config FILE)", runServe)
}

func runServe(args []string) int {
	cfg, log, environ, code, ok := loadServeConfig(args)
	if !ok {
		return code
	}
	if _, err := startHeapFloor(os.Getenv); err != nil { // heapfloor.go
		fmt.Fprintln(os.Stderr, "breakwater serve:", err)
		return 2
	}

	ctx := context.Background()
	stopDemo, err := startDemo(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "breakwater serve:", err)
		return 1
	}
	defer stopDemo()

	g, l, code, ok := listenGateway(ctx, cfg, log, environ)
	if !ok {
		return code
	}
	open := ""
	if len(cfg.ClientKeys) == 0 {
		open = " (open gateway: no clientKeys, loopback only)"
		log.Warn("no clientKeys configured: the gateway is open to anyone who can reach " + l.Addr().String())
	}
	log.Info("breakwater gateway listening"+open, "addr", l.Addr().String(), "providers", len(cfg.Providers), "combos", len(cfg.Combos), "version", proxy.Build.Version)
	stopOps, err := startOps(ctx, g, cfg, log) // ops.go: metrics listener, provider tests
	if err != nil {
		_ = l.Close()
		_ = g.Close(ctx)
		fmt.Fprintln(os.Stderr, "breakwater serve:", err)
		return 1
	}
	defer stopOps()
	return serveUntilSignal(ctx, g, l, cfg, log)
}

// loadServeConfig parses serve's flags, sets up the logger and loads the
// config with its warnings. It ends the command (ok false, with the exit
// code) on bad input, or after -check.
func loadServeConfig(args []string) (cfg *proxy.Config, log *slog.Logger, environ []string, code int, ok bool) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file (YAML, docs/config.md)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json")
	check := fs.Bool("check", false, "validate the config (with its environment) and exit: 0 when it would start")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: breakwater serve -config FILE [-check] [-log-level info] [-log-format text]\n\nEnvironment: BREAKWATER_LISTEN, BREAKWATER_MANAGEMENT_KEY, BREAKWATER_DATABASE_URL override the\nconfig's server.listen, server.managementKey and store.url; BREAKWATER_* resilience variables\noverride the file's resilience: section (docs/config.md).")
		fs.PrintDefaults()
	}
	if code, ok := parseFlagsOnly(fs, args, "the config file is given with -config FILE"); !ok {
		return nil, nil, nil, code, false
	}
	if *configPath == "" {
		fmt.Fprintln(os.Stderr, "breakwater serve: -config FILE is required")
		fs.Usage()
		return nil, nil, nil, 2, false
	}
	log, err := newLogger(*logLevel, *logFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "breakwater serve:", err)
		return nil, nil, nil, 2, false
	}
	slog.SetDefault(log)
	scrubStdLog() // net/http quotes an upstream's stray bytes (stdlog.go)

	environ = os.Environ()
	cfg, warnings, err := proxy.LoadConfig(*configPath, environ)
	for _, w := range warnings {
		log.Warn(w)
	}
	for _, w := range envTypoWarnings(environ, cfg.ReferencesEnv) {
		log.Warn(w)
	}
	if err != nil {
		printConfigError(err)
		return nil, nil, nil, 2, false
	}
	if *check {
		fmt.Printf("%s: ok (%d providers, %d combos, %d client keys)\n", *configPath, len(cfg.Providers), len(cfg.Combos), len(cfg.ClientKeys))
		return nil, nil, nil, 0, false
	}
	return cfg, log, environ, 0, true
}

// listenGateway opens the store, builds the gateway on it and listens on
// the configured address; on failure it closes what it opened.
func listenGateway(ctx context.Context, cfg *proxy.Config, log *slog.Logger, environ []string) (*proxy.Gateway, net.Listener, int, bool) {
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "breakwater serve:", err)
		return nil, nil, 1, false
	}
	g, err := proxy.New(ctx, cfg, proxy.Options{Logger: log, Store: st, Environ: environ})
	if err != nil {
		_ = st.Close(ctx)
		printConfigError(err)
		return nil, nil, 2, false
	}
	l, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		_ = g.Close(ctx)
		fmt.Fprintln(os.Stderr, "breakwater serve:", err)
		return nil, nil, 1, false
	}
	return g, l, 0, true
}

// serveUntilSignal serves on l until the server stops or SIGINT/SIGTERM
// comes, then drains.
func serveUntilSignal(ctx context.Context, g *proxy.Gateway, l net.Listener, cfg *proxy.Config, log *slog.Logger) int {
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(l) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-errc:
		if err != nil {
			log.Error("server stopped", "err", err)
			_ = g.Close(ctx)
			return 1
		}
		return 0
	case s := <-sig:
		log.Info("shutting down: draining in-flight requests", "signal", s.String())
	}
	return drain(ctx, g, sig, cfg, log)
}

// drain shuts the gateway down within server.shutdownTimeoutMs (a second
// signal cuts it short) and returns the exit code.
func drain(ctx context.Context, g *proxy.Gateway, sig <-chan os.Signal, cfg *proxy.Config, log *slog.Logger) int {
	timeout := cfg.Server.ShutdownTimeoutMs.Duration()
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go func() {
		<-sig
		log.Warn("second signal: stopping now")
		cancel()
	}()
	cut, failed := shutdownResult(g.Shutdown(sctx))
	if cut {
		// The drain ran out of time (or a second signal came): the rest was
		// cut, and their outcomes were recorded and flushed with the state.
		log.Warn("shutdown: in-flight requests were cut before they finished", "shutdownTimeoutMs", timeout.Milliseconds())
	}
	if failed != nil {
		log.Error("shutdown", "err", failed)
		return 1
	}
	log.Info("stopped; state flushed")
	return 0
}

// shutdownResult splits Gateway.Shutdown's error: whether the drain ran out
// of time (requests were cut; not a failure of the shutdown) and what else
// went wrong (the store flush), which makes the exit status 1.
func shutdownResult(err error) (cut bool, failed error) {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var rest []error
	for _, e := range errs {
		switch {
		case e == nil || errors.Is(e, http.ErrServerClosed):
		case errors.Is(e, proxy.ErrDrainCut):
			cut = true
		default:
			rest = append(rest, e)
		}
	}
	return cut, errors.Join(rest...)
}

// serveEnvVars are the BREAKWATER_* variables serve reads besides the
// resilience ones (settings.EnvVars).
var serveEnvVars = append(proxy.ServerEnvVars(), heapHeadroomEnv)

// envTypoWarnings names BREAKWATER_* variables that serve does not read but
// that are a few letters away from one it does: a mistyped override is
// otherwise ignored without a word (README: BREAKWATER_* overrides). Other
// BREAKWATER_ names are left alone: operators use them for ${ENV} expansion.
func envTypoWarnings(environ []string, referenced func(string) bool) []string {
	known := append([]string(nil), serveEnvVars...)
	for _, v := range settings.EnvVars() {
		known = append(known, v.Name)
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "BREAKWATER_") || settings.EnvOwned(name) || referenced(name) {
			continue // the settings layer judges its own names (an error, not a warning); the file uses the ones it expands
		}
		best, bestD := "", 4 // at most 3 edits away
		for _, k := range known {
			if k == name {
				best, bestD = "", -1
				break
			}
			if d := suggest.EditDistance(name, k); d < bestD {
				best, bestD = k, d
			}
		}
		if best != "" {
			out = append(out, fmt.Sprintf("environment variable %s is not used (did you mean %s?)", name, best))
		}
	}
	return out
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %v", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("-log-format: want text or json, got %q", format)
}

func printConfigError(err error) {
	if ces := proxy.ConfigErrors(err); len(ces) > 0 {
		for _, ce := range ces {
			fmt.Fprintln(os.Stderr, ce.Error())
		}
		if ses := model.SettingsErrors(err); len(ses) > 0 {
			for _, se := range ses {
				fmt.Fprintln(os.Stderr, se.Error())
			}
		}
		return
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(os.Stderr, line)
	}
}

// openStore opens the configured store: memory (with a warning) or Postgres
// with migrations applied.
func openStore(ctx context.Context, cfg *proxy.Config, log *slog.Logger) (proxy.StateStore, error) {
	u := cfg.Store.URL
	if u == "" || u == "memory" {
		log.Warn("store.url is empty: resilience state lives in memory and dies with the process")
		// The memory store keeps the last 10 000 request-log records, so
		// GET /api/request-log and incident export work without a database.
		return store.NewMemory(store.MemoryOptions{}), nil
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pg, err := store.OpenPostgres(octx, u, store.PostgresOptions{Migrate: true, Logger: log})
	if err != nil {
		return nil, err
	}
	return store.TolerantLoad{Postgres: pg, Log: log}, nil
}

// startDemo serves every provider whose baseURL is demo:// from one
// in-process fault upstream (package faults), so `make run` works offline.
// Each demo connection sends its own id as its key, which is how the fault
// upstream tells connections apart.
func startDemo(cfg *proxy.Config, log *slog.Logger) (func(), error) {
	var demo []int
	for i, p := range cfg.Providers {
		if strings.HasPrefix(p.BaseURL, "demo://") {
			demo = append(demo, i)
		}
	}
	if len(demo) == 0 {
		return func() {}, nil
	}
	var rules []faults.Rule
	if cfg.Demo.Faults != "" {
		path := cfg.Demo.Faults
		if !filepath.IsAbs(path) && cfg.File != "" {
			path = filepath.Join(filepath.Dir(cfg.File), path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("demo.faults: %w", err)
		}
		if rules, err = faults.ParseRules(path, b); err != nil {
			return nil, err
		}
	}
	var models []string
	for _, i := range demo {
		models = append(models, cfg.Providers[i].Models...)
	}
	srv := faults.NewServer(rules, faults.Options{Models: models, Seed: 1})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(l)
	for _, i := range demo {
		p := &cfg.Providers[i]
		p.BaseURL = "http://" + l.Addr().String() + "/" + p.ID + "/v1"
		for j := range p.Connections {
			if p.Connections[j].APIKey == "" {
				p.Connections[j].APIKey = p.Connections[j].ID
			}
		}
	}
	log.Info("demo upstream (in-process fault catalog) serving the demo:// providers", "addr", l.Addr().String(), "control", "http://"+l.Addr().String()+"/_faults")
	return func() { hs.Close() }, nil
}
