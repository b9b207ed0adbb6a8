package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

const uiCfg = `
server: {managementKey: s3cret}
clientKeys:
  - {id: team-a, key: ka, scopes: [lease:exclusive], allowedConnections: [p/k1, p/k2]}
  - {id: plain, key: kp}
providers:
  - id: p
    profile: apikey
    baseURL: {{UP}}
    models: [m]
    strategy: round-robin
    connections: [{id: k1, apiKey: k1}, {id: k2, apiKey: k2}, {id: k3, apiKey: k3}]
  - {id: q, profile: apikey, baseURL: {{UP}}, models: [n], connections: [{id: q1, apiKey: q1}]}
combos:
  - {id: both, strategy: priority, targets: [p/m, q/n]}
` + testBase

type previewOut struct {
	Strategy   string `json:"strategy"`
	Candidates []struct {
		Provider, Connection string
	} `json:"candidates"`
	Excluded []struct {
		Provider, Connection, Reason, LockReason string
		RemainingMs                              int64
	} `json:"excluded"`
}

func order(p previewOut) string {
	var s []string
	for _, c := range p.Candidates {
		s = append(s, c.Provider+"/"+c.Connection)
	}
	return strings.Join(s, ",")
}

func getPreview(t *testing.T, g *gw, model string) previewOut {
	t.Helper()
	r := admin(g, "GET", "/api/routes/preview?model="+model, "")
	if r.code != 200 {
		t.Fatalf("preview %s: %d %s", model, r.code, r.body)
	}
	var p previewOut
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// Looking at what a route would pick changes nothing: previews repeat, and
// the next request goes where the preview said (a round-robin cursor a
// preview moved would send it elsewhere).
func TestRoutePreviewIsReadOnly(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, uiCfg)
	a := getPreview(t, g, "p/m")
	for range 3 {
		if b := getPreview(t, g, "p/m"); order(b) != order(a) {
			t.Fatalf("preview moved: %s then %s", order(a), order(b))
		}
	}
	if a.Strategy != "round-robin" || len(a.Candidates) != 3 {
		t.Fatalf("preview = %+v", a)
	}
	if r := g.chat("p/m", "Authorization", "Bearer kp"); r.code != 200 {
		t.Fatalf("chat: %d %s", r.code, r.body)
	}
	if first := a.Candidates[0].Connection; up.count(first) != 1 {
		t.Fatalf("the request did not go to the previewed first connection %s (calls: k1=%d k2=%d k3=%d)", first, up.count("k1"), up.count("k2"), up.count("k3"))
	}
}

// GET /api/combos shows each combo's pick and, for every excluded target or
// connection, the reason and the time left.
func TestCombosShowExclusionReasons(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, uiCfg)
	up.set("k1", status(401, `{"error":{"message":"bad key"}}`))
	g.chat("p/m", "Authorization", "Bearer kp") // round-robin starts on k1: it fails and k2 serves
	r := admin(g, "GET", "/api/combos", "")
	if r.code != 200 {
		t.Fatalf("combos: %d %s", r.code, r.body)
	}
	var v struct {
		Combos []struct {
			ID string `json:"id"`
			previewOut
		} `json:"combos"`
	}
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Combos) != 1 || v.Combos[0].ID != "both" || v.Combos[0].Strategy != "priority" {
		t.Fatalf("combos = %s", r.body)
	}
	c := v.Combos[0]
	if len(c.Excluded) != 1 || c.Excluded[0].Connection != "k1" || c.Excluded[0].Reason != "connection_cooldown" ||
		c.Excluded[0].LockReason != "auth_error" || c.Excluded[0].RemainingMs <= 0 {
		t.Fatalf("excluded = %+v, want p/k1 cooling for auth_error", c.Excluded)
	}
	if got := order(c.previewOut); !strings.Contains(got, "q/q1") || strings.Contains(got, "p/k1") {
		t.Fatalf("candidates = %s", got)
	}
}

// The new views are management API: the key is required, and bad input is
// a 4xx naming the problem.
func TestUIViewsNeedTheKeyAndRefuseBadInput(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, uiCfg)
	for _, p := range []string{"/api/combos", "/api/leases", "/api/routes/preview?model=p/m"} {
		if r := g.do("GET", p, ""); r.code != 401 {
			t.Fatalf("%s without the key: %d", p, r.code)
		}
	}
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/api/routes/preview", 400, "model is required"},
		{"/api/routes/preview?model=p/m&x=1", 400, `unknown query parameter \"x\"`},
		{"/api/routes/preview?model=nope", 404, "unknown model"},
	} {
		if r := admin(g, "GET", tc.path, ""); r.code != tc.code || !strings.Contains(r.body, tc.want) {
			t.Fatalf("%s: %d %s, want %d with %q", tc.path, r.code, r.body, tc.code, tc.want)
		}
	}
}

// GET /api/leases lists the active leases without the owner token.
func TestLeasesListHidesTheOwner(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, uiCfg)
	if r := admin(g, "GET", "/api/leases", ""); r.code != 200 || !strings.Contains(r.body, `"leases":[]`) {
		t.Fatalf("no leases: %d %s", r.code, r.body)
	}
	r := g.do("POST", "/api/v1/session-leases", `{"action":"acquire","model":"p/m"}`, "Authorization", "Bearer ka", "Content-Type", "application/json")
	if r.code != 200 {
		t.Fatalf("acquire: %d %s", r.code, r.body)
	}
	owner, _ := r.json(t)["owner"].(string)
	l := admin(g, "GET", "/api/leases", "")
	if l.code != 200 || !strings.Contains(l.body, `"apiKeyId":"team-a"`) || !strings.Contains(l.body, `"provider":"p"`) {
		t.Fatalf("leases: %d %s", l.code, l.body)
	}
	if owner == "" || strings.Contains(l.body, owner) || strings.Contains(l.body, hashOwner(owner)) {
		t.Fatalf("the lease list shows the owner token or its hash: %s", l.body)
	}
}

// The dashboard's files are served at /ui/ with a strict content security
// policy; / and /ui send the browser there.
func TestDashboardIsServed(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, uiCfg)
	r := g.do("GET", "/ui/", "")
	if r.code != 200 || !strings.Contains(r.body, "<html") || !strings.Contains(r.h.Get("Content-Security-Policy"), "script-src 'self'") ||
		r.h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("GET /ui/: %d %v %s", r.code, r.h, r.body)
	}
	if r := g.do("GET", "/ui/app.js", ""); r.code != 200 || !strings.Contains(r.h.Get("Content-Type"), "javascript") {
		t.Fatalf("GET /ui/app.js: %d %s", r.code, r.h.Get("Content-Type"))
	}
	req := func(path string) (int, string) {
		res, err := noRedirect.Get(g.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode, res.Header.Get("Location")
	}
	for _, p := range []string{"/", "/ui"} {
		if code, loc := req(p); code != 302 || loc != "/ui/" {
			t.Fatalf("GET %s: %d to %q, want 302 to /ui/", p, code, loc)
		}
	}
	if r := g.do("POST", "/ui/", ""); r.code != 405 {
		t.Fatalf("POST /ui/: %d", r.code)
	}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
