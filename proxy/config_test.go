package proxy

import (
	"context"
	"os"
	"strings"
	"testing"
)

func TestDemoConfigLoads(t *testing.T) {
	for _, f := range []string{"../examples/demo.yaml", "../examples/bench-proxy.yaml"} {
		cfg, _, err := LoadConfig(f, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(cfg.Providers) == 0 {
			t.Fatalf("%s: no providers", f)
		}
	}
}

func TestConfigErrorsNameFileLineAndField(t *testing.T) {
	cases := []struct {
		yaml string
		want []string
	}{
		{"server:\n  listn: 1.2.3.4:80\n", []string{"test.yaml:2", "server.listn", `did you mean "listen"`}},
		{"providers:\n  - id: p\n    baseURL: http://x/v1\n    conections: []\n", []string{"test.yaml:4", "providers[0].conections", `did you mean "connections"`}},
		{"providers:\n  - id: p\n    baseURL: http://x/v1\n    connections:\n      - {id: c, maxConcurrent: lots}\n", []string{"test.yaml:5", "providers[0].connections[0].maxConcurrent", "want an integer"}},
		{"providers:\n  - id: p\n    type: opneai\n    baseURL: http://x/v1\n    connections: [{id: c}]\n", []string{"test.yaml:3", "providers[0].type", `did you mean "openai"`}},
		{"providers:\n  - id: p\n    connections: [{id: c}]\n", []string{"providers[0].baseURL", "is required"}},
		{"combos:\n  - id: x\n    targets: [nope/m]\n", []string{"test.yaml:3", "combos[0].targets[0]", `unknown provider "nope"`}},
		{"providers:\n  - {id: p, baseURL: 'http://x/v1', strategy: fastest, connections: [{id: c}]}\n", []string{"providers[0].strategy", "unknown strategy"}},
		{"server: [1]\n", []string{"test.yaml:1", "server", "want a mapping"}},
		{"a: [\n", []string{"invalid YAML"}},
		// docs/settings.md#layers: a *Ms value is a whole number of milliseconds, as in the resilience section; 500us became 0 (the default).
		{"server: {listen: '127.0.0.1:9'}\n---\nbogus: 1\n", []string{"test.yaml:2", "more than one YAML document"}},
		{"providers:\n  - &p {id: p, baseURL: 'http://x/v1', connections: [{id: c}]}\n  - {<<: *p, id: q, bogus: 1}\n", []string{"test.yaml:3", "providers[1].bogus", "unknown key"}},
		{"store: {url: 'postgres://'}\n", []string{"test.yaml:1", "store.url", "neither a host nor a database"}},
		{"store: {url: 'postgres://u:secret@/'}\n", []string{"test.yaml:1", "store.url", "neither a host nor a database", "u:xxxxx@"}},
		{"server:\n  shutdownTimeoutMs: 500us\n", []string{"test.yaml:2", "server.shutdownTimeoutMs", "not a whole number of milliseconds"}},
		// A removed key is named as removed, not as a typo.
		{"server:\n  busyPollUs: 300\n", []string{"test.yaml:2", "server.busyPollUs", "the key was removed"}},
	}
	for _, c := range cases {
		_, _, err := ParseConfig("test.yaml", []byte(c.yaml), nil)
		if err == nil {
			t.Errorf("%q: want an error", c.yaml)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not contain %q", c.yaml, err, w)
			}
		}
	}
}

func TestResilienceErrorsNameTheLine(t *testing.T) {
	y := `providers:
  - {id: p, baseURL: "http://x/v1", connections: [{id: c}]}
resilience:
  requestQueue:
    maxWaitMs: 5s
    maxWaitMz: 3
`
	// ParseConfig resolves the settings too: serve reports them with the
	// file's other problems, before it opens (and migrates) a database.
	_, _, err := ParseConfig("cfg.yaml", []byte(y), nil)
	if err == nil {
		t.Fatal("want an error for the unknown resilience key")
	}
	for _, w := range []string{"cfg.yaml:6", "resilience.requestQueue.maxWaitMz", `did you mean "maxWaitMs"`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	good := strings.Replace(y, "    maxWaitMz: 3\n", "", 1)
	bad := []string{"BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH=lots"}
	if _, _, err := ParseConfig("cfg.yaml", []byte(good), bad); err == nil || !strings.Contains(err.Error(), "BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH") {
		t.Fatalf("bad env at parse: %v", err)
	}
	cfg, _, err := ParseConfig("cfg.yaml", []byte(good), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), cfg, Options{Environ: bad}); err == nil || !strings.Contains(err.Error(), "BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH") {
		t.Fatalf("bad env at New: %v", err)
	}
	// A rule between values no layer set together names the file's
	// resilience section (it had no file, line or prefix).
	y = good + "  emergencyFallback: {enabled: true}\n"
	if _, _, err := ParseConfig("cfg.yaml", []byte(y), nil); err == nil || !strings.Contains(err.Error(), "cfg.yaml:6: resilience.emergencyFallback") {
		t.Fatalf("cross-field rule: %v", err)
	}
}

func TestEnvExpansionAndOverrides(t *testing.T) {
	y := `server:
  managementKey: ${ADMIN_KEY}
  listen: ${LISTEN:-127.0.0.1:9999}
providers:
  - {id: p, baseURL: "http://x/v1", connections: [{id: c, apiKey: "${MISSING}", maxConcurrent: "${CAP}"}]}
resilience:
  requestQueue: {maxWaitMs: "${WAIT}"}
`
	env := []string{"ADMIN_KEY=adm", "CAP=3", "WAIT=2s", "BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH=7"}
	cfg, warnings, err := ParseConfig("t.yaml", []byte(y), env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.ManagementKey != "adm" || cfg.Server.Listen != "127.0.0.1:9999" || cfg.Providers[0].Connections[0].MaxConcurrent != 3 {
		t.Fatalf("expansion: %+v %+v", cfg.Server, cfg.Providers[0].Connections[0])
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "MISSING") || !strings.Contains(warnings[0], "t.yaml:5") {
		t.Fatalf("warnings: %v", warnings)
	}
	g, err := New(context.Background(), cfg, Options{Environ: env})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	s := g.settings()
	if s.RequestQueue.MaxWaitMs != 2000 || s.RequestQueue.MaxQueueDepth != 7 {
		t.Fatalf("settings: %+v", s.RequestQueue)
	}
	src := g.rt.Load().src
	if src["requestQueue.maxWaitMs"] != "file" || src["requestQueue.maxQueueDepth"] != "env" || src["requestQueue.executionMaxWaitMs"] != "default" {
		t.Fatalf("sources: %v", src)
	}
	// a bad env value is an error naming the variable
	if _, err := New(context.Background(), cfg, Options{Environ: []string{"BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH=lots"}}); err == nil || !strings.Contains(err.Error(), "BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH") {
		t.Fatalf("bad env: %v", err)
	}
}

func TestOpenGatewayOnlyOnLoopback(t *testing.T) {
	y := "server: {listen: '0.0.0.0:8080', managementKey: k}\nproviders:\n  - {id: p, baseURL: 'http://x/v1', connections: [{id: c}]}\n"
	_, _, err := ParseConfig("t.yaml", []byte(y), nil)
	if err == nil || !strings.Contains(err.Error(), "t.yaml:1: server.listen: refusing to run an open gateway") || !strings.Contains(err.Error(), "clientKeys") {
		t.Fatalf("want a refusal, got %v", err)
	}
	y = "server: {listen: '0.0.0.0:8080'}\nclientKeys: [{id: a, key: k}]\nproviders:\n  - {id: p, baseURL: 'http://x/v1', connections: [{id: c}]}\n"
	if _, _, err = ParseConfig("t.yaml", []byte(y), nil); err == nil || !strings.Contains(err.Error(), "managementKey") {
		t.Fatalf("want managementKey required, got %v", err)
	}
	// The override is checked like a file value and names its variable.
	loop := strings.Replace(y, "0.0.0.0:8080", "127.0.0.1:8080", 1)
	if _, _, err = ParseConfig("t.yaml", []byte(loop), []string{"BREAKWATER_LISTEN=0.0.0.0:9"}); err == nil ||
		!strings.Contains(err.Error(), "managementKey") || !strings.Contains(err.Error(), "BREAKWATER_LISTEN") {
		t.Fatalf("want the env override refused, got %v", err)
	}
	// A Config changed in code is checked by New.
	cfg, _, err := ParseConfig("t.yaml", []byte(loop), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.Listen = "0.0.0.0:8080"
	if _, err = New(context.Background(), cfg, Options{}); err == nil || !strings.Contains(err.Error(), "managementKey") {
		t.Fatalf("New: want managementKey required, got %v", err)
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "0.0.0.0:1": false, ":8080": false, "10.0.0.1:1": false} {
		if isLoopback(addr) != want {
			t.Errorf("isLoopback(%q) != %v", addr, want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	b, _ := os.ReadFile("../examples/demo.yaml")
	f.Add(string(b))
	f.Add("providers: [{id: p, baseURL: 'http://x', connections: [{id: c}]}]\nresilience: {requestQueue: {maxWaitMs: 1s}}")
	f.Add("server: {listen: ${X:-a}}")
	f.Fuzz(func(t *testing.T, s string) {
		cfg, _, err := ParseConfig("f.yaml", []byte(s), []string{"X=1"})
		if err == nil && cfg == nil {
			t.Fatal("nil config without an error")
		}
	})
}

// docs/config.md: an unknown variable under a settings prefix is a typo and
// an error, unless the file expands it: BREAKWATER_STREAM_URL named in
// ${...} is the operator's variable (serve refused to start with it).
func TestExpandedVariableIsNotAMistypedSetting(t *testing.T) {
	y := "providers:\n  - {id: p, baseURL: '${BREAKWATER_STREAM_URL}', connections: [{id: c}]}\n"
	env := []string{"BREAKWATER_STREAM_URL=http://127.0.0.1:9/v1"}
	cfg, _, err := ParseConfig("t.yaml", []byte(y), env)
	if err != nil {
		t.Fatalf("a variable the file expands: %v", err)
	}
	if cfg.Providers[0].BaseURL != "http://127.0.0.1:9/v1" || !cfg.ReferencesEnv("BREAKWATER_STREAM_URL") {
		t.Fatalf("expansion: %+v", cfg.Providers[0])
	}
	if _, err := New(context.Background(), cfg, Options{Environ: env}); err != nil {
		t.Fatalf("New with the same environment: %v", err)
	}
	// Not named by the file: still the typo error naming the variable.
	y = "providers:\n  - {id: p, baseURL: 'http://127.0.0.1:9/v1', connections: [{id: c}]}\n"
	if _, _, err := ParseConfig("t.yaml", []byte(y), env); err == nil || !strings.Contains(err.Error(), "BREAKWATER_STREAM_URL") {
		t.Fatalf("an unknown settings variable the file does not use: %v", err)
	}
	// A real setting named in ${...} is still a setting.
	y = "providers:\n  - {id: p, baseURL: 'http://127.0.0.1:9/v1', connections: [{id: c}]}\nresilience: {requestQueue: {maxWaitMs: '${BREAKWATER_RATE_LIMIT_MAX_WAIT_MS}'}}\n"
	if _, _, err := ParseConfig("t.yaml", []byte(y), []string{"BREAKWATER_RATE_LIMIT_MAX_WAIT_MS=lots"}); err == nil {
		t.Fatal("a bad value of a settings variable must stay an error")
	}
}

// YAML merge keys share settings between entries ({<<: *common, id: c2}):
// the entry's own keys win, and a top-level x- key may hold the anchor, as
// in Compose files. `<<` was an unknown key (did you mean "id"?).
func TestConfigMergeKeys(t *testing.T) {
	y := `x-conn: &conn {maxConcurrent: 2, apiKey: shared}
providers:
  - id: p
    baseURL: http://x/v1
    models: [m]
    connections:
      - {<<: *conn, id: c1}
      - {<<: [*conn], id: c2, maxConcurrent: 5}
`
	cfg, warnings, err := ParseConfig("t.yaml", []byte(y), nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := cfg.Providers[0].Connections
	if len(cs) != 2 || cs[0].ID != "c1" || cs[0].MaxConcurrent != 2 || cs[0].APIKey != "shared" || cs[1].MaxConcurrent != 5 || cs[1].APIKey != "shared" {
		t.Fatalf("merged connections: %+v", cs)
	}
	if len(warnings) != 0 {
		t.Fatalf("warnings: %v", warnings)
	}
	if _, _, err := ParseConfig("t.yaml", []byte("providers:\n  - {<<: 5, id: p}\n"), nil); err == nil || !strings.Contains(err.Error(), "merge key takes a mapping") {
		t.Fatalf("a merge of a scalar: %v", err)
	}
	if _, w, _ := ParseConfig("t.yaml", []byte("server: {listen: '127.0.0.1:9'}\n"), nil); len(w) != 1 || !strings.Contains(w[0], "no providers") {
		t.Fatalf("a config without providers should warn: %v", w)
	}
}
