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
