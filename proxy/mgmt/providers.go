package mgmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/breakwater-gw/breakwater/proxy/apierr"
	"github.com/breakwater-gw/breakwater/proxy/confval"
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

// ProviderRoutes registers the provider views and PUT /api/providers/{id}.
func (a *API) ProviderRoutes(m Route) {
	m("/api/providers", a.handleListProviders, http.MethodGet)
	m("/api/providers/{id}", a.handleGetProvider, http.MethodGet)
	m("/api/providers/{id}", a.handlePutProvider, http.MethodPut)
}

// ConnectionView is one connection as the provider views show it: never
// its key, only whether it has one.
type ConnectionView struct {
	ID                  string                     `json:"id"`
	MaxConcurrent       int                        `json:"maxConcurrent"`
	RateLimitOverrides  confval.RateLimitOverrides `json:"rateLimitOverrides"`
	RateLimitProtection bool                       `json:"rateLimitProtection"`
	HasCredentials      bool                       `json:"hasCredentials"`
	CredentialsChanged  bool                       `json:"credentialsChanged,omitempty"`
}

// ProviderView is one provider as GET and PUT /api/providers answer it.
type ProviderView struct {
	ID            string           `json:"id"`
	Type          string           `json:"type"`
	Profile       string           `json:"profile"`
	BaseURL       string           `json:"baseURL"` // redacted
	Models        []string         `json:"models"`
	MaxConcurrent int              `json:"maxConcurrent"`
	Connections   []ConnectionView `json:"connections"`
	// Continuation is the effective stream-resume capability: the
	// config's, else the type's default (docs/resume.md).
	Continuation string `json:"continuation"`
}

// ConnectionPatch is one element of a PUT body's connections.
type ConnectionPatch struct {
	ID                 string                      `json:"id"`
	APIKey             *string                     `json:"apiKey"`
	MaxConcurrent      *int                        `json:"maxConcurrent"`
	RateLimitOverrides *confval.RateLimitOverrides `json:"rateLimitOverrides"`
	// RateLimitProtection is accepted so a GET can be sent back, and
	// deliberately ignored: POST /api/rate-limits changes it (docs/admission.md).
	RateLimitProtection *bool `json:"rateLimitProtection"`
	HasCredentials      *bool `json:"hasCredentials"`
}

// ProviderPatch is a PUT /api/providers/{id} body: the fields it sets.
type ProviderPatch struct {
	ID            *string           `json:"id"`
	Type          *string           `json:"type"`
	Profile       *string           `json:"profile"`
	BaseURL       *string           `json:"baseURL"`
	Models        []string          `json:"models"`
	MaxConcurrent *int              `json:"maxConcurrent"`
	Connections   ConnectionPatches `json:"connections"`
}

// ConnectionPatches decodes a PUT body's connections one by one, so an
// error names the element: encoding/json's field path has no index
// (connections.rateLimitOverrides.maxWaitMs could be any of them).
type ConnectionPatches []ConnectionPatch

// UnmarshalJSON decodes each element strictly, naming it in an error.
func (cs *ConnectionPatches) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(ConnectionPatches, len(raw))
	for i, r := range raw {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&out[i]); err != nil {
			return fmt.Errorf("connections[%d]: %s", i, JSONProblem(err))
		}
	}
	*cs = out
	return nil
}

// ErrNoProvider is PutProvider's answer for a provider the config does
// not name.
var ErrNoProvider = errors.New("no such provider")

func (a *API) handleListProviders(w http.ResponseWriter, r *http.Request) {
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"providers": a.Core.Providers()})
}

func (a *API) handleGetProvider(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	p, ok := a.Core.Provider(id)
	if !ok {
		providerNotFound(w, id)
		return
	}
	apierr.WriteJSON(w, http.StatusOK, p)
}

// handlePutProvider updates a provider's base URL, caps and connection
// credentials. New credentials clear the connection's terminal state
// (docs/api.md#operator-actions); rateLimitProtection is never touched here.
func (a *API) handlePutProvider(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	var body ProviderPatch
	if !a.decodeBody(w, r, &body, false) {
		return
	}
	p, err := a.Core.PutProvider(id, &body)
	switch {
	case errors.Is(err, ErrNoProvider):
		providerNotFound(w, id)
	case err != nil:
		apierr.Write(w, http.StatusBadRequest, "invalid_request", err.Error())
	default:
		apierr.WriteJSON(w, http.StatusOK, p)
	}
}
