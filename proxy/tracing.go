package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/metrics"
)

// TracingConfig is `server.tracing`: OpenTelemetry traces sent to an OTLP
// collector over HTTP (OTLP/HTTP with its JSON encoding, POST
// {endpoint}/v1/traces). Off unless endpoint is set. Each client request is
// one server span, with one client span per upstream attempt; an incoming
// W3C traceparent header makes the request span its child.
type TracingConfig struct {
	// Endpoint is the collector's base URL, e.g. http://127.0.0.1:4318.
	Endpoint string `yaml:"endpoint"`
	// SampleRatio is the share of requests traced (default 1: all); a
	// sampled incoming traceparent is always followed.
	SampleRatio *float64 `yaml:"sampleRatio"`
	// ServiceName is the resource's service.name (default "breakwater").
	ServiceName string `yaml:"serviceName"`
	// Headers are sent with every export (a collector's auth token).
	Headers map[string]string `yaml:"headers"`
}

// validateTracing checks server.tracing.
func (c *Config) validateTracing() []error {
	t := c.Server.Tracing
	var errs []error
	if t.Endpoint != "" {
		if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, c.errAt("server.tracing.endpoint", "want an http(s):// URL of an OTLP/HTTP collector (e.g. http://127.0.0.1:4318), got %q", t.Endpoint))
		}
	}
	if r := t.SampleRatio; r != nil && (*r < 0 || *r > 1 || math.IsNaN(*r)) {
		errs = append(errs, c.errAt("server.tracing.sampleRatio", "want a number from 0 to 1, got %v", *r))
	}
	// A header the Transport would refuse fails every export; refuse it at
	// load instead, with the field named.
	for _, name := range slices.Sorted(maps.Keys(t.Headers)) {
		field := "server.tracing.headers." + name
		if problem := headerNameProblem(name); problem != "" {
			if headerValueProblem(name) != "" {
				field = "server.tracing.headers" // keep a CR or LF in the name out of the message's first line
			}
			errs = append(errs, c.errAt(field, "%s", problem))
		} else if problem := headerValueProblem(t.Headers[name]); problem != "" {
			errs = append(errs, c.errAt(field, "%s", problem))
		}
	}
	return errs
}

// tracer buffers finished request traces and exports them in batches, off
// the request path; when the buffer is full a trace is dropped (counted),
// never waited for.
type tracer struct {
	url     string
	headers map[string]string
	service string
	ratio   float64
	log     *slog.Logger
	client  *http.Client

	ch      chan *reqTrace
	dropped atomic.Int64
	failed  atomic.Int64
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

const (
	traceBuffer    = 4096
	traceBatch     = 256
	traceFlushTick = 2 * time.Second
)

func newTracer(cfg TracingConfig, log *slog.Logger) *tracer {
	if cfg.Endpoint == "" {
		return nil
	}
	t := &tracer{url: strings.TrimRight(cfg.Endpoint, "/") + "/v1/traces", headers: cfg.Headers, service: cfg.ServiceName,
		ratio: 1, log: log, client: &http.Client{Timeout: 10 * time.Second},
		ch: make(chan *reqTrace, traceBuffer), stop: make(chan struct{}), done: make(chan struct{})}
	if t.service == "" {
		t.service = "breakwater"
	}
	if cfg.SampleRatio != nil {
		t.ratio = *cfg.SampleRatio
	}
	go t.run()
	return t
}

// reqTrace is one client request's span and its attempts' spans.
type reqTrace struct {
	traceID  [16]byte
	spanID   [8]byte
	parent   [8]byte // the incoming traceparent's span (zero = root)
	start    time.Time
	end      time.Time
	attrs    []otlpAttr
	status   int
	attempts []attemptSpan
}

type attemptSpan struct {
	spanID     [8]byte
	start, end time.Time
	provider   string
	connection string
	model      string
	result     string
	failed     bool
}

// traceFor returns the request's trace, starting it on first use; nil when
// tracing is off or the request is not sampled.
func (rs *reqState) traceFor() *reqTrace {
	t := rs.g.ops.tracer
	if t == nil || rs.traceOff {
		return nil
	}
	if rs.trace != nil {
		return rs.trace
	}
	tr := &reqTrace{start: rs.start}
	sampled := false
	if tid, sid, flags, ok := parseTraceparent(headerValue(rs.r.Header, "Traceparent")); ok {
		tr.traceID, tr.parent, sampled = tid, sid, flags&1 == 1
	} else {
		_, _ = rand.Read(tr.traceID[:])
		sampled = t.ratio >= 1 || (t.ratio > 0 && float64(tr.traceID[8]>>1)/128 < t.ratio)
	}
	if !sampled {
		rs.traceOff = true
		return nil
	}
	_, _ = rand.Read(tr.spanID[:])
	rs.trace = tr
	return tr
}

// traceAttempt adds one upstream attempt's span (record calls it).
func (rs *reqState) traceAttempt(a *model.Attempt, out *execResult) {
	tr := rs.traceFor()
	if tr == nil {
		return
	}
	s := attemptSpan{start: a.Started.Std(), end: rs.g.now(), provider: a.Provider, connection: a.Connection, model: a.Model,
		result: resultLabel(out)}
	s.failed = !(out.outcome.Kind == model.OutcomeResponse && out.outcome.Status >= 200 && out.outcome.Status < 300)
	if s.start.After(s.end) || s.start.Before(tr.start) {
		s.start = tr.start
	}
	_, _ = rand.Read(s.spanID[:])
	tr.attempts = append(tr.attempts, s)
}

// endTrace closes the request span and hands the trace to the exporter
// (finish calls it).
func (rs *reqState) endTrace(status int) {
	tr := rs.traceFor()
	if tr == nil {
		return
	}
	rs.trace = nil
	tr.end, tr.status = rs.g.now(), status
	key := ""
	if rs.key != nil {
		key = rs.key.id
	}
	tr.attrs = append(tr.attrs, strAttr("http.request.method", rs.r.Method), strAttr("url.path", rs.r.URL.Path),
		intAttr("http.response.status_code", status), strAttr("gen_ai.request.model", rs.req.Model),
		strAttr("breakwater.request_id", rs.logID), strAttr("breakwater.client_key", key),
		strAttr("breakwater.provider", rs.countedProvider()), strAttr("breakwater.connection", rs.conn),
		intAttr("breakwater.attempts", rs.flow.Attempts()))
	if rs.promptTokens > 0 || rs.completionTokens > 0 {
		tr.attrs = append(tr.attrs, intAttr("gen_ai.usage.input_tokens", int(rs.promptTokens)), intAttr("gen_ai.usage.output_tokens", int(rs.completionTokens)))
	}
	t := rs.g.ops.tracer
	select {
	case t.ch <- tr:
	default:
		t.dropped.Add(1)
	}
}

// parseTraceparent reads a W3C traceparent (version 00).
func parseTraceparent(h string) (tid [16]byte, sid [8]byte, flags byte, ok bool) {
	parts := strings.Split(strings.TrimSpace(h), "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return tid, sid, 0, false
	}
	if _, err := hex.Decode(tid[:], []byte(parts[1])); err != nil || tid == [16]byte{} {
		return tid, sid, 0, false
	}
	if _, err := hex.Decode(sid[:], []byte(parts[2])); err != nil || sid == [8]byte{} {
		return tid, sid, 0, false
	}
	f, err := strconv.ParseUint(parts[3], 16, 8)
	if err != nil {
		return tid, sid, 0, false
	}
	return tid, sid, byte(f), true
}

func (t *tracer) run() {
	defer close(t.done)
	tick := time.NewTicker(traceFlushTick)
	defer tick.Stop()
	var batch []*reqTrace
	flush := func() {
		if len(batch) > 0 {
			t.export(batch)
			batch = batch[:0]
		}
	}
	for {
		select {
		case tr := <-t.ch:
			if batch = append(batch, tr); len(batch) >= traceBatch {
				flush()
			}
		case <-tick.C:
			flush()
		case <-t.stop:
		drain:
			for {
				select {
				case tr := <-t.ch:
					batch = append(batch, tr)
				default:
					break drain
				}
			}
			flush()
			return
		}
	}
}

// close exports what is buffered and stops the exporter.
func (t *tracer) close(ctx context.Context) {
	if t == nil {
		return
	}
	t.once.Do(func() { close(t.stop) })
	select {
	case <-t.done:
	case <-ctx.Done():
	}
}

// CloseTracing sends the traces still buffered (serve calls it at exit).
func (g *Gateway) CloseTracing(ctx context.Context) { g.ops.tracer.close(ctx) }

func (t *tracer) export(batch []*reqTrace) {
	body, err := json.Marshal(t.encode(batch))
	if err != nil {
		return
	}
	req, err := http.NewRequest(http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	resp, err := t.client.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			err = fmt.Errorf("the collector answered %d", resp.StatusCode)
		}
	}
	if err != nil {
		if t.failed.Add(1) == 1 || t.failed.Load()%100 == 0 {
			t.log.Warn("exporting traces failed; this batch is dropped", "endpoint", redactURL(t.url), "err", err, "failedBatches", t.failed.Load())
		}
	}
}

// The OTLP/HTTP JSON shapes (opentelemetry-proto, JSON mapping: ids in
// hex, 64-bit integers as strings).
type otlpAttr struct {
	Key   string    `json:"key"`
	Value otlpValue `json:"value"`
}

type otlpValue struct {
	String *string `json:"stringValue,omitempty"`
	Int    *string `json:"intValue,omitempty"`
}

func strAttr(k, v string) otlpAttr { return otlpAttr{Key: k, Value: otlpValue{String: &v}} }

func intAttr(k string, v int) otlpAttr {
	s := strconv.Itoa(v)
	return otlpAttr{Key: k, Value: otlpValue{Int: &s}}
}

type otlpSpan struct {
	TraceID      string     `json:"traceId"`
	SpanID       string     `json:"spanId"`
	ParentSpanID string     `json:"parentSpanId,omitempty"`
	Name         string     `json:"name"`
	Kind         int        `json:"kind"`
	Start        string     `json:"startTimeUnixNano"`
	End          string     `json:"endTimeUnixNano"`
	Attributes   []otlpAttr `json:"attributes,omitempty"`
	Status       otlpStatus `json:"status"`
}

type otlpStatus struct {
	Code    int    `json:"code"` // 1 OK, 2 ERROR
	Message string `json:"message,omitempty"`
}

const (
	spanKindServer = 2
	spanKindClient = 3
)

func nanos(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

func (t *tracer) encode(batch []*reqTrace) map[string]any {
	var spans []otlpSpan
	for _, tr := range batch {
		tid := hex.EncodeToString(tr.traceID[:])
		sid := hex.EncodeToString(tr.spanID[:])
		root := otlpSpan{TraceID: tid, SpanID: sid, Name: "chat " + metrics.SurfaceOf(pathAttr(tr.attrs)), Kind: spanKindServer,
			Start: nanos(tr.start), End: nanos(tr.end), Attributes: tr.attrs, Status: otlpStatus{Code: 1}}
		if tr.parent != [8]byte{} {
			root.ParentSpanID = hex.EncodeToString(tr.parent[:])
		}
		if tr.status >= 400 {
			root.Status = otlpStatus{Code: 2, Message: "HTTP " + strconv.Itoa(tr.status)}
		}
		spans = append(spans, root)
		for i, a := range tr.attempts {
			s := otlpSpan{TraceID: tid, SpanID: hex.EncodeToString(a.spanID[:]), ParentSpanID: sid,
				Name: "attempt " + a.provider + "/" + a.connection, Kind: spanKindClient, Start: nanos(a.start), End: nanos(a.end),
				Attributes: []otlpAttr{strAttr("breakwater.provider", a.provider), strAttr("breakwater.connection", a.connection),
					strAttr("gen_ai.request.model", a.model), strAttr("breakwater.result", a.result), intAttr("breakwater.attempt", i+1)},
				Status: otlpStatus{Code: 1}}
			if a.failed {
				s.Status = otlpStatus{Code: 2, Message: a.result}
			}
			spans = append(spans, s)
		}
	}
	return map[string]any{"resourceSpans": []any{map[string]any{
		"resource":   map[string]any{"attributes": []otlpAttr{strAttr("service.name", t.service), strAttr("service.version", Build.Version)}},
		"scopeSpans": []any{map[string]any{"scope": map[string]any{"name": "github.com/breakwater-gw/breakwater/proxy"}, "spans": spans}},
	}}}
}

func pathAttr(attrs []otlpAttr) string {
	for _, a := range attrs {
		if a.Key == "url.path" && a.Value.String != nil {
			return *a.Value.String
		}
	}
	return ""
}
