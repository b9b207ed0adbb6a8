package mgmt

import (
	"net/http"

	"github.com/breakwater-gw/breakwater/proxy/apierr"
	"github.com/gorilla/mux"
)

// ProviderTestRoutes registers POST /api/providers/{id}/test.
func (a *API) ProviderTestRoutes(m Route) {
	m("/api/providers/{id}/test", a.handleTestProvider, http.MethodPost)
}

// TestResult is one connection's answer to a connection test.
type TestResult struct {
	Connection string `json:"connection"`
	OK         bool   `json:"ok"`
	Status     int    `json:"status,omitempty"`
	LatencyMs  int64  `json:"latencyMs"`
	Error      string `json:"error,omitempty"`
}

// handleTestProvider sends one cheap request (GET {base}/models) per
// connection; a valid answer is reported to the model (docs/api.md#operator-actions).
func (a *API) handleTestProvider(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if !a.Core.HasProvider(id) {
		providerNotFound(w, id)
		return
	}
	if !a.decodeBody(w, r, &struct{}{}, true) {
		return
	}
	results, ok := a.Core.TestProvider(r.Context(), id)
	if !ok { // gone with a config reload since the check above
		providerNotFound(w, id)
		return
	}
	var passed []string
	for _, res := range results {
		if res.OK {
			passed = append(passed, res.Connection)
		}
	}
	a.Core.LogOperator("connection-test", id, "", "", map[string]any{"passed": passed})
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"provider": id, "results": results})
}
