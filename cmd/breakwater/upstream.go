package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
)

func init() {
	register("upstream", "run a fake OpenAI-compatible upstream driven by the fault catalog", runUpstream)
}

const upstreamUsage = `usage: breakwater upstream -listen ADDR [-faults FILE] [-speed N] [-seed N] [-max-hold D] [-catalog]

Serves, for any <provider>, in each API's own format (JSON and SSE):
  POST /<provider>/v1/chat/completions              OpenAI chat completions
  POST /<provider>/v1/messages, .../count_tokens    Anthropic Messages
  POST /<provider>/v1/responses                     OpenAI Responses
  POST /<provider>/v1/models/{model}:generateContent, :streamGenerateContent, :batchEmbedContents  Gemini
  POST /<provider>/v1/embeddings                    OpenAI embeddings
  GET  /<provider>/v1/models
Answers honour max_tokens (cut, with the format's length reason), tools (a call of the first
tool) and JSON response formats. The connection is the API key (Bearer, x-api-key or
x-goog-api-key). Control API: GET|PUT|DELETE /_faults, GET|DELETE /_stats,
GET /_catalog. FILE is a list of rules or a scenario file (its upstream: section).`

func runUpstream(args []string) int {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), upstreamUsage)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:8099", "address to listen on (loopback only)")
	file := fs.String("faults", "", "rules file (YAML or JSON; a rule list or a scenario file)")
	speed := fs.Float64("speed", 1, "divide every latency and stall by N; rule windows run N times faster")
	seed := fs.Uint64("seed", 1, "seed of jitter and rule probabilities")
	maxHold := fs.Duration("max-hold", 2*time.Minute, "longest a timeout or an endless stall holds a connection")
	catalog := fs.Bool("catalog", false, "print the fault catalog and exit")
	verbose := fs.Bool("v", false, "log every attempt")
	if code, ok := parseFlagsOnly(fs, args, "a fault file is given with -faults FILE"); !ok {
		return code
	}
	if *speed <= 0 || math.IsInf(*speed, 0) || math.IsNaN(*speed) {
		fmt.Fprintf(os.Stderr, "breakwater upstream: -speed: want a positive number, got %v\n", *speed)
		return 2
	}
	if *catalog {
		for _, e := range faults.Catalog() {
			fmt.Printf("%-28s %s\n", e.Name, e.Doc)
		}
		return 0
	}
	if !loopbackListen(*listen) {
		return 2
	}
	rules, ok := readUpstreamRules(*file)
	if !ok {
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	srv := faults.NewServer(rules, faults.Options{Speed: *speed, Seed: *seed, MaxHold: *maxHold, Logger: log})
	return serveUpstream(*listen, srv, len(rules), log)
}

// loopbackListen says whether listen is a loopback address, and why not
// on stderr: the fake upstream never serves beyond the machine.
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater upstream: -listen: %v\n", err)
		return false
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		fmt.Fprintf(os.Stderr, "breakwater upstream: refusing to listen on %s: the fake upstream serves loopback only\n", listen)
		return false
	}
	return true
}

// readUpstreamRules reads the -faults file ("" is no rules); a bad file
// is reported on stderr.
func readUpstreamRules(file string) ([]faults.Rule, bool) {
	if file == "" {
		return nil, true
	}
	src, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater upstream: %v\n", err)
		return nil, false
	}
	rules, err := faults.ParseRules(file, src)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return nil, false
	}
	return rules, true
}

// serveUpstream serves srv on listen until SIGINT or SIGTERM.
func serveUpstream(listen string, srv http.Handler, rules int, log *slog.Logger) int {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater upstream: %v\n", err)
		return 1
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	log.Info("fault upstream listening", "addr", ln.Addr().String(), "rules", rules,
		"baseURL", "http://"+ln.Addr().String()+"/<provider>/v1", "apiKey", "<connection id>")
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("serve", "err", err)
		return 1
	}
	return 0
}
