package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// opsMetrics are the series an operator graphs per model and client:
// requests, tokens, end-to-end latency, time to first token, reloads.
// Label values come from the config (models, combos, aliases, client key
// ids); anything else is "other", so no client can grow the series.
type opsMetrics struct {
	requests *prometheus.CounterVec   // provider, model, key, surface, outcome
	tokens   *prometheus.CounterVec   // provider, model, key, type
	e2e      *prometheus.HistogramVec // provider, model, stream
	ttft     *prometheus.HistogramVec // provider, model
	reloads  *prometheus.CounterVec   // result
	build    *prometheus.GaugeVec     // version, commit, goversion
	labels   atomic.Pointer[labelSets]
}

// labelSets are the label values the config allows.
type labelSets struct {
	models map[string]bool
	keys   map[string]bool
}

var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newOpsMetrics(cfg *Config) *opsMetrics {
	m := &opsMetrics{
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
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_config_reloads_total",
			Help: "Config reloads (SIGHUP, POST /api/config/reload) by result (success, failure)."}, []string{"result"}),
		build: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "breakwater_build_info",
			Help: "1, labelled with the running binary's version, commit and Go version."}, []string{"version", "commit", "goversion"}),
	}
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.build.WithLabelValues(Build.Version, Build.Commit, Build.GoVersion).Set(1)
	m.setLabels(cfg)
	return m
}

func (m *opsMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.tokens, m.e2e, m.ttft, m.reloads, m.build}
}

// setLabels takes the allowed label values from cfg (at start and on every
// reload).
func (m *opsMetrics) setLabels(cfg *Config) {
	ls := &labelSets{models: map[string]bool{}, keys: map[string]bool{}}
	for _, p := range cfg.Providers {
		for _, md := range p.Models {
			ls.models[p.ID+"/"+md] = true
			ls.models[md] = true
		}
	}
	for _, c := range cfg.Combos {
		ls.models[c.ID] = true
	}
	for a := range cfg.Aliases {
		ls.models[a] = true
	}
	for _, k := range cfg.ClientKeys {
		ls.keys[k.ID] = true
	}
	m.labels.Store(ls)
}

func (m *opsMetrics) modelLabel(md string) string {
	if md == "" {
		return "none"
	}
	if m.labels.Load().models[md] {
		return md
	}
	return "other"
}

func (m *opsMetrics) keyLabel(k *clientKey) string {
	if k == nil {
		return "none" // an open gateway (no clientKeys)
	}
	if m.labels.Load().keys[k.id] {
		return k.id
	}
	return "other"
}

// providerLabel keeps a provider label to configured providers ("" when
// the request was refused before any provider was known).
func (g *Gateway) providerLabel(p string) string {
	if p == "" {
		return "none"
	}
	if g.provider(p) == nil {
		return "other"
	}
	return p
}

// surfaceOf names the client API a request came through (a fixed set).
func surfaceOf(path string) string {
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

// outcomeOf groups a client status into a few outcomes worth a panel.
func outcomeOf(status int) string {
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

// countOps adds a finished request to the operator series (rs.count calls
// it once per request).
func (rs *reqState) countOps(status int) {
	m := rs.g.ops.met
	prov, md, key := rs.g.providerLabel(rs.countedProvider()), m.modelLabel(rs.req.Model), m.keyLabel(rs.key)
	m.requests.WithLabelValues(prov, md, key, surfaceOf(rs.r.URL.Path), outcomeOf(status)).Inc()
	if rs.promptTokens > 0 {
		m.tokens.WithLabelValues(prov, md, key, "prompt").Add(float64(rs.promptTokens))
	}
	if rs.completionTokens > 0 {
		m.tokens.WithLabelValues(prov, md, key, "completion").Add(float64(rs.completionTokens))
	}
}

// observeOps records the request's end-to-end time and, for a stream that
// sent anything, its time to first token (rs.finish calls it).
func (rs *reqState) observeOps(elapsed time.Duration) {
	m := rs.g.ops.met
	prov, md := rs.g.providerLabel(rs.countedProvider()), m.modelLabel(rs.req.Model)
	stream := "false"
	if rs.req.Stream {
		stream = "true"
	}
	m.e2e.WithLabelValues(prov, md, stream).Observe(elapsed.Seconds())
	if rs.req.Stream && !rs.firstOut.IsZero() {
		m.ttft.WithLabelValues(prov, md).Observe(rs.firstOut.Sub(rs.start).Seconds())
	}
}

var usageKey = []byte(`"usage"`)

// noteUsage reads the token counts of an OpenAI-shaped body or stream
// event that carries a usage object (native answers are already in that
// shape here); events without one cost one substring search.
func (rs *reqState) noteUsage(b []byte) {
	i := bytes.LastIndex(b, usageKey)
	if i < 0 {
		return
	}
	rest := bytes.TrimLeft(b[i+len(usageKey):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return
	}
	var u struct {
		Prompt     int64 `json:"prompt_tokens"`
		Completion int64 `json:"completion_tokens"`
	}
	if err := json.NewDecoder(bytes.NewReader(rest[1:])).Decode(&u); err != nil || u.Prompt < 0 || u.Completion < 0 {
		return
	}
	// A stream may repeat its usage (cumulative): the last one counts.
	rs.promptTokens, rs.completionTokens = u.Prompt, u.Completion
}
