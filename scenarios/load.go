package scenarios

import (
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/scenarios/yamlnode"
	"github.com/breakwater-gw/breakwater/sim"
	"go.yaml.in/yaml/v3"
)

// Options adjust a scenario as it is loaded.
type Options struct {
	// Seed, when set, overrides the file's seed (`sim -seed N`).
	Seed *uint64
	// Sets are `-set path=value` overrides, applied over the file's
	// settings in order.
	Sets []string
}

// MaxFileSize bounds a scenario file.
const MaxFileSize = 4 << 20

// MaxRequests bounds the requests one scenario may send.
const MaxRequests = 100_000_000

// LoadFile reads and loads one scenario file.
func LoadFile(path string, opts Options) (*sim.Scenario, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Load(path, src, opts)
}

var topKeys = []string{"name", "seed", "start", "settings", "providers", "combos", "aliases", "upstream",
	"traffic", "actions", "expect", "liveness"}

// Load parses a scenario from src; name labels errors (usually the path).
func Load(name string, src []byte, opts Options) (*sim.Scenario, error) {
	if len(src) > MaxFileSize {
		return nil, fmt.Errorf("%s: file larger than %d bytes", name, MaxFileSize)
	}
	l := &loader{d: &yamlnode.Decoder{File: name}, sc: &sim.Scenario{File: name, Seed: 1, Start: sim.DefaultStart}}
	root := l.d.Parse(src)
	if l.d.Failed() {
		return nil, l.d.Err()
	}
	if root == nil {
		return nil, fmt.Errorf("%s: empty scenario", name)
	}
	l.root = root
	nodes := map[string]*yaml.Node{}
	l.d.Map(root, "", topKeys, func(key string, k, v *yaml.Node) { nodes[key] = v })
	if l.d.Failed() {
		return nil, l.d.Err()
	}
	sc := l.sc
	if n := nodes["name"]; n != nil {
		sc.Name = l.d.String(n, "name")
	}
	if sc.Name == "" {
		l.d.Errf(root, "name", "a scenario needs a name that says the rule it pins")
	}
	if n := nodes["seed"]; n != nil {
		v := l.d.Int64(n, "seed")
		if v < 0 {
			l.d.Errf(n, "seed", "must not be negative")
		}
		sc.Seed = uint64(v)
	}
	if opts.Seed != nil {
		sc.Seed = *opts.Seed
	}
	if n := nodes["start"]; n != nil {
		s := l.d.String(n, "start")
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			l.d.Errf(n, "start", "want an RFC 3339 instant such as 2026-01-01T00:00:00Z, got %q", s)
		}
		sc.Start = t.UTC()
	}
	if n := nodes["liveness"]; n != nil {
		sc.NoLiveness = !l.d.Bool(n, "liveness")
	}
	l.settings(nodes["settings"], opts.Sets)
	l.providers(nodes["providers"])
	l.combos(nodes["combos"])
	l.aliases(nodes["aliases"])
	if l.d.Failed() {
		return nil, l.d.Err()
	}
	l.topology()
	if l.d.Failed() {
		return nil, l.d.Err()
	}
	sc.Rules = faults.DecodeRules(l.d, nodes["upstream"], "upstream", l.known())
	l.traffic(nodes["traffic"])
	l.actions(nodes["actions"])
	l.checkTrafficLeases()
	l.checkLeaseOrder()
	l.expects(nodes["expect"])
	if err := l.d.Err(); err != nil {
		return nil, err
	}
	return sc, nil
}

type loader struct {
	d    *yamlnode.Decoder
	sc   *sim.Scenario
	root *yaml.Node
	eng  *model.Engine // for resolving model names while loading
	// requests sent per traffic item, for expect checks
	sent int
	// trafficBad: the traffic had errors, so sent (and sentIn) are not
	// known; expect checks that count requests keep quiet.
	trafficBad bool
	// trafficLease and actionNodes are the value of each traffic item's
	// lease: (nil without one) and each action's node, aligned with
	// sc.Traffic and sc.Actions: the lease checks that need the whole
	// file report there (lease.go).
	trafficLease []*yaml.Node
	actionNodes  []*yaml.Node
}

// settings resolves the scenario's settings layer and the -set flags
// through the model's settings layers.
func (l *loader) settings(n *yaml.Node, sets []string) {
	tree := l.d.Value(n, "settings")
	layer, err := settings.LayerOf(tree)
	if err != nil {
		l.settingsErr(n, err, "settings")
		return
	}
	l.sc.Layers = []settings.NamedLayer{{Name: "scenario", Tree: layer}}
	if len(sets) > 0 {
		setLayer := settings.Layer{}
		for _, kv := range sets {
			path, value, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(path) == "" {
				l.d.Errf(nil, "-set "+kv, "want -set path=value, e.g. -set providerBreaker.apikey.failureThreshold=5")
				continue
			}
			next, err := settings.SetPath(setLayer, strings.TrimSpace(path), value)
			if err != nil {
				for _, se := range model.SettingsErrors(err) {
					l.d.Errf(nil, "-set "+kv, "%s", se.Error())
				}
				if len(model.SettingsErrors(err)) == 0 {
					l.d.Errf(nil, "-set "+kv, "%v", err)
				}
				continue
			}
			setLayer = next
			l.sc.Sets = append(l.sc.Sets, kv)
		}
		l.sc.Layers = append(l.sc.Layers, settings.NamedLayer{Name: "set", Tree: setLayer})
	}
	if l.d.Failed() {
		return
	}
	s, _, err := settings.Resolve(l.sc.Layers...)
	if err != nil {
		l.settingsErr(n, err, "settings")
		return
	}
	l.sc.Settings = s
}

// settingsErr reports settings errors at the line of the field they name.
func (l *loader) settingsErr(n *yaml.Node, err error, prefix string) {
	ses := model.SettingsErrors(err)
	if len(ses) == 0 {
		l.d.Errf(n, prefix, "%v", err)
		return
	}
	for _, se := range ses {
		field := se.Field
		msg := se.Problem
		if se.Problem == model.ProblemUnknownKey {
			key := field[strings.LastIndexAny(field, ".")+1:]
			msg = fmt.Sprintf("unknown key %q", key)
			if se.Suggestion != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", se.Suggestion)
			}
		}
		at := n
		if se.Source == "set" {
			l.d.Errf(nil, "-set "+field, "%s", msg)
			continue
		}
		switch {
		case field != "" && se.Problem == model.ProblemUnknownKey:
			at = yamlnode.FindKey(n, field)
		case field != "":
			at = yamlnode.Find(n, field)
		}
		l.d.Errf(at, yamlnode.Join(prefix, field), "%s", msg)
	}
}

var (
	providerKeys = []string{"id", "type", "profile", "models", "strategy", "connections", "perModelQuota",
		"dailyResetUtc", "quotaFamilies", "baseURL", "maxConcurrent", "contextWindows", "continuation"}
	connectionKeys = []string{"id", "priority", "weight", "disableCooling", "apiKey", "maxConcurrent",
		"rateLimitOverrides", "rateLimitProtection", "spendWall", "egressIp"}
	comboKeys  = []string{"id", "strategy", "targets", "mode"}
	targetKeys = []string{"target", "weight", "connection"}
)

func (l *loader) warn(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.sc.Warnings = append(l.sc.Warnings, fmt.Sprintf("%s:%d: %s: %s", l.sc.File, line, field, fmt.Sprintf(format, args...)))
}

func (l *loader) strategy(n *yaml.Node, field string) model.Strategy {
	s := l.d.String(n, field)
	st, err := model.ParseStrategy(s)
	if err != nil {
		if near := yamlnode.Nearest(s, strategyNames()); near != "" {
			l.d.Errf(n, field, "unknown strategy %q (did you mean %q?)", s, near)
		} else {
			l.d.Errf(n, field, "%v", err)
		}
	}
	return st
}

func strategyNames() []string {
	var out []string
	for i := 0; i < 32; i++ {
		s := model.Strategy(i).String()
		if strings.Contains(s, "(") {
			break
		}
		out = append(out, s)
	}
	return out
}

func (l *loader) providers(n *yaml.Node) {
	if yamlnode.IsNull(n) {
		l.d.Errf(l.root, "providers", "a scenario needs at least one provider")
		return
	}
	l.items(n, "providers", func(i int, f string, v *yaml.Node) {
		var p model.ProviderConfig
		var resets []connAnswer // spendwall.go
		l.fields(v, f, providerKeys, func(key, ff string, _, v *yaml.Node) {
			if key == "connections" {
				l.items(v, ff, func(j int, cf string, v *yaml.Node) {
					p.Connections = append(p.Connections, l.connection(v, cf, j, &resets))
				})
				return
			}
			l.providerField(key, ff, v, &p)
		})
		if p.ID == "" {
			l.d.Errf(v, f+".id", "a provider needs an id")
		}
		if len(p.Connections) == 0 && !l.d.Failed() {
			l.d.Errf(v, f+".connections", "a provider needs at least one connection")
		}
		l.addLimitResets(&p, resets)
		l.sc.Topology.Providers = append(l.sc.Topology.Providers, p)
	})
}

// providerField decodes a provider's member key (other than connections)
// at field ff into p.
func (l *loader) providerField(key, ff string, v *yaml.Node, p *model.ProviderConfig) {
	switch key {
	case "id":
		p.ID = l.d.String(v, ff)
	case "type":
		p.Type = l.d.String(v, ff)
		l.checkName(v, ff, "provider type", p.Type, model.ProviderTypes) // docs/classification.md#provider-types
	case "profile":
		s := l.d.String(v, ff)
		pr, err := model.ParseProfile(s)
		if err != nil {
			l.d.Errf(v, ff, "%v", err)
		}
		p.Profile = pr
	case "models":
		p.Models = l.d.StringList(v, ff)
	case "strategy":
		p.Strategy = l.strategy(v, ff)
	case "perModelQuota":
		b := l.d.Bool(v, ff)
		p.PerModelQuota = &b
	case "dailyResetUtc":
		p.DailyResetUTC = l.d.String(v, ff)
	case "continuation": // how the provider continues a prefill (stream resume)
		p.Continuation = l.d.String(v, ff)
		if _, err := model.ParseContinuation(p.Continuation); err != nil {
			l.d.Errf(v, ff, "%v", err)
		}
	case "quotaFamilies":
		p.QuotaFamilies = map[string][]string{}
		l.fields(v, ff, nil, func(key, kf string, _, v *yaml.Node) {
			p.QuotaFamilies[key] = l.d.StringList(v, kf)
		})
	case "contextWindows":
		p.ContextWindows = map[string]int{}
		l.fields(v, ff, nil, func(key, kf string, _, v *yaml.Node) {
			if n := l.d.Int(v, kf); n > 0 {
				p.ContextWindows[key] = n
			} else {
				l.d.Errf(v, kf, "want a context window in tokens > 0, got %d", n)
			}
		})
	case "maxConcurrent":
		p.MaxConcurrent = l.d.NonNegInt(v, ff) // the composite gate's provider layer (sim/admission.go)
	case "baseURL":
		l.warn(v, ff, "ignored by the simulator (used by replay and serve)")
	}
}

// connection decodes connection j of a provider, at field cf; a spend wall
// adds its limit reset to resets.
func (l *loader) connection(v *yaml.Node, cf string, j int, resets *[]connAnswer) model.ConnectionConfig {
	var c model.ConnectionConfig
	l.fields(v, cf, connectionKeys, func(key, kf string, _, v *yaml.Node) {
		switch key {
		case "id":
			c.ID = l.d.String(v, kf)
		case "priority":
			c.Priority = l.d.Int(v, kf)
		case "weight":
			c.Weight = l.d.NonNegInt(v, kf)
		case "disableCooling":
			c.DisableCooling = l.d.Bool(v, kf)
		case "spendWall":
			if a := l.spendWall(v, kf, &c); a != nil {
				*resets = append(*resets, connAnswer{j, *a})
			}
		default:
			if !l.connAdmission(key, v, kf, &c) { // admission.go
				l.warn(v, kf, "ignored by the simulator (used by replay and serve)")
			}
		}
	})
	return c
}

// fields decodes the mapping n at field as yamlnode.Decoder.Map does,
// handing fn each member's key, path, key node and value.
func (l *loader) fields(n *yaml.Node, field string, known []string, fn func(key, path string, k, v *yaml.Node)) bool {
	return l.d.Map(n, field, known, func(key string, k, v *yaml.Node) { fn(key, yamlnode.Join(field, key), k, v) })
}

// items decodes the sequence n at field as yamlnode.Decoder.Seq does,
// handing fn each element's index, path and node.
func (l *loader) items(n *yaml.Node, field string, fn func(i int, path string, v *yaml.Node)) bool {
	return l.d.Seq(n, field, func(i int, v *yaml.Node) { fn(i, yamlnode.Index(field, i), v) })
}

func (l *loader) combos(n *yaml.Node) {
	l.items(n, "combos", func(i int, f string, v *yaml.Node) {
		var c model.ComboConfig
		l.fields(v, f, comboKeys, func(key, ff string, k, v *yaml.Node) {
			switch key {
			case "id":
				c.ID = l.d.String(v, ff)
			case "strategy":
				c.Strategy = l.strategy(v, ff)
			case "mode":
				c.Mode = l.comboMode(v, ff) // admission.go
			case "targets":
				l.items(v, ff, func(j int, tf string, v *yaml.Node) {
					var t model.ComboTarget
					parse := func(n *yaml.Node, field string) {
						s := l.d.String(n, field)
						p, m, ok := strings.Cut(s, "/")
						if !ok || p == "" || m == "" {
							l.d.Errf(n, field, "want provider/model, got %q", s)
						}
						t.Provider, t.Model = p, m
					}
					if v.Kind == yaml.ScalarNode {
						parse(v, tf)
					} else {
						l.fields(v, tf, targetKeys, func(key, kf string, k, v *yaml.Node) {
							switch key {
							case "target":
								parse(v, kf)
							case "weight":
								t.Weight = l.d.NonNegInt(v, kf)
							case "connection":
								t.Connection = l.d.String(v, kf)
							}
						})
					}
					c.Targets = append(c.Targets, t)
				})
			}
		})
		l.sc.Topology.Combos = append(l.sc.Topology.Combos, c)
	})
}

func (l *loader) aliases(n *yaml.Node) {
	l.d.Map(n, "aliases", nil, func(key string, k, v *yaml.Node) {
		if l.sc.Topology.Aliases == nil {
			l.sc.Topology.Aliases = map[string]string{}
		}
		l.sc.Topology.Aliases[key] = l.d.String(v, yamlnode.Join("aliases", key))
	})
}

// topology validates the topology by building the engine it will run.
func (l *loader) topology() {
	eng, err := model.NewEngine(l.sc.Topology, l.sc.Settings, nil)
	if err != nil {
		var te *model.TopologyError
		if errors.As(err, &te) {
			l.d.Errf(yamlnode.Find(l.root, te.Field), te.Field, "%s", te.Problem)
		} else {
			l.d.Errf(l.root, "providers", "%v", err)
		}
		return
	}
	l.eng = eng
}

func (l *loader) known() *faults.Known {
	k := &faults.Known{Providers: map[string][]string{}, Models: map[string][]string{}}
	for _, p := range l.sc.Topology.Providers {
		for _, c := range p.Connections {
			k.Providers[p.ID] = append(k.Providers[p.ID], c.ID)
		}
		k.Models[p.ID] = p.Models
	}
	return k
}

var trafficKeys = []string{"at", "model", "count", "every", "poisson", "stream", "timeout", "session", "format", "lease", "leaseGeneration"}

func (l *loader) traffic(n *yaml.Node) {
	if yamlnode.IsNull(n) {
		l.d.Errf(l.root, "traffic", "a scenario needs traffic")
		return
	}
	before := l.d.Count()
	defer func() { l.trafficBad = l.d.Count() > before }()
	l.items(n, "traffic", func(i int, f string, v *yaml.Node) {
		t := sim.Traffic{Count: 1, Line: v.Line}
		nodes := map[string]*yaml.Node{} // key → its value
		l.fields(v, f, trafficKeys, func(key, ff string, _, v *yaml.Node) {
			nodes[key] = v
			l.trafficField(key, ff, v, &t)
		})
		l.checkTraffic(v, f, &t, nodes["model"])
		l.checkTrafficLease(f, &t, nodes) // lease.go
		l.trafficLease = append(l.trafficLease, nodes["lease"])
		l.sent += t.Count
		if l.sent > MaxRequests {
			l.d.Errf(v, f+".count", "the scenario sends more than %d requests", MaxRequests)
		}
		l.sc.Traffic = append(l.sc.Traffic, t)
	})
}

// trafficField decodes a traffic item's member key at field ff into t.
func (l *loader) trafficField(key, ff string, v *yaml.Node, t *sim.Traffic) {
	switch key {
	case "at":
		t.At = l.d.Duration(v, ff)
	case "model":
		t.Model = l.d.String(v, ff)
	case "count":
		t.Count = l.d.Int(v, ff)
		if t.Count < 1 || t.Count > MaxRequests {
			l.d.Errf(v, ff, "want 1..%d, got %d", MaxRequests, t.Count)
		}
	case "every":
		t.Every = l.d.Duration(v, ff)
	case "poisson":
		t.Poisson = l.d.Bool(v, ff)
	case "stream":
		t.Stream = l.d.Bool(v, ff)
	case "timeout":
		t.Timeout = l.d.Duration(v, ff)
	case "format":
		t.Format = l.d.String(v, ff)
		if !slices.Contains(sim.Formats, t.Format) {
			l.d.Errf(v, ff, "want one of %s, got %q", strings.Join(sim.Formats, ", "), t.Format)
		}
		if t.Format == sim.FormatChat {
			t.Format = ""
		}
	case "lease":
		t.Lease = l.d.String(v, ff)
	case "leaseGeneration":
		t.LeaseGeneration = int64(l.d.Int(v, ff))
		if t.LeaseGeneration < 1 {
			l.d.Errf(v, ff, "a lease generation is a positive integer, got %d", t.LeaseGeneration)
		}
	case "session":
		// The gateway keys affinity by a hash of the header, never the
		// raw id; the simulator does the same.
		t.Session = sessionKey(l.d.String(v, ff))
	}
}

// checkTraffic checks a traffic item's members together: a model that
// resolves, a format that streams, a mean gap for poisson, a last arrival
// in range.
func (l *loader) checkTraffic(v *yaml.Node, f string, t *sim.Traffic, modelNode *yaml.Node) {
	if t.Model == "" {
		l.d.Errf(v, f+".model", "a traffic item needs a model")
	} else if l.eng != nil {
		if _, err := l.eng.Resolve(t.Model); err != nil {
			l.d.Errf(modelNode, f+".model", "%v", err)
		}
	}
	if t.Format == sim.FormatEmbeddings && t.Stream {
		l.d.Errf(v, f+".stream", "embeddings are not streamed")
	}
	if t.Poisson && t.Every <= 0 {
		l.d.Errf(v, f+".every", "poisson traffic needs every (the mean gap)")
	}
	// The last arrival, at + (count-1)×every (the mean for poisson),
	// stays within the duration bound: virtual time must not overflow.
	if t.Count > 1 && t.Every > 0 && t.At <= yamlnode.MaxDuration &&
		time.Duration(t.Count-1) > (yamlnode.MaxDuration-t.At)/t.Every {
		l.d.Errf(v, f+".every", "the last request would arrive more than 10 years after the start (at %v + %d × every %v)", t.At, t.Count-1, t.Every)
	}
}

var actionKeys = []string{"at", "action", "provider", "connection", "connections", "model", "all", "enabled", "settings", "set", "lease", "ttl"}

func (l *loader) connRef(n *yaml.Node, field string) model.ConnRef {
	s := l.d.String(n, field)
	ref, err := model.ParseConnRef(s)
	if err != nil {
		l.d.Errf(n, field, "%v", err)
		return ref
	}
	l.checkConn(n, field, ref.String())
	return ref
}

func (l *loader) checkConn(n *yaml.Node, field, ref string) bool {
	var all []string
	for _, p := range l.sc.Topology.Providers {
		for _, c := range p.Connections {
			all = append(all, p.ID+"/"+c.ID)
		}
	}
	return l.checkName(n, field, "connection", ref, all)
}

func (l *loader) checkProvider(n *yaml.Node, field, id string) bool {
	var ids []string
	for _, p := range l.sc.Topology.Providers {
		ids = append(ids, p.ID)
	}
	return l.checkName(n, field, "provider", id, ids)
}

// checkName reports whether name is one of known, else records an error that
// suggests the nearest one or lists them all.
func (l *loader) checkName(n *yaml.Node, field, kind, name string, known []string) bool {
	if slices.Contains(known, name) {
		return true
	}
	msg := fmt.Sprintf("unknown %s %q", kind, name)
	if near := yamlnode.Nearest(name, known); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	} else {
		msg += fmt.Sprintf(" (%ss: %s)", kind, strings.Join(known, ", "))
	}
	l.d.Errf(n, field, "%s", msg)
	return false
}

func (l *loader) actions(n *yaml.Node) {
	var setLayers []settings.NamedLayer
	l.items(n, "actions", func(i int, f string, v *yaml.Node) {
		a := sim.Action{Line: v.Line}
		var kindNode, settingsNode *yaml.Node
		hasKind := false
		keys := map[string]*yaml.Node{} // key → its key node
		l.fields(v, f, actionKeys, func(key, ff string, k, v *yaml.Node) {
			keys[key] = k
			switch key {
			case "action":
				kindNode = v
				a.Kind, hasKind = l.actionKind(v, ff)
			case "settings", "set":
				settingsNode = v
			}
			l.actionField(key, ff, v, &a)
		})
		if !hasKind {
			if kindNode == nil {
				l.d.Errf(v, f+".action", "an action needs action: (%s)", strings.Join(sim.ActionNames(), ", "))
			}
			return
		}
		if a.Kind == sim.ActSet {
			if settingsNode == nil {
				l.d.Errf(v, f+".settings", "set needs settings: {...} or set: {path: value}")
				return
			}
			setLayers = append(setLayers, settings.NamedLayer{Name: "action", Tree: a.Settings})
			layers := append(slices.Clone(l.sc.Layers), setLayers...)
			if _, _, err := settings.Resolve(layers...); err != nil {
				l.settingsErr(settingsNode, err, f+".settings")
			}
		}
		l.checkActionKeys(f, &a, keys) // lease.go
		l.checkAction(v, f, &a)
		l.sc.Actions = append(l.sc.Actions, a)
		l.actionNodes = append(l.actionNodes, v)
	})
}

// actionKind reads an action's kind; ok is false for an unknown one.
func (l *loader) actionKind(v *yaml.Node, ff string) (sim.ActionKind, bool) {
	s := l.d.String(v, ff)
	kind, ok := sim.ParseAction(s)
	if !ok {
		msg := fmt.Sprintf("unknown action %q (actions: %s)", s, strings.Join(sim.ActionNames(), ", "))
		if near := yamlnode.Nearest(s, sim.ActionNames()); near != "" {
			msg = fmt.Sprintf("unknown action %q (did you mean %q?)", s, near)
		}
		l.d.Errf(v, ff, "%s", msg)
	}
	return kind, ok
}

// actionField decodes an action's member key (other than its kind) at
// field ff into a.
func (l *loader) actionField(key, ff string, v *yaml.Node, a *sim.Action) {
	switch key {
	case "at":
		a.At = l.d.Duration(v, ff)
	case "provider":
		a.Provider = l.d.String(v, ff)
		l.checkProvider(v, ff, a.Provider)
	case "connection":
		a.Connections = append(a.Connections, l.connRef(v, ff))
	case "connections":
		l.items(v, ff, func(_ int, cf string, v *yaml.Node) {
			a.Connections = append(a.Connections, l.connRef(v, cf))
		})
	case "model":
		a.Model = l.d.String(v, ff)
	case "all":
		a.All = l.d.Bool(v, ff)
	case "lease":
		a.Lease = l.d.String(v, ff)
	case "ttl":
		a.TTL = l.d.Duration(v, ff)
	case "enabled":
		a.Enabled = l.d.Bool(v, ff)
	case "settings":
		layer, err := settings.LayerOf(l.d.Value(v, ff))
		if err != nil {
			l.settingsErr(v, err, ff)
		}
		a.Settings = layer
	case "set":
		a.Settings = l.setLayer(v, ff)
	}
}

// setLayer reads set: {path: value} into a settings layer.
func (l *loader) setLayer(v *yaml.Node, ff string) settings.Layer {
	layer := settings.Layer{}
	l.fields(v, ff, nil, func(path, pf string, k, v *yaml.Node) {
		val := l.d.String(v, pf)
		next, err := settings.SetPath(layer, path, val)
		if err != nil {
			for _, se := range model.SettingsErrors(err) {
				l.d.Errf(k, pf, "%s", se.Error())
			}
			return
		}
		layer = next
	})
	return layer
}

// checkAction checks that an action has what its kind needs; clearing
// cooldowns of no connection clears all.
func (l *loader) checkAction(v *yaml.Node, f string, a *sim.Action) {
	switch a.Kind {
	case sim.ActLeaseAcquire, sim.ActLeaseRelease, sim.ActLeaseRenew:
		l.checkLeaseAction(v, f, a)
	case sim.ActResetConnection, sim.ActConnectionTest:
		if len(a.Connections) == 0 {
			l.d.Errf(v, f+".connection", "%s needs a connection (provider/connection)", a.Kind)
		}
	case sim.ActRateLimit:
		if len(a.Connections) == 0 || !hasKey(v, "enabled") {
			l.d.Errf(v, f, "rate-limit needs a connection (provider/connection) and enabled: true|false")
		}
	case sim.ActClearCooldowns:
		if len(a.Connections) == 0 {
			a.All = true
		}
	case sim.ActClearLockout:
		if !a.All && (len(a.Connections) == 0 || a.Model == "") {
			l.d.Errf(v, f, "clear-lockout needs connection and model, or all: true")
		}
	}
}

var (
	requestExpectKeys = []string{"request", "status", "servedBy", "attempts", "code", "result", "retryAfter", "took"}
	tookKeys          = []string{"atLeast", "atMost"}
	stateExpectKeys   = []string{"at", "breaker", "connections", "lockouts", "noLockouts"}
	windowExpectKeys  = []string{"requests", "status", "upstreamCalls", "servedBy", "results", "count"}
	connExpectKeys    = []string{"status", "backoffLevel", "cooldown", "lastError", "uses", "lane"}
	lockoutKeys       = []string{"connection", "model", "reason", "remaining"}
	windowKeys        = []string{"from", "until"}
	resultNames       = []string{sim.ResultServed, sim.ResultFallback, sim.ResultRejected, sim.ResultFailed, sim.ResultStreamError, sim.ResultClientAbort}
	connStatusNames   = []string{"active", "cooldown", "banned", "expired", "credits_exhausted"}
	breakerNames      = []string{"CLOSED", "DEGRADED", "OPEN", "HALF_OPEN"}
)

func hasKey(n *yaml.Node, key string) bool {
	n = yamlnode.Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

func (l *loader) expects(n *yaml.Node) {
	l.items(n, "expect", func(i int, f string, v *yaml.Node) {
		e := sim.Expect{Line: v.Line}
		switch {
		case hasKey(v, "request"):
			e.Kind = sim.ExpectRequest
			l.requestExpect(v, f, &e)
		case hasKey(v, "at"):
			e.Kind = sim.ExpectState
			l.stateExpect(v, f, &e)
		case hasKey(v, "requests"):
			e.Kind = sim.ExpectWindow
			l.windowExpect(v, f, &e)
		default:
			l.d.Errf(v, f, "an expect needs request: N, at: TIME or requests: {from, until}")
			return
		}
		l.sc.Expects = append(l.sc.Expects, e)
	})
}

func (l *loader) status(n *yaml.Node, field string) int {
	s := l.d.Int(n, field)
	if s < 100 || s > 599 {
		l.d.Errf(n, field, "want an HTTP status 100..599, got %d", s)
	}
	return s
}

func (l *loader) requestExpect(v *yaml.Node, f string, e *sim.Expect) {
	checks, before := 0, l.d.Count()
	l.fields(v, f, requestExpectKeys, func(key, ff string, k, v *yaml.Node) {
		switch key {
		case "request":
			e.Request = l.d.Int(v, ff)
			if e.Request < 1 {
				l.d.Errf(v, ff, "requests are numbered from 1")
			} else if e.Request > l.sent && !l.trafficBad {
				l.d.Errf(v, ff, "can never be evaluated: the traffic sends only %d request(s)", l.sent)
			}
			return
		case "status":
			e.Status = l.status(v, ff)
		case "servedBy":
			e.ServedBy = l.d.String(v, ff)
			l.checkConn(v, ff, e.ServedBy)
		case "attempts":
			x := l.d.NonNegInt(v, ff)
			e.Attempts = &x
		case "code":
			e.Code = l.d.String(v, ff)
		case "result":
			e.Result = l.d.String(v, ff)
			if !slices.Contains(resultNames, e.Result) {
				l.d.Errf(v, ff, "unknown result %q (results: %s)", e.Result, strings.Join(resultNames, ", "))
			}
		case "retryAfter":
			x := l.d.NonNegInt(v, ff)
			e.RetryAfter = &x
		case "took":
			l.d.Map(v, ff, tookKeys, func(key string, k, v *yaml.Node) {
				switch key {
				case "atLeast":
					e.TookAtLeast = l.d.Duration(v, yamlnode.Join(ff, key))
				case "atMost":
					e.TookAtMost = l.d.Duration(v, yamlnode.Join(ff, key))
				}
			})
			if e.TookAtLeast <= 0 && e.TookAtMost <= 0 {
				l.d.Errf(v, ff, "took needs atLeast or atMost (a duration > 0)")
			} else if e.TookAtMost > 0 && e.TookAtMost < e.TookAtLeast {
				l.d.Errf(v, ff, "took.atMost (%v) is below took.atLeast (%v)", e.TookAtMost, e.TookAtLeast)
			}
		}
		checks++
	})
	if checks == 0 && l.d.Count() == before { // an unknown key already said what is wrong
		l.d.Errf(v, f, "checks nothing: add status, servedBy, attempts, code, result or retryAfter")
	}
}

func (l *loader) stateExpect(v *yaml.Node, f string, e *sim.Expect) {
	checks, before := 0, l.d.Count()
	l.fields(v, f, stateExpectKeys, func(key, ff string, _, v *yaml.Node) {
		switch key {
		case "at":
			e.At = l.d.Duration(v, ff)
		case "breaker":
			checks += l.breakerExpects(v, ff, e)
		case "connections":
			checks += l.connExpects(v, ff, e)
		case "lockouts":
			l.items(v, ff, func(_ int, lf string, v *yaml.Node) {
				e.Lockouts = append(e.Lockouts, l.lockoutExpect(v, lf))
				checks++
			})
		case "noLockouts":
			e.NoLockouts = l.d.Bool(v, ff)
			checks++
		}
	})
	if checks == 0 && l.d.Count() == before { // an unknown key already said what is wrong
		l.d.Errf(v, f, "checks nothing: add breaker, connections, lockouts or noLockouts")
	}
}

// breakerExpects reads breaker: {provider: state}; it returns the number of
// checks.
func (l *loader) breakerExpects(v *yaml.Node, ff string, e *sim.Expect) int {
	checks := 0
	e.Breaker = map[string]model.BreakerState{}
	l.fields(v, ff, nil, func(p, pf string, k, v *yaml.Node) {
		l.checkProvider(k, pf, p)
		s := l.d.String(v, pf)
		var st model.BreakerState
		if err := st.UnmarshalText([]byte(s)); err != nil {
			l.d.Errf(v, pf, "unknown breaker state %q (states: %s)", s, strings.Join(breakerNames, ", "))
		}
		e.Breaker[p] = st
		checks++
	})
	return checks
}

// connExpects reads connections: {provider/connection: {...}}; it returns
// the number of checks.
func (l *loader) connExpects(v *yaml.Node, ff string, e *sim.Expect) int {
	checks := 0
	e.Connections = map[string]sim.ConnExpect{}
	l.fields(v, ff, nil, func(ref, cf string, k, v *yaml.Node) {
		l.checkConn(k, cf, ref)
		var ce sim.ConnExpect
		l.fields(v, cf, connExpectKeys, func(key, kf string, _, v *yaml.Node) {
			l.connExpectField(key, kf, v, &ce)
			checks++
		})
		e.Connections[ref] = ce
	})
	return checks
}

func (l *loader) connExpectField(key, kf string, v *yaml.Node, ce *sim.ConnExpect) {
	switch key {
	case "status":
		ce.Status = l.d.String(v, kf)
		if !slices.Contains(connStatusNames, ce.Status) {
			l.d.Errf(v, kf, "unknown connection status %q (statuses: %s)", ce.Status, strings.Join(connStatusNames, ", "))
		}
	case "backoffLevel":
		x := l.d.NonNegInt(v, kf)
		ce.BackoffLevel = &x
	case "cooldown":
		ce.Cooldown, ce.HasCooldown = l.d.Duration(v, kf), true
	case "lastError":
		ce.LastError = l.d.String(v, kf)
		if _, err := model.ParseReason(ce.LastError); err != nil {
			l.d.Errf(v, kf, "%v", err)
		}
	case "uses":
		x := l.d.NonNegInt(v, kf)
		ce.Uses = &x
	case "lane":
		ce.Lane = l.d.String(v, kf)
		if !slices.Contains(laneNames, ce.Lane) {
			l.d.Errf(v, kf, "unknown lane state %q (states: %s)", ce.Lane, strings.Join(laneNames, ", "))
		}
	}
}

func (l *loader) lockoutExpect(v *yaml.Node, lf string) sim.LockoutExpect {
	var le sim.LockoutExpect
	l.fields(v, lf, lockoutKeys, func(key, kf string, _, v *yaml.Node) {
		switch key {
		case "connection":
			le.Connection = l.d.String(v, kf)
			l.checkConn(v, kf, le.Connection)
		case "model":
			le.Model = l.d.String(v, kf)
		case "reason":
			le.Reason = l.d.String(v, kf)
			if _, err := model.ParseReason(le.Reason); err != nil {
				l.d.Errf(v, kf, "%v", err)
			}
		case "remaining":
			le.Remaining, le.HasRemaining = l.d.Duration(v, kf), true
		}
	})
	if le.Connection == "" || le.Model == "" {
		l.d.Errf(v, lf, "a lockout expect needs connection and model")
	}
	return le
}

func (l *loader) windowExpect(v *yaml.Node, f string, e *sim.Expect) {
	checks, before := 0, l.d.Count()
	var winNode *yaml.Node
	l.fields(v, f, windowExpectKeys, func(key, ff string, _, v *yaml.Node) {
		if key == "requests" {
			winNode = v
			l.window(v, ff, e)
			return
		}
		l.windowExpectField(key, ff, v, e)
		checks++
	})
	if checks == 0 && l.d.Count() == before { // an unknown key already said what is wrong
		l.d.Errf(v, f, "checks nothing: add status, upstreamCalls, count, servedBy or results")
		return
	}
	// With deterministic traffic the number of requests in the window is
	// known: expecting more than that can never hold.
	if sent, ok := l.sentIn(e.From, e.Until); ok {
		want := 0
		for _, n := range e.Statuses {
			want += n
		}
		if want > sent {
			l.d.Errf(winNode, f+".status", "can never hold: the traffic sends only %d request(s) in [%v, %v)", sent, e.From, e.Until)
		}
		if e.Requests != nil && *e.Requests != sent {
			l.d.Errf(winNode, f+".count", "can never hold: the traffic sends %d request(s) in [%v, %v)", sent, e.From, e.Until)
		}
	}
}

// window reads requests: {from, until}, the window of sending times; until
// defaults to the end of time.
func (l *loader) window(v *yaml.Node, ff string, e *sim.Expect) {
	hasUntil := false
	l.fields(v, ff, windowKeys, func(key, kf string, _, v *yaml.Node) {
		if key == "from" {
			e.From = l.d.Duration(v, kf)
		} else {
			e.Until, hasUntil = l.d.Duration(v, kf), true
		}
	})
	if !hasUntil {
		e.Until = yamlnode.MaxDuration
	}
	if e.Until <= e.From {
		l.d.Errf(v, ff, "can never be evaluated: the window [%v, %v) is empty", e.From, e.Until)
	}
}

// windowExpectField decodes a window expect's check key at field ff.
func (l *loader) windowExpectField(key, ff string, v *yaml.Node, e *sim.Expect) {
	switch key {
	case "status":
		e.Statuses = map[int]int{}
		l.fields(v, ff, nil, func(st, sf string, k, v *yaml.Node) {
			code, err := strconv.Atoi(st)
			if err != nil || code < 100 || code > 599 {
				l.d.Errf(k, sf, "want an HTTP status as the key, got %q", st)
			}
			e.Statuses[code] = l.d.NonNegInt(v, sf)
		})
	case "upstreamCalls":
		x := l.d.NonNegInt(v, ff)
		e.UpstreamCalls = &x
	case "count":
		x := l.d.NonNegInt(v, ff)
		e.Requests = &x
	case "servedBy":
		e.Served = map[string]int{}
		l.fields(v, ff, nil, func(ref, sf string, k, v *yaml.Node) {
			l.checkConn(k, sf, ref)
			e.Served[ref] = l.d.NonNegInt(v, sf)
		})
	case "results":
		e.Results = map[string]int{}
		l.fields(v, ff, resultNames, func(r, rf string, _, v *yaml.Node) {
			e.Results[r] = l.d.NonNegInt(v, rf)
		})
	}
}

// sentIn counts the requests the traffic sends in [from, until), when the
// traffic is deterministic.
func (l *loader) sentIn(from, until time.Duration) (int, bool) {
	if l.trafficBad {
		return 0, false
	}
	n := 0
	for _, t := range l.sc.Traffic {
		if t.Poisson {
			return 0, false
		}
		if t.Every == 0 {
			if t.At >= from && t.At < until {
				n += t.Count
			}
			continue
		}
		// arrivals at At + i·Every for i in [0, Count)
		lo, hi := 0, t.Count // i in [lo, hi)
		if from > t.At {
			lo = int((from - t.At + t.Every - 1) / t.Every)
		}
		if until <= t.At {
			hi = 0
		} else {
			hi = min(hi, int((until-t.At+t.Every-1)/t.Every))
		}
		n += max(0, hi-lo)
	}
	return n, true
}

// sessionKey is the opaque affinity key of a session id (FNV-1a, hex).
func sessionKey(id string) string {
	if id == "" {
		return ""
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 16)
}
