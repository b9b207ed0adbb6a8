package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/store"
)

// Outside-in acceptance checks of the management API (docs/api.md,
// docs/api.md#operator-actions): what an operator with curl ran into.

// docs/api.md: bad input never changes state. The terminal-state reset took
// no body and ignored whatever came, so a mistyped call still cleared a ban.
func TestCheckMgmtConnectionResetRefusesABody(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	up.set("glm-k1", status(403, `{"error":{"message":"Your account has been banned for violating the usage policy."}}`))
	g.chat("glm/glm-5")
	if c := g.conn("glm", "k1"); c["status"] != "banned" {
		t.Fatalf("setup: k1 should be banned: %v", c)
	}
	for _, body := range []string{`{"bogus":1}`, `[]`, `null`, `{"provider":"glm"}`} {
		r := admin(g, "POST", "/api/resilience/connections/glm/k1/reset", body)
		if r.code != 400 || r.errCode() != "invalid_request" {
			t.Errorf("reset with body %s: %d %s, want 400", body, r.code, r.body)
		}
	}
	if c := g.conn("glm", "k1"); c["status"] != "banned" {
		t.Fatalf("a rejected reset cleared the terminal state: %v", c)
	}
	if r := admin(g, "POST", "/api/resilience/connections/glm/k1/reset", ""); r.code != 200 || g.conn("glm", "k1")["status"] != "active" {
		t.Fatalf("reset without a body: %d %s", r.code, r.body)
	}
}

// docs/api.md: a body that is not a JSON object is bad input. `null`
// decoded to the zero value, so POST /api/resilience/reset with `null` reset
// every breaker; an array's error named a Go struct.
func TestCheckMgmtBodyMustBeAnObject(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	up.set("glm-k1", status(503, `{"error":{"message":"down"}}`))
	up.set("glm-k2", status(503, `{"error":{"message":"down"}}`))
	g.chat("glm/glm-5")
	before := g.health()["providers"]
	if before.(map[string]any)["glm"].(map[string]any)["failureCount"].(float64) == 0 {
		t.Fatalf("setup: the breaker should count a failure: %v", before)
	}
	for _, c := range []struct{ m, p, body, kind string }{
		{"POST", "/api/resilience/reset", `null`, "null"},
		{"POST", "/api/resilience/reset", `[]`, "an array"},
		{"POST", "/api/resilience/reset", `"glm"`, "a string"},
		{"POST", "/api/resilience/cooldowns", `true`, "a boolean"},
		{"DELETE", "/api/resilience/model-cooldowns", `7`, "a number"},
		{"PUT", "/api/providers/glm", `null`, "null"},
		{"POST", "/api/rate-limits", `[{"connectionId":"glm/k1","enabled":true}]`, "an array"},
		{"PATCH", "/api/resilience", `null`, "null"},
	} {
		r := admin(g, c.m, c.p, c.body)
		if r.code != 400 || !strings.Contains(r.body, "want a JSON object, got "+c.kind) {
			t.Errorf("%s %s %s: %d %s", c.m, c.p, c.body, r.code, r.body)
		}
	}
	if after := g.health()["providers"]; mustJSON(t, after) != mustJSON(t, before) {
		t.Fatalf("a rejected body changed the breakers:\nbefore %v\nafter  %v", before, after)
	}
	r := admin(g, "PUT", "/api/providers/glm", `{"connections":[5]}`)
	if r.code != 400 || strings.Contains(r.body, "struct") || strings.Contains(r.body, "proxy.") || !strings.Contains(r.body, "an object") {
		t.Fatalf("a nested type error should speak JSON, not Go: %s", r.body)
	}
}

// RFC 9110 §15.5.6: a 405 says which methods the path takes (docs/gateway.md:
// 404 and 405 answer JSON).
func TestCheckMgmtMethodNotAllowedListsAllow(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	for _, c := range []struct{ m, p, allow string }{
		{"DELETE", "/api/monitoring/health", "GET"},
		{"PUT", "/api/resilience", "GET, PATCH"},
		{"POST", "/api/resilience/model-cooldowns", "GET, DELETE"},
		{"GET", "/api/resilience/connections/glm/k1/reset", "POST"},
		{"DELETE", "/api/providers/glm", "GET, PUT"},
	} {
		r := admin(g, c.m, c.p, "")
		if r.code != 405 || r.errCode() != "method_not_allowed" || r.h.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow=%q %s, want 405 Allow=%q", c.m, c.p, r.code, r.h.Get("Allow"), r.body, c.allow)
		}
	}
}

// docs/config.md/docs/api.md: a baseURL the gateway cannot append paths to is refused
// (a query ended up in front of /chat/completions), and a credential in it
// (user:password@, ?key=) never shows in a management answer or an error.
func TestCheckMgmtBaseURLValidatedAndRedacted(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	before := admin(g, "GET", "/api/providers/glm", "").body
	for _, u := range []string{"http://", "http:///v1", "http://h/v1?key=pwSECRET", "http://h/v1#frag", "https://u:pwSECRET@h/v1?", "ftp://u:pwSECRET@h/v1"} {
		r := admin(g, "PUT", "/api/providers/glm", `{"baseURL":"`+u+`"}`)
		if r.code != 400 || !strings.Contains(r.body, "baseURL") {
			t.Errorf("baseURL %q: %d %s, want 400", u, r.code, r.body)
		}
		if strings.Contains(r.body, "pwSECRET") {
			t.Errorf("baseURL %q: the error repeats a credential: %s", u, r.body)
		}
	}
	if after := admin(g, "GET", "/api/providers/glm", "").body; after != before {
		t.Fatalf("a rejected PUT changed the provider:\n%s\n%s", before, after)
	}
	withUser := strings.Replace(up.url(), "http://", "http://user:pwSECRET@", 1)
	if r := admin(g, "PUT", "/api/providers/glm", `{"baseURL":"`+withUser+`"}`); r.code != 200 || strings.Contains(r.body, "pwSECRET") {
		t.Fatalf("PUT with a user:password baseURL: %d %s", r.code, r.body)
	}
	for _, p := range []string{"/api/providers/glm", "/api/providers"} {
		if r := admin(g, "GET", p, ""); r.code != 200 || strings.Contains(r.body, "pwSECRET") || !strings.Contains(r.body, "user:xxxxx@") {
			t.Errorf("GET %s shows the baseURL's password: %s", p, r.body)
		}
	}

	// GET → PUT round trip: the redacted URL put back keeps the password.
	shown := admin(g, "GET", "/api/providers/glm", "").json(t)["baseURL"].(string)
	if r := admin(g, "PUT", "/api/providers/glm", `{"baseURL":"`+shown+`"}`); r.code != 200 {
		t.Fatalf("PUT of the shown baseURL: %d %s", r.code, r.body)
	}
	g.g.provMu.Lock()
	kept := g.g.provs["glm"].cfg.BaseURL
	g.g.provMu.Unlock()
	if kept != withUser {
		t.Fatalf("a GET/PUT round trip stored %q, want %q", kept, withUser)
	}

	_, _, err := ParseConfig("test.yaml", []byte("providers:\n  - id: p\n    baseURL: 'http://h/v1?key=pwSECRET'\n    connections: [{id: c}]\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "test.yaml:3") || !strings.Contains(err.Error(), "must not have a query") || strings.Contains(err.Error(), "pwSECRET") {
		t.Fatalf("config baseURL with a query: %v", err)
	}
}

// docs/api.md#operator-actions: the emergency fallback target is a route like a combo target;
// one naming nothing was saved (PATCH) or loaded (file) and then skipped
// silently exactly when every target was excluded.
func TestCheckMgmtEmergencyFallbackTargetMustResolve(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	before := admin(g, "GET", "/api/resilience", "").body
	for _, target := range []string{"nope/x", "glm/glm-9", "nomodel"} {
		r := admin(g, "PATCH", "/api/resilience", `{"emergencyFallback":{"enabled":true,"target":"`+target+`"}}`)
		if r.code != 400 || r.errCode() != "invalid_settings" || !strings.Contains(r.body, `"field":"emergencyFallback.target"`) {
			t.Errorf("target %q: %d %s, want 400 naming emergencyFallback.target", target, r.code, r.body)
		}
	}
	if after := admin(g, "GET", "/api/resilience", "").body; after != before {
		t.Fatal("a rejected PATCH changed the settings")
	}
	if r := admin(g, "PATCH", "/api/resilience", `{"emergencyFallback":{"enabled":true,"target":"glm/glm-5"}}`); r.code != 200 {
		t.Fatalf("a known target: %d %s", r.code, r.body)
	}
	if r := admin(g, "PATCH", "/api/resilience", `{"requestQueue":{"maxWaitMs":"2s"}}`); r.code != 200 {
		t.Fatalf("an unrelated patch: %d %s", r.code, r.body)
	}

	y := "providers:\n  - {id: p, baseURL: 'http://x/v1', models: [m], connections: [{id: c}]}\nresilience:\n  emergencyFallback:\n    enabled: true\n    target: q/m\n"
	_, _, err := ParseConfig("test.yaml", []byte(y), nil)
	if err == nil || !strings.Contains(err.Error(), "test.yaml:6") || !strings.Contains(err.Error(), "resilience.emergencyFallback.target") {
		t.Fatalf("config with an unknown fallback target: %v", err)
	}
	if _, _, err := ParseConfig("test.yaml", []byte(strings.Replace(y, "q/m", "p/m", 1)), nil); err != nil {
		t.Fatalf("config with a known fallback target: %v", err)
	}
}

// docs/gateway.md: GET /healthz is the liveness probe (503 while draining);
// load balancers probe with HEAD as often as with GET, which answered 405.
func TestCheckMgmtHealthzAnswersHead(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	if r := g.do("HEAD", "/healthz", ""); r.code != 200 || r.body != "" {
		t.Fatalf("HEAD /healthz: %d %q", r.code, r.body)
	}
	if r := g.do("POST", "/healthz", ""); r.code != 405 || r.h.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST /healthz: %d Allow=%q", r.code, r.h.Get("Allow"))
	}
	g.g.draining.Store(true)
	if r := g.do("HEAD", "/healthz", ""); r.code != 503 {
		t.Fatalf("HEAD /healthz while draining: %d", r.code)
	}
}

// docs/config.md / docs/settings.md#defaults: a config that names what it cannot serve is an
// error at start, like a combo naming an unknown target. These loaded and
// then answered 404 (an alias to an unlisted model), silently hid a route
// (combo or alias ids resolve before provider/model; a combo beats an alias
// of the same id), or let two client ids share one key (the first one wins,
// so the second id's scopes and allowed connections never apply).
func TestCheckMgmtConfigRefusesShadowedAndAmbiguousNames(t *testing.T) {
	const base = "providers:\n  - {id: p, baseURL: 'http://x/v1', models: [m, n], connections: [{id: c}]}\n"
	cases := []struct {
		extra string
		want  []string
	}{
		{"aliases: {fast: p/zz}\n", []string{"test.yaml:3", "aliases.fast", `does not list model "zz"`}},
		{"aliases: {c1: p/m}\ncombos: [{id: c1, targets: [p/n]}]\n", []string{"test.yaml:3", "aliases.c1", "would never apply"}},
		{"aliases: {p/m: p/n}\n", []string{"test.yaml:3", "aliases.p/m", `model of provider "p"`}},
		{"combos: [{id: p/m, targets: [p/n]}]\n", []string{"test.yaml:3", "combos[0].id", "would hide it"}},
		{"clientKeys: [{id: a, key: kSECRET}, {id: b, key: kSECRET}]\n", []string{"test.yaml:3", "clientKeys[1].key", `same key as clientKeys[0] ("a")`}},
	}
	for _, c := range cases {
		_, _, err := ParseConfig("test.yaml", []byte(base+c.extra), nil)
		if err == nil {
			t.Errorf("%q: want an error", c.extra)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not contain %q", c.extra, err, w)
			}
		}
		if strings.Contains(err.Error(), "kSECRET") {
			t.Errorf("%q: the error repeats a client key: %v", c.extra, err)
		}
	}
	for _, ok := range []string{
		"aliases: {fast: p/m, best: c1}\ncombos: [{id: c1, targets: [p/n]}]\n",
		"combos: [{id: p/other, targets: [p/n]}]\n",
		"clientKeys: [{id: a, key: k1}, {id: b, key: k2}]\n",
	} {
		if _, _, err := ParseConfig("test.yaml", []byte(base+ok), nil); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// docs/api.md#cooldown-manager: POST /api/resilience/cooldowns answers {cleared, unchanged, ...}
// per connection. A connection listed twice was counted twice ("unchanged":
// 2 for one connection); it is bad input like a duplicate in PUT providers.
func TestCheckMgmtClearCooldownsRefusesDuplicates(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	up.set("glm-k1", status(429, `{"error":{"message":"rate limited"}}`, "Retry-After", "9"))
	g.chat("glm/glm-5")
	r := admin(g, "POST", "/api/resilience/cooldowns", `{"connectionIds":["glm/k1","glm/k2","glm/k1"]}`)
	if r.code != 400 || !strings.Contains(r.body, `connectionIds[2]: \"glm/k1\" appears twice`) {
		t.Fatalf("duplicate ids: %d %s", r.code, r.body)
	}
	if c := g.conn("glm", "k1"); c["status"] != "cooldown" {
		t.Fatalf("a rejected clear changed k1: %v", c)
	}
	r = admin(g, "POST", "/api/resilience/cooldowns", `{"connectionIds":["glm/k1","glm/k2"]}`)
	if m := r.json(t); r.code != 200 || m["cleared"].(float64) != 1 || m["unchanged"].(float64) != 1 {
		t.Fatalf("clear: %d %s", r.code, r.body)
	}
}

// docs/config.md: validation errors name the file, line and field. A listen
// port out of range passed validation and failed later at bind time as
// "listen tcp: address 99999: invalid port", with no file or line.
func TestCheckMgmtConfigListenPortInRange(t *testing.T) {
	const provs = "providers:\n  - {id: p, baseURL: 'http://x/v1', connections: [{id: c}]}\n"
	for _, listen := range []string{"127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:eighty"} {
		_, _, err := ParseConfig("test.yaml", []byte("server:\n  listen: '"+listen+"'\n"+provs), nil)
		if err == nil || !strings.Contains(err.Error(), "test.yaml:2: server.listen: want a port between 0 and 65535") {
			t.Errorf("listen %q: %v", listen, err)
		}
	}
	for _, listen := range []string{"127.0.0.1:0", "127.0.0.1:65535", "[::1]:8080"} {
		if _, _, err := ParseConfig("test.yaml", []byte("server:\n  listen: '"+listen+"'\n"+provs), nil); err != nil {
			t.Errorf("listen %q: %v", listen, err)
		}
	}
}

// docs/config.md/docs/api.md: the managementKey guards /api/*, client keys the client
// API. A client key equal to the managementKey handed that client the whole
// management API without a word.
func TestCheckMgmtConfigClientKeyIsNotTheManagementKey(t *testing.T) {
	y := "server: {managementKey: mSECRET}\nclientKeys: [{id: a, key: other}, {id: b, key: mSECRET}]\nproviders:\n  - {id: p, baseURL: 'http://x/v1', connections: [{id: c}]}\n"
	_, _, err := ParseConfig("test.yaml", []byte(y), nil)
	if err == nil || !strings.Contains(err.Error(), "clientKeys[1].key: is the managementKey") || strings.Contains(err.Error(), "mSECRET") {
		t.Fatalf("client key = managementKey: %v", err)
	}
	if _, _, err := ParseConfig("test.yaml", []byte(strings.Replace(y, "key: mSECRET", "key: cSECRET", 1)), nil); err != nil {
		t.Fatalf("distinct keys: %v", err)
	}
}

// docs/api.md: an oversized management body is a 413, also when the client
// asked "Expect: 100-continue" (curl does for large bodies). The limit is
// checked on the declared length before a 100 Continue: the client got a 100,
// sent its body and then found the connection reset.
func TestCheckMgmtOversizedBodyWithExpectIs413(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	c, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "PATCH /api/resilience HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", 17<<20)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !strings.Contains(string(body), "request_too_large") {
		t.Fatalf("got %d %s, want 413 request_too_large before any 100 Continue", resp.StatusCode, body)
	}
	if s := admin(g, "GET", "/api/resilience", ""); s.code != 200 {
		t.Fatalf("after the refusal: %d %s", s.code, s.body)
	}
}

// docs/settings.md#layers: fields named *Ms take an integer or a Go duration everywhere,
// so PUT /api/providers takes "10s" where the config file does; a bad or
// negative value is a 400 naming the problem, and changes nothing.
func TestCheckMgmtProviderMillisTakeDurations(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	r := admin(g, "PUT", "/api/providers/glm", `{"connections":[{"id":"k1","rateLimitOverrides":{"maxWaitMs":"10s","minTimeMs":250}}]}`)
	if r.code != 200 {
		t.Fatalf("duration string: %d %s", r.code, r.body)
	}
	list := admin(g, "GET", "/api/providers", "")
	if !strings.Contains(list.body, `"maxWaitMs":10000`) || !strings.Contains(list.body, `"minTimeMs":250`) {
		t.Fatalf("the overrides did not apply as milliseconds: %s", list.body)
	}
	for _, bad := range []string{`"10 parsecs"`, `"500us"`, `-5`, `"-1s"`, `true`} {
		r := admin(g, "PUT", "/api/providers/glm", `{"connections":[{"id":"k1","rateLimitOverrides":{"maxWaitMs":`+bad+`}}]}`)
		if r.code != 400 || r.errCode() != "invalid_request" || !strings.Contains(r.body, `connections[0]: field \"rateLimitOverrides.maxWaitMs\"`) {
			t.Errorf("maxWaitMs %s: %d %s, want 400 naming the field", bad, r.code, r.body)
		}
	}
	if after := admin(g, "GET", "/api/providers", ""); after.body != list.body {
		t.Fatalf("a refused PUT changed the provider:\nbefore %s\nafter  %s", list.body, after.body)
	}
}

// docs/api.md: bad input is a 4xx. A NUL in a settings string was accepted
// by the memory store and refused by Postgres's jsonb, which answered 503
// store_unavailable ("saving the settings failed") for the client's input.
func TestCheckMgmtSettingsRefuseNUL(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	before := admin(g, "GET", "/api/resilience", "")
	for _, body := range []string{`{"bannedSignals":["ok\u0000"]}`, `{"providerErrorRules":{"gl\u0000m":[]}}`} {
		r := admin(g, "PATCH", "/api/resilience", body)
		if r.code != 400 || !strings.Contains(r.body, "NUL") {
			t.Errorf("PATCH %s: %d %s, want 400 naming the NUL", body, r.code, r.body)
		}
	}
	if after := admin(g, "GET", "/api/resilience", ""); after.body != before.body {
		t.Fatal("a refused PATCH changed the settings")
	}
}

// GET /api/request-log: connection takes "provider/connection" like the rest
// of the management API (it matched only the bare id, and glm/k1 silently
// found nothing), and a parameter given twice is a 400 (only the first was
// used).
func TestCheckMgmtRequestLogFilters(t *testing.T) {
	up := newFakeUp(t)
	gg := newRequestLogGW(t, up)
	up.set("glm-k1", okJSON("hi"))
	if r := gg.chat("glm/glm-5"); r.code != 200 {
		t.Fatalf("chat: %d %s", r.code, r.body)
	}
	count := func(q string) int {
		var v struct{ Records []json.RawMessage }
		eventually(t, "the request log has the attempt", func() bool {
			r := admin(gg, "GET", "/api/request-log?"+q, "")
			if r.code != 200 || json.Unmarshal([]byte(r.body), &v) != nil {
				t.Fatalf("%s: %d %s", q, r.code, r.body)
			}
			return len(v.Records) > 0 || q == "connection=glm/k2"
		})
		return len(v.Records)
	}
	if n := count("connection=k1"); n != 1 {
		t.Fatalf("connection=k1: %d records", n)
	}
	if n := count("connection=glm/k1"); n != 1 {
		t.Fatalf("connection=glm/k1: %d records, want the same as connection=k1", n)
	}
	if n := count("connection=glm/k2"); n != 0 {
		t.Fatalf("connection=glm/k2: %d records", n)
	}
	// One request's attempts by the id the client sent (the handle a
	// client reports during an incident).
	if r := gg.chat("glm/glm-5", "X-Request-Id", "ticket-4711"); r.code != 200 {
		t.Fatalf("chat: %d %s", r.code, r.body)
	}
	if n := count("requestId=ticket-4711"); n != 1 {
		t.Fatalf("requestId=ticket-4711: %d records", n)
	}
	for _, q := range []string{"provider=glm&provider=oai", "connection=glm/k1&provider=oai", "requestId=a&requestId=b"} {
		if r := admin(gg, "GET", "/api/request-log?"+q, ""); r.code != 400 {
			t.Errorf("%s: %d %s, want 400", q, r.code, r.body)
		}
	}
}

// docs/store.md#request-log (the request log keeps every upstream attempt with its
// verdict): an attempt the gateway cut itself is logged under the cut's
// code — the execution bound's attempt reached the upstream and was not
// logged at all, the request deadline's read as the client's abort — and
// breakwater_upstream_attempts_total labels it cut_<code>.
func TestCheckGatewayCutsAreNamedInTheLog(t *testing.T) {
	up := newFakeUp(t)
	gg := newRequestLogGW(t, up)
	if r := admin(gg, "PATCH", "/api/resilience", `{"requestQueue":{"executionMaxWaitMs":300},"upstreamTimeouts":{"responseHeaderMs":100,"firstContentMs":"10s"}}`); r.code != 200 {
		t.Fatalf("PATCH: %d %s", r.code, r.body)
	}
	// Headers at once, the body after the execution bound, on both keys
	// (the cut is neutral: the flow tries k2 too).
	late := func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	}
	up.set("glm-k1", late)
	up.set("glm-k2", late)
	if r := gg.chat("glm/glm-5"); r.code != 504 || r.errCode() != "RATE_LIMIT_EXECUTION_TIMEOUT" {
		t.Fatalf("want 504 RATE_LIMIT_EXECUTION_TIMEOUT: %d %s", r.code, r.body)
	}
	var v struct {
		Records []struct{ ErrorType, Reason, Connection string }
	}
	eventually(t, "the cut attempt in the request log", func() bool {
		r := admin(gg, "GET", "/api/request-log?connection=glm/k1", "")
		return r.code == 200 && json.Unmarshal([]byte(r.body), &v) == nil && len(v.Records) > 0
	})
	if rec := v.Records[0]; rec.ErrorType != "RATE_LIMIT_EXECUTION_TIMEOUT" || rec.Reason != "RATE_LIMIT_EXECUTION_TIMEOUT" {
		t.Fatalf("logged as %+v", rec)
	}
	if m := admin(gg, "GET", "/metrics", ""); !strings.Contains(m.body, `breakwater_upstream_attempts_total{connection="k1",provider="glm",result="cut_rate_limit_execution_timeout"} 1`) {
		t.Fatalf("metrics:\n%s", grepLines(m.body, "upstream_attempts_total"))
	}
}

// docs/gateway.md Metrics: breakwater_upstream_attempts_total counts what
// went to the upstream. A request whose client left while it still queued
// for its connection's slot never reached it (it was counted as a
// client_abort attempt).
func TestCheckQueuedAbortIsNoUpstreamAttempt(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, `
server: {managementKey: "${ADMIN}"}
providers:
  - {id: p, baseURL: {{UP}}, models: [m], connections: [{id: k1, apiKey: k1, maxConcurrent: 1}]}
`+testBase, "ADMIN=s3cret")
	up.set("k1", slow(600*time.Millisecond, okJSON("hi")))
	held := make(chan resp, 1)
	go func() { held <- g.chat("p/m") }()
	eventually(t, "the slot taken", func() bool { return up.count("k1") == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if r := g.doCtx(ctx, "POST", "/v1/chat/completions", `{"model":"p/m","messages":[{"role":"user","content":"hi"}]}`); r.code != -1 {
		t.Fatalf("the queued request should have been given up by its client: %d", r.code)
	}
	if r := <-held; r.code != 200 {
		t.Fatalf("the held request: %d %s", r.code, r.body)
	}
	m := admin(g, "GET", "/metrics", "")
	if lines := grepLines(m.body, "breakwater_upstream_attempts_total{"); strings.Contains(lines, "client_abort") || !strings.Contains(lines, `result="200"} 1`) {
		t.Fatalf("one upstream attempt, no client_abort:\n%s", lines)
	}
}

// newRequestLogGW is mgmtConfig's gateway on the store package's memory
// store, which keeps a request log (GET /api/request-log).
func newRequestLogGW(t *testing.T, up *fakeUp) *gw {
	t.Helper()
	cfg, _, err := ParseConfig("t.yaml", []byte(strings.ReplaceAll(mgmtConfig, "{{UP}}", up.url())), []string{"ADMIN=s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(t.Context(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Store: store.NewMemory(store.MemoryOptions{}), Environ: []string{"ADMIN=s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveGW(t, g)
	t.Cleanup(func() { srv.Close(); g.Close(context.Background()) })
	return &gw{t: t, g: g, srv: srv, up: up, admin: "s3cret"}
}

// docs/store.md#request-log / docs/incident.md: a stream cut after content reached the
// client is logged with the client's 200 and the error (it was status 0,
// early_eof: an export replayed it as a cut before content, retried
// elsewhere, which the gateway never did).
func TestCheckCommittedCutLoggedWithTheClientsStatus(t *testing.T) {
	up := newFakeUp(t)
	gg := newRequestLogGW(t, up)
	up.set("glm-k1", sse(streamOpt{chunks: 4, cutAfter: 2}))
	if r := gg.stream("glm/glm-5"); r.code != 200 || !strings.Contains(r.body, "stream_interrupted") {
		t.Fatalf("want a committed stream ended by its error event: %d %s", r.code, r.body)
	}
	var v struct {
		Records []struct {
			Status    int
			ErrorType string
		}
	}
	eventually(t, "the cut attempt in the request log", func() bool {
		r := admin(gg, "GET", "/api/request-log?connection=glm/k1", "")
		return r.code == 200 && json.Unmarshal([]byte(r.body), &v) == nil && len(v.Records) > 0
	})
	if rec := v.Records[0]; rec.Status != 200 || rec.ErrorType != "early_eof" {
		t.Fatalf("logged as %+v, want status 200 with early_eof", rec)
	}
}
