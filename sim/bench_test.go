package sim

import (
	"github.com/breakwater-gw/breakwater/model/settings"
	"io"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// simpleScenario: one provider with two keys, n requests 1 ms apart, all
// served.
func simpleScenario(tb testing.TB, n int) *Scenario {
	s, _, err := settings.Resolve()
	if err != nil {
		tb.Fatal(err)
	}
	return &Scenario{Name: "bench", File: "bench", Seed: 1, Settings: s,
		Topology: model.Topology{Providers: []model.ProviderConfig{{ID: "p", Models: []string{"m"},
			Connections: []model.ConnectionConfig{{ID: "k1"}, {ID: "k2"}}}}},
		Traffic: []Traffic{{Model: "p/m", Count: n, Every: time.Millisecond}}}
}

// faultyDay: 24 simulated hours of 50 req/s over two providers in a combo,
// with a rate-limited key, a flapping provider and random 503s.
func faultyDay(tb testing.TB, hours int) *Scenario {
	s, _, err := settings.Resolve()
	if err != nil {
		tb.Fatal(err)
	}
	ok := &faults.Response{Status: 429, Headers: map[string]string{"Retry-After": "5"}}
	bad := &faults.Response{Status: 503, Latency: 200 * time.Millisecond}
	slow := &faults.Response{Latency: 800 * time.Millisecond, Jitter: 400 * time.Millisecond}
	n := hours * 3600 * 50
	return &Scenario{Name: "faulty day", File: "bench", Seed: 1, Settings: s,
		Topology: model.Topology{
			Providers: []model.ProviderConfig{
				{ID: "a", Models: []string{"m"}, Connections: []model.ConnectionConfig{{ID: "k1"}, {ID: "k2"}, {ID: "k3"}}},
				{ID: "b", Models: []string{"m"}, Connections: []model.ConnectionConfig{{ID: "o1"}, {ID: "o2"}}},
			},
			Combos: []model.ComboConfig{{ID: "c", Targets: []model.ComboTarget{{Provider: "a", Model: "m"}, {Provider: "b", Model: "m"}}}},
		},
		Rules: []faults.Rule{
			{Respond: slow},
			{Match: faults.Match{Provider: "a", Connection: "k1"}, Respond: ok, Probability: 0.3},
			{Match: faults.Match{Provider: "a"}, Respond: bad, Flap: &faults.Flap{Down: 2 * time.Minute, Up: 58 * time.Minute}},
			{Match: faults.Match{Provider: "b"}, Respond: bad, Probability: 0.02},
		},
		Traffic:    []Traffic{{Model: "c", Count: n, Every: 20 * time.Millisecond, Poisson: true}},
		NoLiveness: true,
	}
}

func benchRun(b *testing.B, sc *Scenario, opts Options) {
	b.ReportAllocs()
	var reqs int
	for b.Loop() {
		res, err := Run(sc, opts)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Violations) > 0 {
			b.Fatal(res.Violations[0])
		}
		reqs += res.Requests
	}
	b.ReportMetric(float64(reqs)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkSimple: the target ≥ 1 000 000 simulated requests per
// wall second on one core, trace hash computed incrementally.
func BenchmarkSimple(b *testing.B) { benchRun(b, simpleScenario(b, 200_000), Options{}) }

// BenchmarkSimpleJSONTrace: ≥ 200 000 req/s with the JSON trace written.
func BenchmarkSimpleJSONTrace(b *testing.B) {
	benchRun(b, simpleScenario(b, 200_000), Options{Trace: io.Discard})
}

// BenchmarkFaultyHour: one simulated hour of 50 req/s with faults; the
// 24-hour run (≈ 4.3 M requests, target ≤ 10 s) is TestFaultyDay under
// -long, or this × 24.
func BenchmarkFaultyHour(b *testing.B) { benchRun(b, faultyDay(b, 1), Options{}) }
