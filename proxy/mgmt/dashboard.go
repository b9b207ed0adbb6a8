package mgmt

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/apierr"
	"github.com/breakwater-gw/breakwater/proxy/ui"
	"github.com/breakwater-gw/breakwater/store"
	"github.com/gorilla/mux"
)

// DashboardCore is what the dashboard's own views read from the gateway.
type DashboardCore interface {
	// Combos is every combo with what it would pick now.
	Combos() []Combo
	// RoutePreview is what a request for name would pick now, or why
	// name resolves to nothing.
	RoutePreview(name string) (RoutePreview, error)
	// Leases is the active exclusive session leases.
	Leases(ctx context.Context) ([]store.Lease, error)
}

// DashboardRoutes mounts the dashboard (docs/dashboard.md) and the
// read-only management views it needs beyond the rest of the management
// API. The dashboard's files are public (they hold no state); everything
// they show comes from /api/... with the management key. Nothing here runs
// on the request path: a gateway nobody looks at pays nothing for it.
func (a *API) DashboardRoutes(r *mux.Router, m Route) {
	m("/api/combos", a.handleListCombos, http.MethodGet)
	m("/api/routes/preview", a.handleRoutePreview, http.MethodGet)
	m("/api/leases", a.handleListLeases, http.MethodGet)
	r.PathPrefix("/ui/").Handler(http.StripPrefix("/ui", ui.Handler())).Methods(http.MethodGet, http.MethodHead)
	toUI := http.RedirectHandler("/ui/", http.StatusFound)
	r.Handle("/ui", toUI).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/", toUI).Methods(http.MethodGet, http.MethodHead)
}

// RoutePreview is what a route would pick now and why not the rest.
type RoutePreview struct {
	Model    string `json:"model"`
	Combo    string `json:"combo,omitempty"`
	Provider string `json:"provider,omitempty"`
	Strategy string `json:"strategy"`
	// OrderVaries: the strategy draws an order per request (random,
	// weighted, p2c); the candidates are shown in configuration order.
	OrderVaries bool              `json:"orderVaries"`
	Candidates  []model.Candidate `json:"candidates"`
	Excluded    []model.Excluded  `json:"excluded"`
	// EarliestMs is when the first timed exclusion ends (0 = none).
	EarliestMs int64 `json:"earliestMs,omitempty"`
}

// Combo is one combo of GET /api/combos.
type Combo struct {
	ID      string              `json:"id"`
	Mode    string              `json:"mode,omitempty"`
	Targets []model.ComboTarget `json:"targets"`
	RoutePreview
}

// handleListCombos is GET /api/combos: every combo with what it would pick
// now, in try order, and each excluded target or connection with its
// reason and time left.
func (a *API) handleListCombos(w http.ResponseWriter, r *http.Request) {
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"combos": a.Core.Combos()})
}

// handleRoutePreview is GET /api/routes/preview?model=NAME: what a request
// for NAME (a combo, an alias, provider/model or a bare model) would pick
// now. An unknown name is the 404 a chat request would get.
func (a *API) handleRoutePreview(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "model" {
			apierr.Write(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("unknown query parameter %q (known: model)", k))
			return
		}
	}
	name := q.Get("model")
	if strings.TrimSpace(name) == "" {
		apierr.Write(w, http.StatusBadRequest, "invalid_request", "model is required (?model=combo, alias or provider/model)")
		return
	}
	out, err := a.Core.RoutePreview(name)
	if err != nil {
		apierr.Write(w, http.StatusNotFound, "model_not_found", err.Error())
		return
	}
	apierr.WriteJSON(w, http.StatusOK, out)
}

// handleListLeases is GET /api/leases: the active exclusive session leases
// (client key id, connection, generation, times). Owner tokens are never
// shown; the store keeps only their hash, and that is not shown either.
func (a *API) handleListLeases(w http.ResponseWriter, r *http.Request) {
	ls, err := a.Core.Leases(r.Context())
	if err != nil {
		apierr.Write(w, http.StatusServiceUnavailable, "store_unavailable", "listing the leases failed: the store is unavailable")
		return
	}
	if ls == nil {
		ls = []store.Lease{}
	}
	slices.SortFunc(ls, func(a, b store.Lease) int {
		if c := strings.Compare(a.Provider, b.Provider); c != 0 {
			return c
		}
		return strings.Compare(a.Connection, b.Connection)
	})
	apierr.WriteJSON(w, http.StatusOK, map[string]any{"leases": ls})
}
