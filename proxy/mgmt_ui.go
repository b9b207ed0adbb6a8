package proxy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/ui"
	"github.com/breakwater-gw/breakwater/store"
	"github.com/gorilla/mux"
)

// uiRoutes mounts the dashboard (docs/dashboard.md) and the read-only
// management views it needs beyond the rest of the management API. The
// dashboard's files are public (they hold no state); everything they show
// comes from /api/... with the management key. Nothing here runs on the
// request path: a gateway nobody looks at pays nothing for it.
func (g *Gateway) uiRoutes(r *mux.Router, m func(string, http.HandlerFunc, ...string)) {
	m("/api/combos", g.handleListCombos, http.MethodGet)
	m("/api/routes/preview", g.handleRoutePreview, http.MethodGet)
	m("/api/leases", g.handleListLeases, http.MethodGet)
	r.PathPrefix("/ui/").Handler(http.StripPrefix("/ui", ui.Handler())).Methods(http.MethodGet, http.MethodHead)
	toUI := http.RedirectHandler("/ui/", http.StatusFound)
	r.Handle("/ui", toUI).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/", toUI).Methods(http.MethodGet, http.MethodHead)
}

// routePreview is what a route would pick now and why not the rest.
type routePreview struct {
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

type comboOut struct {
	ID      string              `json:"id"`
	Mode    string              `json:"mode,omitempty"`
	Targets []model.ComboTarget `json:"targets"`
	routePreview
}

// preview asks the model what route would pick at now, holding out the
// connections leased to someone, as a request without a lease sees them.
// It changes no state (model.Engine.Preview). The caller holds g.lock.
func (g *Gateway) preview(now model.Time, route model.Route, held []model.ConnRef, until []model.Time, sel *model.Selection) routePreview {
	req := model.Request{Route: route, Held: held, HeldUntil: until}
	g.eng.Preview(now, &req, sel)
	st, _ := g.eng.Strategy(route)
	out := routePreview{Model: route.Name, Combo: route.Combo, Provider: route.Provider, Strategy: st.String(),
		OrderVaries: st == model.Random || st == model.Weighted || st == model.P2C,
		Candidates:  slices.Clone(sel.Candidates), Excluded: slices.Clone(sel.Excluded)}
	if out.Candidates == nil {
		out.Candidates = []model.Candidate{}
	}
	if out.Excluded == nil {
		out.Excluded = []model.Excluded{}
	}
	if sel.Earliest != 0 {
		out.EarliestMs = max(sel.Earliest.Sub(now), 0)
	}
	return out
}

// handleListCombos is GET /api/combos: every combo with what it would pick
// now, in try order, and each excluded target or connection with its
// reason and time left.
func (g *Gateway) handleListCombos(w http.ResponseWriter, r *http.Request) {
	now := g.modelNow()
	held, until := g.leases.heldUntilFor(now)
	out := []comboOut{}
	var sel model.Selection
	g.lock()
	for _, c := range g.eng.Topology().Combos {
		route, err := g.eng.Resolve(c.ID)
		if err != nil {
			continue
		}
		targets := c.Targets
		if targets == nil {
			targets = []model.ComboTarget{}
		}
		out = append(out, comboOut{ID: c.ID, Mode: c.Mode, Targets: targets, routePreview: g.preview(now, route, held, until, &sel)})
	}
	g.unlock()
	writeJSON(w, http.StatusOK, map[string]any{"combos": out})
}

// handleRoutePreview is GET /api/routes/preview?model=NAME: what a request
// for NAME (a combo, an alias, provider/model or a bare model) would pick
// now. An unknown name is the 404 a chat request would get.
func (g *Gateway) handleRoutePreview(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "model" {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("unknown query parameter %q (known: model)", k))
			return
		}
	}
	name := q.Get("model")
	if strings.TrimSpace(name) == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "model is required (?model=combo, alias or provider/model)")
		return
	}
	now := g.modelNow()
	held, until := g.leases.heldUntilFor(now)
	var sel model.Selection
	g.lock()
	route, err := g.eng.Resolve(name)
	var out routePreview
	if err == nil {
		out = g.preview(now, route, held, until, &sel)
	}
	g.unlock()
	if err != nil {
		writeError(w, http.StatusNotFound, "model_not_found", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// handleListLeases is GET /api/leases: the active exclusive session leases
// (client key id, connection, generation, times). Owner tokens are never
// shown; the store keeps only their hash, and that is not shown either.
func (g *Gateway) handleListLeases(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	ls, err := g.leases.arb.Active(ctx)
	if err != nil {
		g.log.Warn("listing leases failed", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store_unavailable", "listing the leases failed: the store is unavailable")
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
	writeJSON(w, http.StatusOK, map[string]any{"leases": ls})
}
