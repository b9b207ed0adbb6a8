package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestChaosCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join("..", "..", "examples", "chaos.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("duration: 2s\nfaults:\n  - {at: 1s, match: {provider: alhpa}, respond: {status: 503}}\n"), 0o644)
	js := filepath.Join(dir, "r.json")
	html := filepath.Join(dir, "r.html")
	cases := []struct {
		args []string
		want int
	}{
		{[]string{"-config", cfg, "-duration", "2s", "-seed", "5", "-json", js, "-report", html, "-q", "-no-leak-check"}, 0},
		{[]string{"-config", cfg, "-schedule", bad}, 2},
		{[]string{"-config", cfg, "-mode", "storm"}, 2},
		{[]string{"-config", cfg, "-target", "http://10.1.2.3:8080"}, 2},
		{[]string{"-config", cfg, "-rate", "fast"}, 2},
		{[]string{"-config", filepath.Join(dir, "missing.yaml")}, 2},
		{[]string{}, 2},
	}
	for _, c := range cases {
		if got := runChaos(c.args); got != c.want {
			t.Errorf("chaos %v: exit %d, want %d", c.args, got, c.want)
		}
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Passed     bool
		Invariants []struct{ Name, Status string }
	}
	if err := json.Unmarshal(b, &rep); err != nil || !rep.Passed || len(rep.Invariants) == 0 {
		t.Errorf("report: %v %+v", err, rep)
	}
	if fi, err := os.Stat(html); err != nil || fi.Size() < 1000 {
		t.Errorf("picture not written: %v", err)
	}
}
