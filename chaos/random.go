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
	m := &mixer{rng: rng, topo: topo, d: d, s: s}
	for i, p := range topo.Providers {
		m.all = append(m.all, i)
		if len(p.Connections) >= 2 {
			m.multiConn = append(m.multiConn, i)
		}
		if len(p.Models) >= 2 {
			m.multiModel = append(m.multiModel, i)
		}
	}
	extras := []func(){m.outage, m.storm, m.badKey, m.timeout, m.brokenStream, m.slow, m.flapping}
	m.outage()
	m.storm()
	m.badKey()
	m.badModel()
	n := min(max(0, int(d/(5*time.Second))-2), 8)
	for range n {
		extras[rng.IntN(len(extras))]()
	}
	// In time order: where windows overlap, the one that started later wins
	// (the last matching rule answers).
	slices.SortStableFunc(s.Faults, func(a, b Fault) int { return int(a.At - b.At) })
	return s
}

// mixer adds random faults to a schedule. Every choice comes from rng, in
// a fixed order, so that a seed gives the same schedule.
type mixer struct {
	rng  *rand.Rand
	topo *model.Topology
	d    time.Duration
	s    *Schedule
	// Indexes of all providers, of those with two connections and of
	// those with two models.
	all, multiConn, multiModel []int
}

func (m *mixer) pick(ps []int) *model.ProviderConfig {
	return &m.topo.Providers[ps[m.rng.IntN(len(ps))]]
}

// window picks a fault window of between an eighth and a third of the
// phase (at least a second), on 100 ms steps.
func (m *mixer) window() (time.Duration, time.Duration) {
	d := m.d
	lo, hi := max(d/8, time.Second), max(d/3, time.Second)
	l := min(lo+time.Duration(m.rng.Int64N(int64(hi-lo)+1)), d)
	at := time.Duration(m.rng.Int64N(int64(d-l) + 1)).Truncate(100 * time.Millisecond)
	return at, min(at+l.Truncate(100*time.Millisecond), d)
}

func (m *mixer) add(name string, match faults.Match, r faults.Response, mod func(*faults.Rule)) {
	at, until := m.window()
	f := Fault{Name: name, At: at, Until: until}
	f.Rule.Match = match
	f.Rule.Respond = &r
	if mod != nil {
		mod(&f.Rule)
	}
	m.s.Faults = append(m.s.Faults, f)
}

// outage fails a whole provider: a reset or a 5xx.
func (m *mixer) outage() {
	statuses := []int{500, 502, 503, 504}
	p := m.pick(m.all)
	if m.rng.IntN(4) == 0 {
		m.add("outage: reset on "+p.ID, faults.Match{Provider: p.ID}, faults.Response{Fault: faults.Reset}, nil)
		return
	}
	st := statuses[m.rng.IntN(len(statuses))]
	m.add(fmt.Sprintf("outage: %d on %s", st, p.ID), faults.Match{Provider: p.ID}, faults.Response{Status: st}, nil)
}

func (m *mixer) storm() {
	p := m.pick(m.all)
	r := faults.Response{Status: 429}
	name := "429 storm on " + p.ID
	if m.rng.IntN(2) == 0 {
		r.Headers = map[string]string{"Retry-After": "1"}
		name += " (Retry-After 1)"
	}
	m.add(name, faults.Match{Provider: p.ID}, r, nil)
}

// badKey fails one connection of a provider that has a sibling.
func (m *mixer) badKey() {
	if len(m.multiConn) == 0 {
		return
	}
	p := m.pick(m.multiConn)
	c := p.Connections[m.rng.IntN(len(p.Connections))].ID
	st := []int{503, 429, 500}[m.rng.IntN(3)]
	m.add(fmt.Sprintf("bad key %s/%s: %d", p.ID, c, st), faults.Match{Provider: p.ID, Connection: c}, faults.Response{Status: st}, nil)
}

// badModel fails one model of a provider that serves another.
func (m *mixer) badModel() {
	if len(m.multiModel) == 0 {
		return
	}
	p := m.pick(m.multiModel)
	mod := p.Models[m.rng.IntN(len(p.Models))]
	r, _ := faults.Preset("model-not-found-404")
	m.add(fmt.Sprintf("bad model %s/%s: 404", p.ID, mod), faults.Match{Provider: p.ID, Model: mod}, r, nil)
}

// timeout sends no answer until the gateway's header timeout.
func (m *mixer) timeout() {
	p := m.pick(m.all)
	m.add("timeout on "+p.ID, faults.Match{Provider: p.ID}, faults.Response{Fault: faults.Timeout}, nil)
}

// brokenStream breaks streams now and then (malformed-chunk and no-done
// were the findings of docs/chaos.md, since handled).
func (m *mixer) brokenStream() {
	p := m.pick(m.all)
	var r faults.Response
	switch m.rng.IntN(4) {
	case 0:
		r = faults.Response{Fault: faults.Cut, Stream: faults.Stream{StallAfter: 2}}
	case 1:
		r = faults.Response{Fault: faults.Stall, Stream: faults.Stream{StallAfter: 1}}
	case 2:
		r = faults.Response{Fault: faults.MalformedChunk, Stream: faults.Stream{StallAfter: 2}}
	default:
		r = faults.Response{Fault: faults.NoDone}
	}
	m.add(fmt.Sprintf("%s on %s p=0.3", r.Fault, p.ID), faults.Match{Provider: p.ID}, r, func(rl *faults.Rule) { rl.Probability = 0.3 })
}

// slow makes a provider answer late.
func (m *mixer) slow() {
	p := m.pick(m.all)
	lat := time.Duration(100+m.rng.IntN(200)) * time.Millisecond
	m.add(fmt.Sprintf("latency %v on %s", lat, p.ID), faults.Match{Provider: p.ID}, faults.Response{Latency: lat, Jitter: 50 * time.Millisecond}, nil)
}

func (m *mixer) flapping() {
	p := m.pick(m.all)
	m.add("flapping 503 on "+p.ID, faults.Match{Provider: p.ID}, faults.Response{Status: 503},
		func(rl *faults.Rule) {
			rl.Flap = &faults.Flap{Down: 400 * time.Millisecond, Up: 400 * time.Millisecond}
		})
}
