package mgmt

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/model/settings"
	"github.com/breakwater-gw/breakwater/proxy/apierr"
)

// ErrSettingsNotSaved is Core.PatchSettings' answer when the store could
// not keep the new layer: nothing changed.
var ErrSettingsNotSaved = errors.New("saving the settings failed; nothing was changed")

// Settings is the resilience settings as they apply, where each value
// comes from, the saved layer and the saved values that beat a lower one.
type Settings struct {
	Settings  model.Settings
	Sources   settings.Sources
	Saved     settings.Layer
	Overrides []settings.Override
}

// SettingsRoutes registers GET and PATCH /api/resilience.
func (a *API) SettingsRoutes(m Route) {
	m("/api/resilience", a.handleGetSettings, http.MethodGet)
	m("/api/resilience", a.handlePatchSettings, http.MethodPatch)
}

func (a *API) settingsView() map[string]any {
	s := a.Core.Settings()
	if s.Saved == nil {
		s.Saved = settings.Layer{}
	}
	return map[string]any{"settings": s.Settings, "sources": s.Sources, "saved": s.Saved, "overrides": s.Overrides}
}

func (a *API) handleGetSettings(w http.ResponseWriter, r *http.Request) {
	apierr.WriteJSON(w, http.StatusOK, a.settingsView())
}

// handlePatchSettings applies a JSON merge patch to the saved layer (null
// deletes a saved key so the file/env value applies again); the core
// resolves it with the file and env layers and only then persists and
// applies it.
func (a *API) handlePatchSettings(w http.ResponseWriter, r *http.Request) {
	b, ok := a.ReadBody(w, r)
	if !ok {
		return
	}
	if len(bytes.TrimSpace(b)) == 0 {
		apierr.Write(w, http.StatusBadRequest, "invalid_request", "a JSON merge patch is required")
		return
	}
	// A merge patch of null would change nothing and say 200; like every
	// other management body it must be an object (the settings parser
	// refuses arrays and scalars itself).
	if JSONKind(b) == "null" {
		apierr.Write(w, http.StatusBadRequest, "invalid_request", "invalid body: want a JSON object, got null")
		return
	}
	patch, err := settings.ParseLayerJSON(b)
	if err != nil {
		apierr.WriteSettings(w, err)
		return
	}
	s, err := a.Core.PatchSettings(r.Context(), patch, string(bytes.TrimSpace(b)))
	if errors.Is(err, ErrSettingsNotSaved) {
		apierr.Write(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
		return
	}
	if err != nil {
		apierr.WriteSettings(w, err)
		return
	}
	a.Core.LogOperator("set", "", "", "", patch)
	view := a.settingsView()
	view["clamped"] = settings.Clamped(patch, s) // numbers moved into their range, said rather than silent
	apierr.WriteJSON(w, http.StatusOK, view)
}
