package mgmt

import (
	"fmt"
	"net/http"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/apierr"
)

// RateLimitRoutes registers GET and POST /api/rate-limits.
func (a *API) RateLimitRoutes(m Route) {
	m("/api/rate-limits", a.handleRateLimits, http.MethodPost)
	m("/api/rate-limits", a.handleGetRateLimits, http.MethodGet)
}

// RateLimit is one connection in GET /api/rate-limits.
type RateLimit struct {
	ConnectionID        string `json:"connectionId"`
	Provider            string `json:"provider"`
	Name                string `json:"name"`
	RateLimitProtection bool   `json:"rateLimitProtection"`
	// Enabled: the connection goes through the admission queue (the flag
	// or the apikey safety net).
	Enabled   bool  `json:"enabled"`
	RPM       int   `json:"rpm,omitempty"`
	MinTimeMs int64 `json:"minTimeMs,omitempty"`
	MaxWaitMs int64 `json:"maxWaitMs"`
	// PausedMs: how long the limiter still drains (body-declared retry or a
	// learned zero-remaining window); model-scoped pauses are not listed.
	PausedMs int64 `json:"pausedMs,omitempty"`
	Running  int   `json:"running"`
	Queued   int   `json:"queued"`
}

// handleGetRateLimits shows every connection's admission-queue status
// (docs/admission.md).
func (a *API) handleGetRateLimits(w http.ResponseWriter, r *http.Request) {
	if !a.decodeBody(w, r, &struct{}{}, true) {
		return
	}
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"connections": a.Core.RateLimits()})
}

// handleRateLimits sets a connection's rateLimitProtection (docs/admission.md).
func (a *API) handleRateLimits(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ConnectionID string `json:"connectionId"`
		Enabled      *bool  `json:"enabled"`
	}
	if !a.decodeBody(w, r, &body, false) {
		return
	}
	if body.Enabled == nil {
		apierr.Write(w, http.StatusBadRequest, "invalid_request", `want {"connectionId":"provider/connection","enabled":true|false}`)
		return
	}
	ref, err := model.ParseConnRef(body.ConnectionID)
	if err != nil {
		apierr.Write(w, http.StatusBadRequest, "invalid_request", "connectionId: "+err.Error())
		return
	}
	if !a.Core.HasConnection(ref) {
		apierr.Write(w, http.StatusNotFound, "not_found", fmt.Sprintf("connection %q not found", body.ConnectionID))
		return
	}
	prot, queued, err := a.Core.SetRateLimitProtection(ref, *body.Enabled)
	if err != nil {
		apierr.Write(w, http.StatusNotFound, "not_found", fmt.Sprintf("connection %q not found", body.ConnectionID))
		return
	}
	a.Core.LogOperator("rate-limit", ref.Provider, ref.Connection, "", map[string]any{"enabled": *body.Enabled})
	// The answer names the connection's fields as GET does (RateLimit):
	// enabled is whether the queue covers it, not the request's enabled,
	// which is rateLimitProtection (docs/api.md).
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"connectionId": ref.String(), "rateLimitProtection": prot, "enabled": queued})
}
