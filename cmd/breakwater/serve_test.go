package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/proxy"
)

func TestServeRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "bad.yaml")
	os.WriteFile(f, []byte("server:\n  listn: x\n"), 0o644)
	r, w, _ := os.Pipe()
	old := os.Stderr
	os.Stderr = w
	code := runServe([]string{"-config", f})
	w.Close()
	os.Stderr = old
	out, _ := io.ReadAll(r)
	if code != 2 || !strings.Contains(string(out), "bad.yaml:2: server.listn") || !strings.Contains(string(out), `did you mean "listen"`) {
		t.Fatalf("exit %d, stderr:\n%s", code, out)
	}
	if code := runServe([]string{"-nope"}); code != 2 {
		t.Fatalf("bad flag: exit %d", code)
	}
}

// make run's wiring: the demo config served by the in-process fault
// upstream answers offline, through the combo and a flaky provider.
func TestDemoConfigServes(t *testing.T) {
	cfg, _, err := proxy.LoadConfig("../../examples/demo.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	stop, err := startDemo(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	g, err := proxy.New(context.Background(), cfg, proxy.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	ok := 0
	for i := 0; i < 10; i++ {
		res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == 200 {
			ok++
		}
	}
	if ok != 10 {
		t.Fatalf("the demo combo should always answer (flaky falls back to steady): %d/10", ok)
	}
}
