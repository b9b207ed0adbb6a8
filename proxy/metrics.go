package proxy

import (
	"strconv"
	"strings"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// gatewayMetrics are the request-path series (proxy/metrics) with the
// lookups the request path makes by its own connection type, and the
// stream series (proxy/resume.go) registered beside them.
type gatewayMetrics struct {
	*metrics.Metrics
	stream *streamMetrics
	// upstreamStray counts the times an upstream was caught writing bytes
	// outside its answers on an HTTP/1.1 connection (transport.go).
	upstreamStray *prometheus.CounterVec
}

// connMetrics are a connection's series, resolved on first use.
type connMetrics = metrics.ConnSeries

func newMetrics(g *Gateway) *gatewayMetrics {
	m := &gatewayMetrics{Metrics: metrics.New(metricsState{g}, g.ops.met.Collectors()...)}
	m.stream = newStreamMetrics(m.Registry())
	m.upstreamStray = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_upstream_stray_bytes_total",
		Help: "Times an upstream sent bytes outside its answers on an HTTP/1.1 connection; the first stops connection reuse to the provider until a reload."},
		[]string{"provider"})
	m.Registry().MustRegister(m.upstreamStray, reuseOffCollector{g: g, desc: reuseOffDesc})
	return m
}

var reuseOffDesc = prometheus.NewDesc("breakwater_upstream_reuse_off",
	"1 for a provider whose upstream connections are not reused: it was caught writing outside its answers (until a reload).",
	[]string{"provider"}, nil)

// reuseOffCollector reads, at scrape time, which providers' pools were
// caught (upstreamPool.stray), so a reload that replaced a pool shows at
// once.
type reuseOffCollector struct {
	g    *Gateway
	desc *prometheus.Desc
}

func (c reuseOffCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c reuseOffCollector) Collect(ch chan<- prometheus.Metric) {
	c.g.provMu.RLock()
	defer c.g.provMu.RUnlock()
	for id, p := range c.g.provs {
		v := 0.0
		if p.pool != nil && p.pool.caught.Load() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, id)
	}
}

func (m *gatewayMetrics) requestsOK(cr *connRuntime) prometheus.Counter {
	return m.RequestsOK(&cr.met, cr.provider, cr.cfg.ID)
}

func (m *gatewayMetrics) upstreamOK(cr *connRuntime) prometheus.Counter {
	return m.UpstreamOK(&cr.met, cr.provider, cr.cfg.ID)
}

func (m *gatewayMetrics) latencyOf(cr *connRuntime) prometheus.Observer {
	return m.LatencyOf(&cr.met, cr.provider, cr.cfg.ID)
}

// metricsState is what the scrape-time series read of a gateway.
type metricsState struct{ g *Gateway }

func (s metricsState) Views() ([]model.ProviderView, []model.ConnectionView, int) {
	g := s.g
	now := g.modelNow()
	g.lock()
	defer g.unlock()
	return g.eng.Providers(now), g.eng.Connections(now, ""), len(g.eng.Pins(now))
}

func (s metricsState) Inflight() int { return int(s.g.active.Load()) }

func (s metricsState) Gates(fn func(provider, connection string, inUse, queued int)) {
	s.g.gate.snapshot(fn)
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
