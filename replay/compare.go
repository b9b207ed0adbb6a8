package replay

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/sim"
)

// Observed is what the simulator decided for a scenario, collected with a
// sim.Observer (Observe).
type Observed struct {
	Requests []sim.RequestObservation
	States   []sim.StateObservation
}

// Observe returns an Observer that fills o.
func (o *Observed) Observe() *sim.Observer {
	return &sim.Observer{
		Request: func(r sim.RequestObservation) { o.Requests = append(o.Requests, r) },
		State: func(s sim.StateObservation) {
			s.Connections = slices.Clone(s.Connections)
			o.States = append(o.States, s)
		},
	}
}

// Diff is one decision on which the simulator and the gateway differ.
type Diff struct {
	What    string `json:"what"`
	Sim     string `json:"sim"`
	Gateway string `json:"gateway"`
}

func (d Diff) String() string { return fmt.Sprintf("%s: sim %s, gateway %s", d.What, d.Sim, d.Gateway) }

// Compare lists every difference between what the simulator decided and
// what the replayed gateway did (docs/scenarios.md "same decisions"): per
// request its status, servedBy, attempts, typed error code and result; per `at:`
// expect every breaker's state and failure count, every connection's
// status, backoff level, last error and uses, and the set of lockouts
// (connection, key, reason). Remaining times are not compared (wall-clock).
func Compare(s *Observed, g *Result) []Diff {
	var out []Diff
	add := func(what, a, b string) {
		if a != b {
			out = append(out, Diff{What: what, Sim: a, Gateway: b})
		}
	}
	gw := map[int]sim.RequestObservation{}
	for _, r := range g.RequestLog {
		gw[r.N] = r
	}
	sreqs := slices.Clone(s.Requests)
	slices.SortFunc(sreqs, func(a, b sim.RequestObservation) int { return a.N - b.N })
	for _, a := range sreqs {
		b, ok := gw[a.N]
		what := fmt.Sprintf("request %d", a.N)
		if !ok {
			add(what, "answered", "never answered")
			continue
		}
		add(what+" status", fmt.Sprint(a.Status), fmt.Sprint(b.Status))
		add(what+" servedBy", a.ServedBy, b.ServedBy)
		if b.Attempts >= 0 || b.Result != sim.ResultClientAbort {
			// Against a -target, a client that gave up before the
			// answer's headers cannot know the attempts (no
			// X-Breakwater-Attempts; in-process the fault upstream's
			// record fills them in): not compared.
			add(what+" attempts", fmt.Sprint(a.Attempts), attemptsStr(b.Attempts))
		}
		if a.Code != "" {
			// A typed gateway error (docs/errors.md) or client_abort; for
			// an upstream error the client gets the upstream's own body
			// and code, which the simulator does not model.
			add(what+" code", a.Code, b.Code)
		}
		add(what+" result", a.Result, b.Result)
	}
	if len(g.RequestLog) != len(s.Requests) {
		add("requests", fmt.Sprint(len(s.Requests)), fmt.Sprint(len(g.RequestLog)))
	}
	if len(s.States) != len(g.States) {
		add("state reads", fmt.Sprint(len(s.States)), fmt.Sprint(len(g.States)))
	}
	for i := range min(len(s.States), len(g.States)) {
		a, b := &s.States[i], &g.States[i]
		pre := fmt.Sprintf("line %d at %v: ", a.Line, a.At)
		add(pre+"line", fmt.Sprint(a.Line), fmt.Sprint(b.Line))
		add(pre+"breakers", breakers(a.Providers), breakers(b.Providers))
		for _, c := range a.Connections {
			ref := c.Provider + "/" + c.Connection
			j := slices.IndexFunc(b.Connections, func(v model.ConnectionView) bool { return v.Provider == c.Provider && v.Connection == c.Connection })
			if j < 0 {
				add(pre+"connection "+ref, "present", "missing")
				continue
			}
			add(pre+"connection "+ref, connState(&c), connState(&b.Connections[j]))
		}
		add(pre+"lockouts", lockouts(a.Connections), lockouts(b.Connections))
	}
	return out
}

func breakers(ps []model.ProviderView) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s=%s/%d", p.Provider, p.State, p.FailureCount))
	}
	return strings.Join(parts, " ")
}

func connState(c *model.ConnectionView) string {
	return fmt.Sprintf("%s backoff %d lastError %q uses %d", c.Status, c.BackoffLevel, c.LastErrorType, c.Uses)
}

func lockouts(cs []model.ConnectionView) string {
	var parts []string
	for _, c := range cs {
		for _, l := range c.Lockouts {
			parts = append(parts, fmt.Sprintf("%s/%s %s (%s)", l.Provider, l.Connection, sim.LockName(l), l.Reason))
		}
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
