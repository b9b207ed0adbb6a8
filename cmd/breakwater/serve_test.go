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
	g := demoGateway(t)
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

// README / docs/config.md: BREAKWATER_* variables override the file. A
// mistyped one was ignored without a word; serve now warns with the name it
// is closest to, and leaves other BREAKWATER_ names (used for ${ENV}) alone.
func TestServeWarnsAboutMistypedEnvOverrides(t *testing.T) {
	got := envTypoWarnings([]string{
		"BREAKWATER_PROVIDER_BREAKR_API_KEY_FAILURE_THRESHOLD=3",
		"BREAKWATER_MANAGMENT_KEY=x",
		"BREAKWATER_PROVIDER_BREAKER_API_KEY_FAILURE_THRESHOLD=4",
		"BREAKWATER_LISTEN=127.0.0.1:1",
		"BREAKWATER_SETTINGS__requestQueue__maxWaitMs=5s",
		"BREAKWATER_ADMIN_KEY=k",
		// under a settings prefix: settings.EnvLayer refuses it with the
		// nearest name, so no second report here
		"BREAKWATER_RATE_LIMIT_MAX_WAITMS=5",
		"HOME=/root",
		// close to a known name, but the file expands it: the operator's own
		"BREAKWATER_LISTEN_2=127.0.0.1:2",
	}, func(name string) bool { return name == "BREAKWATER_LISTEN_2" })
	want := []string{
		"environment variable BREAKWATER_PROVIDER_BREAKR_API_KEY_FAILURE_THRESHOLD is not used (did you mean BREAKWATER_PROVIDER_BREAKER_API_KEY_FAILURE_THRESHOLD?)",
		"environment variable BREAKWATER_MANAGMENT_KEY is not used (did you mean BREAKWATER_MANAGEMENT_KEY?)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// docs/config.md: BREAKWATER_LISTEN overrides server.listen. An error about
// the overriding value pointed at the file's line only, where the operator
// found a loopback address; it now names the variable instead of a line.
func TestServeErrorNamesTheEnvOverride(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "gw.yaml")
	os.WriteFile(f, []byte("server:\n  listen: 127.0.0.1:0\nproviders:\n  - {id: p, baseURL: 'http://127.0.0.1:1/v1', connections: [{id: c}]}\n"), 0o644)
	t.Setenv("BREAKWATER_LISTEN", "0.0.0.0:0")
	code, out := runStderr(runServe, "-config", f, "-log-level", "error")
	if code != 2 || !strings.Contains(out, "gw.yaml: server.listen") || !strings.Contains(out, "(the value comes from BREAKWATER_LISTEN)") {
		t.Fatalf("exit %d, stderr:\n%s", code, out)
	}
}

// docs/cli.md: serve reads flags before or after other arguments like the
// other commands, refuses a stray argument with a message (it printed only
// the usage, or ignored it), and -h is not an error.
func TestServeArgumentErrors(t *testing.T) {
	stderr := func(args ...string) (int, string) { return runStderr(runServe, args...) }
	f := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(f, []byte("server: {listen: 127.0.0.1:0}\n"), 0o644)
	for _, args := range [][]string{{"extra", "-config", f}, {"-config", f, "extra"}, {f}} {
		if code, out := stderr(args...); code != 2 || !strings.Contains(out, `unexpected argument`) {
			t.Errorf("serve %q: exit %d, stderr %q; want 2 naming the argument", args, code, out)
		}
	}
	if code, out := stderr(); code != 2 || !strings.Contains(out, "-config FILE is required") {
		t.Errorf("serve without -config: exit %d, stderr %q", code, out)
	}
	if code, _ := stderr("-h"); code != 0 {
		t.Errorf("serve -h: exit %d, want 0", code)
	}
}

// docs/cli.md: chaos, like serve and upstream, takes no positional
// argument and refuses one instead of ignoring it.
func TestChaosRefusesAStrayArgument(t *testing.T) {
	if code, out := runStderr(runChaos, "examples/chaos.yaml"); code != 2 || !strings.Contains(out, `unexpected argument "examples/chaos.yaml"`) {
		t.Errorf("chaos FILE: exit %d, stderr %q; want 2 naming the argument", code, out)
	}
}

// docs/cli.md: upstream refuses what it would otherwise ignore.
func TestUpstreamArgumentErrors(t *testing.T) {
	for _, args := range [][]string{{"extra", "-listen", "127.0.0.1:0"}, {"-listen", "127.0.0.1:0", "-speed", "0"}, {"-listen", "127.0.0.1:0", "-speed", "-1"}} {
		if code, out := runStderr(runUpstream, args...); code != 2 || len(out) == 0 {
			t.Errorf("upstream %q: exit %d, stderr %q; want 2 with a message", args, code, out)
		}
	}
}

// demoGateway starts make run's demo config with its in-process demo
// upstream, both stopped when the test ends.
func demoGateway(t *testing.T) *proxy.Gateway {
	t.Helper()
	cfg, _, err := proxy.LoadConfig("../../examples/demo.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	stop, err := startDemo(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	g, err := proxy.New(context.Background(), cfg, proxy.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	return g
}
