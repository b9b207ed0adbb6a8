package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Ops are the series an operator graphs per model and client: requests,
// tokens, end-to-end latency, time to first token, reloads. Label values
// come from the config (models, combos, aliases, client key ids); anything
// else is "other", so no client can grow the series.
type Ops struct {
	requests *prometheus.CounterVec   // provider, model, key, surface, outcome
	tokens   *prometheus.CounterVec   // provider, model, key, type
	e2e      *prometheus.HistogramVec // provider, model, stream
	ttft     *prometheus.HistogramVec // provider, model
	Reloads  *prometheus.CounterVec   // result
	build    *prometheus.GaugeVec     // version, commit, goversion
	labels   atomic.Pointer[Labels]

	// cache holds each label combination's series, looked up once:
	// WithLabelValues hashes its labels under a lock on every call, and a
	// request would call it five times. Its keys are bounded label values.
	cacheMu sync.RWMutex
	cache   map[OpsKey]*opsEntry
	// last is the entry Series returned last: requests in a row mostly
	// share their labels, and comparing a key costs less than hashing
	// it and taking the lock. Set only under cacheMu (read or write
	// lock), so a SetLabels drops it with the map.
	last atomic.Pointer[opsEntry]
}

// opsEntry is one cached label combination with its series.
type opsEntry struct {
	k OpsKey
	s *OpsSeries
}

// OpsKey is one label combination of the operator series.
type OpsKey struct {
	Provider, Model, Key, Surface, Outcome string
	Stream                                 bool
}

// OpsSeries are one label combination's series.
type OpsSeries struct {
	Requests   prometheus.Counter
	Prompt     prometheus.Counter
	Completion prometheus.Counter
	E2E        prometheus.Observer
	TTFT       prometheus.Observer
}

// Series returns k's series, looked up once per label combination.
func (m *Ops) Series(k OpsKey) *OpsSeries {
	if e := m.last.Load(); e != nil && e.k == k {
		return e.s
	}
	m.cacheMu.RLock()
	e := m.cache[k]
	if e != nil {
		m.last.Store(e)
	}
	m.cacheMu.RUnlock()
	if e != nil {
		return e.s
	}
	stream := strconv.FormatBool(k.Stream)
	s := &OpsSeries{
		Requests:   m.requests.WithLabelValues(k.Provider, k.Model, k.Key, k.Surface, k.Outcome),
		Prompt:     m.tokens.WithLabelValues(k.Provider, k.Model, k.Key, "prompt"),
		Completion: m.tokens.WithLabelValues(k.Provider, k.Model, k.Key, "completion"),
		E2E:        m.e2e.WithLabelValues(k.Provider, k.Model, stream),
		TTFT:       m.ttft.WithLabelValues(k.Provider, k.Model),
	}
	e = &opsEntry{k: k, s: s}
	m.cacheMu.Lock()
	m.cache[k] = e
	m.last.Store(e)
	m.cacheMu.Unlock()
	return s
}

// Labels are the label values the config allows.
type Labels struct {
	Models    map[string]bool // provider/model, bare models, combo ids, aliases
	Keys      map[string]bool // client key ids
	Providers map[string]bool
}

// BuildInfo names the running binary in breakwater_build_info.
type BuildInfo struct{ Version, Commit, GoVersion string }

var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// NewOps makes the operator series with the config's label values; they
// are registered through Collectors.
func NewOps(l *Labels, build BuildInfo) *Ops {
	m := &Ops{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_client_requests_total",
			Help: "Client requests by the provider that answered last, the model asked for, the client key id, the client API surface and the outcome (ok, client_error, rate_limited, unavailable, upstream_error, client_abort)."},
			[]string{"provider", "model", "key", "surface", "outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_tokens_total",
			Help: "Tokens the upstreams reported in their usage (JSON answers and a stream's final usage chunk), by type (prompt, completion)."},
			[]string{"provider", "model", "key", "type"}),
		e2e: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "breakwater_request_duration_seconds",
			Help: "End-to-end client request time, from the request's arrival to the end of its answer (a stream's last event), retries and waits included.", Buckets: latencyBuckets},
			[]string{"provider", "model", "stream"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "breakwater_time_to_first_token_seconds",
			Help: "Streams: time from the request's arrival to the first event sent to the client.", Buckets: latencyBuckets},
			[]string{"provider", "model"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_config_reloads_total",
			Help: "Config reloads (SIGHUP, POST /api/config/reload) by result (success, failure)."}, []string{"result"}),
		build: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "breakwater_build_info",
			Help: "1, labelled with the running binary's version, commit and Go version."}, []string{"version", "commit", "goversion"}),
	}
	m.cache = map[OpsKey]*opsEntry{}
	m.Reloads.WithLabelValues("success")
	m.Reloads.WithLabelValues("failure")
	m.build.WithLabelValues(build.Version, build.Commit, build.GoVersion).Set(1)
	m.SetLabels(l)
	return m
}

// Collectors are the series to register.
func (m *Ops) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.tokens, m.e2e, m.ttft, m.Reloads, m.build}
}

// SetLabels replaces the allowed label values (at start and on every
// reload).
func (m *Ops) SetLabels(l *Labels) {
	m.labels.Store(l)
	m.cacheMu.Lock()
	m.cache = map[OpsKey]*opsEntry{} // label values of a removed key or model go with it
	m.last.Store(nil)
	m.cacheMu.Unlock()
}

// ModelLabel is the model label of a request for md.
func (m *Ops) ModelLabel(md string) string { return bounded(md, m.labels.Load().Models) }

// KeyLabel is the key label of a request by client key id ("" on an
// open gateway, which has no clientKeys).
func (m *Ops) KeyLabel(id string) string { return bounded(id, m.labels.Load().Keys) }

// ProviderLabel keeps a provider label to configured providers ("none"
// when the request was refused before any provider was known).
func (m *Ops) ProviderLabel(p string) string { return bounded(p, m.labels.Load().Providers) }

// bounded is v as a label value: "none" when empty, itself when the
// config allows it, else "other".
func bounded(v string, allowed map[string]bool) string {
	if v == "" {
		return "none"
	}
	if allowed[v] {
		return v
	}
	return "other"
}

// SurfaceOf names the client API a request came through (a fixed set).
func SurfaceOf(path string) string {
	switch path {
	case "/v1/chat/completions":
		return "chat_completions"
	case "/v1/completions":
		return "completions"
	case "/v1/messages":
		return "messages"
	case "/v1/responses":
		return "responses"
	case "/v1/embeddings":
		return "embeddings"
	}
	return "other"
}

// OutcomeOf groups a client status into a few outcomes worth a panel.
func OutcomeOf(status int) string {
	switch {
	case status >= 200 && status < 300:
		return "ok"
	case status == 499:
		return "client_abort"
	case status == http.StatusTooManyRequests:
		return "rate_limited"
	case status == http.StatusServiceUnavailable:
		return "unavailable"
	case status >= 400 && status < 500:
		return "client_error"
	}
	return "upstream_error"
}
