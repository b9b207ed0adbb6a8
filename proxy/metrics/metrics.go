// Package metrics holds the gateway's Prometheus series: the collectors,
// their registry and the label rules. The gateway (package proxy) counts
// through the exported fields and methods; the hot path uses series
// resolved once (ConnSeries, OpsSeries), never a label lookup per request.
//
// It holds no resilience rule: labels group statuses for dashboards, the
// decisions stay in model/.
package metrics

import (
	"net/http"
	"sync/atomic"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the gateway's request-path series. Each gateway has its own
// registry so tests can run several side by side.
type Metrics struct {
	reg       *prometheus.Registry
	Requests  *prometheus.CounterVec   // client requests by final provider/connection/status
	Upstream  *prometheus.CounterVec   // upstream attempts by provider/connection/status|outcome
	Latency   *prometheus.HistogramVec // upstream attempt time to response headers
	Attempts  prometheus.Histogram     // upstream attempts per client request
	QueueWait *prometheus.HistogramVec // time spent in the admission queue
	QueueRej  *prometheus.CounterVec   // admission refusals by code
	Waits     *prometheus.CounterVec   // cooldown waits by kind
	HTTP      *prometheus.CounterVec   // every HTTP answer of the gateway by surface and code
	HTTPOK    prometheus.Counter       // HTTP{surface="client",code="200"}, looked up once
	Inflight  prometheus.GaugeFunc     // client requests in their handler, read at scrape time
}

// State is what the scrape-time series read from the gateway.
type State interface {
	// Views returns the model's refreshed provider and connection views
	// and the number of live session pins.
	Views() ([]model.ProviderView, []model.ConnectionView, int)
	// Gates calls fn with each admission gate's slots in use and queue.
	Gates(fn func(provider, connection string, inUse, queued int))
	// Inflight is the number of client requests in their handler. It is
	// read when scraped, so the request path updates no gauge.
	Inflight() int
}

// New registers the request-path series, the Go and process collectors,
// the scrape-time state of st and the extra collectors (the operator
// series, the stream series) in a new registry.
func New(st State, extra ...prometheus.Collector) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg: reg,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_requests_total",
			Help: "Client chat requests by the provider and connection that answered last and the status the client got."},
			[]string{"provider", "connection", "status"}),
		Upstream: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_upstream_attempts_total",
			Help: "Upstream attempts by provider, connection and result (HTTP status or outcome kind)."},
			[]string{"provider", "connection", "result"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "breakwater_upstream_latency_seconds",
			Help:    "Upstream attempt latency until response headers.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}},
			[]string{"provider", "connection"}),
		Attempts: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "breakwater_request_attempts",
			Help: "Upstream attempts made for one client request.", Buckets: []float64{0, 1, 2, 3, 4, 6, 10}}),
		QueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "breakwater_queue_wait_seconds",
			Help:    "Time a request waited in the admission queue before a slot (or a refusal).",
			Buckets: []float64{.001, .01, .05, .1, .5, 1, 5, 10, 30, 60}}, []string{"provider", "connection"}),
		QueueRej: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_admission_refusals_total",
			Help: "Admission refusals by provider, connection and typed code."}, []string{"provider", "connection", "code"}),
		Waits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_cooldown_waits_total",
			Help: "Cooldown-aware waits (waitForCooldown, comboCooldownWait, priorityWait)."}, []string{"kind"}),
		HTTP: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_http_responses_total",
			Help: "Every HTTP answer of the gateway by surface and status code."}, []string{"surface", "code"}),
		Inflight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "breakwater_inflight_requests",
			Help: "Client requests being served."}, func() float64 { return float64(st.Inflight()) }),
	}
	m.HTTPOK = m.HTTP.WithLabelValues("client", "200")
	reg.MustRegister(m.Requests, m.Upstream, m.Latency, m.Attempts, m.QueueWait, m.QueueRej, m.Waits, m.HTTP, m.Inflight,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&stateCollector{st: st})
	reg.MustRegister(extra...)
	return m
}

// Registry is where the series are registered (for series the gateway
// defines beside these).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ConnSeries are a connection's series on the request path, each looked
// up once, when first used (so no series appears before it counts
// something): WithLabelValues hashes its labels under a lock on every
// call, and the request path would call it three times per request.
type ConnSeries struct {
	requestsOK atomic.Pointer[counterRef]  // Requests{status="200"}
	upstreamOK atomic.Pointer[counterRef]  // Upstream{result="200"}
	latency    atomic.Pointer[observerRef] // Latency
}

type counterRef struct{ prometheus.Counter }

type observerRef struct{ prometheus.Observer }

// RequestsOK is Requests{provider, connection, status="200"}.
func (m *Metrics) RequestsOK(s *ConnSeries, provider, connection string) prometheus.Counter {
	return counterOf(&s.requestsOK, m.Requests, provider, connection)
}

// UpstreamOK is Upstream{provider, connection, result="200"}.
func (m *Metrics) UpstreamOK(s *ConnSeries, provider, connection string) prometheus.Counter {
	return counterOf(&s.upstreamOK, m.Upstream, provider, connection)
}

// LatencyOf is Latency{provider, connection}.
func (m *Metrics) LatencyOf(s *ConnSeries, provider, connection string) prometheus.Observer {
	if r := s.latency.Load(); r != nil {
		return r.Observer
	}
	r := &observerRef{m.Latency.WithLabelValues(provider, connection)}
	s.latency.Store(r)
	return r.Observer
}

// counterOf is vec's (provider, connection, "200") series, kept in p.
func counterOf(p *atomic.Pointer[counterRef], vec *prometheus.CounterVec, provider, connection string) prometheus.Counter {
	if r := p.Load(); r != nil {
		return r.Counter
	}
	r := &counterRef{vec.WithLabelValues(provider, connection, "200")}
	p.Store(r)
	return r.Counter
}

var (
	descBreaker = prometheus.NewDesc("breakwater_breaker_state",
		"Provider circuit breaker state: 0 CLOSED, 1 DEGRADED, 2 OPEN, 3 HALF_OPEN.", []string{"provider"}, nil)
	descBreakerFailures = prometheus.NewDesc("breakwater_breaker_failures",
		"Consecutive provider-level failures counted by the breaker.", []string{"provider"}, nil)
	descCooldown = prometheus.NewDesc("breakwater_connection_cooldown_seconds",
		"Remaining connection cooldown (0 = not cooling).", []string{"provider", "connection"}, nil)
	descConnStatus = prometheus.NewDesc("breakwater_connection_status",
		"1 for the connection's current status.", []string{"provider", "connection", "status"}, nil)
	descLockouts = prometheus.NewDesc("breakwater_model_lockouts",
		"Active model lockouts per connection.", []string{"provider", "connection"}, nil)
	descQueue = prometheus.NewDesc("breakwater_queue_depth",
		"Requests waiting in a connection's admission queue.", []string{"provider", "connection"}, nil)
	descSlots = prometheus.NewDesc("breakwater_connection_inflight",
		"Admission slots in use per connection.", []string{"provider", "connection"}, nil)
	descPins = prometheus.NewDesc("breakwater_session_pins", "Live session affinity pins.", nil, nil)
)

// stateCollector reads the model's refreshed views at scrape time, so the
// breaker and cooldown series never go stale.
type stateCollector struct{ st State }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBreaker, descBreakerFailures, descCooldown, descConnStatus, descLockouts, descQueue, descSlots, descPins} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	provs, conns, pins := c.st.Views()
	for _, p := range provs {
		ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, float64(p.State), p.Provider)
		ch <- prometheus.MustNewConstMetric(descBreakerFailures, prometheus.GaugeValue, float64(p.FailureCount), p.Provider)
	}
	for _, cv := range conns {
		ch <- prometheus.MustNewConstMetric(descCooldown, prometheus.GaugeValue, float64(cv.CooldownRemainingMs)/1000, cv.Provider, cv.Connection)
		ch <- prometheus.MustNewConstMetric(descConnStatus, prometheus.GaugeValue, 1, cv.Provider, cv.Connection, cv.Status.String())
		ch <- prometheus.MustNewConstMetric(descLockouts, prometheus.GaugeValue, float64(len(cv.Lockouts)), cv.Provider, cv.Connection)
	}
	c.st.Gates(func(p, cn string, inUse, queued int) {
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(queued), p, cn)
		ch <- prometheus.MustNewConstMetric(descSlots, prometheus.GaugeValue, float64(inUse), p, cn)
	})
	ch <- prometheus.MustNewConstMetric(descPins, prometheus.GaugeValue, float64(pins))
}
