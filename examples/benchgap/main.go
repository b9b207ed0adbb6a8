// Command benchgap sets the gateway against the net/http floor from one
// `make bench-proxy` run, level by level, and checks the gateway's
// performance targets (docs/performance.md).
//
// bench-proxy runs the floor and the gateway back to back within each
// repetition of each level, so the i-th run of a level on the floor and the
// i-th on the gateway saw the same state of the machine. The difference of
// such a pair does not move when a shared machine drifts between
// repetitions; the median over the pairs is the figure the latency targets
// are read on (the throughput and CPU targets on the median of the pairs'
// ratios), and each side's own median is shown beside it.
//
// Only clean runs are read: a run with failed requests, or without its
// rate and latencies, is an error naming its line, and the two files must
// hold the same number of runs of each level. A target whose figures are
// missing (no CPU or RSS readings) says so instead of passing.
//
// usage: benchgap FLOOR.jsonl GATEWAY.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// run is one line of the perf kit's load output (the fields used here).
type run struct {
	Label  string   `json:"label"`
	Errors int64    `json:"errors"`
	RPS    *float64 `json:"rps"`
	P50    *float64 `json:"p50_us"`
	P99    *float64 `json:"p99_us"`
	// Open loop: the service time from the request's actual send, which
	// leaves out the load tool's own lag behind its schedule.
	SvcP50 *float64 `json:"svc_p50_us"`
	SvcP99 *float64 `json:"svc_p99_us"`
	// The watched target's readings; missing when the load tool watched
	// nothing or could not read the process.
	Procs []struct {
		CPUPct float64 `json:"cpu_pct"`
		RSSMB  float64 `json:"rss_mb"`
	} `json:"procs"`
}

func (r run) level() string {
	_, lvl, _ := strings.Cut(r.Label, "lvl=")
	return strings.TrimSpace(lvl)
}

func (r run) rps() float64 { return *r.RPS }

func (r run) p50() float64 {
	if r.SvcP50 != nil {
		return *r.SvcP50
	}
	return *r.P50
}

func (r run) p99() float64 {
	if r.SvcP99 != nil {
		return *r.SvcP99
	}
	return *r.P99
}

// cpuPerReq is the target's CPU per request in µs; ok is false without a
// CPU reading.
func (r run) cpuPerReq() (us float64, ok bool) {
	if len(r.Procs) == 0 {
		return 0, false
	}
	return r.Procs[0].CPUPct / 100 / r.rps() * 1e6, true
}

// rss is the target's resident memory in MB; ok is false without a
// reading.
func (r run) rss() (mb float64, ok bool) {
	if len(r.Procs) == 0 || r.Procs[0].RSSMB <= 0 {
		return 0, false
	}
	return r.Procs[0].RSSMB, true
}

// check refuses a run that is not a clean measurement: a latency or rate
// of a run whose requests failed says nothing about the target's cost.
func (r run) check() error {
	switch {
	case r.level() == "":
		return fmt.Errorf("label %q names no level (lvl=...)", r.Label)
	case r.Errors > 0:
		return fmt.Errorf("%s: %d requests failed; only runs without errors are a measurement", r.Label, r.Errors)
	case r.RPS == nil || r.P50 == nil || r.P99 == nil:
		return fmt.Errorf("%s: rps, p50_us and p99_us are required", r.Label)
	}
	for _, v := range []*float64{r.RPS, r.P50, r.P99, r.SvcP50, r.SvcP99} {
		if v != nil && (*v <= 0 || *v > maxFigure) {
			return fmt.Errorf("%s: rps and latencies must be above 0 and below %g", r.Label, float64(maxFigure))
		}
	}
	if len(r.Procs) > 0 && r.Procs[0].CPUPct < 0 {
		return fmt.Errorf("%s: negative CPU reading", r.Label)
	}
	return nil
}

// maxFigure bounds a rate (per second) or latency (µs): a thousand seconds
// or a billion requests a second is not a loopback measurement, and the
// bound keeps every difference and ratio finite.
const maxFigure = 1e9

// maxLine bounds one result line; the load tool writes a few hundred bytes.
const maxLine = 1 << 20

// readRuns reads a results file into its runs per level, in file order.
func readRuns(rd io.Reader) (map[string][]run, []string, error) {
	byLevel := map[string][]run{}
	var order []string
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var r run
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", n, err)
		}
		if err := r.check(); err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", n, err)
		}
		lvl := r.level()
		if _, seen := byLevel[lvl]; !seen {
			order = append(order, lvl)
		}
		byLevel[lvl] = append(byLevel[lvl], r)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	if len(order) == 0 {
		return nil, nil, errors.New("no runs")
	}
	return byLevel, order, nil
}

// matchRuns checks that the two files hold the same levels and the same
// number of runs of each: pairs are made by position, so a run missing on
// one side would pair every later run with the wrong one.
func matchRuns(floor, gw map[string][]run) error {
	for lvl, g := range gw {
		if f := floor[lvl]; len(f) != len(g) {
			return fmt.Errorf("level %s: the floor has %d runs and the gateway %d; make bench-proxy writes one of each per repetition", lvl, len(f), len(g))
		}
	}
	for lvl, f := range floor {
		if _, ok := gw[lvl]; !ok {
			return fmt.Errorf("level %s: the floor has %d runs and the gateway none", lvl, len(f))
		}
	}
	return nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// gap is one level's comparison: medians of each side, and the median of
// the paired differences (gateway minus floor) and ratios.
type gap struct {
	level              string
	pairs              int
	floorP50, gwP50    float64 // µs
	p50Gap, p99Gap     float64 // µs, median of the pairs
	floorP99, gwP99    float64 // µs
	rpsRatio, cpuRatio float64 // median of the pairs
	cpuPairs           int     // pairs with a CPU reading on both sides
	gwRSS, gwRSSMax    float64 // MB: median and largest over the gateway's runs
	rssRuns            int     // gateway runs with an RSS reading
}

// compare pairs the floor's and the gateway's runs of one level by their
// order (the i-th of each ran back to back; matchRuns made the counts
// equal).
func compare(level string, floor, gw []run) gap {
	g := gap{level: level, pairs: len(gw)}
	var fp50, gp50, fp99, gp99, d50, d99, rr, cr, rss []float64
	for i, w := range gw {
		f := floor[i]
		fp50, gp50 = append(fp50, f.p50()), append(gp50, w.p50())
		fp99, gp99 = append(fp99, f.p99()), append(gp99, w.p99())
		d50, d99 = append(d50, w.p50()-f.p50()), append(d99, w.p99()-f.p99())
		rr = append(rr, w.rps()/f.rps())
		fc, fok := f.cpuPerReq()
		wc, wok := w.cpuPerReq()
		if fok && wok && fc > 0 {
			cr = append(cr, wc/fc)
		}
		if m, ok := w.rss(); ok {
			rss = append(rss, m)
			g.gwRSSMax = max(g.gwRSSMax, m)
		}
	}
	g.floorP50, g.gwP50, g.floorP99, g.gwP99 = median(fp50), median(gp50), median(fp99), median(gp99)
	g.p50Gap, g.p99Gap = median(d50), median(d99)
	g.rpsRatio, g.cpuRatio, g.gwRSS = median(rr), median(cr), median(rss)
	g.cpuPairs, g.rssRuns = len(cr), len(rss)
	return g
}

// target is one of the gateway's performance targets against the floor:
// a gap in ms that may be at most limit, or a ratio that must be at least
// (atLeast) or at most limit. value's ok is false when the level's runs
// carry no figure for it.
type target struct {
	name    string
	level   string
	limit   float64
	ratio   bool
	atLeast bool
	value   func(gap) (float64, bool)
}

var targets = []target{
	{name: "c1 added p50", level: "c1", limit: 0.03, value: func(g gap) (float64, bool) { return g.p50Gap / 1000, true }},
	{name: "r2000 added p50", level: "r2000", limit: 0.03, value: func(g gap) (float64, bool) { return g.p50Gap / 1000, true }},
	{name: "r2000 added p99", level: "r2000", limit: 0.3, value: func(g gap) (float64, bool) { return g.p99Gap / 1000, true }},
	{name: "c50 requests/s", level: "c50", limit: 0.9, ratio: true, atLeast: true, value: func(g gap) (float64, bool) { return g.rpsRatio, true }},
	{name: "c50 CPU per request", level: "c50", limit: 1.1, ratio: true, value: func(g gap) (float64, bool) { return g.cpuRatio, g.cpuPairs > 0 }},
}

func (t target) met(v float64) bool {
	if t.atLeast {
		return v >= t.limit
	}
	return v <= t.limit
}

func (t target) format(v float64) (value, limit string) {
	switch {
	case !t.ratio:
		return fmt.Sprintf("%+.3f ms", v), fmt.Sprintf("≤ +%.2f ms", t.limit)
	case t.atLeast:
		return fmt.Sprintf("%.2f×", v), fmt.Sprintf("≥ %.1f×", t.limit)
	default:
		return fmt.Sprintf("%.2f×", v), fmt.Sprintf("≤ %.1f×", t.limit)
	}
}

// rssLimitMB is the gateway's steady resident-memory budget.
const rssLimitMB = 50

// orNone formats a figure, or "—" when there is none.
func orNone(ok bool, format string, v ...any) string {
	if !ok {
		return "—"
	}
	return fmt.Sprintf(format, v...)
}

func report(w io.Writer, floor, gw map[string][]run, order []string) {
	fmt.Fprintln(w, "### breakwater against the floor (paired by repetition; open-loop levels on service time)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| level | pairs | p50 ms floor / gateway | p50 gap ms (median of pairs) | p99 ms floor / gateway | p99 gap ms (median of pairs) | rps ratio | CPU/req ratio | gateway RSS MB median / max |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	gaps := map[string]gap{}
	for _, lvl := range order {
		g := compare(lvl, floor[lvl], gw[lvl])
		gaps[lvl] = g
		fmt.Fprintf(w, "| %s | %d | %.3f / %.3f | %+.3f | %.2f / %.2f | %+.2f | %.2f× | %s | %s |\n",
			lvl, g.pairs, g.floorP50/1000, g.gwP50/1000, g.p50Gap/1000, g.floorP99/1000, g.gwP99/1000, g.p99Gap/1000,
			g.rpsRatio, orNone(g.cpuPairs > 0, "%.2f×", g.cpuRatio), orNone(g.rssRuns > 0, "%.0f / %.0f", g.gwRSS, g.gwRSSMax))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | gateway vs floor | limit | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range targets {
		g, ok := gaps[t.level]
		if !ok {
			fmt.Fprintf(w, "| %s | — | — | not measured (LEVELS has no %s) |\n", t.name, t.level)
			continue
		}
		v, ok := t.value(g)
		if !ok {
			fmt.Fprintf(w, "| %s | — | — | not measured (the %s runs carry no CPU readings) |\n", t.name, t.level)
			continue
		}
		value, limit := t.format(v)
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.name, value, limit, verdict(t.met(v)))
	}
	reportRSS(w, gaps, order)
}

// reportRSS checks the steady RSS on the level that needs the most: each
// level's median over its runs, the largest of those.
func reportRSS(w io.Writer, gaps map[string]gap, order []string) {
	worst, at := 0.0, ""
	for _, lvl := range order {
		if g := gaps[lvl]; g.rssRuns > 0 && (at == "" || g.gwRSS > worst) {
			worst, at = g.gwRSS, lvl
		}
	}
	if at == "" {
		fmt.Fprintln(w, "| RSS steady | — | — | not measured (no RSS readings) |")
		return
	}
	fmt.Fprintf(w, "| RSS steady (median of runs, highest level: %s) | %.0f MB | ≤ %d MB | %s |\n", at, worst, rssLimitMB, verdict(worst <= rssLimitMB))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

func readFile(path string) (map[string][]run, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	byLevel, order, err := readRuns(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return byLevel, order, nil
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: benchgap FLOOR.jsonl GATEWAY.jsonl")
		os.Exit(2)
	}
	if err := compareFiles(os.Stdout, os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "benchgap:", err)
		os.Exit(1)
	}
}

func compareFiles(w io.Writer, floorPath, gwPath string) error {
	floor, _, err := readFile(floorPath)
	if err != nil {
		return err
	}
	gw, order, err := readFile(gwPath)
	if err != nil {
		return err
	}
	if err := matchRuns(floor, gw); err != nil {
		return err
	}
	report(w, floor, gw, order)
	return nil
}
