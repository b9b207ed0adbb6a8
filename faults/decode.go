package faults

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/scenarios/yamlnode"
	"go.yaml.in/yaml/v3"
)

// Known lists what rules may name; a nil *Known checks nothing.
type Known struct {
	// Providers maps a provider id to its connection ids.
	Providers map[string][]string
	// Models maps a provider id to its models (empty = any).
	Models map[string][]string
}

var (
	ruleKeys     = []string{"match", "from", "until", "respond", "sequence", "flap", "probability"}
	matchKeys    = []string{"provider", "connection", "model"}
	responseKeys = []string{"use", "status", "headers", "body", "latency", "jitter", "fault", "stream"}
	streamKeys   = []string{"chunks", "interval", "stallAfter", "stallFor", "bytesPerSecond", "numbered", "malformed"}
	flapKeys     = []string{"down", "up"}
)

// DecodeRules decodes a list of rules (the `upstream:` section) from a YAML
// node, recording every problem in d with its line and field.
func DecodeRules(d *yamlnode.Decoder, n *yaml.Node, field string, known *Known) []Rule {
	var rules []Rule
	d.Seq(n, field, func(i int, v *yaml.Node) {
		f := yamlnode.Index(field, i)
		r, ok := decodeRule(d, v, f, known)
		if ok {
			rules = append(rules, r)
		}
	})
	return rules
}

func decodeRule(d *yamlnode.Decoder, n *yaml.Node, field string, known *Known) (Rule, bool) {
	r := Rule{Line: n.Line}
	n0 := d.Count()
	var matchNode *yaml.Node
	d.Map(n, field, ruleKeys, func(key string, k, v *yaml.Node) {
		f := yamlnode.Join(field, key)
		switch key {
		case "match":
			matchNode = v
			d.Map(v, f, matchKeys, func(key string, k, v *yaml.Node) {
				s := d.String(v, yamlnode.Join(f, key))
				switch key {
				case "provider":
					r.Match.Provider = s
				case "connection":
					r.Match.Connection = s
				case "model":
					r.Match.Model = s
				}
			})
		case "from":
			r.From = d.Duration(v, f)
		case "until":
			c := d.Count()
			r.Until = d.Duration(v, f)
			if r.Until == 0 && d.Count() == c {
				d.Errf(v, f, "until 0s leaves an empty window; omit until for no end")
			}
		case "respond":
			resp := DecodeResponse(d, v, f)
			r.Respond = &resp
		case "sequence":
			d.Seq(v, f, func(i int, v *yaml.Node) {
				r.Sequence = append(r.Sequence, DecodeResponse(d, v, yamlnode.Index(f, i)))
			})
			if len(r.Sequence) == 0 {
				d.Errf(v, f, "a sequence needs at least one item")
			}
		case "flap":
			r.Flap = &Flap{}
			d.Map(v, f, flapKeys, func(key string, k, v *yaml.Node) {
				if key == "down" {
					r.Flap.Down = d.Duration(v, yamlnode.Join(f, key))
				} else {
					r.Flap.Up = d.Duration(v, yamlnode.Join(f, key))
				}
			})
		case "probability":
			r.Probability = d.Float(v, f)
		}
	})
	if d.Count() > n0 {
		return r, false
	}
	if err := r.Validate(); err != nil {
		d.Errf(n, field, "%v", err)
		return r, false
	}
	if known != nil {
		checkMatch(d, matchNode, yamlnode.Join(field, "match"), &r.Match, known)
	}
	return r, true
}

func checkMatch(d *yamlnode.Decoder, n *yaml.Node, field string, m *Match, known *Known) {
	if m.Provider != "" {
		conns, ok := known.Providers[m.Provider]
		if !ok {
			names := make([]string, 0, len(known.Providers))
			for p := range known.Providers {
				names = append(names, p)
			}
			slices.Sort(names)
			msg := fmt.Sprintf("unknown provider %q (providers: %s)", m.Provider, strings.Join(names, ", "))
			if near := yamlnode.Nearest(m.Provider, names); near != "" {
				msg = fmt.Sprintf("unknown provider %q (did you mean %q?)", m.Provider, near)
			}
			d.Errf(yamlnode.Find(n, "provider"), yamlnode.Join(field, "provider"), "%s", msg)
			return
		}
		if m.Connection != "" && !slices.Contains(conns, m.Connection) {
			d.Errf(yamlnode.Find(n, "connection"), yamlnode.Join(field, "connection"),
				"provider %q has no connection %q (it has %s)", m.Provider, m.Connection, strings.Join(conns, ", "))
		}
		if models := known.Models[m.Provider]; m.Model != "" && len(models) > 0 && !slices.Contains(models, m.Model) {
			d.Errf(yamlnode.Find(n, "model"), yamlnode.Join(field, "model"),
				"provider %q does not serve model %q (it serves %s)", m.Provider, m.Model, strings.Join(models, ", "))
		}
		return
	}
	if m.Connection != "" {
		found := false
		for _, conns := range known.Providers {
			found = found || slices.Contains(conns, m.Connection)
		}
		if !found {
			d.Errf(yamlnode.Find(n, "connection"), yamlnode.Join(field, "connection"), "no provider has a connection %q", m.Connection)
		}
	}
}

// DecodeResponse decodes one respond / sequence item. `use: NAME` starts
// from a catalog entry; the other keys override its fields.
func DecodeResponse(d *yamlnode.Decoder, n *yaml.Node, field string) Response {
	n = yamlnode.Resolve(n)
	r := decodeUse(d, n, field)
	d.Map(n, field, responseKeys, func(key string, k, v *yaml.Node) {
		decodeResponseKey(d, &r, key, v, yamlnode.Join(field, key))
	})
	r.Headers = canonicalHeaders(r.Headers)
	return r
}

// decodeUse reads the catalog entry `use` names, whatever its position
// among the keys, so that the other keys override it.
func decodeUse(d *yamlnode.Decoder, n *yaml.Node, field string) Response {
	var r Response
	if n == nil || n.Kind != yaml.MappingNode {
		return r
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "use" {
			continue
		}
		v, f := n.Content[i+1], yamlnode.Join(field, "use")
		name := d.String(v, f)
		p, ok := Preset(name)
		if !ok {
			unknownName(d, v, f, "catalog entry", name, PresetNames(),
				fmt.Sprintf("unknown catalog entry %q (see `breakwater upstream -catalog`)", name))
		}
		r = p
	}
	return r
}

// unknownName records an unknown name: with the nearest known one when
// there is one, else with fallback.
func unknownName(d *yamlnode.Decoder, v *yaml.Node, field, what, name string, known []string, fallback string) {
	if near := yamlnode.Nearest(name, known); near != "" {
		d.Errf(v, field, "unknown %s %q (did you mean %q?)", what, name, near)
		return
	}
	d.Errf(v, field, "%s", fallback)
}

// decodeResponseKey decodes one key of a response other than `use`.
func decodeResponseKey(d *yamlnode.Decoder, r *Response, key string, v *yaml.Node, f string) {
	switch key {
	case "status":
		r.Status = d.Int(v, f)
		if r.Status != 0 && (r.Status < 100 || r.Status > 599) {
			d.Errf(v, f, "want an HTTP status 100..599, got %d", r.Status)
		}
	case "headers":
		if r.Headers == nil {
			r.Headers = map[string]string{}
		}
		d.Map(v, f, nil, func(key string, k, v *yaml.Node) {
			r.Headers[http.CanonicalHeaderKey(key)] = d.String(v, yamlnode.Join(f, key))
		})
	case "body":
		r.Body = d.String(v, f)
	case "latency":
		r.Latency = d.Duration(v, f)
	case "jitter":
		r.Jitter = d.Duration(v, f)
	case "fault":
		s := d.String(v, f)
		ft, err := ParseFault(s)
		if err != nil {
			unknownName(d, v, f, "fault", s, FaultNames(), err.Error())
		}
		r.Fault = ft
	case "stream":
		d.Map(v, f, streamKeys, func(key string, k, v *yaml.Node) {
			decodeStreamKey(d, &r.Stream, key, v, yamlnode.Join(f, key))
		})
	}
}

// decodeStreamKey decodes one key of a response's stream: counts,
// durations, or numbered.
func decodeStreamKey(d *yamlnode.Decoder, s *Stream, key string, v *yaml.Node, f string) {
	counts := map[string]*int{"chunks": &s.Chunks, "stallAfter": &s.StallAfter,
		"bytesPerSecond": &s.BytesPerSecond, "malformed": &s.Malformed}
	durations := map[string]*time.Duration{"interval": &s.Interval, "stallFor": &s.StallFor}
	if n, ok := counts[key]; ok {
		*n = d.NonNegInt(v, f)
	} else if t, ok := durations[key]; ok {
		*t = d.Duration(v, f)
	} else if key == "numbered" {
		s.Numbered = d.Bool(v, f)
	}
}

// canonicalHeaders keeps every header name canonical, as the catalog's
// are.
func canonicalHeaders(hs map[string]string) map[string]string {
	if len(hs) == 0 {
		return hs
	}
	h := make(map[string]string, len(hs))
	for k, v := range hs {
		h[http.CanonicalHeaderKey(k)] = v
	}
	return h
}

// ParseRules reads a rule list from YAML or JSON: either a list of rules,
// a mapping with an `upstream:` list (a whole scenario file; its other keys
// are ignored), or a mapping with a `rules:` list.
func ParseRules(name string, src []byte) ([]Rule, error) {
	d := &yamlnode.Decoder{File: name}
	root := d.Parse(src)
	if d.Failed() {
		return nil, d.Err()
	}
	if root == nil {
		return nil, nil
	}
	field := ""
	if root.Kind == yaml.MappingNode {
		var list *yaml.Node
		for i := 0; i+1 < len(root.Content); i += 2 {
			switch root.Content[i].Value {
			case "upstream", "rules":
				list, field = root.Content[i+1], root.Content[i].Value
			}
		}
		if list == nil {
			d.Errf(root, "", "want a list of rules, or a mapping with an `upstream:` or `rules:` list")
			return nil, d.Err()
		}
		root = list
	}
	rules := DecodeRules(d, root, field, nil)
	if err := d.Err(); err != nil {
		return nil, err
	}
	return rules, nil
}
