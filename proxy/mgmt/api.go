package mgmt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/model/settings"
	"github.com/breakwater-gw/breakwater/proxy/apierr"
	"github.com/breakwater-gw/breakwater/store"
)

// Core is what the management handlers need from the gateway: reads of
// the resilience state and the operator's actions on it. The gateway
// holds the locking and calls the model; the rules stay in model. The
// handlers here route, decode and check the input and encode the answer.
type Core interface {
	DashboardCore
	// Health is a snapshot of the state GET /api/monitoring/health shows.
	Health() Health
	// HasProvider reports whether the config names provider id.
	HasProvider(id string) bool
	// Connections lists the connections' cooldown state (of one provider
	// when provider is not "").
	Connections(provider string) []model.ConnectionView
	// Lockouts lists every model lockout.
	Lockouts() []model.LockoutView
	ResetBreakers(provider string) (int, error)
	ClearCooldowns(refs []model.ConnRef, all bool, provider string) (model.ClearResult, error)
	ClearLockout(ref model.ConnRef, model string) (int, error)
	ClearAllLockouts() int
	ResetConnection(ref model.ConnRef) (bool, error)
	// Settings is the resilience settings and their layers.
	Settings() Settings
	// PatchSettings resolves patch over the saved layer with the file
	// and env layers, then saves and applies it (text, the patch as
	// sent, goes to the log), answering the settings that now apply; a
	// refused patch is a model.SettingsError, a failed save
	// ErrSettingsNotSaved.
	PatchSettings(ctx context.Context, patch settings.Layer, text string) (model.Settings, error)
	// Now is the gateway's clock.
	Now() time.Time
	// KeepsRequestLog reports whether the store can read the request log
	// back; RequestLog reads the records q matches, newest first.
	KeepsRequestLog() bool
	RequestLog(ctx context.Context, q store.LogQuery) ([]store.LogRecord, error)
	// RateLimits is every connection's admission-queue status.
	RateLimits() []RateLimit
	// HasConnection reports whether the config names connection ref.
	HasConnection(ref model.ConnRef) bool
	// SetRateLimitProtection sets ref's rateLimitProtection and answers
	// the flag and whether the admission queue covers ref now.
	SetRateLimitProtection(ref model.ConnRef, on bool) (protection, queued bool, err error)
	// Providers is every provider's view, in config order; Provider is
	// provider id's (ok false when the config names no such provider).
	Providers() []ProviderView
	Provider(id string) (ProviderView, bool)
	// PutProvider applies patch to provider id and answers the new view:
	// ErrNoProvider for a provider the config does not name, an error
	// whose text is the 400's message for a refused patch.
	PutProvider(id string, patch *ProviderPatch) (ProviderView, error)
	// TestProvider runs the connection test of provider id and reports
	// each passing connection to the model; ok is false when the config
	// names no such provider.
	TestProvider(ctx context.Context, id string) (results []TestResult, ok bool)
	// LogOperator records an operator action that changed state in the
	// request log; params, when not nil, is kept as JSON.
	LogOperator(action, provider, connection, model string, params any)
}

// Health is the gateway's state at one instant.
type Health struct {
	Time        time.Time
	Draining    bool
	Providers   []model.ProviderView
	Connections []model.ConnectionView
	Queues      []Queue
	SessionPins int
	Store       store.Health
}

// Queue is one connection's admission gate.
type Queue struct {
	Provider   string `json:"provider"`
	Connection string `json:"connection"`
	InFlight   int    `json:"inFlight"`
	Queued     int    `json:"queued"`
}

// API serves the management endpoints over a Core.
type API struct {
	Core     Core
	ReadBody BodyReader
}

// Route registers one management handler; the gateway's wraps it in the
// management key check.
type Route func(path string, h http.HandlerFunc, methods ...string)

// BodyReader reads a management body under the gateway's size and time
// bounds, answering a refused one itself (ok false).
type BodyReader func(w http.ResponseWriter, r *http.Request) (b []byte, ok bool)

// DecodeBody reads a JSON management body with read and decodes it
// strictly (DecodeJSON), answering the 400 itself; an empty body decodes
// to the zero value when allowEmpty.
func DecodeBody(read BodyReader, w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) bool {
	b, ok := read(w, r)
	if !ok {
		return false
	}
	if problem := DecodeJSON(b, v, allowEmpty); problem != "" {
		apierr.Write(w, http.StatusBadRequest, "invalid_request", problem)
		return false
	}
	return true
}

func (a *API) decodeBody(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) bool {
	return DecodeBody(a.ReadBody, w, r, v, allowEmpty)
}

// writeActionError answers an operator action the model refused: a 404
// for what does not exist, a 400 otherwise.
func writeActionError(w http.ResponseWriter, err error) {
	var nf *model.NotFoundError
	if errors.As(err, &nf) {
		apierr.Write(w, http.StatusNotFound, "not_found", err.Error())
		return
	}
	apierr.Write(w, http.StatusBadRequest, "invalid_request", err.Error())
}

// providerParam reads the optional ?provider= filter of a list; an unknown
// provider is answered 404 (ok false).
func (a *API) providerParam(w http.ResponseWriter, r *http.Request) (prov string, ok bool) {
	prov = r.URL.Query().Get("provider")
	if prov != "" && !a.Core.HasProvider(prov) {
		providerNotFound(w, prov)
		return "", false
	}
	return prov, true
}

func providerNotFound(w http.ResponseWriter, id string) {
	apierr.Write(w, http.StatusNotFound, "not_found", fmt.Sprintf("provider %q not found", id))
}
