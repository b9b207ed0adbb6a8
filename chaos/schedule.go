package chaos

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/scenarios/yamlnode"
	"go.yaml.in/yaml/v3"
)

// Schedule is what a chaos run does to the upstreams over time and the load
// it drives. It is read from a YAML file (ParseSchedule) or generated from a
// seed (RandomSchedule).
//
//	name: provider outage, 429 storm, one bad key
//	duration: 20s                # the fault phase; -duration overrides
//	seed: 7                      # -seed overrides
//	load: {workers: 4, rate: 40, maxInFlight: 256, streamRatio: 0.3, models: [alpha/m1, combo], timeout: 10s}
//	faults:
//	  - at: 2s
//	    until: 8s                # or `for: 6s`; default: the end of the fault phase
//	    match: {provider: alpha} # provider / connection / model, each optional
//	    respond: {status: 503}   # or sequence: [...]; any `upstream:` response (docs/scenarios.md)
//	    probability: 0.5         # optional, as in scenario rules
//	    flap: {down: 1s, up: 1s} # optional
//	  - {at: 9s, for: 2s, action: down, match: {provider: beta}}   # connection refused
//	  - {at: 12s, action: restart}                                  # gateway restart (in-process)
//	  - {at: 4s, for: 3s, action: db-down}                          # Postgres unreachable
//
// Every problem is reported with file:line:column and the field.
type Schedule struct {
	Name     string
	File     string
	Duration time.Duration // 0 = not set (flag or default)
	Seed     uint64
	HasSeed  bool
	Load     LoadSpec
	Faults   []Fault
}

// LoadSpec is the `load:` section; nil / zero fields are not set.
type LoadSpec struct {
	Workers     *int
	Rate        *float64
	MaxInFlight *int
	StreamRatio *float64
	Models      []string
	Timeout     time.Duration
}

// Action is what a schedule item does.
type Action string

const (
	// ActionRule answers matching upstream attempts with a fault response.
	ActionRule Action = ""
	// ActionDown stops a provider's fault upstream listening (connection
	// refused; open connections are cut) for the window.
	ActionDown Action = "down"
	// ActionDBDown makes the gateway's Postgres unreachable for the window.
	ActionDBDown Action = "db-down"
	// ActionRestart closes the gateway and starts a new one on the same
	// store at an instant (in-process only).
	ActionRestart Action = "restart"
)

var actions = []string{"down", "db-down", "restart"}

// Fault is one schedule item.
type Fault struct {
	Name   string        `json:"name,omitempty"`
	Line   int           `json:"line,omitempty"`
	Action Action        `json:"action,omitempty"`
	At     time.Duration `json:"-"`
	// Until is the end of the window; 0 = the end of the fault phase
	// (resolved by Resolve).
	Until time.Duration `json:"-"`
	// Rule holds match, respond / sequence, flap and probability. Its From
	// and Until are set from At and Until when it is sent to an upstream.
	Rule faults.Rule `json:"-"`
	// NoCheck exempts the window from the fault-specific invariants.
	NoCheck bool `json:"noCheck,omitempty"`
}

// Label names the fault in reports.
func (f *Fault) Label() string {
	if f.Name != "" {
		return f.Name
	}
	var b strings.Builder
	switch f.Action {
	case ActionRule:
		b.WriteString(responseLabel(f.Rule))
	default:
		b.WriteString(string(f.Action))
	}
	if m := matchLabel(f.Rule.Match); m != "" {
		b.WriteString(" on ")
		b.WriteString(m)
	}
	if f.Rule.Probability > 0 && f.Rule.Probability < 1 {
		fmt.Fprintf(&b, " p=%.2g", f.Rule.Probability)
	}
	if f.Rule.Flap != nil {
		b.WriteString(" flapping")
	}
	return b.String()
}

func matchLabel(m faults.Match) string {
	var parts []string
	switch {
	case m.Provider != "" && m.Connection != "":
		parts = append(parts, m.Provider+"/"+m.Connection)
	case m.Provider != "":
		parts = append(parts, m.Provider)
	case m.Connection != "":
		parts = append(parts, "*/"+m.Connection)
	}
	if m.Model != "" {
		parts = append(parts, "model "+m.Model)
	}
	return strings.Join(parts, " ")
}

func responseLabel(r faults.Rule) string {
	items := r.Sequence
	if r.Respond != nil {
		items = []faults.Response{*r.Respond}
	}
	var out []string
	for i := range items {
		it := &items[i]
		switch {
		case it.Use != "":
			out = append(out, it.Use)
		case it.Fault != faults.None:
			out = append(out, it.Fault.String())
		case it.StatusOrOK() != 200:
			out = append(out, fmt.Sprint(it.StatusOrOK()))
		case it.Latency > 0:
			out = append(out, "latency "+it.Latency.String())
		default:
			out = append(out, "200")
		}
		if len(out) == 3 && len(items) > 3 {
			out = append(out, "…")
			break
		}
	}
	return strings.Join(out, ",")
}

// End returns the window's end for a fault phase of length d.
func (f *Fault) End(d time.Duration) time.Duration {
	if f.Until > 0 {
		return f.Until
	}
	if f.Action == ActionRestart {
		return f.At
	}
	return d
}

var (
	scheduleKeys = []string{"name", "duration", "seed", "load", "faults"}
	loadKeys     = []string{"workers", "rate", "maxInFlight", "streamRatio", "models", "timeout"}
	faultKeys    = []string{"name", "at", "until", "for", "action", "match", "respond", "sequence", "flap", "probability", "check"}
	matchKeys    = []string{"provider", "connection", "model"}
	flapKeys     = []string{"down", "up"}
)

// LoadSchedule reads and checks a schedule file against the gateway's
// topology (nil checks no names).
func LoadSchedule(path string, topo *model.Topology) (*Schedule, error) {
	return LoadScheduleFor(path, topo, nil)
}

// RunEnv is what the run offers a schedule. Checked with the schedule, a
// mismatch is reported as file:line:column: field before anything starts.
type RunEnv struct {
	// Duration is the fault phase when the command sets it (-duration);
	// 0 = the schedule's own.
	Duration time.Duration
	// Target: the gateway is not in-process (no restart).
	Target bool
	// Postgres: the gateway's store is Postgres (db-down needs it).
	Postgres bool
}

// LoadScheduleFor is LoadSchedule that also checks the schedule against
// the run (nil checks nothing about it).
func LoadScheduleFor(path string, topo *model.Topology, env *RunEnv) (*Schedule, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseScheduleFor(path, src, topo, env)
}

// ParseSchedule parses a schedule. Every problem names the file, the line
// and the field; nothing is accepted with a problem. topo, when not nil,
// checks every provider, connection and model the schedule names.
func ParseSchedule(name string, src []byte, topo *model.Topology) (*Schedule, error) {
	return ParseScheduleFor(name, src, topo, nil)
}

// ParseScheduleFor is ParseSchedule that also checks the schedule against
// the run: its windows against the fault phase the run will have, and its
// actions against what the run can do.
func ParseScheduleFor(name string, src []byte, topo *model.Topology, env *RunEnv) (*Schedule, error) {
	d := &yamlnode.Decoder{File: name}
	root := d.Parse(src)
	if d.Failed() {
		return nil, d.Err()
	}
	s := &Schedule{File: name}
	if root == nil || root.Kind == 0 {
		d.Errf(nil, "", "empty schedule: want a mapping with a `faults:` list")
		return nil, d.Err()
	}
	var faultNodes []*yaml.Node
	d.Map(root, "", scheduleKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "name":
			s.Name = d.String(v, key)
		case "duration":
			s.Duration = d.Duration(v, key)
			if s.Duration == 0 && !d.Failed() {
				d.Errf(v, key, "must be positive")
			}
		case "seed":
			s.Seed, s.HasSeed = uint64(d.Int64(v, key)), true
		case "load":
			decodeLoad(d, v, key, &s.Load)
		case "faults":
			d.Seq(v, key, func(i int, v *yaml.Node) {
				f := yamlnode.Index(key, i)
				n0 := d.Count()
				ft := decodeFault(d, v, f)
				if d.Count() == n0 {
					s.Faults = append(s.Faults, ft)
					faultNodes = append(faultNodes, v)
				}
			})
		}
	})
	if d.Failed() {
		return nil, d.Err()
	}
	for i := range s.Faults {
		checkFault(d, faultNodes[i], yamlnode.Index("faults", i), &s.Faults[i], s.Duration, topo, env)
	}
	checkOverlaps(d, s, faultNodes)
	if topo != nil {
		checkModels(d, root, s.Load.Models, topo)
	}
	if d.Failed() {
		return nil, d.Err()
	}
	return s, nil
}

func decodeLoad(d *yamlnode.Decoder, n *yaml.Node, field string, l *LoadSpec) {
	d.Map(n, field, loadKeys, func(key string, k, v *yaml.Node) {
		f := yamlnode.Join(field, key)
		switch key {
		case "workers":
			x := d.NonNegInt(v, f)
			if x > maxWorkers {
				d.Errf(v, f, "at most %d workers, got %d", maxWorkers, x)
			}
			l.Workers = &x
		case "rate":
			x := d.Float(v, f)
			if x < 0 || x > maxRate {
				d.Errf(v, f, "want a rate in [0, %d] requests/s, got %v", maxRate, x)
			}
			l.Rate = &x
		case "maxInFlight":
			x := d.Int(v, f)
			if x < 1 || x > maxInFlightLimit {
				d.Errf(v, f, "want 1..%d, got %d", maxInFlightLimit, x)
			}
			l.MaxInFlight = &x
		case "streamRatio":
			x := d.Float(v, f)
			if !(x >= 0 && x <= 1) {
				d.Errf(v, f, "want a fraction in [0, 1], got %v", x)
			}
			l.StreamRatio = &x
		case "models":
			l.Models = d.StringList(v, f)
			if len(l.Models) == 0 {
				d.Errf(v, f, "list at least one model, or leave models out for every model")
			}
		case "timeout":
			l.Timeout = d.Duration(v, f)
			if l.Timeout == 0 {
				d.Errf(v, f, "must be positive")
			}
		}
	})
}

func decodeFault(d *yamlnode.Decoder, n *yaml.Node, field string) Fault {
	f := Fault{Line: n.Line}
	var forD time.Duration
	hasUntil, hasFor := false, false
	d.Map(n, field, faultKeys, func(key string, k, v *yaml.Node) {
		fd := yamlnode.Join(field, key)
		switch key {
		case "name":
			f.Name = d.String(v, fd)
		case "at":
			f.At = d.Duration(v, fd)
		case "until":
			f.Until, hasUntil = d.Duration(v, fd), true
		case "for":
			forD, hasFor = d.Duration(v, fd), true
			if forD == 0 {
				d.Errf(v, fd, "must be positive")
			}
		case "action":
			f.Action = decodeAction(d, v, fd)
		case "match":
			decodeMatch(d, v, fd, &f.Rule.Match)
		case "respond":
			r := faults.DecodeResponse(d, v, fd)
			f.Rule.Respond = &r
		case "sequence":
			d.Seq(v, fd, func(i int, v *yaml.Node) {
				f.Rule.Sequence = append(f.Rule.Sequence, faults.DecodeResponse(d, v, yamlnode.Index(fd, i)))
			})
			if len(f.Rule.Sequence) == 0 {
				d.Errf(v, fd, "a sequence needs at least one item")
			}
		case "flap":
			f.Rule.Flap = decodeFlap(d, v, fd)
		case "probability":
			f.Rule.Probability = d.Float(v, fd)
		case "check":
			f.NoCheck = !d.Bool(v, fd)
		}
	})
	if hasUntil && hasFor {
		d.Errf(n, field, "give until or for, not both")
	}
	if hasUntil && f.Until == 0 {
		d.Errf(yamlnode.Find(n, "until"), yamlnode.Join(field, "until"), "until 0s leaves an empty window; leave until out to last to the end of the fault phase")
	}
	if hasFor {
		f.Until = f.At + forD
	}
	return f
}

// decodeAction reads a fault's action; an unknown one is an error that
// names the nearest known action or lists them.
func decodeAction(d *yamlnode.Decoder, v *yaml.Node, fd string) Action {
	s := d.String(v, fd)
	if !slices.Contains(actions, s) {
		if near := yamlnode.Nearest(s, actions); near != "" {
			d.Errf(v, fd, "unknown action %q (did you mean %q?)", s, near)
		} else {
			d.Errf(v, fd, "unknown action %q (want one of %s; leave it out for a fault response)", s, strings.Join(actions, ", "))
		}
	}
	return Action(s)
}

// decodeMatch reads which provider, connection and model a fault hits;
// a key given empty is an error.
func decodeMatch(d *yamlnode.Decoder, v *yaml.Node, fd string, m *faults.Match) {
	d.Map(v, fd, matchKeys, func(key string, k, v *yaml.Node) {
		s := d.String(v, yamlnode.Join(fd, key))
		if s == "" {
			d.Errf(v, yamlnode.Join(fd, key), "must not be empty")
		}
		switch key {
		case "provider":
			m.Provider = s
		case "connection":
			m.Connection = s
		case "model":
			m.Model = s
		}
	})
}

func decodeFlap(d *yamlnode.Decoder, v *yaml.Node, fd string) *faults.Flap {
	fl := &faults.Flap{}
	d.Map(v, fd, flapKeys, func(key string, k, v *yaml.Node) {
		if key == "down" {
			fl.Down = d.Duration(v, yamlnode.Join(fd, key))
		} else {
			fl.Up = d.Duration(v, yamlnode.Join(fd, key))
		}
	})
	return fl
}

// checkFault checks what one item may and must have for its action, and the
// names it uses against the topology.
func checkFault(d *yamlnode.Decoder, n *yaml.Node, field string, f *Fault, dur time.Duration, topo *model.Topology, env *RunEnv) {
	fn := faultNode{n}
	if !checkAction(d, fn, field, f) {
		return
	}
	if f.Until > 0 && f.Until <= f.At {
		d.Errf(fn.val("until"), yamlnode.Join(field, "until"), "the window ends (%v) before it starts (at %v)", f.Until, f.At)
	}
	checkPhase(d, fn, field, f, dur, env)
	if env != nil {
		switch {
		case f.Action == ActionRestart && env.Target:
			d.Errf(fn.val("action"), yamlnode.Join(field, "action"), "action restart needs the in-process gateway (no -target)")
		case f.Action == ActionDBDown && !env.Postgres:
			d.Errf(fn.val("action"), yamlnode.Join(field, "action"), "action db-down needs a Postgres store (store.url: postgres://… on loopback) in an in-process run")
		}
	}
	if topo != nil {
		checkMatch(d, valueNode(n, "match"), yamlnode.Join(field, "match"), &f.Rule.Match, topo)
	}
}

// faultNode is a fault's YAML mapping. Errors about a key point at the
// key or its value, or at the whole fault when the key is not there.
type faultNode struct{ n *yaml.Node }

func (fn faultNode) has(key string) bool { return keyNode(fn.n, key) != nil }

func (fn faultNode) val(key string) *yaml.Node {
	if x := valueNode(fn.n, key); x != nil {
		return x
	}
	return fn.n
}

func (fn faultNode) at(key string) *yaml.Node {
	if x := keyNode(fn.n, key); x != nil {
		return x
	}
	return fn.n
}

// checkAction checks that the keys given fit the fault's action. It
// returns false when a fault response is missing or invalid: the rest of
// the checks would only repeat that.
func checkAction(d *yamlnode.Decoder, fn faultNode, field string, f *Fault) bool {
	switch f.Action {
	case ActionRule:
		if f.Rule.Respond == nil && len(f.Rule.Sequence) == 0 {
			d.Errf(fn.n, field, "a fault needs respond or sequence (or an action: %s)", strings.Join(actions, ", "))
			return false
		}
		if err := f.Rule.Validate(); err != nil {
			d.Errf(fn.n, field, "%v", err)
			return false
		}
	case ActionDown:
		if f.Rule.Match.Provider == "" || f.Rule.Match.Connection != "" || f.Rule.Match.Model != "" {
			d.Errf(fn.at("match"), yamlnode.Join(field, "match"), "action down stops one provider's upstream: want match: {provider: ID} and nothing else")
		}
	case ActionDBDown:
		if fn.has("match") {
			d.Errf(fn.at("match"), yamlnode.Join(field, "match"), "action db-down takes no match: the whole database is unreachable")
		}
	case ActionRestart:
		for _, k := range []string{"until", "for", "match"} {
			if fn.has(k) {
				d.Errf(fn.at(k), yamlnode.Join(field, k), "action restart is an instant: it takes no %s", k)
			}
		}
	}
	if f.Action != ActionRule {
		for _, k := range []string{"respond", "sequence", "flap", "probability"} {
			if fn.has(k) {
				d.Errf(fn.at(k), yamlnode.Join(field, k), "action %s takes no %s", f.Action, k)
			}
		}
	}
	return true
}

// checkPhase checks that the fault's window lies inside the fault phase:
// the run's -duration when given, else the schedule's duration.
func checkPhase(d *yamlnode.Decoder, fn faultNode, field string, f *Fault, dur time.Duration, env *RunEnv) {
	phase := fmt.Sprintf("duration %v", dur)
	if env != nil && env.Duration > 0 {
		dur, phase = env.Duration, fmt.Sprintf("-duration %v", env.Duration)
	}
	if dur <= 0 {
		return
	}
	if f.At >= dur && f.Action != ActionRestart || f.At > dur {
		d.Errf(fn.val("at"), yamlnode.Join(field, "at"), "starts at %v, at or after the end of the fault phase (%s)", f.At, phase)
	}
	if f.Until > dur {
		key := "until"
		if !fn.has(key) && fn.has("for") {
			key = "for"
		}
		d.Errf(fn.val(key), yamlnode.Join(field, key), "ends at %v, after the end of the fault phase (%s)", f.Until, phase)
	}
}

func checkMatch(d *yamlnode.Decoder, n *yaml.Node, field string, m *faults.Match, topo *model.Topology) {
	if n == nil {
		return
	}
	node := func(key string) *yaml.Node {
		if x := valueNode(n, key); x != nil {
			return x
		}
		return n
	}
	var ids []string
	for _, p := range topo.Providers {
		ids = append(ids, p.ID)
	}
	if m.Provider != "" {
		i := slices.IndexFunc(topo.Providers, func(p model.ProviderConfig) bool { return p.ID == m.Provider })
		if i < 0 {
			msg := fmt.Sprintf("unknown provider %q (providers: %s)", m.Provider, strings.Join(ids, ", "))
			if near := yamlnode.Nearest(m.Provider, ids); near != "" {
				msg = fmt.Sprintf("unknown provider %q (did you mean %q?)", m.Provider, near)
			}
			d.Errf(node("provider"), yamlnode.Join(field, "provider"), "%s", msg)
			return
		}
		p := &topo.Providers[i]
		var conns []string
		for _, c := range p.Connections {
			conns = append(conns, c.ID)
		}
		if m.Connection != "" && !slices.Contains(conns, m.Connection) {
			d.Errf(node("connection"), yamlnode.Join(field, "connection"), "provider %q has no connection %q (it has %s)", m.Provider, m.Connection, strings.Join(conns, ", "))
		}
		if m.Model != "" && len(p.Models) > 0 && !slices.Contains(p.Models, m.Model) {
			d.Errf(node("model"), yamlnode.Join(field, "model"), "provider %q does not serve model %q (it serves %s)", m.Provider, m.Model, strings.Join(p.Models, ", "))
		}
		return
	}
	if m.Connection != "" {
		found := false
		for _, p := range topo.Providers {
			for _, c := range p.Connections {
				found = found || c.ID == m.Connection
			}
		}
		if !found {
			d.Errf(node("connection"), yamlnode.Join(field, "connection"), "no provider has a connection %q", m.Connection)
		}
	}
	if m.Model != "" {
		found := false
		for _, p := range topo.Providers {
			found = found || len(p.Models) == 0 || slices.Contains(p.Models, m.Model)
		}
		if !found {
			d.Errf(node("model"), yamlnode.Join(field, "model"), "no provider serves model %q", m.Model)
		}
	}
}

// checkOverlaps rejects a restart inside a db-down window: a gateway that
// stops while its database is unreachable loses what it could not flush
// (docs/store.md), so such a run could only fail.
func checkOverlaps(d *yamlnode.Decoder, s *Schedule, nodes []*yaml.Node) {
	for i := range s.Faults {
		r := &s.Faults[i]
		if r.Action != ActionRestart {
			continue
		}
		for j := range s.Faults {
			w := &s.Faults[j]
			if w.Action == ActionDBDown && r.At >= w.At && (w.Until == 0 || r.At < w.Until+time.Second) {
				d.Errf(nodes[i], yamlnode.Index("faults", i), "restart at %v falls in the db-down window of faults[%d] (line %d) or within 1s after it: a gateway stopped while Postgres is unreachable loses unflushed state by design", r.At, j, w.Line)
			}
		}
	}
}

// checkModels checks the load's models resolve on the topology.
func checkModels(d *yamlnode.Decoder, root *yaml.Node, models []string, topo *model.Topology) {
	if len(models) == 0 {
		return
	}
	all := ModelsOf(topo)
	list := yamlnode.Find(root, "load.models")
	for i, m := range models {
		if ok, _ := resolvable(topo, m); ok {
			continue
		}
		n := list
		if list != nil && list.Kind == yaml.SequenceNode && i < len(list.Content) {
			n = list.Content[i]
		}
		msg := fmt.Sprintf("unknown model %q (known: %s)", m, strings.Join(all, ", "))
		if near := yamlnode.Nearest(m, all); near != "" {
			msg = fmt.Sprintf("unknown model %q (did you mean %q?)", m, near)
		}
		d.Errf(n, yamlnode.Index("load.models", i), "%s", msg)
	}
}

// ModelsOf lists every model a client can ask for: provider/model for
// every model of every provider, then every combo and alias.
func ModelsOf(topo *model.Topology) []string {
	var out []string
	for _, p := range topo.Providers {
		for _, m := range p.Models {
			out = append(out, p.ID+"/"+m)
		}
	}
	for _, c := range topo.Combos {
		out = append(out, c.ID)
	}
	var aliases []string
	for a := range topo.Aliases {
		aliases = append(aliases, a)
	}
	slices.Sort(aliases)
	return append(out, aliases...)
}

// resolvable reports whether a client model resolves, and the providers it
// may reach.
func resolvable(topo *model.Topology, m string) (bool, []string) {
	for _, c := range topo.Combos {
		if c.ID == m {
			var ps []string
			for _, t := range c.Targets {
				if !slices.Contains(ps, t.Provider) {
					ps = append(ps, t.Provider)
				}
			}
			return true, ps
		}
	}
	if t, ok := topo.Aliases[m]; ok {
		m = t
		for _, c := range topo.Combos {
			if c.ID == m {
				return resolvable(topo, m)
			}
		}
	}
	pid, mod, ok := strings.Cut(m, "/")
	if ok {
		for _, p := range topo.Providers {
			if p.ID == pid && (len(p.Models) == 0 || slices.Contains(p.Models, mod)) {
				return true, []string{pid}
			}
		}
	}
	var ps []string
	for _, p := range topo.Providers {
		if slices.Contains(p.Models, m) {
			ps = append(ps, p.ID)
		}
	}
	return len(ps) == 1, ps
}

// keyNode returns the key node of key in mapping n, or nil.
func keyNode(n *yaml.Node, key string) *yaml.Node {
	n = yamlnode.Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}

// valueNode returns the value node of key in mapping n, or nil.
func valueNode(n *yaml.Node, key string) *yaml.Node {
	n = yamlnode.Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return yamlnode.Resolve(n.Content[i+1])
		}
	}
	return nil
}
