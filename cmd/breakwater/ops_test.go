package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/proxy"
)

// capture runs f with stdout and stderr captured.
func capture(t *testing.T, f func() int) (code int, stdout, stderr string) {
	t.Helper()
	or, ow, _ := os.Pipe()
	er, ew, _ := os.Pipe()
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = ow, ew
	code = f()
	ow.Close()
	ew.Close()
	os.Stdout, os.Stderr = oldOut, oldErr
	o, _ := io.ReadAll(or)
	e, _ := io.ReadAll(er)
	return code, string(o), string(e)
}

// version prints the version, commit and Go version; -json as JSON.
func TestVersionCommand(t *testing.T) {
	code, out, _ := capture(t, func() int { return runVersion(nil) })
	if code != 0 || !strings.HasPrefix(out, "breakwater ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %d %q", code, out)
	}
	code, out, _ = capture(t, func() int { return runVersion([]string{"-json"}) })
	var b proxy.BuildInfo
	if code != 0 || json.Unmarshal([]byte(out), &b) != nil || b.Version == "" || !strings.HasPrefix(b.GoVersion, "go1.") {
		t.Fatalf("version -json: %d %q", code, out)
	}
}

// serve -check validates a config (with its environment) and exits.
func TestServeCheck(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(f, []byte("server: {managementKey: '${BW_TEST_UNSET_ADMIN}'}\nproviders:\n  - {id: p, baseURL: 'http://127.0.0.1:1/v1', connections: [{id: c}]}\n"), 0o600)
	code, _, errOut := capture(t, func() int { return runServe([]string{"-check", "-config", f}) })
	if code != 2 || !strings.Contains(errOut, "c.yaml:1: server.managementKey: environment variable BW_TEST_UNSET_ADMIN is not set") {
		t.Fatalf("unset managementKey: %d %s", code, errOut)
	}
	t.Setenv("BW_TEST_UNSET_ADMIN", "k")
	code, out, errOut := capture(t, func() int { return runServe([]string{"-check", "-config", f}) })
	if code != 0 || !strings.Contains(out, "ok (1 providers") {
		t.Fatalf("valid: %d %s %s", code, out, errOut)
	}
}

// healthcheck exits 0 on a ready gateway and 1 otherwise (the image's
// HEALTHCHECK).
func TestHealthcheckCommand(t *testing.T) {
	cfg, _, err := proxy.ParseConfig("t.yaml", []byte("providers:\n  - {id: p, baseURL: 'http://127.0.0.1:1/v1', connections: [{id: c}]}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := proxy.New(context.Background(), cfg, proxy.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	if code, _, e := capture(t, func() int { return runHealthcheck([]string{"-url", srv.URL + "/readyz"}) }); code != 0 {
		t.Fatalf("ready gateway: %d %s", code, e)
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	defer down.Close()
	if code, _, e := capture(t, func() int { return runHealthcheck([]string{"-url", down.URL + "/readyz"}) }); code != 1 || !strings.Contains(e, "503") {
		t.Fatalf("not ready: %d %s", code, e)
	}
}

// make run's demo config reloads: its demo:// providers keep the address
// of the in-process demo upstream serve gave them.
func TestDemoConfigReloads(t *testing.T) {
	g := demoGateway(t)
	res, err := g.Reload(context.Background())
	if err != nil || !res.OK || len(res.Added) != 0 || len(res.Removed) != 0 {
		t.Fatalf("reload: %+v %v", res, err)
	}
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"steady/demo-small","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after reload: %d", resp.StatusCode)
	}
}

// SIGHUP reloads: each signal re-reads the file and applies it.
func TestSIGHUPReloads(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.yaml")
	write := func(models string) {
		os.WriteFile(f, []byte("providers:\n  - {id: p, baseURL: 'http://127.0.0.1:1/v1', models: ["+models+"], connections: [{id: c}]}\n"), 0o600)
	}
	write("a")
	cfg, _, err := proxy.LoadConfig(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := proxy.New(context.Background(), cfg, proxy.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	sig, done := make(chan os.Signal, 1), make(chan struct{})
	defer close(done)
	go reloadOnSignal(context.Background(), g, sig, done, slog.New(slog.DiscardHandler))
	write("a, b")
	sig <- syscall.SIGHUP
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), `"p/b"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the model added by the reload is not listed: %s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
