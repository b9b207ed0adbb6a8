package chaos

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy"
)

func TestExampleSchedule(t *testing.T) {
	cfg := exampleConfig(t)
	topo, err := cfg.Topology()
	if err != nil {
		t.Fatal(err)
	}
	s, err := LoadSchedule("../examples/chaos-schedule.yaml", &topo)
	if err != nil {
		t.Fatal(err)
	}
	if s.Duration != 20*time.Second || !s.HasSeed || s.Seed != 7 || len(s.Faults) < 6 {
		t.Fatalf("unexpected schedule: %+v", s)
	}
	ws := windows(s, s.Duration, &topo, &model.Settings{})
	classes := map[WindowClass]bool{}
	for _, w := range ws {
		classes[w.Class] = true
	}
	for _, c := range []WindowClass{ClassProviderTrip, ClassStorm429, ClassBadKey, ClassBadModel} {
		if !classes[c] {
			t.Errorf("the example schedule has no %s window", c)
		}
	}
	for _, p := range []string{"../examples/chaos-postgres-schedule.yaml", "../examples/chaos-findings.yaml"} {
		if _, err := LoadSchedule(p, &topo); err != nil {
			t.Error(err)
		}
	}
	pgCfg, _, err := proxy.LoadConfig("../examples/chaos-postgres.yaml", nil)
	if err != nil {
		t.Error(err)
	} else if pgCfg.Store.URL == "" {
		t.Error("examples/chaos-postgres.yaml has no store.url")
	}
}

// TestScheduleErrors: bad input is rejected before anything starts, and the
// message names the file, the line and the field.
func TestScheduleErrors(t *testing.T) {
	topo := traceTopo()
	cases := []struct {
		name, src, want string
	}{
		{"unknown top-level key", "duration: 5s\nfualts: []\n", `s.yaml:2:1: fualts: unknown key "fualts" (did you mean "faults"?)`},
		{"bad duration", "duration: 5 seconds\n", `s.yaml:1:11: duration: bad duration "5 seconds"`},
		{"unknown fault key", "faults:\n  - at: 1s\n    untill: 2s\n    respond: {status: 503}\n", `s.yaml:3:5: faults[0].untill: unknown key "untill" (did you mean "until"?)`},
		{"unknown provider", "faults:\n  - {at: 1s, match: {provider: alhpa}, respond: {status: 503}}\n", `s.yaml:2:32: faults[0].match.provider: unknown provider "alhpa" (did you mean "alpha"?)`},
		{"unknown connection", "faults:\n  - at: 1s\n    match: {provider: beta, connection: b9}\n    respond: {status: 503}\n", `s.yaml:3:41: faults[0].match.connection: provider "beta" has no connection "b9"`},
		{"model not served", "faults:\n  - at: 1s\n    match: {provider: beta, model: m2}\n    respond: {status: 404}\n", `s.yaml:3:36: faults[0].match.model: provider "beta" does not serve model "m2"`},
		{"unknown catalog entry", "faults:\n  - at: 1s\n    respond: {use: unavailable-530}\n", `s.yaml:3:20: faults[0].respond.use: unknown catalog entry "unavailable-530" (did you mean "unavailable-503"?)`},
		{"bad status", "faults:\n  - at: 1s\n    respond: {status: 999}\n", `s.yaml:3:23: faults[0].respond.status: want an HTTP status 100..599, got 999`},
		{"no response", "faults:\n  - at: 1s\n    match: {provider: alpha}\n", `s.yaml:2:5: faults[0]: a fault needs respond or sequence`},
		{"window ends before it starts", "faults:\n  - {at: 3s, until: 2s, respond: {status: 503}}\n", `s.yaml:2:21: faults[0].until: the window ends (2s) before it starts (at 3s)`},
		{"until and for", "faults:\n  - {at: 1s, until: 2s, for: 1s, respond: {status: 503}}\n", `s.yaml:2:5: faults[0]: give until or for, not both`},
		{"past the fault phase", "duration: 5s\nfaults:\n  - {at: 1s, until: 6s, respond: {status: 503}}\n", `s.yaml:3:21: faults[0].until: ends at 6s, after the end of the fault phase (duration 5s)`},
		{"unknown action", "faults:\n  - {at: 1s, action: reboot}\n", `s.yaml:2:22: faults[0].action: unknown action "reboot"`},
		{"down needs a provider", "faults:\n  - {at: 1s, for: 1s, action: down}\n", `s.yaml:2:5: faults[0].match: action down stops one provider's upstream`},
		{"restart takes no window", "faults:\n  - {at: 1s, for: 1s, action: restart}\n", `s.yaml:2:14: faults[0].for: action restart is an instant: it takes no for`},
		{"action with a response", "faults:\n  - {at: 1s, action: db-down, respond: {status: 503}}\n", `s.yaml:2:31: faults[0].respond: action db-down takes no respond`},
		{"restart during db-down", "faults:\n  - {at: 1s, for: 3s, action: db-down}\n  - {at: 2s, action: restart}\n", `s.yaml:3:5: faults[1]: restart at 2s falls in the db-down window`},
		{"stream fault on an error status", "faults:\n  - {at: 1s, respond: {status: 503, fault: cut}}\n", `s.yaml:2:5: faults[0]: respond: fault cut needs a 2xx stream, not status 503`},
		{"bad probability", "faults:\n  - {at: 1s, probability: 2, respond: {status: 503}}\n", `s.yaml:2:5: faults[0]: probability must be in [0, 1]`},
		{"unknown load model", "load: {models: [alpha/m1, alpha/m3]}\n", `s.yaml:1:27: load.models[1]: unknown model "alpha/m3" (did you mean "alpha/m1"?)`},
		{"bad stream ratio", "load: {streamRatio: 1.5}\n", `s.yaml:1:21: load.streamRatio: want a fraction in [0, 1], got 1.5`},
		{"too many workers", "load: {workers: 100000}\n", `s.yaml:1:17: load.workers: at most 4096 workers`},
		{"not a mapping", "- at: 1s\n", `s.yaml:1:1: want a mapping, got a list`},
		{"empty", "", `s.yaml: empty schedule`},
		{"invalid YAML", "faults: [\n", `s.yaml:1: invalid YAML`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSchedule("s.yaml", []byte(tc.src), topo)
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.src)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, tc.want)
			}
		})
	}
}

// TestScheduleErrorsForTheRun pins docs/chaos.md "a schedule error —
// reported as file:line:column: field: problem before anything starts":
// a -duration shorter than the schedule's windows, a restart in a -target
// run and a db-down without Postgres are schedule errors with a position,
// found while parsing (they were found only after the gateway and the
// upstreams had started, as "file: faults[0] (line 3)").
func TestScheduleErrorsForTheRun(t *testing.T) {
	topo := traceTopo()
	cases := []struct {
		name, src string
		env       RunEnv
		want      string
	}{
		{"-duration shorter than a window", "duration: 20s\nfaults:\n  - {at: 1s, until: 6s, respond: {status: 503}}\n", RunEnv{Duration: 5 * time.Second},
			`s.yaml:3:21: faults[0].until: ends at 6s, after the end of the fault phase (-duration 5s)`},
		{"-duration before a start", "duration: 20s\nfaults:\n  - {at: 7s, for: 1s, respond: {status: 503}}\n", RunEnv{Duration: 5 * time.Second},
			`s.yaml:3:10: faults[0].at: starts at 7s, at or after the end of the fault phase (-duration 5s)`},
		{"for past -duration", "faults:\n  - {at: 1s, for: 9s, respond: {status: 503}}\n", RunEnv{Duration: 5 * time.Second},
			`s.yaml:2:19: faults[0].for: ends at 10s`},
		{"restart with -target", "faults:\n  - {at: 1s, action: restart}\n", RunEnv{Target: true},
			`s.yaml:2:22: faults[0].action: action restart needs the in-process gateway (no -target)`},
		{"db-down without Postgres", "faults:\n  - {at: 1s, for: 1s, action: db-down}\n", RunEnv{},
			`s.yaml:2:31: faults[0].action: action db-down needs a Postgres store`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseSchedule("s.yaml", []byte(tc.src), topo); err != nil && tc.env.Duration == 0 {
				t.Fatalf("without the run the schedule is fine, got %v", err)
			}
			_, err := ParseScheduleFor("s.yaml", []byte(tc.src), topo, &tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, tc.want)
			}
		})
	}
	ok := RunEnv{Duration: 20 * time.Second, Postgres: true}
	if _, err := ParseScheduleFor("s.yaml", []byte("faults:\n  - {at: 1s, for: 1s, action: db-down}\n  - {at: 5s, action: restart}\n"), topo, &ok); err != nil {
		t.Errorf("an in-process Postgres run takes db-down and restart: %v", err)
	}
}

func TestScheduleParsesEverything(t *testing.T) {
	src := `name: all of it
duration: 10s
seed: 42
load: {workers: 2, rate: 15.5, maxInFlight: 64, streamRatio: 0.5, models: [alpha/m1, beta/m1], timeout: 3s}
faults:
  - name: named
    at: 1s
    for: 2s
    match: {provider: alpha, connection: a1, model: m1}
    sequence: [{status: 503}, {use: reset}, {status: 200, latency: 10ms}]
    probability: 0.25
    check: false
  - {at: 2s, match: {provider: beta}, respond: {status: 502}, flap: {down: 300ms, up: 200ms}}
  - {at: 3s, until: 4s, action: down, match: {provider: alpha}}
  - {at: 5s, action: restart}
  - {at: 6s, for: 1s, action: db-down}
`
	s, err := ParseSchedule("all.yaml", []byte(src), traceTopo())
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "all of it" || s.Duration != 10*time.Second || s.Seed != 42 || !s.HasSeed {
		t.Errorf("header: %+v", s)
	}
	l := s.Load
	if *l.Workers != 2 || *l.Rate != 15.5 || *l.MaxInFlight != 64 || *l.StreamRatio != 0.5 || len(l.Models) != 2 || l.Timeout != 3*time.Second {
		t.Errorf("load: %+v", l)
	}
	f := s.Faults
	if len(f) != 5 || f[0].Name != "named" || f[0].At != time.Second || f[0].Until != 3*time.Second || !f[0].NoCheck ||
		len(f[0].Rule.Sequence) != 3 || f[0].Rule.Sequence[1].Fault != faults.Reset || f[0].Rule.Probability != 0.25 || f[0].Line != 6 {
		t.Errorf("faults[0]: %+v", f[0])
	}
	if f[1].Until != 0 || f[1].End(s.Duration) != 10*time.Second || f[1].Rule.Flap == nil || f[1].Rule.Flap.Down != 300*time.Millisecond {
		t.Errorf("faults[1]: %+v", f[1])
	}
	if f[2].Action != ActionDown || f[3].Action != ActionRestart || f[3].End(s.Duration) != 5*time.Second || f[4].Action != ActionDBDown {
		t.Errorf("actions: %+v", f[2:])
	}
}

func TestRandomSchedule(t *testing.T) {
	cfg := exampleConfig(t)
	topo, _ := cfg.Topology()
	st := model.DefaultSettings()
	a := RandomSchedule(&topo, 30*time.Second, 5)
	b := RandomSchedule(&topo, 30*time.Second, 5)
	c := RandomSchedule(&topo, 30*time.Second, 6)
	if !reflect.DeepEqual(a, b) {
		t.Error("the same seed gave two schedules")
	}
	if reflect.DeepEqual(a.Faults, c.Faults) {
		t.Error("two seeds gave the same schedule")
	}
	for seed := uint64(1); seed <= 50; seed++ {
		for _, d := range []time.Duration{time.Second, 6 * time.Second, 45 * time.Second} {
			s := RandomSchedule(&topo, d, seed)
			classes := map[WindowClass]bool{}
			for i, f := range s.Faults {
				if err := f.Rule.Validate(); err != nil {
					t.Fatalf("seed %d faults[%d]: %v", seed, i, err)
				}
				if f.At < 0 || f.Until <= f.At || f.Until > d {
					t.Fatalf("seed %d faults[%d] window %v–%v outside [0, %v]", seed, i, f.At, f.Until, d)
				}
				for _, it := range ruleItems(&f.Rule) {
					if it.StatusOrOK() == 401 || it.StatusOrOK() == 402 || it.StatusOrOK() == 403 || strings.Contains(it.ErrorBody(), "quota") {
						t.Fatalf("seed %d: the random mix must only use faults the liveness bound covers, got %s", seed, f.Label())
					}
				}
			}
			for _, w := range windows(s, d, &topo, &st) {
				classes[w.Class] = true
			}
			for _, want := range []WindowClass{ClassProviderTrip, ClassStorm429, ClassBadKey, ClassBadModel} {
				if !classes[want] && !(want == ClassProviderTrip && hasResetOutage(s)) {
					t.Errorf("seed %d, %v: no %s window in %v", seed, d, want, labels(s))
				}
			}
		}
	}
}

func hasResetOutage(s *Schedule) bool {
	for _, f := range s.Faults {
		if strings.HasPrefix(f.Name, "outage") {
			return true
		}
	}
	return false
}

func labels(s *Schedule) []string {
	var out []string
	for _, f := range s.Faults {
		out = append(out, f.Label())
	}
	return out
}

// FuzzParseSchedule: a schedule file is untrusted input. The parser never
// panics, and whatever it accepts is usable: every fault validates, windows
// are ordered, and the derived windows and bound compute.
func FuzzParseSchedule(f *testing.F) {
	for _, p := range []string{"../examples/chaos-schedule.yaml"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("duration: 5s\nfaults:\n  - {at: 1s, for: 2s, match: {provider: alpha}, respond: {status: 503}}\n"))
	f.Add([]byte("faults:\n  - {at: 1s, action: restart}\n  - {at: 0s, for: 1s, action: db-down}\n"))
	f.Add([]byte("load: {workers: 2, rate: 10, models: [alpha/m1]}\nfaults: []\n"))
	f.Add([]byte("faults:\n  - {at: 1s, sequence: [{use: reset}, {status: 200, stream: {chunks: 3}}], flap: {down: 1s, up: 2s}, probability: 0.5}\n"))
	f.Add([]byte("faults: [{at: 1s, until: 0s}]"))
	f.Add([]byte("&a {faults: *a}"))
	topo := traceTopo()
	st := model.DefaultSettings()
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := ParseSchedule("fuzz.yaml", src, topo)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("an error without the file name: %v", err)
			}
			return
		}
		d := s.Duration
		if d == 0 {
			d = DefaultDuration
		}
		for i := range s.Faults {
			ft := &s.Faults[i]
			if ft.Action == ActionRule {
				if err := ft.Rule.Validate(); err != nil {
					t.Fatalf("accepted an invalid fault: %v", err)
				}
			}
			if ft.Until != 0 && ft.Until <= ft.At {
				t.Fatalf("accepted an empty window %v–%v", ft.At, ft.Until)
			}
			_ = ft.Label()
		}
		ws := windows(s, d, topo, &st)
		LivenessBound(&st, topo, ws, nil, 100*time.Millisecond)
		_ = fmt.Sprint(ws)
	})
}
