package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/mgmt"
	"github.com/gorilla/mux"
)

const maxManagementBody = 1 << 20

// routes builds the router: client API, management API, metrics. The
// whole router is wrapped (not mux.Use, which does not run on 404/405) for
// metrics, panic recovery and the JSON 404/405 answers.
func (g *Gateway) routes() http.Handler {
	r := mux.NewRouter()
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.apiUnauthorized(w, r) {
			return
		}
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if g.apiUnauthorized(w, req) {
			return
		}
		allow := allowedMethods(r, req)
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", ")) // RFC 9110 §15.5.6: a 405 lists what the path takes
		}
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s is not allowed on %s (allowed: %s)", req.Method, req.URL.Path, strings.Join(allow, ", ")))
	})
	// The router tries the routes in order: the client APIs first, so a
	// request to them matches without trying the others' patterns.
	r.HandleFunc("/v1/chat/completions", g.handleChat).Methods(http.MethodPost)
	g.surfaceRoutes(r)
	r.HandleFunc("/v1/models", g.handleModels).Methods(http.MethodGet)
	r.HandleFunc("/v1/models/{id:.+}", g.handleModel).Methods(http.MethodGet)      // ids hold a slash: provider/model
	r.Handle("/api/v1/session-leases", g.leasesHandler()).Methods(http.MethodPost) // client key auth (docs/leases.md)
	r.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if g.draining.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}).Methods(http.MethodGet, http.MethodHead) // load balancers probe with HEAD too
	g.opsRoutes(r) // /livez, /readyz, POST /api/config/reload (proxy/ops.go)

	m := func(path string, h http.HandlerFunc, methods ...string) {
		r.Handle(path, g.mgmt(h)).Methods(methods...)
	}
	api := &mgmt.API{Core: g, ReadBody: readManagementBody}
	api.ResilienceRoutes(m)
	api.SettingsRoutes(m)
	api.CooldownRoutes(m)
	api.RateLimitRoutes(m)
	api.ProviderRoutes(m)
	api.ProviderTestRoutes(m)
	api.RequestLogRoutes(m)
	r.Handle("/metrics", g.mgmt(g.met.Handler().ServeHTTP)).Methods(http.MethodGet)
	api.DashboardRoutes(r, m) // the dashboard and its read-only views
	return g.wrap(r)
}

// allowedMethods lists the methods the router serves on req's path.
func allowedMethods(router *mux.Router, req *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := req.Clone(req.Context())
		probe.Method = m
		var match mux.RouteMatch
		if router.Match(probe, &match) && match.MatchErr == nil {
			out = append(out, m)
		}
	}
	return out
}

// wrap adds metrics and panic recovery around everything the router
// answers, 404 and 405 included.
func (g *Gateway) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "//") {
			// A base URL with a trailing slash makes clients ask for
			// //v1/chat/completions. The router would answer a 301 to the
			// clean path, which clients follow as a GET (a 405); serve the
			// clean path instead, as nginx's merge_slashes does.
			r.URL.Path = mergeSlashes(r.URL.Path)
			r.URL.RawPath = ""
		}
		// The routes nearly every request takes go without the router's
		// walk over the routes (regexps, path cleaning, a copy of the
		// request for route variables, which these do not use).
		post := r.Method == http.MethodPost
		if post && r.URL.Path == "/v1/chat/completions" {
			// The recorder lives in the request's state: one allocation,
			// not two.
			rs := &reqState{}
			rs.rec.ResponseWriter = w
			defer g.served(&rs.rec, r)
			g.serveChatIn(rs, &rs.rec, r, nil)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		defer g.served(rec, r)
		switch {
		case post && r.URL.Path == messagesPath:
			g.handleMessages(rec, r)
		case post && r.URL.Path == responsesPath:
			g.handleResponses(rec, r)
		default:
			next.ServeHTTP(rec, r)
		}
	})
}

// served ends a wrapped request: a handler's panic is logged and answered
// 500 (net/http's own abort passes through), and the request is counted by
// surface and status. Deferred directly, so its recover sees the panic.
func (g *Gateway) served(rec *statusRecorder, r *http.Request) {
	if v := recover(); v != nil {
		if v == http.ErrAbortHandler {
			panic(v)
		}
		g.log.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(v))
		if !rec.wrote {
			writeError(rec, http.StatusInternalServerError, "internal_error", "internal error")
		}
	}
	if s, code := surface(r.URL.Path), rec.code(); s == "client" && code == http.StatusOK {
		g.met.HTTPOK.Inc()
	} else {
		g.met.HTTP.WithLabelValues(s, statusLabel(code)).Inc()
	}
}

// mergeSlashes turns every run of slashes in p into one.
func mergeSlashes(p string) string {
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && len(b) > 0 && b[len(b)-1] == '/' {
			continue
		}
		b = append(b, p[i])
	}
	return string(b)
}

func surface(path string) string {
	switch {
	case strings.HasPrefix(path, "/v1/"):
		return "client"
	case path == "/api/v1/session-leases": // client key auth, not management
		return "leases"
	case strings.HasPrefix(path, "/api/"):
		return "management"
	case path == "/metrics":
		return "metrics"
	}
	return "other"
}

// statusRecorder remembers the status; it passes Flush through (SSE) and
// unwraps for http.ResponseController.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if !s.wrote {
		s.status, s.wrote = http.StatusOK, true
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) code() int {
	if !s.wrote {
		return http.StatusOK
	}
	return s.status
}

// mgmt requires the management key (constant-time compare); it is optional
// only on a loopback listen address.
func (g *Gateway) mgmt(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.authManagement(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="breakwater management"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "missing or invalid management key (Authorization: Bearer <managementKey>)")
			return
		}
		h(w, r)
	})
}

// readManagementBody reads a management body under maxManagementBody. A
// declared length over it is refused before anything is read, so a client
// that sent "Expect: 100-continue" gets its 413 instead of a 100 and then a
// reset connection. A body that fails otherwise (a broken chunked framing,
// a client gone, the server's read timeout) gets the answer readBody gives
// it, not a 413.
func readManagementBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := readBody(w, r, maxManagementBody, 0) // bounded in time by the server's ReadTimeout
	if err != nil {
		var e *errBadRequest
		if !errors.As(err, &e) {
			e = &errBadRequest{http.StatusBadRequest, "invalid_request", err.Error()}
		}
		writeError(w, e.status, e.code, e.msg)
		return nil, false
	}
	return b, true
}

// decodeBody reads and decodes a JSON management body strictly
// (mgmt.DecodeBody).
func decodeBody(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) bool {
	return mgmt.DecodeBody(readManagementBody, w, r, v, allowEmpty)
}

// ---------------------------------------------------------------------------
// Client API: models

// modelEntry is one model of the OpenAI models list.
type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// modelEntries lists what a client key can ask for: the combos, every
// provider/model and the aliases, each only when one of its providers is
// reachable through the key's allowedConnections (a model the key cannot
// use would answer 404 no_executable_targets). Never nil: the list is an
// array even when empty.
func (g *Gateway) modelEntries(key *clientKey) []modelEntry {
	comboTargets := g.comboTargets()
	data := []modelEntry{}
	for _, c := range g.conf().Combos {
		if key.reaches(comboTargets[c.ID]...) {
			data = append(data, modelEntry{c.ID, "model", 0, "breakwater-combo"})
		}
	}
	for _, p := range g.conf().Providers {
		if !key.reaches(model.ConnRef{Provider: p.ID}) {
			continue
		}
		for _, m := range p.Models {
			data = append(data, modelEntry{p.ID + "/" + m, "model", 0, p.ID})
		}
	}
	for _, a := range keysOf(g.conf().Aliases) {
		if _, ok := g.reachableRoute(key, a, comboTargets); ok {
			data = append(data, modelEntry{a, "model", 0, "breakwater-alias"})
		}
	}
	return data
}

// reachableRoute resolves name as a chat request would and reports whether
// the key reaches one of its targets (comboTargets: Gateway.comboTargets).
func (g *Gateway) reachableRoute(key *clientKey, name string, comboTargets map[string][]model.ConnRef) (model.Route, bool) {
	g.lock()
	r, err := g.eng.Resolve(name)
	g.unlock()
	if err != nil {
		return r, false
	}
	if r.IsCombo() {
		return r, key.reaches(comboTargets[r.Combo]...)
	}
	return r, key.reaches(model.ConnRef{Provider: r.Provider})
}

// reaches reports whether one of targets (a provider, with the connection
// a combo target pins, if any) is among the key's connections; a nil key or
// one without allowedConnections reaches everything.
func (k *clientKey) reaches(targets ...model.ConnRef) bool {
	if k == nil || len(k.allowed) == 0 {
		return true
	}
	for _, a := range k.allowed {
		for _, t := range targets {
			if a.Provider == t.Provider && (t.Connection == "" || a.Connection == t.Connection) {
				return true
			}
		}
	}
	return false
}

// comboTargets is every combo's targets as provider (+ pinned connection).
func (g *Gateway) comboTargets() map[string][]model.ConnRef {
	out := make(map[string][]model.ConnRef, len(g.conf().Combos))
	for _, c := range g.conf().Combos {
		for _, t := range c.Targets {
			pid, _, _ := strings.Cut(t.Target, "/")
			out[c.ID] = append(out[c.ID], model.ConnRef{Provider: pid, Connection: t.Connection})
		}
	}
	return out
}

// handleModels is GET /v1/models (OpenAI's list shape).
func (g *Gateway) handleModels(w http.ResponseWriter, r *http.Request) {
	key, ok := g.authClient(r)
	if !ok {
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "missing or invalid API key (Authorization: Bearer <key>)")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": g.modelEntries(key)})
}

// handleModel is GET /v1/models/{id} (OpenAI's retrieve): one entry of the
// list, or a 404 model_not_found naming the id.
func (g *Gateway) handleModel(w http.ResponseWriter, r *http.Request) {
	key, ok := g.authClient(r)
	if !ok {
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "missing or invalid API key (Authorization: Bearer <key>)")
		return
	}
	id := mux.Vars(r)["id"]
	for _, e := range g.modelEntries(key) {
		if e.ID == id {
			writeJSON(w, http.StatusOK, e)
			return
		}
	}
	// Any other name a chat request accepts (a bare model one provider
	// lists, " p/m " with spaces): the entry of what it resolves to.
	if route, ok := g.reachableRoute(key, id, g.comboTargets()); ok {
		e := modelEntry{ID: id, Object: "model", OwnedBy: route.Provider}
		if route.IsCombo() {
			e.OwnedBy = "breakwater-combo"
		}
		writeJSON(w, http.StatusOK, e)
		return
	}
	writeError(w, http.StatusNotFound, string(model.CodeModelNotFound), fmt.Sprintf("the model %q does not exist or this key cannot use it", id))
}

// ---------------------------------------------------------------------------
// Settings

// checkFallbackTarget refuses a patch that sets an emergency fallback
// target naming no route (docs/api.md#operator-actions): the engine would skip it silently
// exactly when every target is excluded. A patch that does not touch
// emergencyFallback is not held to a target from a lower layer.
func (g *Gateway) checkFallbackTarget(patch settings.Layer, s model.Settings) error {
	if _, ok := patch["emergencyFallback"]; !ok || s.EmergencyFallback.Target == "" {
		return nil
	}
	g.lock()
	problem := fallbackTargetProblem(g.eng, s.EmergencyFallback.Target)
	g.unlock()
	if problem == "" {
		return nil
	}
	return &model.SettingsError{Field: "emergencyFallback.target", Problem: problem, Source: "patch"}
}

// ---------------------------------------------------------------------------
// Providers

// providerView is p as the provider views show it (mgmt.ProviderView),
// noting the connections whose key a PUT changed.
func (g *Gateway) providerView(p *provRuntime, changed map[string]bool) mgmt.ProviderView {
	out := mgmt.ProviderView{ID: p.cfg.ID, Type: p.cfg.Type, Profile: p.cfg.Profile, BaseURL: redactURL(p.cfg.BaseURL), Models: p.cfg.Models,
		MaxConcurrent: p.cfg.MaxConcurrent, Connections: []mgmt.ConnectionView{},
		Continuation: model.ContinuationOf(p.cfg.Type, p.cfg.Continuation).String()}
	if out.Models == nil {
		out.Models = []string{}
	}
	for _, c := range p.cfg.Connections {
		cr := p.conns[c.ID]
		out.Connections = append(out.Connections, mgmt.ConnectionView{ID: c.ID, MaxConcurrent: cr.cfg.MaxConcurrent,
			RateLimitOverrides: cr.cfg.RateLimitOverrides, RateLimitProtection: g.protection(p.cfg.ID, cr.cfg),
			HasCredentials: cr.cfg.APIKey != "", CredentialsChanged: changed[c.ID]})
	}
	return out
}

// applyProviderPatch returns provider id's config cur with the patch applied and the
// connections whose key it changes, or why the patch is refused.
func applyProviderPatch(body *mgmt.ProviderPatch, id string, cur ProviderConfig) (next ProviderConfig, changed map[string]bool, problem string) {
	switch {
	case body.ID != nil && *body.ID != id:
		return next, nil, fmt.Sprintf("id %q does not match the path (%q); provider ids are set in the config file", *body.ID, id)
	case body.Type != nil && *body.Type != cur.Type:
		return next, nil, fmt.Sprintf("type cannot change at run time (it is %q)", cur.Type)
	case body.Profile != nil && *body.Profile != cur.Profile:
		return next, nil, fmt.Sprintf("profile cannot change at run time (it is %q)", cur.Profile)
	case body.Models != nil && strings.Join(body.Models, "\x00") != strings.Join(cur.Models, "\x00"):
		return next, nil, "models cannot change at run time; edit the config file"
	case body.MaxConcurrent != nil && *body.MaxConcurrent < 0:
		return next, nil, "maxConcurrent must not be negative"
	case body.BaseURL != nil && baseURLProblem(*body.BaseURL) != "":
		return next, nil, "baseURL: " + baseURLProblem(*body.BaseURL)
	}
	next = cur
	next.Connections = append([]ConnectionConfig(nil), cur.Connections...)
	// GET shows the baseURL redacted; putting that answer back keeps the
	// real one instead of storing the mask as the password.
	if body.BaseURL != nil && *body.BaseURL != redactURL(cur.BaseURL) {
		next.BaseURL = *body.BaseURL
	}
	if body.MaxConcurrent != nil {
		next.MaxConcurrent = *body.MaxConcurrent
	}
	changed = map[string]bool{}
	seen := map[string]bool{}
	for i, cp := range body.Connections {
		j := slices.IndexFunc(next.Connections, func(c ConnectionConfig) bool { return c.ID == cp.ID })
		switch {
		case j < 0:
			return next, nil, fmt.Sprintf("connections[%d].id: provider %q has no connection %q (connections are added in the config file)", i, id, cp.ID)
		case seen[cp.ID]:
			return next, nil, fmt.Sprintf("connections[%d].id: %q appears twice", i, cp.ID)
		}
		seen[cp.ID] = true
		if problem := applyConnectionPatch(&cp, &next.Connections[j], i, changed); problem != "" {
			return next, nil, problem
		}
	}
	return next, changed, ""
}

// applyConnectionPatch applies the patch of connections[i] to c, noting in changed a new
// key; it returns why the patch is refused, or "".
func applyConnectionPatch(cp *mgmt.ConnectionPatch, c *ConnectionConfig, i int, changed map[string]bool) string {
	if cp.MaxConcurrent != nil {
		if *cp.MaxConcurrent < 0 {
			return fmt.Sprintf("connections[%d].maxConcurrent must not be negative", i)
		}
		c.MaxConcurrent = *cp.MaxConcurrent
	}
	if cp.RateLimitOverrides != nil {
		o := *cp.RateLimitOverrides
		if o.RPM < 0 || o.MaxWaitMs < 0 || o.ExecutionMaxWaitMs < 0 || o.MinTimeMs < 0 {
			return fmt.Sprintf("connections[%d].rateLimitOverrides: values must not be negative", i)
		}
		for m, n := range o.ModelConcurrency {
			if n < 0 {
				return fmt.Sprintf("connections[%d].rateLimitOverrides.modelConcurrency.%s must not be negative", i, m)
			}
		}
		c.RateLimitOverrides = o
	}
	if cp.APIKey != nil {
		if problem := headerValueProblem(*cp.APIKey); problem != "" {
			return fmt.Sprintf("connections[%d].apiKey: %s", i, problem)
		}
		if *cp.APIKey != c.APIKey {
			c.APIKey = *cp.APIKey
			changed[c.ID] = true
		}
	}
	return ""
}

// replaceProvider puts next in place of cur (the caller holds provMu,
// which it releases) and hands the new caps and keys to the admission
// gate and the model: a connection with a new key starts over.
func (g *Gateway) replaceProvider(cur *provRuntime, next ProviderConfig, changed map[string]bool) mgmt.ProviderView {
	id := next.ID
	// The pool as a reload would size it (reloadPool): a new cap resizes
	// the idle connections, and the old pool's idle ones go.
	np := newProvRuntime(next, reloadPool(g, cur, next, g.settings().RequestQueue.GlobalMaxConcurrent))
	g.provs[id] = np
	var cfgs []ProviderConfig
	for _, pid := range g.provOrder {
		cfgs = append(cfgs, g.provs[pid].cfg)
	}
	out := g.providerView(np, changed)
	g.provMu.Unlock()
	if np.pool != cur.pool {
		cur.pool.closeIdle() // in-flight attempts keep their connections
	}

	g.gate.configure(g.settings().RequestQueue.GlobalMaxConcurrent, cfgs)
	g.lock()
	now := g.modelNow()
	for _, c := range next.Connections {
		ref := model.ConnRef{Provider: id, Connection: c.ID}
		// The selection's copy of the caps (model.connState.full), and a
		// new key's start over.
		_ = g.eng.SetCaps(ref, c.MaxConcurrent, c.RateLimitOverrides.ModelConcurrency)
		if changed[c.ID] {
			_, _ = g.eng.SetCredential(now, ref, credentialFingerprint(c.APIKey))
		}
	}
	g.unlock()
	if len(changed) > 0 {
		g.log.Info("connection credentials changed; their state starts over (a terminal one is kept for the old key)", "provider", id, "connections", keysOf(changed))
		for _, c := range keysOf(changed) {
			g.logOperator("new-credentials", id, c, "", nil)
		}
	}
	return out
}

// testResult is one connection's answer to a connection test.
type testResult = mgmt.TestResult

func (g *Gateway) testConnection(ctx context.Context, p *provRuntime, c *connRuntime, timeout time.Duration) testResult {
	res := testResult{Connection: c.cfg.ID}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.modelsURL, nil)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	if p.wire != nil {
		p.wire.setAuth(req.Header, c.cfg.APIKey)
	}
	t0 := time.Now()
	resp, err := g.client.Do(req)
	res.LatencyMs = time.Since(t0).Milliseconds()
	if err != nil {
		res.Error = string(redact([]byte(err.Error()), c.cfg.APIKey))
		return res
	}
	defer resp.Body.Close()
	decodeGzip(resp) // as an attempt's answer is (transport.go)
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	res.Status = resp.StatusCode
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 && json.Valid(b) {
		res.OK = true
		return res
	}
	res.Error = fmt.Sprintf("upstream answered %d", resp.StatusCode)
	if resp.StatusCode == http.StatusNotFound {
		res.Error += ": " + baseURLHint
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		res.Error = unrelayableStatus(resp.StatusCode, resp.Header) // where a redirect points
	}
	return res
}
