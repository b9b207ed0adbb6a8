package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// RandomSchedule builds a seeded mix of faults for a fault phase of length
// d: the same topology, length and seed give the same schedule. Every run
// gets at least one whole-provider outage, one 429 storm, one bad key and
// one bad model (where the topology has a provider with two connections /
// two models), then random extras: timeouts, flapping, latency and broken
// streams. Only faults whose recovery the settings bound are used (no
// quota, no terminal states), so the liveness check applies.
func RandomSchedule(topo *model.Topology, d time.Duration, seed uint64) *Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x6368616f73)) // "chaos"
	s := &Schedule{Name: fmt.Sprintf("random mix (seed %d)", seed), Duration: d, Seed: seed, HasSeed: true}
	if len(topo.Providers) == 0 || d < time.Second {
		return s
	}
	pick := func(ps []int) *model.ProviderConfig { return &topo.Providers[ps[rng.IntN(len(ps))]] }
	var all, multiConn, multiModel []int
	for i, p := range topo.Providers {
		all = append(all, i)
		if len(p.Connections) >= 2 {
			multiConn = append(multiConn, i)
		}
		if len(p.Models) >= 2 {
			multiModel = append(multiModel, i)
		}
	}
	window := func() (time.Duration, time.Duration) {
		lo, hi := max(d/8, time.Second), max(d/3, time.Second)
		l := min(lo+time.Duration(rng.Int64N(int64(hi-lo)+1)), d)
		at := time.Duration(rng.Int64N(int64(d-l) + 1)).Truncate(100 * time.Millisecond)
		return at, min(at+l.Truncate(100*time.Millisecond), d)
	}
	add := func(name string, m faults.Match, r faults.Response, mod func(*faults.Rule)) {
		at, until := window()
		f := Fault{Name: name, At: at, Until: until}
		f.Rule.Match = m
		f.Rule.Respond = &r
		if mod != nil {
			mod(&f.Rule)
		}
		s.Faults = append(s.Faults, f)
	}
	statuses := []int{500, 502, 503, 504}
	outage := func() {
		p := pick(all)
		if rng.IntN(4) == 0 {
			add("outage: reset on "+p.ID, faults.Match{Provider: p.ID}, faults.Response{Fault: faults.Reset}, nil)
			return
		}
		st := statuses[rng.IntN(len(statuses))]
		add(fmt.Sprintf("outage: %d on %s", st, p.ID), faults.Match{Provider: p.ID}, faults.Response{Status: st}, nil)
	}
	storm := func() {
		p := pick(all)
		r := faults.Response{Status: 429}
		name := "429 storm on " + p.ID
		if rng.IntN(2) == 0 {
			r.Headers = map[string]string{"Retry-After": "1"}
			name += " (Retry-After 1)"
		}
		add(name, faults.Match{Provider: p.ID}, r, nil)
	}
	badKey := func() {
		if len(multiConn) == 0 {
			return
		}
		p := pick(multiConn)
		c := p.Connections[rng.IntN(len(p.Connections))].ID
		st := []int{503, 429, 500}[rng.IntN(3)]
		add(fmt.Sprintf("bad key %s/%s: %d", p.ID, c, st), faults.Match{Provider: p.ID, Connection: c}, faults.Response{Status: st}, nil)
	}
	badModel := func() {
		if len(multiModel) == 0 {
			return
		}
		p := pick(multiModel)
		m := p.Models[rng.IntN(len(p.Models))]
		r, _ := faults.Preset("model-not-found-404")
		add(fmt.Sprintf("bad model %s/%s: 404", p.ID, m), faults.Match{Provider: p.ID, Model: m}, r, nil)
	}
	extras := []func(){
		outage,
		storm,
		badKey,
		func() { // no answer until the gateway's header timeout
			p := pick(all)
			add("timeout on "+p.ID, faults.Match{Provider: p.ID}, faults.Response{Fault: faults.Timeout}, nil)
		},
		func() { // broken streams now and then (malformed-chunk and no-done
			// were the findings of docs/chaos.md, since handled)
			p := pick(all)
			var r faults.Response
			switch rng.IntN(4) {
			case 0:
				r = faults.Response{Fault: faults.Cut, Stream: faults.Stream{StallAfter: 2}}
			case 1:
				r = faults.Response{Fault: faults.Stall, Stream: faults.Stream{StallAfter: 1}}
			case 2:
				r = faults.Response{Fault: faults.MalformedChunk, Stream: faults.Stream{StallAfter: 2}}
			default:
				r = faults.Response{Fault: faults.NoDone}
			}
			add(fmt.Sprintf("%s on %s p=0.3", r.Fault, p.ID), faults.Match{Provider: p.ID}, r, func(rl *faults.Rule) { rl.Probability = 0.3 })
		},
		func() { // slow upstream
			p := pick(all)
			lat := time.Duration(100+rng.IntN(200)) * time.Millisecond
			add(fmt.Sprintf("latency %v on %s", lat, p.ID), faults.Match{Provider: p.ID}, faults.Response{Latency: lat, Jitter: 50 * time.Millisecond}, nil)
		},
		func() { // flapping
			p := pick(all)
			add("flapping 503 on "+p.ID, faults.Match{Provider: p.ID}, faults.Response{Status: 503},
				func(rl *faults.Rule) {
					rl.Flap = &faults.Flap{Down: 400 * time.Millisecond, Up: 400 * time.Millisecond}
				})
		},
	}
	outage()
	storm()
	badKey()
	badModel()
	n := min(max(0, int(d/(5*time.Second))-2), 8)
	for range n {
		extras[rng.IntN(len(extras))]()
	}
	// In time order: where windows overlap, the one that started later wins
	// (the last matching rule answers).
	slices.SortStableFunc(s.Faults, func(a, b Fault) int { return int(a.At - b.At) })
	return s
}
