package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSimCommandExitCodes(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join("..", "..", "scenarios", "library", "contracts-example.yaml")
	failing := filepath.Join(dir, "failing.yaml")
	src, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(failing, append(src, []byte("  - {request: 2, status: 503}\n")...), 0o644)
	broken := filepath.Join(dir, "broken.yaml")
	os.WriteFile(broken, []byte("name: x\nprovders: []\n"), 0o644)
	trace := filepath.Join(dir, "t.jsonl")
	plot := filepath.Join(dir, "p.svg")
	cases := []struct {
		args []string
		want int
	}{
		{[]string{lib, "-q"}, 0},
		{[]string{"-seed", "3", lib, "-set", "requestBudget.maxAttempts=4", "-trace", trace, "-plot", plot, "-q"}, 0},
		{[]string{lib, "-json"}, 0},
		{[]string{failing, "-q"}, 1},
		{[]string{broken}, 2},
		{[]string{lib, "-set", "no.such.key=1"}, 2},
		{[]string{lib, "-plot", "x.png"}, 2},
		{[]string{}, 2},
	}
	for _, c := range cases {
		if got := runSim(c.args); got != c.want {
			t.Errorf("sim %v: exit %d, want %d", c.args, got, c.want)
		}
	}
	for _, f := range []string{trace, plot} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

func TestUpstreamCommandRefusesNonLoopback(t *testing.T) {
	if got := runUpstream([]string{"-listen", "0.0.0.0:0"}); got != 2 {
		t.Errorf("exit %d, want 2", got)
	}
	if got := runUpstream([]string{"-catalog"}); got != 0 {
		t.Errorf("-catalog: exit %d", got)
	}
}
