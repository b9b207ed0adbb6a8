package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// line is one load result as the perf kit writes it; svcP50 < 0 leaves out
// the open-loop service-time fields.
func line(target, lvl string, rps, p50, p99, svcP50, svcP99, cpu, rss float64) string {
	svc := ""
	if svcP50 >= 0 {
		svc = fmt.Sprintf(`,"svc_p50_us":%g,"svc_p99_us":%g`, svcP50, svcP99)
	}
	return fmt.Sprintf(`{"label":"%s rep=1 lvl=%s","rps":%g,"p50_us":%g,"p99_us":%g%s,"procs":[{"cpu_pct":%g,"rss_mb":%g}]}`+"\n",
		target, lvl, rps, p50, p99, svc, cpu, rss)
}

func mustRead(t *testing.T, s string) (map[string][]run, []string) {
	t.Helper()
	byLevel, order, err := readRuns(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return byLevel, order
}

// The verdict figure is the median of the per-repetition differences: a
// machine that drifts between repetitions moves both runs of a pair alike,
// so the pairs agree even when each side's own spread is wider than the
// gap.
func TestGapIsTheMedianOfPairedDifferences(t *testing.T) {
	var floor, gw strings.Builder
	// Repetition i ran on a machine 100*i µs slower; the gateway is 20 µs
	// behind the floor in each pair, except one pair hit by a stall.
	for i, d := range []float64{20, 20, 900, 20, 20} {
		base := 200 + 100*float64(i)
		floor.WriteString(line("bare-proxy", "c1", 4000, base, 2*base, -1, 0, 70, 15))
		gw.WriteString(line("breakwater", "c1", 3600, base+d, 2*base+d, -1, 0, 72, 30))
	}
	f, _ := mustRead(t, floor.String())
	g, _ := mustRead(t, gw.String())
	got := compare("c1", f["c1"], g["c1"])
	if got.pairs != 5 || got.p50Gap != 20 || got.p99Gap != 20 {
		t.Fatalf("pairs %d, p50 gap %v, p99 gap %v; want 5 pairs and a 20 µs gap", got.pairs, got.p50Gap, got.p99Gap)
	}
	// Each side's own median differs by more than the paired gap here
	// (the stalled pair moves the gateway's median).
	if got.gwP50-got.floorP50 == got.p50Gap {
		t.Fatalf("side medians %v/%v should differ from the paired gap", got.floorP50, got.gwP50)
	}
	if want := 72.0 / 3600 / (70.0 / 4000); fmt.Sprintf("%.4f", got.cpuRatio) != fmt.Sprintf("%.4f", want) {
		t.Fatalf("CPU ratio %v, want %v", got.cpuRatio, want)
	}
}

// An open-loop run is read on its service time (from the request's actual
// send), as the perf kit's summary does: the load tool's own lag behind
// its schedule is not the target's.
func TestOpenLoopUsesServiceTime(t *testing.T) {
	f, _ := mustRead(t, line("bare-proxy", "r2000", 2000, 5000, 9000, 300, 800, 26, 15))
	g, _ := mustRead(t, line("breakwater", "r2000", 2000, 5100, 9900, 320, 900, 31, 30))
	got := compare("r2000", f["r2000"], g["r2000"])
	if got.p50Gap != 20 || got.p99Gap != 100 {
		t.Fatalf("p50 gap %v, p99 gap %v; want 20 and 100 (service times)", got.p50Gap, got.p99Gap)
	}
}

// The targets table says met or not met against each limit, and names a
// target whose level the run did not measure instead of passing it.
func TestReportVerdicts(t *testing.T) {
	floor := line("bare-proxy", "c1", 4000, 200, 400, -1, 0, 70, 15) +
		line("bare-proxy", "r2000", 2000, 900, 1500, 300, 800, 26, 15)
	// c1: +0.02 ms, met; r2000: +0.04 ms p50 and 60 MB, which the c1
	// runs' 30 MB must not outvote.
	gw := line("breakwater", "c1", 3800, 220, 430, -1, 0, 72, 30) +
		line("breakwater", "r2000", 2000, 950, 2500, 340, 1200, 31, 60)
	reportHas(t, floor, gw,
		"| c1 added p50 | +0.020 ms | ≤ +0.03 ms | met |",
		"| r2000 added p50 | +0.040 ms | ≤ +0.03 ms | not met |",
		"| r2000 added p99 | +0.400 ms | ≤ +0.30 ms | not met |",
		"| c50 requests/s | — | — | not measured (LEVELS has no c50) |",
		"| RSS steady (median of runs, highest level: r2000) | 60 MB | ≤ 50 MB | not met |",
	)
}

// reportHas checks that the report on two results files holds each of
// the wanted lines.
func reportHas(t *testing.T, floor, gw string, wants ...string) {
	t.Helper()
	f, _ := mustRead(t, floor)
	g, order := mustRead(t, gw)
	var out bytes.Buffer
	report(&out, f, g, order)
	for _, want := range wants {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// A line that is not a clean load result is an error that says where,
// not a silently shorter table or a figure of 0 that passes a target: a
// run whose requests failed, one without its rate or latencies, a label
// without a level, an implausible figure, a line past the size bound.
func TestReadRunsRejectsBadLines(t *testing.T) {
	ok := line("bare-proxy", "c1", 4000, 200, 400, -1, 0, 70, 15)
	for name, in := range map[string]string{
		"not json":      ok + "not json\n",
		"no level":      `{"label":"no level here","rps":1,"p50_us":1,"p99_us":1}` + "\n",
		"failed":        `{"label":"x lvl=c1","errors":9000,"rps":0,"p50_us":0,"p99_us":0}` + "\n",
		"no figures":    `{"label":"x lvl=c1"}` + "\n",
		"null figures":  `{"label":"x lvl=c1","rps":null,"p50_us":null,"p99_us":null}` + "\n",
		"zero rps":      `{"label":"x lvl=c1","rps":0,"p50_us":200,"p99_us":400}` + "\n",
		"negative":      `{"label":"x lvl=c1","rps":10,"p50_us":-200,"p99_us":400}` + "\n",
		"implausible":   `{"label":"x lvl=c1","rps":10,"p50_us":1e308,"p99_us":400}` + "\n",
		"too long line": ok + `{"label":"x lvl=c1","pad":"` + strings.Repeat("a", maxLine) + `"}` + "\n",
	} {
		_, _, err := readRuns(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: readRuns = %v; want an error naming the line", name, err)
		}
	}
	if _, _, err := readRuns(strings.NewReader("\n")); err == nil {
		t.Error("an empty file read as a result")
	}
}

// Pairs are made by position, so the files must hold the same levels and
// the same number of runs of each; a run missing on one side would pair
// every later run with the wrong one.
func TestRunCountsMustMatch(t *testing.T) {
	one := line("bare-proxy", "c1", 4000, 200, 400, -1, 0, 70, 15)
	two := one + one
	r2000 := line("bare-proxy", "r2000", 2000, 900, 1500, 300, 800, 26, 15)
	for name, c := range map[string][2]string{
		"fewer floor runs":      {one, two},
		"fewer gateway runs":    {two, one},
		"level only on floor":   {one + r2000, one},
		"level only on gateway": {one, one + r2000},
	} {
		f, _ := mustRead(t, c[0])
		g, _ := mustRead(t, c[1])
		if err := matchRuns(f, g); err == nil || !strings.Contains(err.Error(), "level ") {
			t.Errorf("%s: matchRuns = %v; want an error naming the level", name, err)
		}
	}
}

// Without CPU or RSS readings (the load tool watched no process) those
// targets read "not measured", never a 0 that passes.
func TestMissingReadingsAreNotMeasured(t *testing.T) {
	noProcs := func(target string) string {
		return fmt.Sprintf(`{"label":"%s rep=1 lvl=c50","rps":12000,"p50_us":2000,"p99_us":9000}`+"\n", target)
	}
	reportHas(t, noProcs("bare-proxy"), noProcs("breakwater"),
		"| c50 CPU per request | — | — | not measured (the c50 runs carry no CPU readings) |",
		"| RSS steady | — | — | not measured (no RSS readings) |",
		"| c50 requests/s | 1.00× | ≥ 0.9× | met |",
	)
}
