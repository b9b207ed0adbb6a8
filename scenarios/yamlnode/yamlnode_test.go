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
