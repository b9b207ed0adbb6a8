package proxy

import (
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"net/http"
	"strings"
)

// savedOverrides lists the settings whose saved value (PATCH
// /api/resilience, kept in the store) beats the config file or the
// environment.
func (g *Gateway) savedOverrides() []settings.Override {
	g.setMu.Lock()
	lower, saved := g.lower, g.saved
	g.setMu.Unlock()
	return settings.Overrides(lower, saved)
}

// logSavedOverrides warns, one line per setting, when a saved value beats
// the file or the environment: editing the file then changes nothing until
// the saved value is deleted (PATCH with null).
func (g *Gateway) logSavedOverrides() {
	for _, o := range g.savedOverrides() {
		g.log.Warn("a saved setting overrides the "+o.Layer+" value (PATCH /api/resilience with null deletes it)",
			"field", o.Field, o.Layer+"Value", fmt.Sprint(o.Lower), "savedValue", fmt.Sprint(o.Saved))
	}
}

// apiUnauthorized answers 401 for a path under /api/ when the caller lacks
// the management key: a 404 or 405 there would tell an unauthenticated
// caller which management routes exist. The client-key lease route keeps
// its own answers.
func (g *Gateway) apiUnauthorized(w http.ResponseWriter, r *http.Request) bool {
	if !strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == "/api/v1/session-leases" || g.authManagement(r) {
		return false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="breakwater management"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", "missing or invalid management key (Authorization: Bearer <managementKey>)")
	return true
}
