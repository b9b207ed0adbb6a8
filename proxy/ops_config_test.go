package proxy

import (
	"strings"
	"testing"
)

// An unset variable in server.managementKey is a start-up error (it would
// leave the management API open), as an unset client key is.
func TestUnsetManagementKeyVariableIsAnError(t *testing.T) {
	y := "server: {managementKey: '${BW_ADMIN_KEY_UNSET}'}\nproviders:\n  - {id: p, baseURL: 'http://x/v1', connections: [{id: c}]}\n"
	_, _, err := ParseConfig("t.yaml", []byte(y), nil)
	if err == nil || !strings.Contains(err.Error(), "t.yaml:1: server.managementKey: environment variable BW_ADMIN_KEY_UNSET is not set") {
		t.Fatalf("want a file:line error naming the variable, got %v", err)
	}
	// BREAKWATER_MANAGEMENT_KEY sets the key instead: no error.
	if _, _, err := ParseConfig("t.yaml", []byte(y), []string{"BREAKWATER_MANAGEMENT_KEY=k"}); err != nil {
		t.Fatalf("with BREAKWATER_MANAGEMENT_KEY: %v", err)
	}
	// A default keeps it valid.
	y2 := strings.Replace(y, "UNSET}", "UNSET:-dflt}", 1)
	if cfg, _, err := ParseConfig("t.yaml", []byte(y2), nil); err != nil || cfg.Server.ManagementKey != "dflt" {
		t.Fatalf("with a default: %v", err)
	}
}

// BREAKWATER_DATABASE_URL is the one name for the database URL; the old
// BREAKWATER_STORE_URL is read with a deprecation warning when it is unset.
func TestDatabaseURLOneName(t *testing.T) {
	y := "providers:\n  - {id: p, baseURL: 'http://x/v1', connections: [{id: c}]}\n"
	cfg, warns, err := ParseConfig("t.yaml", []byte(y), []string{"BREAKWATER_DATABASE_URL=memory"})
	if err != nil || cfg.Store.URL != "memory" || strings.Contains(strings.Join(warns, "\n"), "deprecated") {
		t.Fatalf("new name: url %q warns %v err %v", cfg.Store.URL, warns, err)
	}
	cfg, warns, err = ParseConfig("t.yaml", []byte(y), []string{"BREAKWATER_STORE_URL=memory"})
	if err != nil || cfg.Store.URL != "memory" || !strings.Contains(strings.Join(warns, "\n"), "BREAKWATER_STORE_URL is deprecated") {
		t.Fatalf("old name: url %q warns %v err %v", cfg.Store.URL, warns, err)
	}
	cfg, _, err = ParseConfig("t.yaml", []byte(y), []string{"BREAKWATER_STORE_URL=postgres://old/db", "BREAKWATER_DATABASE_URL=memory"})
	if err != nil || cfg.Store.URL != "memory" {
		t.Fatalf("both: the new name wins, got %q (%v)", cfg.Store.URL, err)
	}
}

// Under /api, a 404 or 405 is answered only after authentication: without
// the management key every path, known or not, is a 401.
func TestAPINotFoundOnlyAfterAuth(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	for _, c := range []struct{ m, p string }{{"GET", "/api/nothing"}, {"DELETE", "/api/monitoring/health"}, {"GET", "/api/providers/glm/nope"}} {
		if r := g.do(c.m, c.p, ""); r.code != 401 || r.errCode() != "unauthorized" {
			t.Errorf("%s %s without the key: %d %s", c.m, c.p, r.code, r.body)
		}
	}
	if r := admin(g, "GET", "/api/nothing", ""); r.code != 404 {
		t.Fatalf("with the key: %d %s", r.code, r.body)
	}
	if r := admin(g, "DELETE", "/api/monitoring/health", ""); r.code != 405 {
		t.Fatalf("with the key: %d %s", r.code, r.body)
	}
	if r := g.do("GET", "/nothing", ""); r.code != 404 {
		t.Fatalf("outside /api a 404 stays a 404: %d", r.code)
	}
}

// A PATCH answer lists every number it clamped into range, and GET
// /api/resilience lists every saved value that beats the file.
func TestPatchListsClampedAndSavedOverrides(t *testing.T) {
	up := newFakeUp(t)
	y := mgmtConfig + "  providerBreaker: {dedup: {transportMs: 100}}\n"
	g := newGW(t, up, y, "ADMIN=s3cret")
	r := admin(g, "PATCH", "/api/resilience", `{"providerBreaker":{"dedup":{"connectionMs":99999999,"transportMs":200}}}`)
	if r.code != 200 {
		t.Fatalf("PATCH: %d %s", r.code, r.body)
	}
	clamped := r.json(t)["clamped"].([]any)
	if len(clamped) != 1 || mustJSON(t, clamped[0]) != `{"applied":600000,"field":"providerBreaker.dedup.connectionMs","requested":99999999}` {
		t.Fatalf("clamped: %v", clamped)
	}
	ov := admin(g, "GET", "/api/resilience", "").json(t)["overrides"].([]any)
	if len(ov) != 1 || mustJSON(t, ov[0]) != `{"field":"providerBreaker.dedup.transportMs","layer":"file","lowerValue":100,"savedValue":200}` {
		t.Fatalf("overrides: %v", ov)
	}
	// Deleting the saved value ends the override.
	admin(g, "PATCH", "/api/resilience", `{"providerBreaker":{"dedup":{"transportMs":null}}}`)
	if ov := admin(g, "GET", "/api/resilience", "").json(t)["overrides"].([]any); len(ov) != 0 {
		t.Fatalf("after null: %v", ov)
	}
}

// examples/providers.yaml (the real-provider example) validates once its
// variables are set, and refuses to start without the management key.
func TestProvidersExampleValidates(t *testing.T) {
	env := []string{"OPENAI_API_KEY=x", "ANTHROPIC_API_KEY=y", "GEMINI_API_KEY=z", "BW_ADMIN_KEY=a", "BW_CLIENT_KEY=b"}
	cfg, _, err := LoadConfig("../examples/providers.yaml", env)
	if err != nil {
		t.Fatalf("examples/providers.yaml: %v", err)
	}
	types := map[string]bool{}
	for _, p := range cfg.Providers {
		types[p.Type] = true
	}
	for _, want := range []string{"openai", "anthropic", "gemini", "local"} {
		if !types[want] {
			t.Errorf("the example lacks a %s provider", want)
		}
	}
	if _, _, err := LoadConfig("../examples/providers.yaml", env[:3]); err == nil || !strings.Contains(err.Error(), "BW_ADMIN_KEY is not set") {
		t.Fatalf("without BW_ADMIN_KEY: %v", err)
	}
}
