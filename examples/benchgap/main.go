// Command benchgap sets the gateway against the net/http floor from one
// `make bench-proxy` run, level by level, and checks the gateway's
// performance targets (docs/performance.md).
//
// bench-proxy runs the floor and the gateway back to back within each
// repetition of each level, so the i-th run of a level on the floor and the
// i-th on the gateway saw the same state of the machine. The difference of
// such a pair does not move when a shared machine drifts between
// repetitions; the median over the pairs is the figure the targets are read
// on, and each side's own median is shown beside it.
//
// usage: benchgap FLOOR.jsonl GATEWAY.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// run is one line of the perf kit's load output (the fields used here).
type run struct {
	Label string  `json:"label"`
	Mode  string  `json:"mode"`
	RPS   float64 `json:"rps"`
	P50   float64 `json:"p50_us"`
	P99   float64 `json:"p99_us"`
	// Open loop: the service time from the request's actual send, which
	// leaves out the load tool's own lag behind its schedule.
	SvcP50 *float64 `json:"svc_p50_us"`
	SvcP99 *float64 `json:"svc_p99_us"`
	Procs  []struct {
		CPUPct float64 `json:"cpu_pct"`
		RSSMB  float64 `json:"rss_mb"`
	} `json:"procs"`
}

func (r run) level() string {
	_, lvl, _ := strings.Cut(r.Label, "lvl=")
	return lvl
}

func (r run) p50() float64 {
	if r.SvcP50 != nil {
		return *r.SvcP50
	}
	return r.P50
}

func (r run) p99() float64 {
	if r.SvcP99 != nil {
		return *r.SvcP99
	}
	return r.P99
}

// cpuPerReq is the target's CPU per request in µs.
func (r run) cpuPerReq() float64 {
	if len(r.Procs) == 0 || r.RPS <= 0 {
		return 0
	}
	return r.Procs[0].CPUPct / 100 / r.RPS * 1e6
}

func (r run) rss() float64 {
	if len(r.Procs) == 0 {
		return 0
	}
	return r.Procs[0].RSSMB
}

// readRuns reads a results file into its runs per level, in file order.
func readRuns(rd io.Reader) (map[string][]run, []string, error) {
	byLevel := map[string][]run{}
	var order []string
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var r run
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", n, err)
		}
		lvl := r.level()
		if lvl == "" {
			return nil, nil, fmt.Errorf("line %d: label %q names no level (lvl=...)", n, r.Label)
		}
		if _, seen := byLevel[lvl]; !seen {
			order = append(order, lvl)
		}
		byLevel[lvl] = append(byLevel[lvl], r)
	}
	return byLevel, order, sc.Err()
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
	gwRSS, gwRSSMax    float64 // MB: median and largest over the gateway's runs
}

// compare pairs the floor's and the gateway's runs of one level by their
// order (the i-th of each ran back to back).
func compare(level string, floor, gw []run) gap {
	n := min(len(floor), len(gw))
	g := gap{level: level, pairs: n}
	var fp50, gp50, fp99, gp99, d50, d99, rr, cr, rss []float64
	for i := range n {
		f, w := floor[i], gw[i]
		fp50, gp50 = append(fp50, f.p50()), append(gp50, w.p50())
		fp99, gp99 = append(fp99, f.p99()), append(gp99, w.p99())
		d50, d99 = append(d50, w.p50()-f.p50()), append(d99, w.p99()-f.p99())
		if f.RPS > 0 {
			rr = append(rr, w.RPS/f.RPS)
		}
		if c := f.cpuPerReq(); c > 0 {
			cr = append(cr, w.cpuPerReq()/c)
		}
		rss = append(rss, w.rss())
		g.gwRSSMax = max(g.gwRSSMax, w.rss())
	}
	g.floorP50, g.gwP50, g.floorP99, g.gwP99 = median(fp50), median(gp50), median(fp99), median(gp99)
	g.p50Gap, g.p99Gap = median(d50), median(d99)
	g.rpsRatio, g.cpuRatio, g.gwRSS = median(rr), median(cr), median(rss)
	return g
}

// target is one of the gateway's performance targets against the floor:
// a gap in ms that may be at most limit, or a ratio that must be at least
// (atLeast) or at most limit.
type target struct {
	name    string
	level   string
	limit   float64
	ratio   bool
	atLeast bool
	value   func(gap) float64
}

var targets = []target{
	{name: "c1 added p50", level: "c1", limit: 0.03, value: func(g gap) float64 { return g.p50Gap / 1000 }},
	{name: "r2000 added p50", level: "r2000", limit: 0.03, value: func(g gap) float64 { return g.p50Gap / 1000 }},
	{name: "r2000 added p99", level: "r2000", limit: 0.3, value: func(g gap) float64 { return g.p99Gap / 1000 }},
	{name: "c50 requests/s", level: "c50", limit: 0.9, ratio: true, atLeast: true, value: func(g gap) float64 { return g.rpsRatio }},
	{name: "c50 CPU per request", level: "c50", limit: 1.1, ratio: true, value: func(g gap) float64 { return g.cpuRatio }},
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

func report(w io.Writer, floor, gw map[string][]run, order []string) {
	fmt.Fprintln(w, "### breakwater against the floor (paired by repetition)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| level | pairs | p50 ms floor / gateway | p50 gap ms (median of pairs) | p99 ms floor / gateway | p99 gap ms (median of pairs) | rps ratio | CPU/req ratio | gateway RSS MB median / max |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	gaps := map[string]gap{}
	rssAll := []float64{}
	for _, lvl := range order {
		if len(gw[lvl]) == 0 {
			continue
		}
		g := compare(lvl, floor[lvl], gw[lvl])
		gaps[lvl] = g
		for _, r := range gw[lvl][:g.pairs] {
			rssAll = append(rssAll, r.rss())
		}
		fmt.Fprintf(w, "| %s | %d | %.3f / %.3f | %+.3f | %.2f / %.2f | %+.2f | %.2f× | %.2f× | %.0f / %.0f |\n",
			lvl, g.pairs, g.floorP50/1000, g.gwP50/1000, g.p50Gap/1000, g.floorP99/1000, g.gwP99/1000, g.p99Gap/1000,
			g.rpsRatio, g.cpuRatio, g.gwRSS, g.gwRSSMax)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | gateway vs floor | limit | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range targets {
		g, ok := gaps[t.level]
		if !ok || g.pairs == 0 {
			fmt.Fprintf(w, "| %s | — | — | not measured (LEVELS has no %s) |\n", t.name, t.level)
			continue
		}
		v := t.value(g)
		value, limit := t.format(v)
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.name, value, limit, verdict(t.met(v)))
	}
	if len(rssAll) > 0 {
		steady := median(rssAll)
		fmt.Fprintf(w, "| RSS steady (median of the gateway's runs) | %.0f MB | ≤ %d MB | %s |\n", steady, rssLimitMB, verdict(steady <= rssLimitMB))
	}
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
	report(w, floor, gw, order)
	return nil
}
