package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/incident"
	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/store"
)

func init() {
	register("incident", "export a window of the request log as a replayable scenario (incident export)", runIncident)
}

const incidentUsage = `usage: breakwater incident export -from T [-to T] (-database URL | -log FILE.jsonl) [-config FILE] [-o OUT.yaml] [-window D] [-name S]

T is an RFC 3339 instant (2026-01-02T15:04:05Z), "now", or a negative duration
relative to now (-1h, -90m). -to defaults to now. The window is [from, to).
-log - reads JSONL from stdin; GET /api/request-log?since=&until=&format=jsonl
on a running gateway writes that file.

Exit status: 0 written, 1 nothing to export or the source failed, 2 bad flags or input.`

// incidentNow is the clock relative times read (tests pin it).
var incidentNow = time.Now

func runIncident(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(os.Stderr, incidentUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] != "export" {
		fmt.Fprintf(os.Stderr, "breakwater incident: unknown subcommand %q (want export)\n\n%s\n", args[0], incidentUsage)
		return 2
	}
	return runIncidentExport(args[1:], os.Stdin, os.Stdout, os.Stderr)
}

func runIncidentExport(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &incidentExport{stdin: stdin, stdout: stdout, stderr: stderr}
	opts, code, ok := c.parse(args)
	if !ok {
		return code
	}
	recs, code, ok := c.read(&opts)
	if !ok {
		return code
	}
	out, sum, err := incident.Export(recs, opts)
	if err != nil {
		if errors.Is(err, incident.ErrEmptyWindow) {
			return c.fail(1, "%v: nothing to export (check -from/-to, which are UTC unless they carry an offset)", err)
		}
		return c.fail(2, "%v", err)
	}
	return c.write(out, sum)
}

// incidentExport is one run of `breakwater incident export`.
type incidentExport struct {
	stdin                   io.Reader
	stdout, stderr          io.Writer
	dbURL, logPath, outPath string
}

func (c *incidentExport) fail(code int, format string, a ...any) int {
	fmt.Fprintf(c.stderr, "breakwater incident export: "+format+"\n", a...)
	return code
}

// parse reads the flags into the export's options and the source and
// output paths; ok false ends the command with code.
func (c *incidentExport) parse(args []string) (opts incident.Options, code int, ok bool) {
	fs := flag.NewFlagSet("incident export", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintln(c.stderr, incidentUsage)
		fs.PrintDefaults()
	}
	fromS := fs.String("from", "", "window start: RFC 3339, now, or relative (-1h)")
	toS := fs.String("to", "now", "window end (exclusive): RFC 3339, now, or relative (-10m)")
	fs.StringVar(&c.dbURL, "database", "", "read the request log table of this Postgres database (postgres://...)")
	fs.StringVar(&c.logPath, "log", "", "read request log records from this JSONL file (- = stdin)")
	cfgPath := fs.String("config", "", "the gateway config: providers, combos, aliases and resilience settings (else derived from the log)")
	fs.StringVar(&c.outPath, "o", "", "write the scenario here (default stdout)")
	window := fs.Duration("window", time.Minute, "width of the recorded-facts expect windows")
	name := fs.String("name", "", "scenario name (default: incident FROM .. TO)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return opts, 0, false
		}
		return opts, 2, false
	}
	if fs.NArg() > 0 {
		return opts, c.fail(2, "unexpected argument %q (flags only)", fs.Arg(0)), false
	}
	from, to, err := incident.ParseWindow(*fromS, *toS, incidentNow())
	if err != nil {
		return opts, c.fail(2, "%v", err), false
	}
	if (c.dbURL == "") == (c.logPath == "") {
		return opts, c.fail(2, "give exactly one source: -database postgres://... or -log FILE.jsonl"), false
	}
	if *window <= 0 {
		return opts, c.fail(2, "-window must be positive, got %v", *window), false
	}
	opts = incident.Options{From: from, To: to, Window: *window, Name: *name}
	if *cfgPath != "" {
		cfg, _, err := proxy.LoadConfig(*cfgPath, os.Environ())
		if err != nil {
			fmt.Fprintf(c.stderr, "breakwater incident export: -config:\n")
			for _, line := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(c.stderr, "  %s\n", line)
			}
			return opts, 2, false
		}
		opts.Config = topologyOf(cfg)
	}
	return opts, 0, true
}

// read reads the window's records from the JSONL file (or stdin) or the
// database, and names the source in opts.
func (c *incidentExport) read(opts *incident.Options) (recs []store.LogRecord, code int, ok bool) {
	from, to := opts.From, opts.To
	if c.logPath != "" {
		in, label := c.stdin, "stdin"
		if c.logPath != "-" {
			f, err := os.Open(c.logPath)
			if err != nil {
				return nil, c.fail(2, "-log: %v", err), false
			}
			defer f.Close()
			in, label = f, c.logPath
		}
		opts.Source = "JSONL file " + label
		recs, err := incident.ReadJSONL(in, label, from, to)
		if err != nil {
			var ie *incident.InputError
			if errors.As(err, &ie) {
				return nil, c.fail(2, "%v", err), false
			}
			return nil, c.fail(1, "%v", err), false
		}
		return recs, 0, true
	}
	u, err := url.Parse(c.dbURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// Never echo the URL: it may carry a password.
		return nil, c.fail(2, "-database wants a postgres:// URL"), false
	}
	opts.Source = "Postgres request log (proxy_logs) on " + redactDBURL(u)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	recs, err = incident.ReadPostgres(ctx, c.dbURL, from, to)
	cancel()
	if err != nil {
		return nil, c.fail(1, "reading the request log from %s: %v", redactDBURL(u), redactURLErr(err, c.dbURL)), false
	}
	return recs, 0, true
}

// write checks the scenario, writes it to -o (atomically) or stdout and
// says what was exported.
func (c *incidentExport) write(out []byte, sum incident.Summary) int {
	stderr := c.stderr
	target := cmpOr(c.outPath, "-")
	if _, err := incident.Check(target, out); err != nil {
		return c.fail(1, "%v", err)
	}
	if c.outPath == "" || c.outPath == "-" {
		if _, err := c.stdout.Write(out); err != nil {
			return c.fail(1, "%v", err)
		}
	} else if err := writeFileAtomic(c.outPath, out); err != nil {
		return c.fail(1, "%v", err)
	}
	fmt.Fprintf(stderr, "exported %d attempt(s) of %d request(s) (%d ended on a 2xx) over %d connection(s), %d rule(s)",
		sum.Records, sum.Requests, sum.Succeeded, sum.Connections, sum.Rules)
	if sum.Actions > 0 {
		fmt.Fprintf(stderr, ", %d operator action(s)", sum.Actions)
	}
	if sum.Skipped > 0 {
		fmt.Fprintf(stderr, ", %d record(s) skipped", sum.Skipped)
	}
	fmt.Fprintf(stderr, " → %s\n", target)
	for _, n := range sum.Notes {
		fmt.Fprintf(stderr, "  note: %s\n", n)
	}
	return 0
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// redactDBURL names a database without its credentials or parameters.
func redactDBURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.Path
}

// redactURLErr removes the URL (and its password) from a driver error.
func redactURLErr(err error, dbURL string) string {
	s := err.Error()
	if dbURL != "" {
		s = strings.ReplaceAll(s, dbURL, "<database url>")
	}
	if u, perr := url.Parse(dbURL); perr == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			s = strings.ReplaceAll(s, p, "<password>")
		}
	}
	return s
}

// writeFileAtomic writes via a temporary file so a failed export never
// leaves half a scenario behind.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".incident-*.yaml")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// topologyOf keeps what an incident replay needs from the config: never a
// credential, a base URL or a client key.
func topologyOf(cfg *proxy.Config) *incident.Topology {
	t := &incident.Topology{File: cfg.File, Aliases: cfg.Aliases}
	if len(cfg.Resilience) > 0 {
		t.Resilience = map[string]any(cfg.Resilience)
	}
	for _, p := range cfg.Providers {
		ip := incident.Provider{ID: p.ID, Type: p.Type, Profile: p.Profile, Strategy: p.Strategy, Models: p.Models,
			PerModelQuota: p.PerModelQuota, DailyResetUTC: p.DailyResetUTC, QuotaFamilies: p.QuotaFamilies}
		for _, c := range p.Connections {
			ip.Connections = append(ip.Connections, incident.Connection{ID: c.ID, Priority: c.Priority, Weight: c.Weight, DisableCooling: c.DisableCooling})
		}
		t.Providers = append(t.Providers, ip)
	}
	for _, c := range cfg.Combos {
		ic := incident.Combo{ID: c.ID, Strategy: c.Strategy, Mode: c.Mode}
		for _, tg := range c.Targets {
			ic.Targets = append(ic.Targets, incident.Target{Target: tg.Target, Connection: tg.Connection, Weight: tg.Weight})
		}
		t.Combos = append(t.Combos, ic)
	}
	return t
}
