package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReplayCommandExitCodes pins the `breakwater replay` contract
// (docs/cli.md, docs/scenarios.md): exit 0 when every expect holds (and, with -compare,
// every decision equals the simulator's), 1 on a failing expect, 2 on a
// file that does not load or bad flags.
func TestReplayCommandExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("wall-clock replays")
	}
	dir := t.TempDir()
	lib := filepath.Join("..", "..", "scenarios", "library", "failover-reset-before-headers.yaml")
	src, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	failing := filepath.Join(dir, "failing.yaml")
	os.WriteFile(failing, append(src, []byte("  - {request: 1, status: 503}\n")...), 0o644)
	broken := filepath.Join(dir, "broken.yaml")
	os.WriteFile(broken, []byte("name: x\nprovders: []\n"), 0o644)
	cases := []struct {
		args []string
		want int
	}{
		{[]string{lib, "-speed", "4", "-compare", "-q"}, 0},
		{[]string{"-json", "-speed", "4", lib}, 0},
		{[]string{failing, "-speed", "4", "-q"}, 1},
		{[]string{broken}, 2},
		{[]string{lib, "-speed", "0"}, 2},
		{[]string{lib, "-upstream", "http://127.0.0.1:1"}, 2},                       // -upstream goes with -target
		{[]string{lib, "-target", "http://127.0.0.1:1", "-management-key", "k"}, 2}, // nothing answers there
		{[]string{}, 2},
	}
	for _, c := range cases {
		if got := runReplay(c.args); got != c.want {
			t.Errorf("replay %v: exit %d, want %d", c.args, got, c.want)
		}
	}
}
