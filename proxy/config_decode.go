package proxy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model/settings"
	"github.com/breakwater-gw/breakwater/scenarios/yamlnode"
	"go.yaml.in/yaml/v3"
)

// configDecoder decodes the config file's node tree into a Config by the
// fields' yaml tags, on the shared strict node decoder (scenarios/yamlnode):
// every mapping key must be a known field (an unknown one names the nearest
// known key), every problem carries its line, merge keys apply, and every
// value goes through ${VAR} expansion.
type configDecoder struct {
	yamlnode.Decoder
	env      map[string]string
	lines    map[string]int // dotted field path → line, for later messages
	warnings []string
	refs     map[string]bool // variables named by ${...}
	// mgmtUnset is the unset variable server.managementKey expands (and
	// its node): an error unless BREAKWATER_MANAGEMENT_KEY sets the key.
	mgmtUnset     string
	mgmtUnsetNode *yaml.Node
}

func newConfigDecoder(file string, env map[string]string) *configDecoder {
	d := &configDecoder{env: env, lines: map[string]int{}}
	d.File = file
	d.Merge = true
	d.SingleDocument = true
	d.Expand = d.expand
	return d
}

// problems returns what the decoder recorded as ConfigErrors, in document
// order (a config problem names a line, not a column).
func (d *configDecoder) problems() []error {
	var out []error
	for _, e := range yamlnode.Errors(d.Err()) {
		out = append(out, &ConfigError{File: e.File, Line: e.Line, Field: e.Field, Problem: e.Msg})
	}
	return out
}

// expand performs ${VAR} and ${VAR:-default} expansion; $$ is a literal $.
func (d *configDecoder) expand(n *yaml.Node, field, s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		if s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if s[i+1] != '{' {
			b.WriteByte(c)
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			d.Errf(n, field, "unterminated ${ in %q", s)
			return s
		}
		name, def, hasDef := strings.Cut(s[i+2:i+2+end], ":-")
		if name == "" {
			d.Errf(n, field, "empty variable name in %q", s)
			return s
		}
		b.WriteString(d.variable(n, field, name, def, hasDef))
		i += 2 + end
	}
	return b.String()
}

// variable is the value of ${name} (or ${name:-def}) in field: an unset
// variable expands to "" with a warning, and is remembered when it would
// leave the management key empty.
func (d *configDecoder) variable(n *yaml.Node, field, name, def string, hasDef bool) string {
	if d.refs == nil {
		d.refs = map[string]bool{}
	}
	d.refs[name] = true
	v, ok := d.env[name]
	switch {
	case ok && v != "":
		return v
	case hasDef:
		return def
	case field == "server.managementKey":
		d.mgmtUnset, d.mgmtUnsetNode = name, n
	default:
		d.warnings = append(d.warnings, fmt.Sprintf("%s:%d: %s: environment variable %s is not set (expands to \"\")", d.File, n.Line, field, name))
	}
	return ""
}

// noteLine remembers the line of the first node seen at path.
func (d *configDecoder) noteLine(path string, n *yaml.Node) {
	if path == "" {
		return
	}
	if _, seen := d.lines[path]; !seen {
		d.lines[path] = n.Line
	}
}

var (
	layerType  = reflect.TypeOf(settings.Layer(nil))
	millisType = reflect.TypeOf(Millis(0))
	targetType = reflect.TypeOf(ComboTarget{})
)

// removedKeys are keys the config no longer has, with what to do instead: a
// config that still sets one is refused with that message rather than the
// generic unknown-key one.
var removedKeys = map[string]string{
	"server.busyPollUs": "the key was removed: client and upstream connections are served by net/http, which parks goroutines itself; delete the line",
}

// decode decodes node n into v; path is n's dotted field path. A null
// leaves the zero value.
func (d *configDecoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = d.Merged(n, path)
	if n == nil {
		return
	}
	d.noteLine(path, n)
	if yamlnode.IsNull(n) || d.decodeSpecial(n, v, path) {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	default:
		d.decodeScalar(n, v, path)
	}
}

// decodeSpecial decodes the types whose YAML form is not their Go shape:
// the resilience settings tree, a combo target written as a bare string,
// and milliseconds written as a duration. It reports whether v was one.
func (d *configDecoder) decodeSpecial(n *yaml.Node, v reflect.Value, path string) bool {
	switch {
	case v.Type() == layerType:
		tree := d.tree(n, path)
		if m, ok := tree.(map[string]any); ok {
			v.Set(reflect.ValueOf(settings.Layer(m)))
		} else if tree != nil {
			d.Errf(n, path, "want a mapping of resilience settings")
		}
	case v.Type() == targetType && n.Kind == yaml.ScalarNode:
		v.Set(reflect.ValueOf(ComboTarget{Target: d.String(n, path)}))
	case v.Type() == millisType:
		s, ok := d.Scalar(n, path, `milliseconds (an integer or a duration like "30s")`)
		if !ok {
			break
		}
		if ms, err := parseMillis(s); err != nil {
			d.Errf(n, path, "%v", err)
		} else {
			v.SetInt(ms)
		}
	default:
		return false
	}
	return true
}

// decodeStruct decodes a mapping into a struct by its fields' yaml tags.
func (d *configDecoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	names, index := yamlFields(v.Type())
	d.Map(n, path, nil, func(key string, k, val *yaml.Node) {
		fp := yamlnode.Join(path, key)
		fi, known := index[key]
		switch {
		case known:
			d.decode(val, v.Field(fi), fp)
		case path == "" && strings.HasPrefix(key, "x-"):
			// A top-level x- key holds YAML anchors for merge keys (as in
			// Compose files).
		case removedKeys[fp] != "":
			d.Errf(k, fp, "%s", removedKeys[fp])
		default:
			d.UnknownKey(k, path, key, names)
		}
	})
}

// yamlFields lists the yaml names of t's exported fields and their index.
func yamlFields(t reflect.Type) ([]string, map[string]int) {
	var names []string
	index := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" || !t.Field(i).IsExported() {
			continue
		}
		names = append(names, tag)
		index[tag] = i
	}
	return names, index
}

func (d *configDecoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	var elems []*yaml.Node
	if !d.Seq(n, path, func(_ int, e *yaml.Node) { elems = append(elems, e) }) {
		return
	}
	s := reflect.MakeSlice(v.Type(), len(elems), len(elems))
	for i, e := range elems {
		d.decode(e, s.Index(i), yamlnode.Index(path, i))
	}
	v.Set(s)
}

func (d *configDecoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	m := reflect.MakeMap(v.Type())
	ok := d.Map(n, path, nil, func(key string, _, val *yaml.Node) {
		e := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, e, yamlnode.Join(path, key))
		m.SetMapIndex(reflect.ValueOf(key), e)
	})
	if ok {
		v.Set(m)
	}
}

// decodeScalar decodes a string, a decimal integer or a boolean (true,
// yes, on, 1 and their opposites), each after ${VAR} expansion.
func (d *configDecoder) decodeScalar(n *yaml.Node, v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(d.String(n, path))
	case reflect.Int, reflect.Int64:
		s, ok := d.Scalar(n, path, "an integer")
		if !ok {
			return
		}
		s = strings.TrimSpace(s)
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			d.Errf(n, path, "want an integer, got %q", s)
			return
		}
		v.SetInt(i)
	case reflect.Bool:
		s, ok := d.Scalar(n, path, "true or false")
		if !ok {
			return
		}
		switch s = strings.ToLower(strings.TrimSpace(s)); s {
		case "true", "yes", "on", "1":
			v.SetBool(true)
		case "false", "no", "off", "0":
			v.SetBool(false)
		default:
			d.Errf(n, path, "want true or false, got %q", s)
		}
	default:
		d.Errf(n, path, "unsupported field type %s", v.Type())
	}
}

// tree converts a node into the generic form settings.LayerOf accepts,
// recording the line of every path for later messages.
func (d *configDecoder) tree(n *yaml.Node, path string) any {
	n = d.Merged(n, path)
	if n == nil {
		return nil
	}
	d.noteLine(path, n)
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		d.Map(n, path, nil, func(key string, _, v *yaml.Node) { m[key] = d.tree(v, yamlnode.Join(path, key)) })
		return m
	case yaml.SequenceNode:
		a := make([]any, 0, len(n.Content))
		d.Seq(n, path, func(i int, e *yaml.Node) { a = append(a, d.tree(e, yamlnode.Index(path, i))) })
		return a
	case yaml.ScalarNode:
		return d.treeScalar(n, path)
	}
	d.Errf(n, path, "unsupported YAML node")
	return nil
}

// treeScalar is a scalar of the settings tree: typed YAML values as JSON
// would decode them, strings after ${VAR} expansion.
func (d *configDecoder) treeScalar(n *yaml.Node, path string) any {
	switch n.Tag {
	case "!!null":
		return nil
	case "!!bool":
		return strings.EqualFold(n.Value, "true")
	case "!!int", "!!float":
		// YAML 1.1 style ints (0x, 0o, _) are not JSON numbers: keep the
		// text, the model parses integers leniently from strings.
		if json.Valid([]byte(n.Value)) {
			return json.Number(n.Value)
		}
		return n.Value
	}
	return d.expand(n, path, n.Value)
}

func parseMillis(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if i < 0 {
			return 0, fmt.Errorf("must not be negative, got %d", i)
		}
		return i, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want milliseconds (an integer or a duration like \"30s\"), got %q", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative, got %q", s)
	}
	if d%time.Millisecond != 0 { // as in the resilience section: never a silent truncation
		return 0, fmt.Errorf("duration %q is not a whole number of milliseconds", s)
	}
	return d.Milliseconds(), nil
}
