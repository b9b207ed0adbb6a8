package proxy

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/breakwater-gw/breakwater/proxy/metrics"
	"github.com/breakwater-gw/breakwater/store"
	"github.com/gorilla/mux"
)

// Build identifies the running binary (cmd/breakwater sets it from
// -ldflags and the Go build info); shown by /readyz and the
// breakwater_build_info metric.
var Build = BuildInfo{Version: "dev"}

// BuildInfo is what `breakwater version` prints.
type BuildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"goVersion,omitempty"`
}

// baseURLHint is added wherever an upstream answers 404 to a request that
// should exist (the models list of a connection test, a chat attempt): the
// usual cause is a baseURL without its version segment.
const baseURLHint = "does baseURL include the version segment, e.g. /v1?"

// hintEvery bounds how often one provider's 404 hint is logged.
const hintEvery = 5 * time.Minute

// opsState is the operator side of a gateway: reload, readiness, the
// extra metrics and the logged hints. It is created in New and never
// replaced.
type opsState struct {
	g      *Gateway
	met    *metrics.Ops
	tracer *tracer // nil = tracing off (proxy/tracing.go)

	reloadMu sync.Mutex // one reload at a time
	live     atomic.Pointer[liveView]
	environ  []string // the environment the config expands (reloads read the file with it)

	hintMu sync.Mutex
	hinted map[string]time.Time // provider → last 404 hint logged
}

func newOps(g *Gateway, environ []string) *opsState {
	o := &opsState{g: g, hinted: map[string]time.Time{}, environ: environ}
	o.live.Store(newLiveView(g.cfg))
	o.met = metrics.NewOps(opsLabels(g.cfg), metrics.BuildInfo(Build))
	o.tracer = newTracer(g.cfg.Server.Tracing, g.log)
	return o
}

// validateOps checks the server and store fields the operator side adds.
func (c *Config) validateOps() []error {
	errs := c.validateTracing()
	if l := c.Server.MetricsListen; l != "" {
		if _, _, err := net.SplitHostPort(l); err != nil {
			errs = append(errs, c.errAt("server.metricsListen", "want host:port (e.g. 127.0.0.1:9090), got %q", l))
		} else if l == c.Server.Listen {
			errs = append(errs, c.errAt("server.metricsListen", "is the same address as server.listen (%s); give the metrics listener its own port", l))
		}
	}
	return errs
}

// opsRoutes adds the probes and the reload endpoint to the router.
func (g *Gateway) opsRoutes(r *mux.Router) {
	r.HandleFunc("/livez", g.handleLivez).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/readyz", g.handleReadyz).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/api/config/reload", g.mgmt(g.handleReload)).Methods(http.MethodPost)
}

// handleLivez answers 200 while the process serves HTTP at all: a
// liveness probe restarts only a process that stopped answering, never one
// that is draining or whose database is down.
func (g *Gateway) handleLivez(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
}

// readiness is /readyz's answer.
type readiness struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
	Build  BuildInfo         `json:"build"`
}

// ready reports whether the gateway should get traffic: its config is
// loaded (it is, once New returned), it is not shutting down, and its store
// is reachable — or unreachable with store.failOpen (the default), where
// traffic is served and state kept in memory until the database returns.
func (g *Gateway) ready() readiness {
	out := readiness{Ready: true, Build: Build, Checks: map[string]string{"config": "loaded", "shutdown": "no", "store": "memory"}}
	if g.draining.Load() {
		out.Ready, out.Checks["shutdown"] = false, "draining"
	}
	if sh, ok := g.store.(interface{ Health() store.Health }); ok {
		h := sh.Health()
		switch {
		case h.Up:
			out.Checks["store"] = "reachable"
		case g.conf().Store.FailOpen == nil || *g.conf().Store.FailOpen:
			out.Checks["store"] = "unreachable (fail-open: traffic is served, state is kept in memory)"
		default:
			out.Ready, out.Checks["store"] = false, "unreachable (store.failOpen is false)"
		}
	}
	return out
}

func (g *Gateway) handleReadyz(w http.ResponseWriter, r *http.Request) {
	rd := g.ready()
	code := http.StatusOK
	if !rd.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, rd)
}

// MetricsHandler serves the gateway's metrics without authentication, for
// the separate listener of server.metricsListen.
func (g *Gateway) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", g.met.Handler())
	mux.HandleFunc("GET /livez", g.handleLivez)
	mux.HandleFunc("GET /readyz", g.handleReadyz)
	return mux
}

// testProvider tests every connection of p at once (GET {base}/models) and
// reports each passing one to the model (it clears the cooldown): POST
// /api/providers/{id}/test and server.testProvidersAtStart.
func (g *Gateway) testProvider(ctx context.Context, p *provRuntime) []testResult {
	to := g.settings().UpstreamTimeouts
	timeout := min(to.ConnectMs.Duration()+to.ResponseHeaderMs.Duration(), 30*time.Second)
	results := make([]testResult, len(p.cfg.Connections))
	var wg sync.WaitGroup
	for i, c := range p.cfg.Connections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = g.testConnection(ctx, p, p.conns[c.ID], timeout)
		}()
	}
	wg.Wait()
	var passed []string
	for _, res := range results {
		if res.OK {
			passed = append(passed, res.Connection)
		}
	}
	now := g.modelNow()
	g.lock()
	_ = g.eng.ProviderTested(now, p.cfg.ID, passed) // the rule the simulator applies too
	g.unlock()
	for _, res := range results {
		if res.Status == http.StatusNotFound {
			g.log.Warn("connection test: the upstream answered 404 to its models list; "+baseURLHint,
				"provider", p.cfg.ID, "connection", res.Connection, "baseURL", redactURL(p.cfg.BaseURL))
		}
	}
	return results
}

// TestProvidersAtStart runs the connection test of every provider once
// (server.testProvidersAtStart) and logs each result; a failure is logged,
// never fatal: the gateway starts and the model decides what to use.
func (g *Gateway) TestProvidersAtStart(ctx context.Context) {
	g.provMu.RLock()
	var provs []*provRuntime
	for _, id := range g.provOrder {
		provs = append(provs, g.provs[id])
	}
	g.provMu.RUnlock()
	for _, p := range provs {
		for _, res := range g.testProvider(ctx, p) {
			if res.OK {
				g.log.Info("provider test passed", "provider", p.cfg.ID, "connection", res.Connection, "latency_ms", res.LatencyMs)
			} else {
				g.log.Warn("provider test failed", "provider", p.cfg.ID, "connection", res.Connection, "status", res.Status, "err", res.Error, "latency_ms", res.LatencyMs)
			}
		}
	}
}

// note404 logs the baseURL hint when a chat attempt is answered 404, at
// most once per provider every hintEvery: a provider whose every answer is
// a 404 would otherwise cool one key after another without a word on why.
func (o *opsState) note404(provider, model string) {
	now := time.Now()
	o.hintMu.Lock()
	last, seen := o.hinted[provider]
	if seen && now.Sub(last) < hintEvery {
		o.hintMu.Unlock()
		return
	}
	o.hinted[provider] = now
	o.hintMu.Unlock()
	base := ""
	if p := o.g.provider(provider); p != nil {
		base = redactURL(p.cfg.BaseURL)
	}
	o.g.log.Warn("upstream answered 404 to a chat request; if it answers 404 to everything, "+baseURLHint,
		"provider", provider, "model", model, "baseURL", base)
}
