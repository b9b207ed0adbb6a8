package yamlnode

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestNearest(t *testing.T) {
	known := []string{"latency", "status", "sequence", "respond"}
	for in, want := range map[string]string{"latncy": "latency", "Status": "status", "sequense": "sequence", "zzz": "", "respon": "respond"} {
		if got := Nearest(in, known); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFindAndErrors(t *testing.T) {
	d := &Decoder{File: "f.yaml"}
	root := d.Parse([]byte("a:\n  b:\n    - {c: 1}\n    - {c: 2, d: x}\n"))
	if n := Find(root, "a.b[1].d"); n == nil || n.Value != "x" || n.Line != 4 {
		t.Fatalf("Find: %+v", n)
	}
	if n := FindKey(root, "a.b[1].d"); n == nil || n.Value != "d" {
		t.Fatalf("FindKey: %+v", n)
	}
	d.Map(root, "", []string{"b"}, func(string, *yaml.Node, *yaml.Node) {})
	d.Duration(Find(root, "a.b[0].c"), "a.b[0].c")
	err := d.Err()
	if err == nil || !strings.Contains(err.Error(), `f.yaml:1:1: a: unknown key "a"`) || !strings.Contains(err.Error(), `f.yaml:3:11: a.b[0].c: bad duration "1"`) {
		t.Errorf("errors: %v", err)
	}
	if len(Errors(err)) != 2 {
		t.Errorf("Errors: %v", Errors(err))
	}
}

// TestParseNamesTheLineOfASyntaxError pins "errors name file, line and
// field" (docs/scenarios.md scenario files) for malformed YAML: the line is the
// one with the mistake, not yaml.v3's context line (the line before the
// enclosing block, which read "line 2" for all of these).
func TestParseNamesTheLineOfASyntaxError(t *testing.T) {
	for _, c := range []struct {
		src  string
		want string
	}{
		{"name: x\nproviders:\n  - id: glm\n    models: [glm-5]\n   connections: [{id: k1}]\ntraffic: []\n", "f.yaml:5: invalid YAML"},
		{"name: bad\nproviders:\n  - {id: glm, connections: [{id: k1}\ntraffic:\n  - at: 0s\n", "f.yaml:3: invalid YAML"},
		{"name: x\nproviders:\n  - a: 1\n    b: 2\n    c: 3\n    d: 4\n  - e: 5\n     f: 6\n", "f.yaml:8: invalid YAML"},
		{"a: [\n", "f.yaml:1: invalid YAML"},
		{"name: x\nproviders:\n\t- id: glm\n", "f.yaml:3: invalid YAML"},
	} {
		d := &Decoder{File: "f.yaml"}
		if root := d.Parse([]byte(c.src)); root != nil {
			t.Errorf("%q parsed", c.src)
			continue
		}
		if err := d.Err(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %s...", c.src, err, c.want)
		}
	}
	// An empty document (or only comments) is nil, as Parse promises.
	for _, src := range []string{"", "# nothing\n"} {
		d := &Decoder{File: "f.yaml"}
		if root := d.Parse([]byte(src)); root != nil || d.Failed() {
			t.Errorf("%q: root %v, err %v; want nil, nil", src, root, d.Err())
		}
	}
}

// TestMergeExpandAndSingleDocument pins the options the gateway config
// decodes with: merge keys apply (own keys win, then earlier sources),
// Expand rewrites every scalar read, and a second document is refused
// rather than left unread. Without the options merge keys stay refused.
func TestMergeExpandAndSingleDocument(t *testing.T) {
	src := []byte("base: &b {a: 1, b: 2}\nother: &o {b: 3, c: 4}\nuse: {<<: [*b, *o], a: 9}\n")
	d := &Decoder{File: "f.yaml", Merge: true, Expand: func(_ *yaml.Node, _, s string) string { return "x" + s }}
	root := d.Parse(src)
	got := map[string]string{}
	d.Map(Find(root, "use"), "use", nil, func(key string, _, v *yaml.Node) { got[key] = d.String(v, key) })
	if want := map[string]string{"a": "x9", "b": "x2", "c": "x4"}; len(got) != 3 || got["a"] != want["a"] || got["b"] != want["b"] || got["c"] != want["c"] || d.Failed() {
		t.Errorf("merged %v (errors %v), want %v", got, d.Err(), want)
	}

	plain := &Decoder{File: "f.yaml"}
	plain.Map(Find(plain.Parse(src), "use"), "use", nil, func(string, *yaml.Node, *yaml.Node) {})
	if err := plain.Err(); err == nil || !strings.Contains(err.Error(), "merge keys (<<) are not supported") {
		t.Errorf("without Merge: %v", err)
	}

	bad := &Decoder{File: "f.yaml", Merge: true}
	bad.Map(Find(bad.Parse([]byte("k: {<<: 3}\n")), "k"), "k", nil, func(string, *yaml.Node, *yaml.Node) {})
	if err := bad.Err(); err == nil || !strings.Contains(err.Error(), "f.yaml:1:5: k.<<: a merge key takes a mapping") {
		t.Errorf("bad merge source: %v", err)
	}

	two := []byte("a: 1\n---\nb: 2\n")
	single := &Decoder{File: "f.yaml", SingleDocument: true}
	if root := single.Parse(two); root != nil || single.Err() == nil || !strings.HasPrefix(single.Err().Error(), "f.yaml:2: the file holds more than one YAML document") {
		t.Errorf("SingleDocument: root %v, err %v", root, single.Err())
	}
	if multi := (&Decoder{File: "f.yaml"}); multi.Parse(two) == nil || multi.Failed() {
		t.Errorf("without SingleDocument the first document is read: %v", multi.Err())
	}
}
