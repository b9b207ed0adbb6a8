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

// TestSimSameNamedFilesKeepTheirOwnTrace pins docs/cli.md `sim FILE...
// -trace OUT.jsonl -plot OUT.svg` with several files: each scenario gets its
// own trace and plot, also when two files share a name (a/x.yaml, b/x.yaml)
// — the second must not overwrite the first's.
func TestSimSameNamedFilesKeepTheirOwnTrace(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join("..", "..", "scenarios", "library")
	a, b := filepath.Join(dir, "a", "x.yaml"), filepath.Join(dir, "b", "x.yaml")
	for f, src := range map[string]string{a: "contracts-example.yaml", b: "backoff-decay.yaml"} {
		data, err := os.ReadFile(filepath.Join(lib, src))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(f), 0o755)
		os.WriteFile(f, data, 0o644)
	}
	out := filepath.Join(dir, "out")
	if got := runSim([]string{a, b, "-trace", out + ".jsonl", "-plot", out + ".svg", "-q"}); got != 0 {
		t.Fatalf("exit %d", got)
	}
	for _, ext := range []string{".jsonl", ".svg"} {
		first, err1 := os.ReadFile(out + "-x" + ext)
		second, err2 := os.ReadFile(out + "-x-2" + ext)
		if err1 != nil || err2 != nil {
			t.Fatalf("want one %s per file: %v, %v", ext, err1, err2)
		}
		if string(first) == string(second) {
			t.Errorf("the two %s outputs are the same file's", ext)
		}
	}
}
