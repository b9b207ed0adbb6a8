package settings

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/internal/lenient"
	"github.com/breakwater-gw/breakwater/internal/suggest"
	"github.com/breakwater-gw/breakwater/model"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Settings layers and precedence (docs/settings.md#layers), as pure functions.
//
// A Layer is a sparse settings tree: the JSON object form of Settings with only
// the keys that layer sets, e.g. {"providerBreaker":{"apikey":{"failureThreshold":5}}}.
// Its canonical values are those of encoding/json with UseNumber:
//
//	nil (JSON null), bool, string, json.Number, []any, map[string]any
//
// LayerOf converts what a YAML or JSON decoder produced (ints, float64,
// map[any]any with string keys, typed slices, time.Duration) into that form;
// every function here accepts any such tree and canonicalises it first.
//
// Precedence, lowest to highest: built-in defaults < "file" < "env" <
// "saved" (PATCH, persisted). Resolve deep-merges the layers in the order given
// over model.DefaultSettings: objects merge key by key (RFC 7386), arrays and scalars
// replace. Inside a layer passed to Resolve, null means "this layer does not
// set the key" (the lower layers apply); MergePatch uses null to delete a
// saved key. Per-connection overrides are applied later by the engine
// (model.Settings.QueueBudgets). Keys are matched exactly (case-sensitive); an
// unknown key is an error naming its path and the nearest known key.
//
// Scalars are accepted leniently so quoting in YAML, env or `-set` never
// matters, and are always written back canonically:
//   - *Ms fields: an integer (ms), a string holding one, or a Go duration
//     string ("30s", "1m30s", "250ms") that is a whole number of milliseconds;
//   - integers: a whole number or a string holding one (integers beyond int64
//     saturate, then model.Normalize clamps);
//   - booleans: true/false, or the strings true/1/on and false/0/off (any case).
//
// Paths are dotted JSON keys ("providerBreaker.apikey.failureThreshold").
// Under a map keyed by a provider id or a failure kind the rest of the path is
// the key, so provider ids may contain dots ("providerErrorRules.my.provider").
// Lists (errorCodes, rules, bannedSignals) are set as a whole.
type Layer map[string]any

// NamedLayer is one source of settings: Name is what Sources reports for the
// values it supplies ("file", "env", "saved", "scenario", "set").
type NamedLayer struct {
	Name string
	Tree Layer
}

// Sources maps every leaf path of the resolved settings to the name of the
// layer that supplied it, or SourceDefault. Leaves are scalars, lists, and the
// entries of maps keyed by provider or failure kind (an empty such map is
// listed under its own path).
type Sources map[string]string

// SourceDefault is the Sources value of a built-in default.
const SourceDefault = "default"

const (
	maxSettingsTreeDepth  = 64
	settingsEnvPrefix     = "BREAKWATER_"
	settingsEnvGenericPfx = "BREAKWATER_SETTINGS__"
)

// ---------------------------------------------------------------------------
// Resolve

// Resolve merges the layers, lowest precedence first, over model.DefaultSettings,
// decodes the result strictly and normalises it. Every layer is checked on its
// own first, so an error names the layer (model.SettingsError.Source) as well as the
// key. Sources tells, for every leaf, which layer supplied it.
func Resolve(layers ...NamedLayer) (model.Settings, Sources, error) {
	tree := map[string]any(Full(model.DefaultSettings()))
	set := map[string]string{}
	var errs []error
	for i, nl := range layers {
		name := nl.Name
		if name == "" {
			name = fmt.Sprintf("layer %d", i+1)
		}
		l, err := LayerOf(nl.Tree)
		if err == nil {
			err = checkSettingsLayer(l)
		}
		if err != nil {
			errs = append(errs, withSettingsSource(err, name))
			continue
		}
		tree = mergeSettingsTrees(tree, l)
		walkSettingsLeaves(map[string]any(l), settingsSchema, "", false, func(p string) { set[p] = name })
	}
	if len(errs) > 0 {
		return model.Settings{}, nil, errors.Join(errs...)
	}
	s, err := decodeSettingsTree(tree)
	if err != nil {
		return model.Settings{}, nil, err
	}
	n, err := model.Normalize(s)
	if err != nil {
		for _, se := range model.SettingsErrors(err) {
			if se.Source == "" {
				se.Source = lookupSettingsSource(set, se.Field)
			}
		}
		return model.Settings{}, nil, err
	}
	src := Sources{}
	walkSettingsLeaves(map[string]any(Full(n)), settingsSchema, "", true, func(p string) {
		if name, ok := set[p]; ok {
			src[p] = name
		} else {
			src[p] = SourceDefault
		}
	})
	return n, src, nil
}

// lookupSettingsSource finds the layer that set field or the leaf containing
// it ("providerErrorRules.glm[0].status" → "providerErrorRules.glm").
func lookupSettingsSource(set map[string]string, field string) string {
	for f := field; f != ""; {
		if name, ok := set[f]; ok {
			return name
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return ""
}

func withSettingsSource(err error, source string) error {
	for _, se := range model.SettingsErrors(err) {
		if se.Source == "" {
			se.Source = source
		}
	}
	return err
}

// checkSettingsLayer decodes a canonical layer on its own: unknown keys and
// wrong types are reported; values are not range-checked (model.Normalize clamps).
func checkSettingsLayer(l Layer) error {
	var d settingsDecoder
	d.check(map[string]any(l), settingsSchema, "", 0)
	return d.p.Err()
}

// decodeSettingsTree decodes a full canonical tree into Settings, strictly.
func decodeSettingsTree(tree map[string]any) (model.Settings, error) {
	var d settingsDecoder
	checked := d.check(tree, settingsSchema, "", 0)
	if err := d.p.Err(); err != nil {
		return model.Settings{}, err
	}
	// checked now holds only known keys and values of the right JSON kind,
	// so encoding/json cannot fail on it.
	b, err := json.Marshal(checked)
	if err != nil {
		return model.Settings{}, &model.SettingsError{Problem: err.Error()}
	}
	var s model.Settings
	if err := json.Unmarshal(b, &s); err != nil {
		return model.Settings{}, &model.SettingsError{Problem: err.Error()}
	}
	return s, nil
}

// mergeSettingsTrees returns dst with src merged in: objects merge, other
// values replace, null in src leaves dst's value. Neither input is modified.
func mergeSettingsTrees(dst, src map[string]any) map[string]any {
	out := make(map[string]any, len(dst)+len(src))
	for k, v := range dst {
		out[k] = v
	}
	for k, v := range src {
		switch sv := v.(type) {
		case nil:
		case map[string]any:
			dv, _ := out[k].(map[string]any)
			out[k] = mergeSettingsTrees(dv, sv)
		default:
			out[k] = cloneSettingsValue(v)
		}
	}
	return out
}

func cloneSettingsValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneSettingsValue(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = cloneSettingsValue(e)
		}
		return a
	}
	return v
}

// ---------------------------------------------------------------------------
// PATCH

// MergePatch applies an RFC 7386 JSON merge patch to the saved layer: objects
// merge, arrays and scalars replace, and null deletes the saved key so the
// file / env / default value applies again. The patch is checked strictly
// (unknown keys — also under null — and wrong types are errors, Source
// "patch"); neither input is modified. Range problems and rules that need the
// other layers are found by Resolve: a PATCH handler should use ApplyPatch,
// which resolves the result with the lower layers before anything is saved.
func MergePatch(saved Layer, patch Layer) (Layer, error) {
	s, err := LayerOf(saved)
	if err != nil {
		return nil, withSettingsSource(err, "saved")
	}
	p, err := LayerOf(patch)
	if err == nil {
		err = checkSettingsLayer(p)
	}
	if err != nil {
		return nil, withSettingsSource(err, "patch")
	}
	out, _ := mergePatchValue(map[string]any(s), map[string]any(p)).(map[string]any)
	out = pruneEmptySettingsObjects(out)
	if err := checkSettingsLayer(out); err != nil {
		return nil, withSettingsSource(err, "saved")
	}
	return Layer(out), nil
}

func mergePatchValue(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return cloneSettingsValue(patch)
	}
	tm, _ := target.(map[string]any)
	out := make(map[string]any, len(tm)+len(pm))
	for k, v := range tm {
		out[k] = v
	}
	for k, v := range pm {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = mergePatchValue(out[k], v)
	}
	return out
}

// pruneEmptySettingsObjects drops objects left empty by a patch: an empty
// object sets nothing.
func pruneEmptySettingsObjects(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			sub = pruneEmptySettingsObjects(sub)
			if len(sub) == 0 {
				continue
			}
			v = sub
		}
		out[k] = v
	}
	return out
}

// ApplyPatch is the whole PATCH /api/resilience step: merge patch into saved,
// then resolve lower (e.g. file and env layers) plus the new saved layer. It
// returns the layer to persist and the settings to apply only when all of it
// is valid; on error nothing should change.
func ApplyPatch(lower []NamedLayer, saved, patch Layer) (Layer, model.Settings, Sources, error) {
	next, err := MergePatch(saved, patch)
	if err != nil {
		return nil, model.Settings{}, nil, err
	}
	layers := append(slices.Clone(lower), NamedLayer{Name: "saved", Tree: next})
	s, src, err := Resolve(layers...)
	if err != nil {
		return nil, model.Settings{}, nil, err
	}
	return next, s, src, nil
}

// ---------------------------------------------------------------------------
// -set and Get

// SetPath returns a copy of l with the value at path set, for
// `sim -set a.b.c=value` and the generic env form. value is parsed as JSON
// when it is valid JSON (numbers, true/false, arrays, objects, quoted strings)
// and taken as a plain string otherwise, so "30s" works for *Ms fields. JSON
// null removes the key from the layer. An unknown path is an error naming the
// nearest known key; a value of the wrong type is an error too (ranges are
// model.Normalize's business). l is not modified.
func SetPath(l Layer, path string, value string) (Layer, error) {
	segs, err := splitSettingsPath(path)
	if err != nil {
		return nil, err
	}
	v, err := parseSetValue(value, path)
	if err != nil {
		return nil, err
	}
	base, err := LayerOf(l)
	if err != nil {
		return nil, err
	}
	out := setSettingsIn(map[string]any(base), segs, v)
	if err := checkSettingsLayer(out); err != nil {
		return nil, err
	}
	return Layer(out), nil
}

func parseSetValue(value, path string) (any, error) {
	if !json.Valid([]byte(value)) {
		return value, nil
	}
	dec := json.NewDecoder(strings.NewReader(value))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return value, nil
	}
	return canonSettingsValue(v, path, 0)
}

func setSettingsIn(m map[string]any, segs []string, v any) map[string]any {
	if m == nil {
		m = map[string]any{}
	}
	k := segs[0]
	if len(segs) == 1 {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	child, _ := m[k].(map[string]any)
	m[k] = setSettingsIn(child, segs[1:], v)
	return m
}

// splitSettingsPath splits a dotted path along the settings schema.
func splitSettingsPath(path string) ([]string, error) {
	if path == "" {
		return nil, &model.SettingsError{Problem: "empty settings path"}
	}
	n := settingsSchema
	rest := path
	walked := ""
	var segs []string
	for rest != "" {
		var seg string
		switch n.kind {
		case schemaObject:
			var found bool
			seg, rest, found = strings.Cut(rest, ".")
			if found && rest == "" {
				return nil, &model.SettingsError{Field: path, Problem: "path ends with a dot"}
			}
			child := n.field(seg)
			if child == nil {
				return nil, unknownSettingsKey(joinSettingsPath(walked, seg), seg, n)
			}
			n = child
		case schemaMap:
			if n.elem.isLeaf() {
				seg, rest = rest, ""
			} else {
				seg, rest, _ = strings.Cut(rest, ".")
			}
			if seg == "" {
				return nil, &model.SettingsError{Field: path, Problem: "empty key"}
			}
			n = n.elem
		default:
			return nil, &model.SettingsError{Field: walked, Problem: fmt.Sprintf("is a value, not an object (cannot set %q below it)", rest)}
		}
		segs = append(segs, seg)
		walked = joinSettingsPath(walked, seg)
	}
	return segs, nil
}

// settingsPathNode returns the schema node at a path, or nil.
func settingsPathNode(path string) *settingsNode {
	segs, err := splitSettingsPath(path)
	if err != nil {
		return nil
	}
	n := settingsSchema
	for _, seg := range segs {
		if n.kind == schemaObject {
			n = n.field(seg)
		} else {
			n = n.elem
		}
	}
	return n
}

// Get returns the value at a dotted path of s in its canonical tree form
// (json.Number, bool, string, []any or map[string]any).
func Get(s model.Settings, path string) (any, error) {
	segs, err := splitSettingsPath(path)
	if err != nil {
		return nil, err
	}
	var cur any = map[string]any(Full(s))
	for _, seg := range segs {
		m, _ := cur.(map[string]any)
		v, ok := m[seg]
		if !ok {
			return nil, &model.SettingsError{Field: path, Problem: "not set"}
		}
		cur = v
	}
	return cur, nil
}

// ---------------------------------------------------------------------------
// Settings → tree

// plainSettings has Settings' fields without its methods, for encoding/json.
type plainSettings model.Settings

// Full returns s as a full settings tree: every key, empty maps as {} and
// empty lists as [] (never null), durations as integer milliseconds. It is
// what GET /api/resilience shows, and resolving it as a layer gives s back
// (docs/settings.md#validation: the API can always re-submit what it returns).
// model.Settings.MarshalJSON writes the same tree (TestSettingsJSONIsFull).
func Full(s model.Settings) Layer {
	b, err := json.Marshal(plainSettings(s))
	if err != nil {
		return Layer{}
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return Layer{}
	}
	fillSettingsEmpties(m, settingsSchema)
	return Layer(m)
}

// fillSettingsEmpties replaces the nulls encoding/json writes for nil maps and
// slices with {} and [].
func fillSettingsEmpties(v any, n *settingsNode) any {
	switch n.kind {
	case schemaObject:
		m, _ := v.(map[string]any)
		for _, f := range n.fields {
			if e, ok := m[f.name]; ok {
				m[f.name] = fillSettingsEmpties(e, f.node)
			}
		}
	case schemaMap:
		m, _ := v.(map[string]any)
		if m == nil {
			return map[string]any{}
		}
		for k, e := range m {
			m[k] = fillSettingsEmpties(e, n.elem)
		}
	case schemaList:
		a, _ := v.([]any)
		if a == nil {
			return []any{}
		}
		for i, e := range a {
			a[i] = fillSettingsEmpties(e, n.elem)
		}
	}
	return v
}

// ---------------------------------------------------------------------------
// Canonical trees

// ParseLayerJSON decodes a JSON object (a PATCH body, a saved row) into a
// canonical Layer. null or an empty body is an empty layer.
func ParseLayerJSON(b []byte) (Layer, error) {
	if strings.TrimSpace(string(b)) == "" {
		return Layer{}, nil
	}
	if !json.Valid(b) {
		var v any
		err := json.Unmarshal(b, &v)
		return nil, &model.SettingsError{Problem: fmt.Sprintf("invalid JSON: %v", err)}
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &model.SettingsError{Problem: fmt.Sprintf("invalid JSON: %v", err)}
	}
	return LayerOf(v)
}

// LayerOf converts a decoded JSON or YAML document into a canonical Layer
// (see Layer). The input is not modified; the result shares nothing with it.
func LayerOf(v any) (Layer, error) {
	c, err := canonSettingsValue(v, "", 0)
	if err != nil {
		return nil, err
	}
	switch m := c.(type) {
	case nil:
		return Layer{}, nil
	case map[string]any:
		return Layer(m), nil
	}
	return nil, &model.SettingsError{Problem: fmt.Sprintf("settings must be an object, got %s", describeSettingValue(c))}
}

func canonSettingsValue(v any, path string, depth int) (any, error) {
	if depth > maxSettingsTreeDepth {
		return nil, &model.SettingsError{Field: path, Problem: "nested too deeply"}
	}
	if c, ok, err := canonSettingsScalar(v, path); ok {
		return c, err
	}
	switch x := v.(type) {
	case Layer:
		return canonSettingsObject(x, path, depth)
	case map[string]any:
		return canonSettingsObject(x, path, depth)
	case map[any]any: // yaml.v2
		m := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, &model.SettingsError{Field: path, Problem: fmt.Sprintf("object keys must be strings, got %v", k)}
			}
			m[ks] = e
		}
		return canonSettingsObject(m, path, depth)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c, err := canonSettingsValue(e, fmt.Sprintf("%s[%d]", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	return canonSettingsViaJSON(v, path, depth)
}

// canonSettingsScalar canonicalises a string, bool, null, number, duration
// or text-marshalling value; ok is false for anything else.
func canonSettingsScalar(v any, path string) (c any, ok bool, err error) {
	if n, ok := settingsIntegerText(v); ok {
		return json.Number(n), true, nil
	}
	switch x := v.(type) {
	case string:
		if strings.IndexByte(x, 0) >= 0 {
			// No setting has a use for one, and the Postgres store
			// cannot keep it (jsonb refuses \u0000): bad input, not a
			// failed save.
			return nil, true, &model.SettingsError{Field: path, Problem: "must not contain a NUL character (\\u0000)"}
		}
		return x, true, nil
	case nil, bool, json.Number:
		return x, true, nil
	case time.Duration:
		if x%time.Millisecond != 0 {
			return nil, true, &model.SettingsError{Field: path, Problem: fmt.Sprintf("duration %v is not a whole number of milliseconds", x)}
		}
		return json.Number(strconv.FormatInt(int64(x/time.Millisecond), 10)), true, nil
	case float64:
		c, err := canonSettingsFloat(x, path)
		return c, true, err
	case float32:
		c, err := canonSettingsFloat(float64(x), path)
		return c, true, err
	case interface{ MarshalText() ([]byte, error) }:
		b, err := x.MarshalText()
		if err != nil {
			return nil, true, &model.SettingsError{Field: path, Problem: err.Error()}
		}
		return string(b), true, nil
	}
	return nil, false, nil
}

// settingsIntegerText is an integer's decimal text; ok is false for a value
// of any other type.
func settingsIntegerText(v any) (string, bool) {
	switch x := v.(type) {
	case model.Millis:
		return strconv.FormatInt(int64(x), 10), true
	case int:
		return strconv.Itoa(x), true
	case int8:
		return strconv.FormatInt(int64(x), 10), true
	case int16:
		return strconv.FormatInt(int64(x), 10), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint:
		return strconv.FormatUint(uint64(x), 10), true
	case uint8:
		return strconv.FormatUint(uint64(x), 10), true
	case uint16:
		return strconv.FormatUint(uint64(x), 10), true
	case uint32:
		return strconv.FormatUint(uint64(x), 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	}
	return "", false
}

// canonSettingsViaJSON canonicalises anything else (typed slices and maps,
// structs) through encoding/json.
func canonSettingsViaJSON(v any, path string, depth int) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &model.SettingsError{Field: path, Problem: fmt.Sprintf("unsupported value of type %T", v)}
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, &model.SettingsError{Field: path, Problem: fmt.Sprintf("unsupported value of type %T", v)}
	}
	return canonSettingsValue(out, path, depth+1)
}

func canonSettingsObject(x map[string]any, path string, depth int) (any, error) {
	out := make(map[string]any, len(x))
	for _, k := range sortedSettingKeys(x) {
		if strings.IndexByte(k, 0) >= 0 {
			return nil, &model.SettingsError{Field: path, Problem: "a key must not contain a NUL character (\\u0000)"}
		}
		c, err := canonSettingsValue(x[k], joinSettingsPath(path, k), depth+1)
		if err != nil {
			return nil, err
		}
		out[k] = c
	}
	return out, nil
}

func canonSettingsFloat(f float64, path string) (any, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, &model.SettingsError{Field: path, Problem: "not a finite number"}
	}
	return json.Number(strconv.FormatFloat(f, 'f', -1, 64)), nil
}

// ---------------------------------------------------------------------------
// The schema

type settingsKind uint8

const (
	schemaObject settingsKind = iota // a struct: fixed keys
	schemaMap                        // keyed by provider id or failure kind
	schemaList
	schemaInt
	schemaMs
	schemaBool
	schemaString
	schemaScope
	schemaReason
)

// settingsNode describes one node of the settings tree. The schema mirrors
// the json tags of Settings (a test checks it against the struct with
// reflection, which the model itself may not import).
type settingsNode struct {
	kind   settingsKind
	fields []settingsFieldNode // schemaObject, in struct order
	elem   *settingsNode       // schemaMap values, schemaList elements
	// positive: a duration that cannot be 0 (a timer or budget with no
	// "off": 0 would clamp to 1 ms and cut every request).
	positive bool
}

type settingsFieldNode struct {
	name string
	node *settingsNode
}

func (n *settingsNode) isLeaf() bool { return n.kind != schemaObject && n.kind != schemaMap }

func (n *settingsNode) field(name string) *settingsNode {
	for _, f := range n.fields {
		if f.name == name {
			return f.node
		}
	}
	return nil
}

func (n *settingsNode) fieldNames() []string {
	names := make([]string, len(n.fields))
	for i, f := range n.fields {
		names[i] = f.name
	}
	return names
}

// settingsSchema is the settings tree's shape (read-only).
var settingsSchema = buildSettingsSchema()

func buildSettingsSchema() *settingsNode {
	obj := func(fields ...settingsFieldNode) *settingsNode {
		return &settingsNode{kind: schemaObject, fields: fields}
	}
	f := func(name string, n *settingsNode) settingsFieldNode { return settingsFieldNode{name, n} }
	leaf := func(k settingsKind) *settingsNode { return &settingsNode{kind: k} }
	mapOf := func(e *settingsNode) *settingsNode { return &settingsNode{kind: schemaMap, elem: e} }
	listOf := func(e *settingsNode) *settingsNode { return &settingsNode{kind: schemaList, elem: e} }
	integer, ms, boolean, str := leaf(schemaInt), leaf(schemaMs), leaf(schemaBool), leaf(schemaString)
	timer := &settingsNode{kind: schemaMs, positive: true}
	enabled := f("enabled", boolean)

	breaker := obj(
		f("degradationThreshold", integer), f("failureThreshold", integer), f("resetTimeoutMs", ms),
		f("halfOpenRequests", integer), f("maxBackoffMultiplier", integer), f("backoffEscalationCount", integer),
		f("cooldownByKind", mapOf(ms)), f("probeTimeoutMs", ms))
	window := obj(f("providerFailureThreshold", integer), f("providerFailureWindowMs", ms), f("providerCooldownMs", ms))
	cooldown := obj(f("baseCooldownMs", ms), f("maxBackoffSteps", integer))
	errorRule := obj(f("status", integer), f("match", str), f("scope", leaf(schemaScope)),
		f("reason", leaf(schemaReason)), f("cooldownMs", ms))
	restatement := obj(f("id", str), f("fromStatuses", listOf(integer)), f("toStatus", integer),
		f("textMarkers", listOf(str)), f("excludeMarkers", listOf(str)), f("defaultRetryAfterMs", ms))

	return obj(
		f("providerBreaker", obj(f("oauth", breaker), f("apikey", breaker), f("local", breaker),
			f("dedup", obj(f("connectionMs", ms), f("transportMs", ms))))),
		f("providerCooldown", obj(enabled, f("oauth", window), f("apikey", window), f("local", window),
			f("minRetryCooldownMs", ms), f("maxRetryCooldownMs", ms))),
		f("connectionCooldown", obj(f("oauth", cooldown), f("apikey", cooldown), f("local", cooldown),
			f("maxCooldownMs", ms), f("maxStatedResetMs", ms), f("backoffDecayMs", ms), f("concurrencyCooldownMs", ms),
			f("transientMaxCooldownMs", ms))),
		f("modelLockout", obj(enabled, f("errorCodes", listOf(integer)), f("baseCooldownMs", ms),
			f("maxCooldownMs", ms), f("maxBackoffSteps", integer), f("useExponentialBackoff", boolean),
			f("escalationWindowMs", ms))),
		f("requestQueue", obj(f("maxWaitMs", timer), f("executionMaxWaitMs", timer), f("maxQueueDepth", integer),
			f("globalMaxConcurrent", integer), f("autoEnableApiKeyProviders", boolean))),
		f("waitForCooldown", obj(enabled, f("maxRetries", integer), f("maxRetryWaitSec", integer), f("budgetMs", ms))),
		f("comboCooldownWait", obj(enabled, f("maxWaitMs", ms), f("maxAttempts", integer), f("budgetMs", ms))),
		f("priorityWait", obj(enabled, f("maxWaitMs", ms))),
		f("quotaShareConcurrencyLimit", obj(enabled)),
		f("streamStallCooldown", obj(enabled)),
		f("streamRecovery", obj(f("throughputWatchdog", obj(enabled, f("warmupMs", ms), f("windowMs", ms),
			f("minUsefulBytesPerSecond", integer), f("minUsefulBytes", integer))),
			f("malformedEvents", obj(f("maxConsecutive", integer), f("maxTotal", integer))))),
		f("streamResume", obj(enabled, f("maxResumes", integer))),
		f("upstreamTimeouts", obj(f("connectMs", timer), f("responseHeaderMs", timer), f("firstContentMs", timer),
			f("streamIdleMs", timer), f("attemptMs", timer))),
		f("requestBudget", obj(f("maxAttempts", integer), f("deadlineMs", timer))),
		f("sessionAffinityTtlMs", ms),
		f("emergencyFallback", obj(enabled, f("target", str))),
		f("providerErrorRules", mapOf(listOf(errorRule))),
		f("statusRestatements", mapOf(listOf(restatement))),
		f("bannedSignals", listOf(str)),
	)
}

func joinSettingsPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func unknownSettingsKey(field, key string, n *settingsNode) *model.SettingsError {
	names := n.fieldNames()
	return &model.SettingsError{Field: field, Problem: model.ProblemUnknownKey, Suggestion: suggest.Nearest(key, names), Known: names}
}

// ---------------------------------------------------------------------------
// Strict checking along the schema

type settingsDecoder struct{ p settingProblems }

func (d *settingsDecoder) fail(path, format string, args ...any) { d.p.Add(path, format, args...) }

// check validates the canonical tree value v against schema node n, recording
// every problem with its path, and returns v in the exact JSON form
// encoding/json decodes into Settings: lenient scalars made canonical,
// null object members dropped.
func (d *settingsDecoder) check(v any, n *settingsNode, path string, depth int) any {
	if depth > maxSettingsTreeDepth {
		d.fail(path, "nested too deeply")
		return nil
	}
	switch n.kind {
	case schemaMs:
		return d.checkMs(v, n, path)
	case schemaInt:
		return d.checkInt(v, path)
	case schemaBool:
		b, err := parseSettingBool(v)
		if err != nil {
			d.fail(path, "%s", err.Error())
			return nil
		}
		return b
	case schemaString, schemaScope, schemaReason:
		return d.checkString(v, n, path)
	case schemaList:
		return d.checkList(v, n, path, depth)
	case schemaMap, schemaObject:
		return d.checkObject(v, n, path, depth)
	}
	d.fail(path, "unsupported setting")
	return nil
}

func (d *settingsDecoder) checkMs(v any, n *settingsNode, path string) any {
	ms, err := parseSettingMillis(v)
	if err != nil {
		d.fail(path, "%s", err.Error())
		return nil
	}
	// One validation for every source (file, env, PATCH, scenario):
	// a negative value means nothing anywhere (the named env variables
	// always refused it), and a timer of 0 would clamp to 1 ms and
	// cut every request. Values above a range still clamp (docs/settings.md#layers).
	switch {
	case ms < 0:
		d.fail(path, "must not be negative, got %s", describeSettingValue(v))
		return nil
	case ms == 0 && n.positive:
		d.fail(path, "must be at least 1 ms (this timer cannot be turned off), got %s", describeSettingValue(v))
		return nil
	}
	return json.Number(strconv.FormatInt(int64(ms), 10))
}

func (d *settingsDecoder) checkInt(v any, path string) any {
	i, err := parseSettingInt(v)
	if err != nil {
		d.fail(path, "%s", err.Error())
		return nil
	}
	if i < 0 {
		d.fail(path, "must not be negative, got %s", describeSettingValue(v))
		return nil
	}
	return json.Number(strconv.FormatInt(i, 10))
}

// checkString checks a string and, for a scope or a reason, that it names
// one.
func (d *settingsDecoder) checkString(v any, n *settingsNode, path string) any {
	s, ok := v.(string)
	if !ok {
		d.fail(path, "want a string, got %s", describeSettingValue(v))
		return nil
	}
	switch n.kind {
	case schemaScope:
		if _, err := model.ParseScope(s); err != nil {
			d.fail(path, "want model, provider or connection, got %q", s)
		}
	case schemaReason:
		if _, err := model.ParseReason(s); err != nil {
			d.fail(path, "%s", err.Error())
		}
	}
	return s
}

// checkList checks each element; a null element is a problem.
func (d *settingsDecoder) checkList(v any, n *settingsNode, path string, depth int) any {
	arr, ok := v.([]any)
	if !ok {
		d.fail(path, "want an array, got %s", describeSettingValue(v))
		return nil
	}
	out := make([]any, len(arr))
	for i, e := range arr {
		p := fmt.Sprintf("%s[%d]", path, i)
		if e == nil {
			d.fail(p, "must not be null")
			continue
		}
		out[i] = d.check(e, n.elem, p, depth+1)
	}
	return out
}

// checkObject checks a struct's members (an unknown key is a problem) or a
// map's values; a null member is dropped.
func (d *settingsDecoder) checkObject(v any, n *settingsNode, path string, depth int) any {
	obj, ok := v.(map[string]any)
	if !ok {
		d.fail(path, "want an object, got %s", describeSettingValue(v))
		return nil
	}
	out := make(map[string]any, len(obj))
	for _, k := range sortedSettingKeys(obj) {
		child := n.elem
		if n.kind == schemaObject {
			if child = n.field(k); child == nil {
				d.p = append(d.p, unknownSettingsKey(joinSettingsPath(path, k), k, n))
				continue
			}
		}
		if obj[k] == nil {
			continue
		}
		out[k] = d.check(obj[k], child, joinSettingsPath(path, k), depth+1)
	}
	return out
}

func parseSettingBool(v any) (bool, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true", "1", "on":
			return true, nil
		case "false", "0", "off":
			return false, nil
		}
	case json.Number:
		// 1 and 0 unquoted (YAML, JSON, BREAKWATER_SETTINGS__…=1), as the
		// named variables and quoted strings take them.
		switch x {
		case "1":
			return true, nil
		case "0":
			return false, nil
		}
	}
	return false, fmt.Errorf("want true or false, got %s", describeSettingValue(v))
}

func parseSettingInt(v any) (int64, error) {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = string(x)
	case string:
		s = strings.TrimSpace(x)
	default:
		return 0, fmt.Errorf("want an integer, got %s", describeSettingValue(v))
	}
	n, err := lenient.Whole(s)
	if err != nil {
		return 0, fmt.Errorf("want an integer, got %s", describeSettingValue(v))
	}
	return n, nil
}

// walkSettingsLeaves calls fn with the path of every leaf of the canonical
// tree v of type t (see Sources). With emptyMaps, an empty provider- or
// kind-keyed map is reported under its own path.
func walkSettingsLeaves(v any, n *settingsNode, path string, emptyMaps bool, fn func(path string)) {
	if v == nil {
		return
	}
	obj, isObj := v.(map[string]any)
	if n == nil || n.isLeaf() || !isObj {
		fn(path)
		return
	}
	if n.kind == schemaMap && len(obj) == 0 && emptyMaps {
		fn(path)
		return
	}
	for _, k := range sortedSettingKeys(obj) {
		child := n.elem
		if n.kind == schemaObject {
			if child = n.field(k); child == nil {
				continue
			}
		}
		walkSettingsLeaves(obj[k], child, joinSettingsPath(path, k), emptyMaps, fn)
	}
}

// ---------------------------------------------------------------------------
// Environment

// EnvVar documents one BREAKWATER_* settings variable.
type EnvVar struct {
	Name string // e.g. BREAKWATER_RATE_LIMIT_MAX_WAIT_MS
	Path string // settings path, e.g. requestQueue.maxWaitMs
	Kind string // "bool" (true/1/on, false/0/off), "int" (≥ 0) or "ms" (≥ 0 ms or a Go duration)
	Doc  string
}

// EnvVars lists the supported named variables (a fresh slice on every call),
// in a stable order. Besides these, BREAKWATER_SETTINGS__<path with "__"
// between keys> sets any settings path with SetPath's value syntax, e.g.
// BREAKWATER_SETTINGS__providerBreaker__apikey__failureThreshold=5.
func EnvVars() []EnvVar {
	var out []EnvVar
	add := func(name, path, doc string) {
		kind := "int"
		switch n := settingsPathNode(path); {
		case n == nil:
			kind = "invalid"
		case n.kind == schemaMs:
			kind = "ms"
		case n.kind == schemaBool:
			kind = "bool"
		}
		out = append(out, EnvVar{Name: name, Path: path, Kind: kind, Doc: doc})
	}
	profiles := []struct{ env, key string }{{"OAUTH", "oauth"}, {"API_KEY", "apikey"}, {"LOCAL", "local"}}
	for _, p := range profiles {
		for _, f := range []struct{ env, key, doc string }{
			{"FAILURE_THRESHOLD", "failureThreshold", "consecutive provider-level failures that open the breaker"},
			{"DEGRADATION_THRESHOLD", "degradationThreshold", "consecutive failures that mark the provider DEGRADED (kept below failureThreshold)"},
			{"RESET_TIMEOUT_MS", "resetTimeoutMs", "how long the breaker stays OPEN before a half-open probe"},
			{"HALF_OPEN_REQUESTS", "halfOpenRequests", "probe requests admitted while HALF_OPEN"},
			{"MAX_BACKOFF_MULTIPLIER", "maxBackoffMultiplier", "cap of the open-duration multiplier of repeated re-opens"},
			{"BACKOFF_ESCALATION_COUNT", "backoffEscalationCount", "re-opens before the open duration starts doubling"},
			{"PROBE_TIMEOUT_MS", "probeTimeoutMs", "frees a half-open probe permit whose result never came (0 = upstreamTimeouts.attemptMs)"},
		} {
			add("BREAKWATER_PROVIDER_BREAKER_"+p.env+"_"+f.env, "providerBreaker."+p.key+"."+f.key, p.key+" profile: "+f.doc)
		}
	}
	add("BREAKWATER_PROVIDER_COOLDOWN_ENABLED", "providerCooldown.enabled", "turns on the provider cooldown window gate (docs/breaker.md#provider-cooldown)")
	for _, p := range profiles {
		for _, f := range []struct{ env, key, doc string }{
			{"FAILURE_THRESHOLD", "providerFailureThreshold", "failures inside the window that make the provider cool"},
			{"FAILURE_WINDOW_MS", "providerFailureWindowMs", "the failure-counting window"},
			{"COOLDOWN_MS", "providerCooldownMs", "how long the provider cools once tripped"},
		} {
			add("BREAKWATER_PROVIDER_COOLDOWN_"+p.env+"_"+f.env, "providerCooldown."+p.key+"."+f.key, p.key+" profile window gate: "+f.doc)
		}
	}
	add("BREAKWATER_PROVIDER_COOLDOWN_MIN_MS", "providerCooldown.minRetryCooldownMs", "first backoff of a provider:connection entry")
	add("BREAKWATER_PROVIDER_COOLDOWN_MAX_MS", "providerCooldown.maxRetryCooldownMs", "cap of a provider:connection entry's backoff")
	for _, p := range profiles {
		add("BREAKWATER_CONNECTION_COOLDOWN_"+p.env+"_BASE_COOLDOWN_MS", "connectionCooldown."+p.key+".baseCooldownMs", p.key+" profile: base connection cooldown (doubles per backoff level)")
		add("BREAKWATER_CONNECTION_COOLDOWN_"+p.env+"_MAX_BACKOFF_STEPS", "connectionCooldown."+p.key+".maxBackoffSteps", p.key+" profile: maximum backoff level")
	}
	add("BREAKWATER_RATE_LIMIT_AUTO_ENABLE", "requestQueue.autoEnableApiKeyProviders", "every active apikey connection goes through the admission queue (docs/admission.md)")
	add("BREAKWATER_RATE_LIMIT_MAX_WAIT_MS", "requestQueue.maxWaitMs", "queue-wait budget of a request")
	add("BREAKWATER_RATE_LIMIT_EXECUTION_MAX_WAIT_MS", "requestQueue.executionMaxWaitMs", "execution bound of a queued request")
	add("BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH", "requestQueue.maxQueueDepth", "jobs allowed to wait per provider+connection (0 = unbounded)")
	add("BREAKWATER_RATE_LIMIT_GLOBAL_MAX_CONCURRENT", "requestQueue.globalMaxConcurrent", "gateway-wide concurrency cap (0 = unlimited)")
	add("BREAKWATER_STREAM_THROUGHPUT_WATCHDOG_ENABLED", "streamRecovery.throughputWatchdog.enabled", "turns on the slow-stream watchdog (docs/streams.md)")
	add("BREAKWATER_STREAM_THROUGHPUT_WATCHDOG_WARMUP_MS", "streamRecovery.throughputWatchdog.warmupMs", "throughput watchdog warm-up")
	add("BREAKWATER_STREAM_THROUGHPUT_WATCHDOG_WINDOW_MS", "streamRecovery.throughputWatchdog.windowMs", "throughput watchdog sliding window")
	add("BREAKWATER_STREAM_THROUGHPUT_WATCHDOG_MIN_BYTES_PER_SECOND", "streamRecovery.throughputWatchdog.minUsefulBytesPerSecond", "minimum useful output rate")
	add("BREAKWATER_STREAM_THROUGHPUT_WATCHDOG_MIN_USEFUL_BYTES", "streamRecovery.throughputWatchdog.minUsefulBytes", "minimum measurable bytes in the window")
	add("BREAKWATER_STREAM_RESUME_ENABLED", "streamResume.enabled", "resumes a broken stream on a target that can continue it")
	add("BREAKWATER_STREAM_STALL_COOLDOWN_ENABLED", "streamStallCooldown.enabled", "a stream stall also cools the connection")
	add("BREAKWATER_MODEL_LOCKOUT_ENABLED", "modelLockout.enabled", "turns on the generic model lockout path (docs/lockouts.md)")
	add("BREAKWATER_MODEL_LOCKOUT_BASE_COOLDOWN_MS", "modelLockout.baseCooldownMs", "first lockout duration")
	add("BREAKWATER_MODEL_LOCKOUT_MAX_COOLDOWN_MS", "modelLockout.maxCooldownMs", "lockout cap")
	add("BREAKWATER_SESSION_AFFINITY_TTL_MS", "sessionAffinityTtlMs", "session pin lifetime (0 = off)")
	return out
}

// EnvLayer builds the "env" layer from an environment (the caller passes
// os.Environ(); the model reads none). It reads the variables of EnvVars and
// the generic BREAKWATER_SETTINGS__a__b__c form. An empty value counts as
// unset. A bad value is an error naming the variable — never a silent fallback
// to the default. An unknown variable under a settings prefix (e.g.
// BREAKWATER_PROVIDER_BREAKER_APIKEY_FAILURE_THRESHOLD) is an error naming the
// nearest known one; other BREAKWATER_* variables belong to other parts of the
// gateway and are ignored. Two variables setting the same (or an enclosing)
// path are an error. For a repeated name the first occurrence wins, as with
// os.Getenv.
func EnvLayer(environ []string) (Layer, error) {
	vars := EnvVars()
	byName := make(map[string]EnvVar, len(vars))
	names := make([]string, len(vars))
	for i, v := range vars {
		byName[v.Name] = v
		names[i] = v.Name
	}
	values := settingsEnvValues(environ)
	var p settingProblems
	l := Layer{}
	setBy := map[string]string{} // path → variable
	for _, name := range sortedSettingKeys(values) {
		raw := values[name]
		if strings.TrimSpace(raw) == "" {
			continue
		}
		path, next, ok, err := envSetting(l, byName, name, raw)
		if !ok {
			if EnvOwned(name) {
				p = append(p, &model.SettingsError{Field: name, Problem: model.ProblemUnknownVariable,
					Suggestion: suggest.Nearest(name, names), Source: "env"})
			}
			continue
		}
		source := "env " + name
		if err != nil {
			for _, se := range model.SettingsErrors(err) {
				se.Source = source
				p = append(p, se)
			}
			continue
		}
		for _, other := range sortedSettingKeys(setBy) {
			if settingsPathOverlaps(path, other) {
				p = append(p, &model.SettingsError{Field: path, Source: source,
					Problem: fmt.Sprintf("also set by %s (%s)", setBy[other], other)})
			}
		}
		setBy[path] = name
		l = next
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	return l, nil
}

// settingsEnvValues picks the settings variables out of environ; the first
// of a repeated name wins.
func settingsEnvValues(environ []string) map[string]string {
	values := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, settingsEnvPrefix) {
			continue
		}
		if _, dup := values[k]; !dup {
			values[k] = v
		}
	}
	return values
}

// envSetting sets variable name, a named one or a generic path, in a copy
// of l; ok is false when name is neither.
func envSetting(l Layer, byName map[string]EnvVar, name, raw string) (path string, next Layer, ok bool, err error) {
	if ev, ok := byName[name]; ok {
		next, err := envNamedSetting(l, ev, raw)
		return ev.Path, next, true, err
	}
	if rest, ok := strings.CutPrefix(name, settingsEnvGenericPfx); ok {
		path = strings.ReplaceAll(rest, "__", ".")
		next, err = SetPath(l, path, raw)
		return path, next, true, err
	}
	return "", nil, false, nil
}

func envNamedSetting(l Layer, ev EnvVar, raw string) (Layer, error) {
	v, err := parseEnvSettingValue(ev.Kind, raw)
	if n := settingsPathNode(ev.Path); err == nil && n != nil && n.positive && v == json.Number("0") {
		// Here, not in the later check, so the error names the variable.
		err = fmt.Errorf("must be at least 1 ms (this timer cannot be turned off), got %q", raw)
	}
	if err != nil {
		return l, &model.SettingsError{Field: ev.Path, Problem: err.Error()}
	}
	return Layer(setSettingsIn(map[string]any(cloneSettingsValue(map[string]any(l)).(map[string]any)), strings.Split(ev.Path, "."), v)), nil
}

// EnvOwned reports whether name is under a variable prefix the
// settings own: an unknown variable there is a typo, not someone else's
// (EnvLayer refuses it, naming the nearest known one).
func EnvOwned(name string) bool {
	for _, pfx := range []string{
		"BREAKWATER_PROVIDER_BREAKER_", "BREAKWATER_PROVIDER_COOLDOWN_", "BREAKWATER_CONNECTION_COOLDOWN_",
		"BREAKWATER_RATE_LIMIT_", "BREAKWATER_STREAM_", "BREAKWATER_MODEL_LOCKOUT_",
		"BREAKWATER_SESSION_AFFINITY_", "BREAKWATER_SETTINGS",
	} {
		if strings.HasPrefix(name, pfx) {
			return true
		}
	}
	return false
}

func settingsPathOverlaps(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(b, a+".")
}

func parseEnvSettingValue(kind, raw string) (any, error) {
	s := strings.TrimSpace(raw)
	switch kind {
	case "bool":
		switch strings.ToLower(s) {
		case "true", "1", "on":
			return true, nil
		case "false", "0", "off":
			return false, nil
		}
		return nil, fmt.Errorf("want true/1/on or false/0/off, got %q", raw)
	case "ms":
		ms, err := parseSettingMillis(s)
		if err != nil {
			return nil, err
		}
		if ms < 0 {
			return nil, fmt.Errorf("must not be negative, got %q", raw)
		}
		return json.Number(strconv.FormatInt(int64(ms), 10)), nil
	default:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("want a non-negative integer, got %q", raw)
		}
		if n < 0 {
			return nil, fmt.Errorf("must not be negative, got %q", raw)
		}
		return json.Number(strconv.FormatInt(n, 10)), nil
	}
}
