package proxy

import (
	"bytes"
	"net/http"
	"strconv"
	"sync"
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

	// cache holds each label combination's series, looked up once:
	// WithLabelValues hashes its labels under a lock on every call, and a
	// request would call it five times. Its keys are bounded label values.
	cacheMu sync.RWMutex
	cache   map[opsKey]*opsSeries
}

type opsKey struct {
	provider, model, key, surface, outcome string
	stream                                 bool
}

// opsSeries are one label combination's series.
type opsSeries struct {
	requests   prometheus.Counter
	prompt     prometheus.Counter
	completion prometheus.Counter
	e2e        prometheus.Observer
	ttft       prometheus.Observer
}

func (m *opsMetrics) series(k opsKey) *opsSeries {
	m.cacheMu.RLock()
	s := m.cache[k]
	m.cacheMu.RUnlock()
	if s != nil {
		return s
	}
	stream := strconv.FormatBool(k.stream)
	s = &opsSeries{
		requests:   m.requests.WithLabelValues(k.provider, k.model, k.key, k.surface, k.outcome),
		prompt:     m.tokens.WithLabelValues(k.provider, k.model, k.key, "prompt"),
		completion: m.tokens.WithLabelValues(k.provider, k.model, k.key, "completion"),
		e2e:        m.e2e.WithLabelValues(k.provider, k.model, stream),
		ttft:       m.ttft.WithLabelValues(k.provider, k.model),
	}
	m.cacheMu.Lock()
	m.cache[k] = s
	m.cacheMu.Unlock()
	return s
}

// labelSets are the label values the config allows.
type labelSets struct {
	models    map[string]bool
	keys      map[string]bool
	providers map[string]bool
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
	m.cache = map[opsKey]*opsSeries{}
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
	ls := &labelSets{models: map[string]bool{}, keys: map[string]bool{}, providers: map[string]bool{}}
	for _, p := range cfg.Providers {
		ls.providers[p.ID] = true
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
	m.cacheMu.Lock()
	m.cache = map[opsKey]*opsSeries{} // label values of a removed key or model go with it
	m.cacheMu.Unlock()
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

// providerLabel keeps a provider label to configured providers ("none"
// when the request was refused before any provider was known).
func (m *opsMetrics) providerLabel(p string) string {
	if p == "" {
		return "none"
	}
	if m.labels.Load().providers[p] {
		return p
	}
	return "other"
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
	s := m.series(opsKey{provider: m.providerLabel(rs.countedProvider()), model: m.modelLabel(rs.req.Model), key: m.keyLabel(rs.key),
		surface: surfaceOf(rs.r.URL.Path), outcome: outcomeOf(status), stream: rs.req.Stream})
	rs.opsSeries = s
	s.requests.Inc()
	if rs.promptTokens > 0 {
		s.prompt.Add(float64(rs.promptTokens))
	}
	if rs.completionTokens > 0 {
		s.completion.Add(float64(rs.completionTokens))
	}
}

// observeOps records the request's end-to-end time and, for a stream that
// sent anything, its time to first token (rs.finish calls it, after count).
func (rs *reqState) observeOps(elapsed time.Duration) {
	s := rs.opsSeries
	if s == nil {
		return
	}
	s.e2e.Observe(elapsed.Seconds())
	if rs.req.Stream && !rs.firstOut.IsZero() {
		s.ttft.Observe(rs.firstOut.Sub(rs.start).Seconds())
	}
}

var (
	usageKey      = []byte(`"usage"`)
	promptKey     = []byte(`"prompt_tokens"`)
	completionKey = []byte(`"completion_tokens"`)
	inputKey      = []byte(`"input_tokens"`)
	outputKey     = []byte(`"output_tokens"`)
	cacheReadKey  = []byte(`"cache_read_input_tokens"`)
	cacheMakeKey  = []byte(`"cache_creation_input_tokens"`)
)

// noteUsage reads the token counts of a body or stream event that carries
// a usage object: OpenAI chat's (prompt_tokens, completion_tokens), or,
// for an answer a native surface passes on as it came, Anthropic
// Messages' and OpenAI Responses' (input_tokens, output_tokens).
// Events without one cost one substring search; nothing is allocated.
func (rs *reqState) noteUsage(b []byte) {
	// The first "usage" with its quotes is the answer's own: inside a
	// JSON string the quotes would be escaped.
	i := bytes.Index(b, usageKey)
	if i < 0 {
		return
	}
	u := b[i+len(usageKey):]
	p, okP := jsonIntAfter(u, promptKey)
	c, okC := jsonIntAfter(u, completionKey)
	if okP || okC {
		// A stream may repeat its usage (cumulative): the last one counts.
		rs.promptTokens, rs.completionTokens = p, c
		return
	}
	// Messages streams split their usage: message_start has the input,
	// message_delta the (cumulative) output and sometimes the input
	// again; a count an event leaves out keeps its earlier value.
	if in, ok := jsonIntAfter(u, inputKey); ok {
		// Anthropic's input_tokens leave out the cached prompt; a
		// Responses usage has no such fields and counts it in.
		cr, _ := jsonIntAfter(u, cacheReadKey)
		cm, _ := jsonIntAfter(u, cacheMakeKey)
		rs.promptTokens = in + cr + cm
	}
	if out, ok := jsonIntAfter(u, outputKey); ok {
		rs.completionTokens = out
	}
}

// jsonIntAfter finds "key": N in b (the first occurrence) and returns N.
func jsonIntAfter(b, key []byte) (int64, bool) {
	i := bytes.Index(b, key)
	if i < 0 {
		return 0, false
	}
	rest := skipSpace(b[i+len(key):])
	if len(rest) == 0 || rest[0] != ':' {
		return 0, false
	}
	rest = skipSpace(rest[1:])
	var n int64
	digits := 0
	for _, ch := range rest {
		if ch < '0' || ch > '9' || digits > 15 {
			break
		}
		n = n*10 + int64(ch-'0')
		digits++
	}
	return n, digits > 0
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}
