package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus series. Each gateway has its own
// registry so tests can run several side by side.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec   // client requests by final provider/connection/status
	upstream  *prometheus.CounterVec   // upstream attempts by provider/connection/status|outcome
	latency   *prometheus.HistogramVec // upstream attempt time to response headers
	attempts  prometheus.Histogram     // upstream attempts per client request
	queueWait *prometheus.HistogramVec // time spent in the admission queue
	queueRej  *prometheus.CounterVec   // admission refusals by code
	waits     *prometheus.CounterVec   // cooldown waits by kind
	http      *prometheus.CounterVec   // every HTTP answer of the gateway by surface and code
	httpOK    prometheus.Counter       // http{surface="client",code="200"}, looked up once
	inflight  prometheus.GaugeFunc     // chat requests in their handler (Gateway.active)
	stream    *streamMetrics           // stream resume and malformed events (proxy/resume.go)
}

func newMetrics(g *Gateway) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_requests_total",
			Help: "Client chat requests by the provider and connection that answered last and the status the client got."},
			[]string{"provider", "connection", "status"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_upstream_attempts_total",
			Help: "Upstream attempts by provider, connection and result (HTTP status or outcome kind)."},
			[]string{"provider", "connection", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "breakwater_upstream_latency_seconds",
			Help:    "Upstream attempt latency until response headers.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}},
			[]string{"provider", "connection"}),
		attempts: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "breakwater_request_attempts",
			Help: "Upstream attempts made for one client request.", Buckets: []float64{0, 1, 2, 3, 4, 6, 10}}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "breakwater_queue_wait_seconds",
			Help:    "Time a request waited in the admission queue before a slot (or a refusal).",
			Buckets: []float64{.001, .01, .05, .1, .5, 1, 5, 10, 30, 60}}, []string{"provider", "connection"}),
		queueRej: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_admission_refusals_total",
			Help: "Admission refusals by provider, connection and typed code."}, []string{"provider", "connection", "code"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_cooldown_waits_total",
			Help: "Cooldown-aware waits (waitForCooldown, comboCooldownWait, priorityWait)."}, []string{"kind"}),
		http: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_http_responses_total",
			Help: "Every HTTP answer of the gateway by surface and status code."}, []string{"surface", "code"}),
		// Read from the gateway's own count at scrape time: no gauge
		// update on every request.
		inflight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "breakwater_inflight_requests",
			Help: "Client requests being served."}, func() float64 { return float64(g.active.Load()) }),
	}
	m.httpOK = m.http.WithLabelValues("client", "200")
	m.stream = newStreamMetrics(reg)
	reg.MustRegister(m.requests, m.upstream, m.latency, m.attempts, m.queueWait, m.queueRej, m.waits, m.http, m.inflight,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&stateCollector{g: g})
	reg.MustRegister(g.ops.met.collectors()...) // proxy/metrics_ops.go
	return m
}

// connMetrics are a connection's series on the request path, each looked
// up once, when first used (so no series appears before it counts
// something): WithLabelValues hashes its labels under a lock on every
// call, and the request path would call it three times per request.
type connMetrics struct {
	requestsOK atomic.Pointer[counterRef]  // requests{status="200"}
	upstreamOK atomic.Pointer[counterRef]  // upstream{result="200"}
	latency    atomic.Pointer[observerRef] // latency
}

type counterRef struct{ prometheus.Counter }

type observerRef struct{ prometheus.Observer }

func (m *metrics) requestsOK(cr *connRuntime) prometheus.Counter {
	return counterOf(&cr.met.requestsOK, m.requests, cr)
}

func (m *metrics) upstreamOK(cr *connRuntime) prometheus.Counter {
	return counterOf(&cr.met.upstreamOK, m.upstream, cr)
}

func (m *metrics) latencyOf(cr *connRuntime) prometheus.Observer {
	if r := cr.met.latency.Load(); r != nil {
		return r.Observer
	}
	r := &observerRef{m.latency.WithLabelValues(cr.provider, cr.cfg.ID)}
	cr.met.latency.Store(r)
	return r.Observer
}

// counterOf is vec's (provider, connection, "200") series, kept in p.
func counterOf(p *atomic.Pointer[counterRef], vec *prometheus.CounterVec, cr *connRuntime) prometheus.Counter {
	if r := p.Load(); r != nil {
		return r.Counter
	}
	r := &counterRef{vec.WithLabelValues(cr.provider, cr.cfg.ID, "200")}
	p.Store(r)
	return r.Counter
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
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
type stateCollector struct{ g *Gateway }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBreaker, descBreakerFailures, descCooldown, descConnStatus, descLockouts, descQueue, descSlots, descPins} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.g
	now := g.modelNow()
	g.lock()
	provs := g.eng.Providers(now)
	conns := g.eng.Connections(now, "")
	pins := len(g.eng.Pins(now))
	g.unlock()
	for _, p := range provs {
		ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, float64(p.State), p.Provider)
		ch <- prometheus.MustNewConstMetric(descBreakerFailures, prometheus.GaugeValue, float64(p.FailureCount), p.Provider)
	}
	for _, cv := range conns {
		ch <- prometheus.MustNewConstMetric(descCooldown, prometheus.GaugeValue, float64(cv.CooldownRemainingMs)/1000, cv.Provider, cv.Connection)
		ch <- prometheus.MustNewConstMetric(descConnStatus, prometheus.GaugeValue, 1, cv.Provider, cv.Connection, cv.Status.String())
		ch <- prometheus.MustNewConstMetric(descLockouts, prometheus.GaugeValue, float64(len(cv.Lockouts)), cv.Provider, cv.Connection)
	}
	g.gate.snapshot(func(p, cn string, inUse, queued int) {
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(queued), p, cn)
		ch <- prometheus.MustNewConstMetric(descSlots, prometheus.GaugeValue, float64(inUse), p, cn)
	})
	ch <- prometheus.MustNewConstMetric(descPins, prometheus.GaugeValue, float64(pins))
}

func statusLabel(code int) string { return strconv.Itoa(code) }

func resultLabel(out *execResult) string {
	o := out.outcome
	if out.local != nil {
		// The gateway cut the attempt itself: named by its code
		// (RATE_LIMIT_EXECUTION_TIMEOUT, request_budget_exhausted,
		// gateway_shutting_down), not as the client abort or local-queue
		// outcome it is recorded as.
		return "cut_" + strings.ToLower(string(out.local.Code))
	}
	if o.Kind == model.OutcomeResponse {
		return strconv.Itoa(o.Status)
	}
	if o.Kind == model.OutcomeTransport {
		return "transport_" + o.Transport.String()
	}
	return o.Kind.String()
}
