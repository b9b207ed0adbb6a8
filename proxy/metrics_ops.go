package proxy

import (
	"bytes"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/metrics"
)

// opsSeries are one label combination's operator series.
type opsSeries = metrics.OpsSeries

// opsLabels are the label values cfg allows in the operator series.
func opsLabels(cfg *Config) *metrics.Labels {
	ls := &metrics.Labels{Models: map[string]bool{}, Keys: map[string]bool{}, Providers: map[string]bool{}}
	for _, p := range cfg.Providers {
		ls.Providers[p.ID] = true
		for _, md := range p.Models {
			ls.Models[p.ID+"/"+md] = true
			ls.Models[md] = true
		}
	}
	for _, c := range cfg.Combos {
		ls.Models[c.ID] = true
	}
	for a := range cfg.Aliases {
		ls.Models[a] = true
	}
	for _, k := range cfg.ClientKeys {
		ls.Keys[k.ID] = true
	}
	return ls
}

// countOps adds a finished request to the operator series (rs.count calls
// it once per request).
func (rs *reqState) countOps(status int) {
	m := rs.g.ops.met
	key := "" // an open gateway (no clientKeys)
	if rs.key != nil {
		key = rs.key.id
	}
	s := m.Series(metrics.OpsKey{Provider: m.ProviderLabel(rs.countedProvider()), Model: m.ModelLabel(rs.req.Model), Key: m.KeyLabel(key),
		Surface: metrics.SurfaceOf(rs.r.URL.Path), Outcome: metrics.OutcomeOf(status), Stream: rs.req.Stream})
	rs.opsSeries = s
	s.Requests.Inc()
	if rs.promptTokens > 0 {
		s.Prompt.Add(float64(rs.promptTokens))
	}
	if rs.completionTokens > 0 {
		s.Completion.Add(float64(rs.completionTokens))
	}
}

// observeOps records the request's end-to-end time and, for a stream that
// sent anything, its time to first token (rs.finish calls it, after count).
func (rs *reqState) observeOps(elapsed time.Duration) {
	s := rs.opsSeries
	if s == nil {
		return
	}
	s.E2E.Observe(elapsed.Seconds())
	if rs.req.Stream && !rs.firstOut.IsZero() {
		s.TTFT.Observe(rs.firstOut.Sub(rs.start).Seconds())
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
// A stream event is searched only when its parse says it holds "usage"; a
// non-streamed answer is not searched at all (validAnswer finds its usage
// while validating it); nothing is allocated.
func (rs *reqState) noteUsage(b []byte) {
	// The first "usage" with its quotes is the answer's own: inside a
	// JSON string the quotes would be escaped.
	if i := bytes.Index(b, usageKey); i >= 0 {
		rs.noteUsageIn(b[i+len(usageKey):])
	}
}

// noteUsageIn reads the token counts from u, which starts at a usage
// object (a body's "usage" key or its value).
func (rs *reqState) noteUsageIn(u []byte) {
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

// noteEventUsage is noteUsage for a stream event, ev its parse: an event
// whose bytes do not hold "usage" (most of a stream) is not searched again.
func (rs *reqState) noteEventUsage(ev *model.StreamEvent, data []byte) {
	if ev.MentionsUsage {
		rs.noteUsage(data)
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
