package proxy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/breakwater-gw/breakwater/model"
)

// liveView is the part of the config a reload replaces as one value:
// requests load it once and keep using what they loaded, so a request
// that started before a reload finishes on the view it started with.
type liveView struct {
	cfg        *Config
	clientKeys []clientKey
	mgmtKey    [32]byte
	mgmtOpen   bool
	combos     map[string]*ComboConfig
	// managed: client key id → it may hold exclusive session leases
	// (scope lease:exclusive and a non-empty allowedConnections).
	managed map[string]bool
}

func newLiveView(cfg *Config) *liveView {
	v := &liveView{cfg: cfg, combos: map[string]*ComboConfig{}, managed: map[string]bool{}}
	for i := range cfg.Combos {
		v.combos[cfg.Combos[i].ID] = &cfg.Combos[i]
	}
	for _, k := range cfg.ClientKeys {
		ck := clientKey{id: k.ID, digest: sha256.Sum256([]byte(k.Key))}
		for _, a := range k.AllowedConnections {
			ref, _ := model.ParseConnRef(a)
			ck.allowed = append(ck.allowed, ref)
		}
		v.clientKeys = append(v.clientKeys, ck)
		v.managed[k.ID] = slices.Contains(k.Scopes, model.LeaseScope) && len(k.AllowedConnections) > 0
	}
	v.mgmtOpen = cfg.Server.ManagementKey == ""
	v.mgmtKey = sha256.Sum256([]byte(cfg.Server.ManagementKey))
	return v
}

// view is the config the gateway serves with now.
func (g *Gateway) view() *liveView { return g.ops.live.Load() }

// conf is the config the gateway serves with now (the file as last loaded
// or reloaded).
func (g *Gateway) conf() *Config { return g.view().cfg }

// ReloadResult says what a reload changed.
type ReloadResult struct {
	OK     bool     `json:"ok"`
	File   string   `json:"file,omitempty"`
	Errors []string `json:"errors,omitempty"`
	// Added and Removed list providers ("p") and connections ("p/c").
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Kept    int      `json:"keptConnections"`
	// Warnings name what a reload cannot change (listen addresses, the
	// store) and the file's own warnings.
	Warnings []string `json:"warnings,omitempty"`
}

// Reload re-reads the config file the gateway was started with and applies
// it (ApplyConfig). SIGHUP and POST /api/config/reload call it.
func (g *Gateway) Reload(ctx context.Context) (ReloadResult, error) {
	file := g.conf().File
	if file == "" {
		err := errors.New("the gateway was not started from a config file; nothing to reload")
		g.reloadFailed(ReloadResult{}, err)
		return ReloadResult{Errors: []string{err.Error()}}, err
	}
	next, warnings, err := LoadConfig(file, g.ops.environ)
	if err != nil {
		res := ReloadResult{File: file, Warnings: warnings}
		return g.reloadFailed(res, err), err
	}
	res, err := g.ApplyConfig(ctx, next)
	res.Warnings = append(warnings, res.Warnings...)
	return res, err
}

// reloadFailed counts, logs and describes a refused reload.
func (g *Gateway) reloadFailed(res ReloadResult, err error) ReloadResult {
	res.OK = false
	if ces := ConfigErrors(err); len(ces) > 0 {
		for _, ce := range ces {
			res.Errors = append(res.Errors, ce.Error())
		}
		for _, se := range model.SettingsErrors(err) {
			res.Errors = append(res.Errors, se.Error())
		}
	} else if err != nil {
		res.Errors = strings.Split(err.Error(), "\n")
	}
	g.ops.met.Reloads.WithLabelValues("failure").Inc()
	g.log.Error("config reload refused; still serving the previous config", "file", res.File, "errors", strings.Join(res.Errors, "; "))
	return res
}

// ApplyConfig replaces the gateway's providers, connections, client keys,
// combos, aliases and settings with next's, as one step: next is checked
// whole first (its topology, its settings resolved with the saved layer),
// and on any error nothing changes. Requests in flight finish on the view
// they started with; the state of every connection that stays is kept
// (model.Engine.UpdateTopology). What a reload cannot change — the listen
// addresses and the store — keeps its running value, with a warning.
// Credentials and caps set with PUT /api/providers are replaced by the
// file's.
func (g *Gateway) ApplyConfig(ctx context.Context, next *Config) (ReloadResult, error) {
	o := g.ops
	o.reloadMu.Lock()
	defer o.reloadMu.Unlock()
	cur := g.conf()
	res := ReloadResult{File: next.File, Added: []string{}, Removed: []string{}}
	fail := func(err error) (ReloadResult, error) { return g.reloadFailed(res, err), err }

	res.Warnings = append(res.Warnings, keepRestartFields(cur, next)...)
	if err := keepDemoUpstreams(cur, next); err != nil {
		return fail(err)
	}
	if err := next.accessProblem(); err != nil {
		return fail(err)
	}
	topo, err := next.Topology()
	if err != nil {
		return fail(err)
	}
	lower, err := next.SettingsLayers(o.environ)
	if err != nil {
		return fail(next.settingsError(err))
	}
	g.setMu.Lock()
	defer g.setMu.Unlock()
	rt, err := g.checkReload(next, topo, lower)
	if err != nil {
		return fail(err)
	}
	if res.Added, res.Removed, res.Kept, err = g.swapConfig(next, topo, lower, rt); err != nil {
		return fail(err)
	}
	g.gate.configure(rt.s.RequestQueue.GlobalMaxConcurrent, next.Providers)
	g.gate.prune(next.Providers)
	o.met.SetLabels(opsLabels(next))
	o.met.Reloads.WithLabelValues("success").Inc()
	res.OK = true
	// In the request log so an incident exported across it says that the
	// config changed there (docs/incident.md).
	g.logOperator("config-reload", "", "", "", map[string]any{"added": res.Added, "removed": res.Removed})
	for _, w := range res.Warnings {
		g.log.Warn("config reload: " + w)
	}
	g.log.Info("config reloaded", "file", next.File, "providers", len(next.Providers), "combos", len(next.Combos),
		"clientKeys", len(next.ClientKeys), "added", strings.Join(res.Added, ","), "removed", strings.Join(res.Removed, ","), "keptConnections", res.Kept)
	return res, nil
}

// keepRestartFields gives next the running values of what needs a restart
// (the listen addresses, the store, tracing) and warns of each change.
func keepRestartFields(cur, next *Config) (warnings []string) {
	for _, f := range []struct {
		name      string
		cur, next *string
	}{{"server.listen", &cur.Server.Listen, &next.Server.Listen}, {"server.metricsListen", &cur.Server.MetricsListen, &next.Server.MetricsListen},
		{"store.url", &cur.Store.URL, &next.Store.URL}} {
		if *f.next != *f.cur {
			warnings = append(warnings, f.name+" changed: it takes effect at the next restart")
			*f.next = *f.cur
		}
	}
	if !reflect.DeepEqual(next.Server.Tracing, cur.Server.Tracing) {
		warnings = append(warnings, "server.tracing changed: it takes effect at the next restart")
		next.Server.Tracing = cur.Server.Tracing
	}
	return warnings
}

// keepDemoUpstreams gives a demo:// provider of next the in-process demo
// upstream's address serve gave it; a new one has no upstream.
func keepDemoUpstreams(cur, next *Config) error {
	for i := range next.Providers {
		p := &next.Providers[i]
		if !strings.HasPrefix(p.BaseURL, "demo://") {
			continue
		}
		j := slices.IndexFunc(cur.Providers, func(c ProviderConfig) bool { return c.ID == p.ID })
		if j < 0 {
			return next.errAt(fmt.Sprintf("providers[%d].baseURL", i), "a demo:// provider cannot be added by a reload (restart to serve it)")
		}
		p.BaseURL = cur.Providers[j].BaseURL
		for k := range p.Connections {
			if p.Connections[k].APIKey == "" {
				p.Connections[k].APIKey = p.Connections[k].ID
			}
		}
	}
	return nil
}

// checkReload resolves next's settings with the saved layer (the caller
// holds setMu) and checks its topology on a scratch engine before the live
// one is touched: UpdateTopology refuses the same topologies, so the swap
// cannot fail half-way.
func (g *Gateway) checkReload(next *Config, topo model.Topology, lower []settings.NamedLayer) (*runtimeSettings, error) {
	layers := append(append([]settings.NamedLayer(nil), lower...), settings.NamedLayer{Name: "saved", Tree: g.saved})
	s, src, err := settings.Resolve(layers...)
	if err != nil {
		return nil, next.settingsError(err)
	}
	scratch, err := model.NewEngine(topo, s, nil)
	if err != nil {
		return nil, err
	}
	if t := s.EmergencyFallback.Target; t != "" {
		if problem := fallbackTargetProblem(scratch, t); problem != "" {
			return nil, next.errAt("resilience.emergencyFallback.target", "%s", problem)
		}
	}
	return &runtimeSettings{s: s, src: src}, nil
}

// swapConfig puts next's providers, topology and settings in place as one
// step and closes the idle connections of the upstream pools it retires.
func (g *Gateway) swapConfig(next *Config, topo model.Topology, lower []settings.NamedLayer, rt *runtimeSettings) (added, removed []string, kept int, err error) {
	g.provMu.Lock() // lock order: provMu, then the engine's
	provs := map[string]*provRuntime{}
	var order []string
	var retired []*upstreamPool
	for _, p := range next.Providers {
		provs[p.ID] = newProvRuntime(p, reloadPool(g, g.provs[p.ID], p, rt.s.RequestQueue.GlobalMaxConcurrent))
		order = append(order, p.ID)
	}
	for id, old := range g.provs {
		if np := provs[id]; np == nil || np.pool != old.pool {
			retired = append(retired, old.pool)
		}
	}
	added, removed, kept = topologyDiff(g.provs, provs)
	g.provs, g.provOrder = provs, order
	g.lock()
	now := g.modelNow()
	if err := g.eng.UpdateTopology(topo); err != nil { // cannot happen: checked above
		g.unlock()
		g.provMu.Unlock()
		return added, removed, kept, err
	}
	g.eng.UpdateSettings(now, rt.s)
	for _, p := range next.Providers {
		for _, c := range p.Connections {
			_, _ = g.eng.SetCredential(now, model.ConnRef{Provider: p.ID, Connection: c.ID}, credentialFingerprint(c.APIKey))
		}
	}
	g.ops.live.Store(newLiveView(next))
	g.lower = lower
	g.rt.Store(rt)
	g.unlock()
	g.provMu.Unlock()
	for _, p := range retired {
		p.closeIdle() // in-flight attempts keep their connections; idle ones go
	}
	return added, removed, kept, nil
}

// topologyDiff lists the providers and connections added and removed
// between two provider sets, and counts the connections kept.
func topologyDiff(old, next map[string]*provRuntime) (added, removed []string, kept int) {
	added, removed = []string{}, []string{}
	for id, np := range next {
		op := old[id]
		if op == nil {
			added = append(added, id)
			continue
		}
		for c := range np.conns {
			if op.conns[c] == nil {
				added = append(added, id+"/"+c)
			} else {
				kept++
			}
		}
	}
	for id, op := range old {
		np := next[id]
		if np == nil {
			removed = append(removed, id)
			continue
		}
		for c := range op.conns {
			if np.conns[c] == nil {
				removed = append(removed, id+"/"+c)
			}
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed, kept
}

// handleReload is POST /api/config/reload: 200 with what changed, or 422
// with the file's problems (nothing applied, the previous config serves).
func (g *Gateway) handleReload(w http.ResponseWriter, r *http.Request) {
	if !decodeBody(w, r, &struct{}{}, true) {
		return
	}
	res, err := g.Reload(r.Context())
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, struct {
			ReloadResult
			Error apiError `json:"error"`
		}{res, apiError{Message: "the config was not reloaded; the previous one is still serving: " + strings.Join(res.Errors, "; "),
			Type: "invalid_request_error", Code: "config_invalid"}})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// prune drops the admission state of connections and providers no longer
// configured, once nothing holds or waits for their slots (a reload that
// removed them; one still busy is dropped by a later reload or stays
// listed, idle, until then).
func (g *gate) prune(provs []ProviderConfig) {
	keepProv, keepConn := map[string]bool{}, map[model.ConnRef]bool{}
	for _, p := range provs {
		keepProv[p.ID] = true
		for _, c := range p.Connections {
			keepConn[model.ConnRef{Provider: p.ID, Connection: c.ID}] = true
		}
	}
	g.mu.Lock()
	g.m.Prune(keepProv, keepConn)
	g.mu.Unlock()
}

// resizePools sizes every provider's idle upstream connections to a new
// global cap (requestQueue.globalMaxConcurrent, changed by a PATCH or by
// another replica) as a reload would (reloadPool): a provider whose size
// changes gets a new pool, and the old pool's idle connections close;
// in-flight attempts keep theirs.
func (g *Gateway) resizePools(global int) {
	g.provMu.Lock()
	var retired []*upstreamPool
	for id, cur := range g.provs {
		idle := idleConnsFor(cur.cfg, global)
		if cur.pool != nil && cur.pool.idle == idle {
			continue
		}
		g.provs[id] = newProvRuntime(cur.cfg, newUpstreamPool(g, id, idle))
		if cur.pool != nil {
			retired = append(retired, cur.pool)
		}
	}
	g.provMu.Unlock()
	for _, p := range retired {
		p.closeIdle()
	}
}

// reloadPool keeps a provider's upstream connections across a reload when
// its pool's sizing is unchanged: the connections of a provider that stays
// are worth keeping like its state. A pool whose upstream was caught
// writing outside its answers (upstreamPool.stray) is replaced: the reload
// is how an operator who fixed the upstream brings reuse back.
func reloadPool(g *Gateway, old *provRuntime, p ProviderConfig, global int) *upstreamPool {
	idle := idleConnsFor(p, global)
	if old != nil && old.pool != nil && old.pool.idle == idle && !old.pool.caught.Load() {
		return old.pool
	}
	return newUpstreamPool(g, p.ID, idle)
}
