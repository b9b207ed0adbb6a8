// Package yamlnode decodes YAML documents strictly from the yaml.v3 node
// tree, so that every error names the file, the line and the field: unknown
// keys come with the nearest known key, bad durations and wrong types with
// what was expected. It is shared by the scenario loader and the fault
// upstream's control API, which read the same rule format.
//
// It never panics on any input and holds no state beyond one Decoder.
package yamlnode

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/internal/suggest"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is one problem at one place of a document.
type Error struct {
	File  string // file name, or a label such as "PUT /_faults"
	Line  int    // 1-based; 0 when unknown
	Col   int
	Field string // dotted path, e.g. upstream[2].respond.latency
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, ":%d", e.Col)
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors lists every *Error in err.
func Errors(err error) []*Error { return suggest.ErrorsOf[*Error](err) }

// maxErrors bounds how many problems one document reports.
const maxErrors = 50

// Decoder collects problems while the caller walks a document.
type Decoder struct {
	File string
	// Expand, when set, rewrites every scalar before it is read (the
	// gateway config's ${VAR} expansion); n and field name the value.
	Expand func(n *yaml.Node, field, s string) string
	// Merge applies YAML merge keys (<<: *anchor) in Map, as Merged does;
	// unset, a merge key is refused.
	Merge bool
	// SingleDocument makes Parse refuse a second document (---): whatever
	// follows it would otherwise go unread, unknown keys and all.
	SingleDocument bool
	errs           []*Error
}

// Errf records a problem at node n (n may be nil).
func (d *Decoder) Errf(n *yaml.Node, field, format string, args ...any) {
	if len(d.errs) >= maxErrors {
		return
	}
	e := &Error{File: d.File, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Col = n.Line, n.Column
		// One problem per value: a wrong type is not reported again by
		// the range check that reads the zero it decoded to.
		if slices.ContainsFunc(d.errs, func(o *Error) bool { return o.Line == e.Line && o.Col == e.Col && o.Field == field }) {
			return
		}
	}
	d.errs = append(d.errs, e)
}

// Count is how many problems were recorded so far (compare before and
// after decoding a part to know whether that part failed).
func (d *Decoder) Count() int { return len(d.errs) }

// Failed reports whether any problem was recorded.
func (d *Decoder) Failed() bool { return len(d.errs) > 0 }

// Err returns every problem, sorted by position, joined; nil when none.
func (d *Decoder) Err() error {
	if len(d.errs) == 0 {
		return nil
	}
	errs := slices.Clone(d.errs)
	slices.SortStableFunc(errs, func(a, b *Error) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Col - b.Col
	})
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// Parse parses one YAML document and returns its root node (never a
// document node). An empty document gives nil.
func (d *Decoder) Parse(src []byte) *yaml.Node {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(src))
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		line, msg := syntaxError(err)
		line = problemLine(src, line, msg)
		d.errs = append(d.errs, &Error{File: d.File, Line: line, Msg: "invalid YAML: " + msg})
		return nil
	}
	if d.SingleDocument {
		var next yaml.Node
		if err := dec.Decode(&next); err != io.EOF && (err != nil || len(next.Content) > 0) {
			d.errs = append(d.errs, &Error{File: d.File, Line: next.Line, Msg: "the file holds more than one YAML document (---): put it all in one"})
			return nil
		}
	}
	if doc.Kind == 0 { // empty, or only comments
		return nil
	}
	return Resolve(&doc)
}

// syntaxError splits a yaml.v3 error "yaml: line N: msg" into N and msg.
func syntaxError(err error) (line int, msg string) {
	msg = err.Error()
	if rest, ok := strings.CutPrefix(msg, "yaml: line "); ok {
		if n, after, ok := strings.Cut(rest, ":"); ok {
			if v, err := strconv.Atoi(n); err == nil {
				return v, strings.TrimSpace(after)
			}
		}
	}
	return 0, strings.TrimPrefix(msg, "yaml: ")
}

// problemLine finds the line a syntax error is on. For a parse error yaml.v3
// reports the line BEFORE the enclosing block starts (its 0-based context
// mark), often far above the mistake (a mis-indented key on line 5 of a list
// that starts on line 3 reads "line 2"); it never reports a line after it.
// The mistake is on the first line whose prefix of the document fails with
// the same message: a binary search over whole-line prefixes from the
// reported line on (a few parses, only on the error path).
func problemLine(src []byte, reported int, msg string) int {
	var ends []int // ends[k-1]: end of line k
	for i, c := range src {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(src) {
		ends = append(ends, len(src))
	}
	fails := func(k int) bool {
		var n yaml.Node
		err := yaml.Unmarshal(src[:ends[k-1]], &n)
		if err == nil {
			return false
		}
		_, m := syntaxError(err)
		return m == msg
	}
	lo, hi := max(reported, 1), len(ends)
	if lo > hi || !fails(hi) {
		return reported
	}
	if fails(lo) {
		return lo
	}
	for hi-lo > 1 { // !fails(lo), fails(hi)
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// Resolve unwraps document and alias nodes.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && i < 16; i++ {
		switch n.Kind {
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				return nil
			}
			n = n.Content[0]
		case yaml.AliasNode:
			n = n.Alias
		default:
			return n
		}
	}
	return n
}

// IsNull reports whether n is absent or an explicit null.
func IsNull(n *yaml.Node) bool {
	n = Resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// Join appends a key to a dotted field path.
func Join(field, key string) string {
	if field == "" {
		return key
	}
	if key == "" {
		return field // the whole value ("settings", not "settings.")
	}
	return field + "." + key
}

// Index appends a list index to a field path.
func Index(field string, i int) string { return fmt.Sprintf("%s[%d]", field, i) }

// Map walks a mapping node: every key must be one of known (an unknown key
// is reported with the nearest known one), no key may repeat, and fn is
// called for each known key in document order. A null node is an empty map.
// It reports whether n was a mapping (or null).
func (d *Decoder) Map(n *yaml.Node, field string, known []string, fn func(key string, k, v *yaml.Node)) bool {
	n = Resolve(n)
	if IsNull(n) {
		return true
	}
	if n.Kind != yaml.MappingNode {
		d.Errf(n, field, "want a mapping, got %s", describe(n))
		return false
	}
	if d.Merge {
		n = d.Merged(n, field)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := Resolve(n.Content[i]), Resolve(n.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode {
			d.Errf(n.Content[i], field, "keys must be plain strings")
			continue
		}
		key := k.Value
		if k.Tag == "!!merge" {
			d.Errf(k, field, "merge keys (<<) are not supported")
			continue
		}
		if seen[key] {
			d.Errf(k, Join(field, key), "duplicate key")
			continue
		}
		seen[key] = true
		if known != nil && !slices.Contains(known, key) {
			d.UnknownKey(k, field, key, known)
			continue
		}
		fn(key, k, v)
	}
	return true
}

// UnknownKey records that key (node k) under field is none of known, naming
// the nearest known key, or all of them when none is near.
func (d *Decoder) UnknownKey(k *yaml.Node, field, key string, known []string) {
	if near := Nearest(key, known); near != "" {
		d.Errf(k, Join(field, key), "unknown key %q (did you mean %q?)", key, near)
	} else {
		d.Errf(k, Join(field, key), "unknown key %q (known keys: %s)", key, strings.Join(known, ", "))
	}
}

// Merged returns mapping n with its YAML merge keys applied
// ({<<: *common, id: k2}): n's own keys first, then each merged mapping's
// keys n does not have (an earlier source wins, as the YAML merge spec
// says). Anything but a mapping is returned as it is; n is not modified.
func (d *Decoder) Merged(n *yaml.Node, field string) *yaml.Node {
	n = Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return n
	}
	own, sources := d.mergeSources(n, field)
	if sources == nil && len(own) == len(n.Content) {
		return n
	}
	has := map[string]bool{}
	for i := 0; i < len(own); i += 2 {
		has[own[i].Value] = true
	}
	out := *n
	out.Content = own
	for _, src := range sources {
		for i := 0; i+1 < len(src.Content); i += 2 {
			if key := src.Content[i].Value; !has[key] {
				has[key] = true
				out.Content = append(out.Content, src.Content[i], src.Content[i+1])
			}
		}
	}
	return &out
}

// mergeSources splits mapping n into its own key/value nodes and the
// (already merged) mappings its merge keys name, in order.
func (d *Decoder) mergeSources(n *yaml.Node, field string) (own, sources []*yaml.Node) {
	own = make([]*yaml.Node, 0, len(n.Content))
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value != "<<" || (k.Tag != "!!merge" && k.Style != 0) {
			own = append(own, k, v)
			continue
		}
		items := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			items = v.Content
		}
		for _, it := range items {
			it = Resolve(it)
			if it == nil || it.Kind != yaml.MappingNode {
				d.Errf(k, Join(field, "<<"), "a merge key takes a mapping or a list of mappings (an anchor like *common), got %s", describe(it))
				continue
			}
			sources = append(sources, d.Merged(it, field))
		}
	}
	return own, sources
}

// Seq walks a sequence node; a null node is an empty sequence. A scalar
// or mapping where a list is wanted is an error.
func (d *Decoder) Seq(n *yaml.Node, field string, fn func(i int, v *yaml.Node)) bool {
	n = Resolve(n)
	if IsNull(n) {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		d.Errf(n, field, "want a list, got %s", describe(n))
		return false
	}
	for i, v := range n.Content {
		fn(i, Resolve(v))
	}
	return true
}

func describe(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unsupported node"
}

// Scalar returns the text of a non-null scalar, expanded by Expand when
// it is set; anything else is recorded as "want <want>, got ...".
func (d *Decoder) Scalar(n *yaml.Node, field, want string) (string, bool) {
	n = Resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		if n == nil {
			d.Errf(nil, field, "want %s", want)
		} else {
			d.Errf(n, field, "want %s, got %s", want, describe(n))
		}
		return "", false
	}
	if d.Expand != nil {
		return d.Expand(n, field, n.Value), true
	}
	return n.Value, true
}

// String decodes a scalar as a string.
func (d *Decoder) String(n *yaml.Node, field string) string {
	s, _ := d.Scalar(n, field, "a string")
	return s
}

// Int decodes an integer.
func (d *Decoder) Int(n *yaml.Node, field string) int {
	s, ok := d.Scalar(n, field, "an integer")
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		d.Errf(n, field, "want an integer, got %q", s)
		return 0
	}
	if err != nil || v > math.MaxInt32 || v < math.MinInt32 {
		d.Errf(n, field, "%s is out of range", s)
		return 0
	}
	return int(v)
}

// NonNegInt decodes an integer ≥ 0.
func (d *Decoder) NonNegInt(n *yaml.Node, field string) int {
	v := d.Int(n, field)
	if v < 0 {
		d.Errf(n, field, "must not be negative, got %d", v)
		return 0
	}
	return v
}

// Int64 decodes a 64-bit integer.
func (d *Decoder) Int64(n *yaml.Node, field string) int64 {
	s, ok := d.Scalar(n, field, "an integer")
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
	if err != nil {
		d.Errf(n, field, "want an integer, got %q", s)
		return 0
	}
	return v
}

// Float decodes a number.
func (d *Decoder) Float(n *yaml.Node, field string) float64 {
	s, ok := d.Scalar(n, field, "a number")
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		d.Errf(n, field, "want a number, got %q", s)
		return 0
	}
	return v
}

// Bool decodes true or false.
func (d *Decoder) Bool(n *yaml.Node, field string) bool {
	s, ok := d.Scalar(n, field, "true or false")
	if !ok {
		return false
	}
	switch strings.ToLower(s) {
	case "true", "yes", "on":
		return true
	case "false", "no", "off":
		return false
	}
	d.Errf(n, field, "want true or false, got %q", s)
	return false
}

// MaxDuration bounds every duration in a document (10 years).
const MaxDuration = 10 * 365 * 24 * time.Hour

// Duration decodes a Go duration string ("1500ms", "2m", "0s"); a bare 0
// is accepted. Negative durations are errors.
func (d *Decoder) Duration(n *yaml.Node, field string) time.Duration {
	s, ok := d.Scalar(n, field, "a duration such as 1500ms or 2m")
	if !ok {
		return 0
	}
	v, err := ParseDuration(s)
	if err != nil {
		d.Errf(n, field, "%v", err)
		return 0
	}
	return v
}

// ParseDuration parses Go duration syntax, with "0" allowed, and rejects
// negative values and values past MaxDuration.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (want Go duration syntax such as 1500ms, 30s, 2m)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("bad duration %q: must not be negative", s)
	}
	if v > MaxDuration {
		return 0, fmt.Errorf("bad duration %q: longer than 10 years", s)
	}
	return v, nil
}

// StringList decodes a list of strings; a single scalar counts as a list
// of one.
func (d *Decoder) StringList(n *yaml.Node, field string) []string {
	n = Resolve(n)
	if n != nil && n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		return []string{n.Value}
	}
	var out []string
	d.Seq(n, field, func(i int, v *yaml.Node) { out = append(out, d.String(v, Index(field, i))) })
	return out
}

// Value decodes any node into plain Go values (map[string]any, []any,
// string, int, float64, bool, nil), for trees checked elsewhere (settings).
func (d *Decoder) Value(n *yaml.Node, field string) any {
	var v any
	if n == nil {
		return nil
	}
	if err := n.Decode(&v); err != nil {
		d.Errf(n, field, "%v", err)
		return nil
	}
	return v
}

// Find returns the node at a dotted path under n ("a.b[2].c"), or the
// deepest node found on the way; used to put a line number on an error that
// another layer reported by path.
func Find(n *yaml.Node, path string) *yaml.Node {
	n = Resolve(n)
	best := n
	for path != "" && n != nil {
		var seg string
		if path[0] == '[' {
			j := strings.IndexByte(path, ']')
			if j < 0 {
				return best
			}
			i, err := strconv.Atoi(path[1:j])
			path = strings.TrimPrefix(path[j+1:], ".")
			if err != nil || n.Kind != yaml.SequenceNode || i < 0 || i >= len(n.Content) {
				return best
			}
			n = Resolve(n.Content[i])
			best = n
			continue
		}
		j := strings.IndexAny(path, ".[")
		if j < 0 {
			seg, path = path, ""
		} else {
			seg, path = path[:j], path[j:]
			path = strings.TrimPrefix(path, ".")
		}
		if n.Kind != yaml.MappingNode {
			return best
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == seg {
				next = Resolve(n.Content[i+1])
				best = n.Content[i]
				if next != nil && (next.Kind == yaml.MappingNode || next.Kind == yaml.SequenceNode) {
					best = next
				} else if next != nil {
					best = next
				}
				break
			}
		}
		if next == nil {
			return best
		}
		n = next
	}
	return best
}

// FindKey is Find, but for a path that ends at a mapping key it returns
// the key node (where an "unknown key" error belongs).
func FindKey(n *yaml.Node, path string) *yaml.Node {
	parent, last := "", path
	if i := strings.LastIndexAny(path, ".["); i >= 0 && path[i] == '.' {
		parent, last = path[:i], path[i+1:]
	} else if i >= 0 {
		return Find(n, path)
	}
	p := Resolve(Find(n, parent))
	if parent == "" {
		p = Resolve(n)
	}
	if p != nil && p.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(p.Content); i += 2 {
			if p.Content[i].Value == last {
				return p.Content[i]
			}
		}
	}
	return Find(n, path)
}

// Nearest is suggest.Nearest, the one "did you mean" rule, for the file
// decoders that reach it through this package.
func Nearest(name string, candidates []string) string {
	return suggest.Nearest(name, candidates)
}
