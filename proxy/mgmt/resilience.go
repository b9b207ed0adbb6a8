package mgmt

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/apierr"
	"github.com/breakwater-gw/breakwater/store"
	"github.com/gorilla/mux"
)

// ResilienceRoutes registers the health view and the operator's actions
// on breakers, cooldowns and lockouts (docs/api.md#operator-actions).
func (a *API) ResilienceRoutes(m Route) {
	m("/api/monitoring/health", a.handleHealth, http.MethodGet)
	m("/api/resilience/reset", a.handleResetBreakers, http.MethodPost)
}

// CooldownRoutes registers the cooldown and lockout lists and actions.
func (a *API) CooldownRoutes(m Route) {
	m("/api/resilience/cooldowns", a.handleGetCooldowns, http.MethodGet)
	m("/api/resilience/cooldowns", a.handleClearCooldowns, http.MethodPost)
	m("/api/resilience/model-cooldowns", a.handleGetLockouts, http.MethodGet)
	m("/api/resilience/model-cooldowns", a.handleDeleteLockouts, http.MethodDelete)
	m("/api/resilience/connections/{provider}/{connection}/reset", a.handleResetConnection, http.MethodPost)
}

type providerHealth struct {
	State              model.BreakerState `json:"state"`
	FailureCount       int                `json:"failureCount"`
	RetryAfterMs       int64              `json:"retryAfterMs"`
	ProviderCooldownMs int64              `json:"providerCooldownMs,omitempty"`
}

// handleHealth shows every breaker and every connection's cooldown in one
// place (docs/README.md#troubleshooting); the reads refresh expired state.
func (a *API) handleHealth(w http.ResponseWriter, r *http.Request) {
	h := a.Core.Health()
	out := struct {
		Status      string                    `json:"status"`
		Time        time.Time                 `json:"time"`
		Providers   map[string]providerHealth `json:"providers"`
		Connections []model.ConnectionView    `json:"connections"`
		Queues      []Queue                   `json:"queues"`
		SessionPins int                       `json:"sessionPins"`
		Store       store.Health              `json:"store"`
	}{Status: "ok", Time: h.Time, Providers: map[string]providerHealth{}, Connections: h.Connections, Queues: h.Queues,
		SessionPins: h.SessionPins, Store: h.Store}
	// The state store's side (docs/store.md): a database outage is
	// fail-open for traffic, so the gateway still answers, but the
	// operator sees it here ("degraded") and in lastError.
	if !out.Store.Up {
		out.Status = "degraded"
	}
	if h.Draining {
		out.Status = "draining"
	}
	for _, p := range h.Providers {
		out.Providers[p.Provider] = providerHealth{p.State, p.FailureCount, p.RetryAfterMs, p.ProviderCooldownMs}
	}
	if out.Connections == nil {
		out.Connections = []model.ConnectionView{}
	}
	if out.Queues == nil {
		out.Queues = []Queue{}
	}
	sort.Slice(out.Queues, func(i, j int) bool {
		if out.Queues[i].Provider != out.Queues[j].Provider {
			return out.Queues[i].Provider < out.Queues[j].Provider
		}
		return out.Queues[i].Connection < out.Queues[j].Connection
	})
	apierr.WriteJSON(w, http.StatusOK, out)
}

func (a *API) handleResetBreakers(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Provider *string `json:"provider"`
	}
	if !a.decodeBody(w, r, &body, true) {
		return
	}
	provider := ""
	if body.Provider != nil {
		// Every breaker is reset by leaving provider out; an empty one is
		// a script's unset variable, not a request to reset them all.
		if provider = strings.TrimSpace(*body.Provider); provider == "" {
			apierr.Write(w, http.StatusBadRequest, "invalid_request", `"provider" is empty: name a provider, or leave the field out to reset every breaker`)
			return
		}
	}
	n, err := a.Core.ResetBreakers(provider)
	if err != nil {
		writeActionError(w, err)
		return
	}
	a.Core.LogOperator("reset-breaker", provider, "", "", nil)
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "reset": n})
}

func (a *API) handleGetCooldowns(w http.ResponseWriter, r *http.Request) {
	prov, ok := a.providerParam(w, r)
	if !ok {
		return
	}
	conns := a.Core.Connections(prov)
	if conns == nil {
		conns = []model.ConnectionView{}
	}
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"connections": conns})
}

type clearCooldowns struct {
	ConnectionIDs []string `json:"connectionIds"`
	All           bool     `json:"all"`
	Provider      string   `json:"provider"`
}

// refs checks the body's shape and parses its connection ids, or says
// why it is refused.
func (body clearCooldowns) refs() ([]model.ConnRef, string) {
	switch {
	case !body.All && len(body.ConnectionIDs) == 0:
		return nil, `want {"connectionIds":["provider/connection",...]} or {"all":true,"provider"?:...}`
	case body.All && len(body.ConnectionIDs) > 0:
		return nil, "give either connectionIds or all, not both"
	case !body.All && body.Provider != "":
		return nil, "provider only goes with all:true"
	}
	var refs []model.ConnRef
	for i, s := range body.ConnectionIDs {
		ref, err := model.ParseConnRef(s)
		if err != nil {
			return nil, fmt.Sprintf("connectionIds[%d]: %v", i, err)
		}
		if slices.Contains(refs, ref) { // counted twice in the answer otherwise
			return nil, fmt.Sprintf("connectionIds[%d]: %q appears twice", i, s)
		}
		refs = append(refs, ref)
	}
	return refs, ""
}

func (a *API) handleClearCooldowns(w http.ResponseWriter, r *http.Request) {
	var body clearCooldowns
	if !a.decodeBody(w, r, &body, false) {
		return
	}
	refs, problem := body.refs()
	if problem != "" {
		apierr.Write(w, http.StatusBadRequest, "invalid_request", problem)
		return
	}
	res, err := a.Core.ClearCooldowns(refs, body.All, body.Provider)
	if err != nil {
		writeActionError(w, err)
		return
	}
	a.Core.LogOperator("clear-cooldowns", body.Provider, "", "", map[string]any{"connectionIds": body.ConnectionIDs, "all": body.All})
	apierr.WriteJSON(w, http.StatusOK, res)
}

// handleGetLockouts lists model lockouts; ?provider= narrows the list like
// GET /api/resilience/cooldowns does (an unknown provider is a 404 there too).
func (a *API) handleGetLockouts(w http.ResponseWriter, r *http.Request) {
	prov, ok := a.providerParam(w, r)
	if !ok {
		return
	}
	l := a.Core.Lockouts()
	if prov != "" {
		l = slices.DeleteFunc(l, func(v model.LockoutView) bool { return v.Provider != prov })
	}
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"lockouts": l})
}

func (a *API) handleDeleteLockouts(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Provider   string `json:"provider"`
		Connection string `json:"connection"`
		Model      string `json:"model"`
		All        bool   `json:"all"`
	}
	if !a.decodeBody(w, r, &body, false) {
		return
	}
	if body.All {
		if body.Provider != "" || body.Connection != "" || body.Model != "" {
			apierr.Write(w, http.StatusBadRequest, "invalid_request", "all:true takes no provider, connection or model")
			return
		}
		n := a.Core.ClearAllLockouts()
		a.Core.LogOperator("clear-lockout", "", "", "", map[string]any{"all": true})
		apierr.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "removed": n})
		return
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"provider", body.Provider}, {"connection", body.Connection}, {"model", body.Model}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		apierr.Write(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("missing %s (want {provider, connection, model} or {all:true})", strings.Join(missing, ", ")))
		return
	}
	n, err := a.Core.ClearLockout(model.ConnRef{Provider: body.Provider, Connection: body.Connection}, body.Model)
	if err != nil {
		writeActionError(w, err)
		return
	}
	a.Core.LogOperator("clear-lockout", body.Provider, body.Connection, body.Model, nil)
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "removed": n})
}

func (a *API) handleResetConnection(w http.ResponseWriter, r *http.Request) {
	v := mux.Vars(r)
	if !a.decodeBody(w, r, &struct{}{}, true) { // takes no body: anything in it is a mistake, not a reset
		return
	}
	changed, err := a.Core.ResetConnection(model.ConnRef{Provider: v["provider"], Connection: v["connection"]})
	if err != nil {
		writeActionError(w, err)
		return
	}
	a.Core.LogOperator("reset-connection", v["provider"], v["connection"], "", nil)
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "changed": changed})
}
