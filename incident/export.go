package incident

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/store"
	"go.yaml.in/yaml/v3"
)

// Options shape one export.
type Options struct {
	// From and To are the window [From, To); offsets in the scenario are
	// measured from From, which is also the scenario's virtual epoch
	// (`start:`), so absolute reset headers keep their meaning.
	From, To time.Time
	// Config, when set, is the gateway config: providers (type, profile,
	// models, strategy, connections), combos, aliases and the `resilience:`
	// settings come from it. Without it the topology is derived from the
	// log (type openai, profile apikey, default settings).
	Config *Topology
	// Source names where the records came from, for the header comment.
	// It must not hold a credential (the command passes a redacted URL).
	Source string
	// Window is the width of the expect windows (default 1m; widened so
	// that there are at most MaxExpectWindows).
	Window time.Duration
	// Name is the scenario name (default "incident FROM .. TO").
	Name string
}

// MaxExpectWindows bounds the `requests:` expects of one export.
const MaxExpectWindows = 500

// maxLatency bounds a replayed latency: the log's value is trusted only
// this far (a day is far past every upstream timeout).
const maxLatency = 24 * time.Hour

// Summary counts what an export found; the command prints it to stderr.
type Summary struct {
	Records     int // records in the window that were exported
	Skipped     int // records in the window that could not be placed
	Requests    int // client requests (attempts grouped by request id)
	Succeeded   int // requests whose last attempt answered 2xx
	Providers   int
	Connections int
	Rules       int
	Actions     int // operator actions replayed as the scenario's actions:
	// Notes say what the replay cannot reproduce exactly.
	Notes []string
}

// attempt is one exported record with its offset.
type attempt struct {
	rec store.LogRecord
	// off is the offset from Options.From, rounded UP to the simulator's
	// millisecond grain. Up, because the log's latencies are whole ms
	// rounded down: an attempt that began the instant a cooldown ended
	// (Retry-After measured from the previous answer) then still begins at
	// or after that cooldown's end in the replay, never a millisecond
	// before it.
	off time.Duration
	req int // index into requests
}

type request struct {
	id       string
	atts     []int // indexes into attempts, in time order
	at       time.Duration
	model    string        // traffic model: provider/model or a combo id
	timeout  time.Duration // the client gave up after this long (0 = not recorded)
	final    int           // status of the last attempt when it was a success, else 0
	finalErr string        // what the last attempt ended with when it failed
}

type exporter struct {
	o        Options
	atts     []attempt
	reqs     []*request
	sum      Summary
	notes    map[string]int // note → count, for the header
	provs    []*provOut
	provByID map[string]*provOut
	combos   []comboOut
	aliases  map[string]string
	settings map[string]any
	ops      []opRec // operator actions in the window, in time order
}

// opRec is an operator action of the log (store.OperatorAction).
type opRec struct {
	rec store.LogRecord
	off time.Duration
}

type provOut struct {
	id, typ, profile, strategy string
	models                     []string
	perModelQuota              *bool
	dailyResetUTC              string
	quotaFamilies              map[string][]string
	conns                      []connOut
	addedConns, addedModels    []string // seen in the log, missing from the config
}

type connOut struct {
	id             string
	priority       int
	weight         int
	disableCooling bool
}

type comboOut struct {
	id, strategy string
	targets      []targetOut
	observed     bool // synthesised from the log
}

type targetOut struct {
	target, connection string
	weight             int
}

// Export writes the scenario that replays recs in [o.From, o.To). Records
// outside the window are ignored; an empty window is ErrEmptyWindow.
func Export(recs []store.LogRecord, o Options) ([]byte, Summary, error) {
	if !o.To.After(o.From) {
		return nil, Summary{}, &InputError{Field: "-to", Problem: "must be after -from"}
	}
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	length := ceilMs(o.To.Sub(o.From))
	if n := (length + o.Window - 1) / o.Window; n > MaxExpectWindows {
		o.Window = ceilMs((length + MaxExpectWindows - 1) / MaxExpectWindows)
	}
	x := &exporter{o: o, notes: map[string]int{}, provByID: map[string]*provOut{}}
	x.collect(recs)
	if len(x.atts) == 0 {
		if x.sum.Skipped > 0 {
			return nil, x.sum, fmt.Errorf("%w between %s and %s (%d record(s) skipped: %s)", ErrEmptyWindow,
				fmtTime(o.From), fmtTime(o.To), x.sum.Skipped, strings.Join(x.noteList(), "; "))
		}
		return nil, x.sum, fmt.Errorf("%w between %s and %s", ErrEmptyWindow, fmtTime(o.From), fmtTime(o.To))
	}
	// An attempt in the window's last millisecond rounds up onto its end:
	// stretch the window so every arrival stays inside it.
	if last := x.atts[len(x.atts)-1].off; last >= length {
		length = last + time.Millisecond
	}
	x.topology()
	x.group()
	out, err := x.write(length)
	x.sum.Notes = x.noteList()
	return out, x.sum, err
}

func (x *exporter) note(format string, args ...any) { x.notes[fmt.Sprintf(format, args...)]++ }

func (x *exporter) noteList() []string {
	keys := slices.Sorted(maps.Keys(x.notes))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if n := x.notes[k]; n > 1 {
			out = append(out, fmt.Sprintf("%s (×%d)", k, n))
		} else {
			out = append(out, k)
		}
	}
	return out
}

// validID is what the model accepts as a provider or connection id.
func validID(s string) bool {
	return s != "" && len(s) <= 200 && !strings.ContainsAny(s, "/ \t\r\n") && strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) < 0
}

func validModel(s string) bool {
	return s != "" && len(s) <= 200 && strings.IndexFunc(s, func(r rune) bool { return r <= 0x20 || r == 0x7f }) < 0
}

// collect keeps the records of the window that the scenario can name, in
// time order (stable: the log's order breaks ties).
func (x *exporter) collect(recs []store.LogRecord) {
	for _, r := range recs {
		t := r.Time.UTC()
		if t.Before(x.o.From) || !t.Before(x.o.To) {
			continue
		}
		if r.ErrorType == store.OperatorAction {
			r.Time = t
			x.ops = append(x.ops, opRec{rec: r, off: roundUpMs(t.Sub(x.o.From))})
			continue
		}
		switch {
		case !validID(r.Provider) || !validID(r.Connection):
			x.sum.Skipped++
			x.note("skipped a record whose provider or connection id is not a valid id")
			continue
		case !validModel(r.Model):
			x.sum.Skipped++
			x.note("skipped a record with no (or an invalid) model")
			continue
		case r.Status != 0 && (r.Status < 100 || r.Status > 599):
			x.sum.Skipped++
			x.note("skipped a record with an impossible status")
			continue
		}
		r.Time = t
		x.atts = append(x.atts, attempt{rec: r, off: roundUpMs(t.Sub(x.o.From))})
	}
	slices.SortStableFunc(x.atts, func(a, b attempt) int { return a.rec.Time.Compare(b.rec.Time) })
	slices.SortStableFunc(x.ops, func(a, b opRec) int { return a.rec.Time.Compare(b.rec.Time) })
	x.sum.Records = len(x.atts)
	x.sum.Actions = len(x.ops)
}

// topology starts from the config (when given) and adds whatever the log
// names that the config lacks, so every rule and traffic item resolves.
func (x *exporter) topology() {
	if c := x.o.Config; c != nil {
		for _, p := range c.Providers {
			po := &provOut{id: p.ID, typ: p.Type, profile: p.Profile, strategy: p.Strategy, models: slices.Clone(p.Models),
				perModelQuota: p.PerModelQuota, dailyResetUTC: p.DailyResetUTC, quotaFamilies: p.QuotaFamilies}
			for _, cn := range p.Connections {
				// Only what the model reads: never apiKey, baseURL or the
				// admission knobs the simulator ignores.
				po.conns = append(po.conns, connOut{id: cn.ID, priority: cn.Priority, weight: cn.Weight, disableCooling: cn.DisableCooling})
			}
			x.provs = append(x.provs, po)
			x.provByID[p.ID] = po
		}
		for _, cb := range c.Combos {
			co := comboOut{id: cb.ID, strategy: cb.Strategy}
			if cb.Mode != "" {
				x.note("combo %s: mode %s is not simulated", cb.ID, cb.Mode)
			}
			for _, t := range cb.Targets {
				co.targets = append(co.targets, targetOut{target: t.Target, connection: t.Connection, weight: t.Weight})
			}
			x.combos = append(x.combos, co)
		}
		x.aliases = c.Aliases
		if len(c.Resilience) > 0 {
			x.settings = c.Resilience
		}
	}
	derived := x.o.Config == nil
	for i := range x.atts {
		r := &x.atts[i].rec
		po := x.provByID[r.Provider]
		if po == nil {
			po = &provOut{id: r.Provider}
			x.provs = append(x.provs, po)
			x.provByID[r.Provider] = po
			if !derived {
				x.note("provider %s is in the log but not in the config: added with default type and profile", r.Provider)
			}
		}
		if !slices.ContainsFunc(po.conns, func(c connOut) bool { return c.id == r.Connection }) {
			po.conns = append(po.conns, connOut{id: r.Connection})
			if !derived {
				po.addedConns = append(po.addedConns, r.Connection)
			}
		}
		// A provider with no model list serves any model; one with a list
		// must list every model the log names, or nothing would resolve.
		if (derived || len(po.models) > 0) && !slices.Contains(po.models, r.Model) {
			po.models = append(po.models, r.Model)
			if !derived {
				po.addedModels = append(po.addedModels, r.Model)
			}
		}
	}
	if derived {
		// Derived topologies read best sorted; config ones keep the
		// config's order (it is the priority order of fill-first).
		slices.SortFunc(x.provs, func(a, b *provOut) int { return cmp.Compare(a.id, b.id) })
		for _, p := range x.provs {
			slices.SortFunc(p.conns, func(a, b connOut) int { return cmp.Compare(a.id, b.id) })
			slices.Sort(p.models)
		}
	}
	for _, p := range x.provs {
		x.sum.Connections += len(p.conns)
	}
	x.sum.Providers = len(x.provs)
}

// group builds the client requests: attempts grouped by request id (an
// attempt without one is a request of its own); the first attempt's time is
// the arrival.
func (x *exporter) group() {
	byID := map[string]int{}
	for i := range x.atts {
		a := &x.atts[i]
		id := a.rec.RequestID
		k, ok := byID[id]
		if !ok || id == "" {
			k = len(x.reqs)
			x.reqs = append(x.reqs, &request{id: id, at: a.off})
			if id != "" {
				byID[id] = k
			}
		}
		a.req = k
		x.reqs[k].atts = append(x.reqs[k].atts, i)
	}
	observed := map[string]string{} // target list → synthesised combo id
	for _, r := range x.reqs {
		var targets []string
		for _, i := range r.atts {
			t := x.atts[i].rec.Provider + "/" + x.atts[i].rec.Model
			if !slices.Contains(targets, t) {
				targets = append(targets, t)
			}
		}
		r.model = x.askedModel(x.atts[r.atts[0]].rec.Route, targets)
		if r.model == "" {
			r.model = x.trafficModel(targets, observed)
		}
		last := &x.atts[r.atts[len(r.atts)-1]]
		lr := &last.rec
		switch {
		case lr.ErrorType == "client_abort":
			// The client went away while this attempt was in flight: the
			// replayed client gives up at the same instant.
			end := last.off + clampLatency(lr.LatencyMs)
			r.timeout = max(end-r.at, time.Millisecond)
			r.finalErr = "client_abort"
		case lr.Status >= 200 && lr.Status <= 299 && lr.ErrorType == "":
			r.final = lr.Status
			x.sum.Succeeded++
		case lr.Status >= 200 && lr.Status <= 299:
			// A stream that failed after content reached the client: the
			// client's status was 200 (the error came as its last event).
			r.final = lr.Status
		case lr.Status != 0:
			r.finalErr = strconv.Itoa(lr.Status)
		default:
			r.finalErr = cmp.Or(lr.ErrorType, "no_response")
		}
	}
	x.sum.Requests = len(x.reqs)
}

// askedModel is the route the client asked for, as the log recorded it,
// when the scenario's topology resolves it to a route that holds every
// target the request tried; else "" (an older log without routes, or a
// combo or alias the exported topology lacks). Replaying the asked route
// keeps a combo request whose first target answered a combo request: in
// the replay that target may be cooling (concurrent requests answered in
// another order), and the request must fall back as the gateway would have.
func (x *exporter) askedModel(route string, targets []string) string {
	route = strings.TrimSpace(route)
	if !validModel(route) {
		return ""
	}
	reach := x.routeTargets(route, true)
	for _, t := range targets {
		if !slices.Contains(reach, t) {
			if reach != nil {
				x.note("requests whose recorded route does not hold the targets they tried replay as those targets")
			}
			return ""
		}
	}
	return route
}

// routeTargets lists the provider/model targets name resolves to in the
// exported topology, the way the model resolves a client's model: a combo,
// an alias (one level), provider/model, or a model name one provider
// serves. nil when it does not resolve.
func (x *exporter) routeTargets(name string, aliases bool) []string {
	for _, c := range x.combos {
		if c.id == name && !c.observed {
			var out []string
			for _, t := range c.targets {
				out = append(out, t.target)
			}
			return out
		}
	}
	if target, ok := x.aliases[name]; ok && aliases {
		return x.routeTargets(target, false)
	}
	if p, m, ok := strings.Cut(name, "/"); ok {
		if po := x.provByID[p]; po != nil && m != "" && (len(po.models) == 0 || slices.Contains(po.models, m)) {
			return []string{name}
		}
		return nil
	}
	var found []string
	for _, po := range x.provs {
		if slices.Contains(po.models, name) {
			found = append(found, po.id+"/"+name)
		}
	}
	if len(found) == 1 {
		return found
	}
	return nil
}

// trafficModel names what the replayed client asks for when the log kept
// no usable route, from the upstream targets the request tried: one target
// is that target; several (a fail-over across providers or models) is the
// first config combo that holds them all, else a combo synthesised from the
// targets in the order they were tried.
func (x *exporter) trafficModel(targets []string, observed map[string]string) string {
	if len(targets) == 1 {
		return targets[0]
	}
	for _, c := range x.combos {
		if c.observed {
			continue
		}
		ok := true
		for _, t := range targets {
			ok = ok && slices.ContainsFunc(c.targets, func(ct targetOut) bool { return ct.target == t })
		}
		if ok {
			return c.id
		}
	}
	key := strings.Join(targets, ",")
	if id, ok := observed[key]; ok {
		return id
	}
	id := x.freeComboID(fmt.Sprintf("observed-%d", len(observed)+1))
	observed[key] = id
	co := comboOut{id: id, strategy: "priority", observed: true}
	for _, t := range targets {
		co.targets = append(co.targets, targetOut{target: t})
	}
	x.combos = append(x.combos, co)
	x.note("requests that failed over across targets no config combo holds use synthesised priority combos (observed-N)")
	return id
}

func (x *exporter) freeComboID(id string) string {
	taken := func(s string) bool {
		_, alias := x.aliases[s]
		return alias || slices.ContainsFunc(x.combos, func(c comboOut) bool { return c.id == s })
	}
	for i := 2; taken(id); i++ {
		id = fmt.Sprintf("%s-%d", strings.TrimSuffix(id, "-"+strconv.Itoa(i-1)), i)
	}
	return id
}

func clampLatency(ms int64) time.Duration {
	d := time.Duration(min(max(ms, 0), int64(maxLatency/time.Millisecond))) * time.Millisecond
	return d
}

func roundUpMs(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r > 0 {
		d += time.Millisecond - r
	}
	return d
}

func ceilMs(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return max(d, time.Millisecond)
}

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// item is the sequence item replaying one attempt: the recorded status,
// headers, body and latency, or the fault that produces the recorded
// transport or stream outcome in the simulator.
func (x *exporter) item(r *store.LogRecord) *yaml.Node {
	lat := clampLatency(r.LatencyMs)
	head := lat
	if r.FirstByteMs > 0 {
		// latency is "until headers / the first byte" in the scenario
		// format; the log's total latency also counts the body. The log
		// floors latencyMs but writes at least 1 for firstByteMs, so the
		// smaller of the two is the one that is never an overestimate (a
		// replayed answer must not end after the recorded one did, or a
		// Retry-After cooldown would outlast the recorded next attempt).
		head = min(clampLatency(r.FirstByteMs), lat)
	}
	// A stream that failed after content reached the client is logged
	// with the client's 200 and its error: replayed as the same failure
	// after a first chunk (committed: never retried), not before any
	// content (retried elsewhere, which the gateway did not do).
	chunksBefore := 0
	if r.Status >= 200 && r.Status < 300 && r.ErrorType != "" && r.ErrorType != "response" {
		chunksBefore = 1
	}
	m := newMap(true)
	if et := r.ErrorType; r.Status >= 400 || (r.Status != 0 && (et == "" || et == "response")) {
		x.statusFields(m, r, head)
	} else {
		x.faultFields(m, r, lat, head, chunksBefore)
	}
	if r.ErrorType == "throughput" || r.ErrorType == "stall" {
		x.note("stream stalls and slow streams are replayed from the first byte on (the recorded chunk timing is not in the log)")
	}
	return m.n
}

// statusFields replays an answer: its status, classification headers,
// redacted error body and time to headers.
func (x *exporter) statusFields(m mapNode, r *store.LogRecord, head time.Duration) {
	m.add("status", r.Status)
	if len(r.Headers) > 0 {
		h := newMap(true)
		for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
			lk := strings.ToLower(k)
			if lk == "x-request-id" || lk == "request-id" {
				continue // identifies the upstream's request, classifies nothing
			}
			h.add(lk, store.Redact(r.Headers[k]))
		}
		if len(h.n.Content) > 0 {
			m.addNode("headers", h.n)
		}
	}
	if r.ErrorBody != "" && r.Status >= 400 {
		m.add("body", store.Redact(r.ErrorBody))
	}
	m.addLatency(head)
}

// faultFields replays a transport or stream outcome as the fault that
// produces it in the simulator.
func (x *exporter) faultFields(m mapNode, r *store.LogRecord, lat, head time.Duration, chunksBefore int) {
	switch et := r.ErrorType; {
	case et == "refused" || et == "reset":
		m.add("fault", "reset")
		m.addLatency(lat)
	case et == "connect_timeout" || et == "header_timeout" || et == "attempt_timeout":
		// The simulator's timeout fault ends at the configured header
		// timeout: the settings decide when, as they did in the gateway.
		m.add("fault", "timeout")
	case et == "client_abort":
		// The upstream had not answered when the client left; the
		// traffic item's timeout ends it at the recorded instant.
		m.add("fault", "timeout")
	case et == "early_eof":
		m.add("fault", "cut")
		m.addLatency(head)
		m.addNode("stream", flowMap("stallAfter", chunksBefore))
	case et == "stall":
		m.add("fault", "stall")
		m.addLatency(head)
		m.addNode("stream", flowMap("stallAfter", chunksBefore))
	case et == "throughput":
		m.add("fault", "slow-stream")
		m.addLatency(head)
		m.addNode("stream", flowMap("bytesPerSecond", 1))
	case et == "quality":
		// The gateway skips a malformed stream event and fails only a run
		// of them past its bound: the replay sends more than any bound.
		m.add("fault", "malformed-chunk")
		m.addLatency(head)
		m.addNode("stream", flowMap("stallAfter", chunksBefore, "malformed", 1001))
	default:
		x.note("attempts ending %q (status 0) are replayed as connection resets", et)
		m.add("fault", "reset")
		m.addLatency(lat)
	}
}

// write renders the scenario.
func (x *exporter) write(length time.Duration) ([]byte, error) {
	root := newMap(false)
	name := x.o.Name
	if name == "" {
		name = fmt.Sprintf("incident %s .. %s", fmtTime(x.o.From), fmtTime(x.o.To))
	}
	root.add("name", name)
	root.add("seed", 1)
	root.add("start", fmtTime(x.o.From))
	root.add("liveness", false)
	root.n.Content[len(root.n.Content)-1].LineComment = "recovery after the window is not part of the record"
	if x.settings != nil {
		s := &yaml.Node{}
		if err := s.Encode(x.settings); err != nil {
			return nil, fmt.Errorf("encoding the config's resilience settings: %w", err)
		}
		root.addNode("settings", s)
		root.n.Content[len(root.n.Content)-2].HeadComment = "the config's resilience: section (env overrides and saved PATCH settings are not included)"
	}
	root.addNode("providers", x.providersNode())
	if len(x.combos) > 0 {
		root.addNode("combos", x.combosNode())
	}
	if len(x.aliases) > 0 {
		a := newMap(false)
		for _, k := range slices.Sorted(maps.Keys(x.aliases)) {
			a.add(k, x.aliases[k])
		}
		root.addNode("aliases", a.n)
	}
	root.addNode("upstream", x.upstreamNode(length))
	root.n.Content[len(root.n.Content)-2].HeadComment = "what each connection answered, in order: one sequence item per recorded attempt (# offset, request)"
	root.addNode("traffic", x.trafficNode())
	root.n.Content[len(root.n.Content)-2].HeadComment = "the recorded client requests: the first attempt's time is the arrival"
	if acts := x.actionsNode(); len(acts.Content) > 0 {
		root.addNode("actions", acts)
		root.n.Content[len(root.n.Content)-2].HeadComment = "the operator's actions through the management API, at their instants"
	}
	if ex := x.expectNode(length); ex != nil {
		root.addNode("expect", ex)
		root.n.Content[len(root.n.Content)-2].HeadComment = "RECORDED FACTS from the log, per window of requests sent: how many were sent (count),\n" +
			"how many ended on a 2xx (status) and how many upstream attempts they made (upstreamCalls).\n" +
			"Requests that ended on an error are listed in comments only: the log keeps the last\n" +
			"upstream answer, not the status the gateway gave the client."
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root.n}, HeadComment: x.header(length)}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("writing the scenario: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("writing the scenario: %w", err)
	}
	return b.Bytes(), nil
}

func (x *exporter) header(length time.Duration) string {
	var h strings.Builder
	fmt.Fprintf(&h, "Incident replay exported by `breakwater incident export` from the request log.\n")
	fmt.Fprintf(&h, "source: %s\n", cmp.Or(x.o.Source, "request log records"))
	fmt.Fprintf(&h, "window: %s .. %s (%v); offsets below are from the window start\n", fmtTime(x.o.From), fmtTime(x.o.To), length)
	fmt.Fprintf(&h, "records: %d upstream attempts, %d client requests (%d ended on a 2xx), %d provider(s), %d connection(s)",
		x.sum.Records, x.sum.Requests, x.sum.Succeeded, x.sum.Providers, x.sum.Connections)
	if x.sum.Skipped > 0 {
		fmt.Fprintf(&h, ", %d record(s) skipped", x.sum.Skipped)
	}
	h.WriteString("\n")
	if x.o.Config != nil {
		fmt.Fprintf(&h, "topology and settings: %s (credentials and base URLs are never exported)\n", cmp.Or(x.o.Config.File, "the gateway config"))
	} else {
		h.WriteString("topology: derived from the log (type openai, profile apikey, default settings); pass -config for the real ones\n")
	}
	h.WriteString("replay: breakwater sim FILE [-set path=value]...   (what-if tuning with -set)\n")
	h.WriteString("not in the log, so not replayed: requests the gateway refused without an upstream attempt,\n")
	h.WriteString("stream vs non-stream, session affinity, and chunk timing after the first byte.")
	for _, n := range x.noteList() {
		fmt.Fprintf(&h, "\nnote: %s", n)
	}
	return h.String()
}

func (x *exporter) providersNode() *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, p := range x.provs {
		m := newMap(false)
		m.add("id", p.id)
		if p.typ != "" {
			m.add("type", p.typ)
		}
		if p.profile != "" {
			m.add("profile", p.profile)
		}
		if len(p.models) > 0 {
			mn := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, md := range p.models {
				mn.Content = append(mn.Content, scalar(md))
			}
			m.addNode("models", mn)
			if len(p.addedModels) > 0 {
				mn.LineComment = "not in the config, seen in the log: " + strings.Join(p.addedModels, ", ")
			}
		}
		if p.strategy != "" {
			m.add("strategy", p.strategy)
		}
		if p.perModelQuota != nil {
			m.add("perModelQuota", *p.perModelQuota)
		}
		if p.dailyResetUTC != "" {
			m.add("dailyResetUtc", p.dailyResetUTC)
		}
		if len(p.quotaFamilies) > 0 {
			q := &yaml.Node{}
			_ = q.Encode(p.quotaFamilies)
			m.addNode("quotaFamilies", q)
		}
		cs := &yaml.Node{Kind: yaml.SequenceNode}
		for _, c := range p.conns {
			cm := newMap(true)
			cm.add("id", c.id)
			if c.priority != 0 {
				cm.add("priority", c.priority)
			}
			if c.weight != 0 {
				cm.add("weight", c.weight)
			}
			if c.disableCooling {
				cm.add("disableCooling", true)
			}
			if slices.Contains(p.addedConns, c.id) {
				cm.n.LineComment = "not in the config, seen in the log"
			}
			cs.Content = append(cs.Content, cm.n)
		}
		m.addNode("connections", cs)
		seq.Content = append(seq.Content, m.n)
	}
	return seq
}

func (x *exporter) combosNode() *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, c := range x.combos {
		m := newMap(false)
		m.add("id", c.id)
		if c.strategy != "" {
			m.add("strategy", c.strategy)
		}
		ts := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, t := range c.targets {
			if t.connection == "" && t.weight == 0 {
				ts.Content = append(ts.Content, scalar(t.target))
				continue
			}
			tm := newMap(true)
			tm.add("target", t.target)
			if t.weight != 0 {
				tm.add("weight", t.weight)
			}
			if t.connection != "" {
				tm.add("connection", t.connection)
			}
			ts.Content = append(ts.Content, tm.n)
		}
		m.addNode("targets", ts)
		if c.observed {
			m.n.HeadComment = "synthesised: these targets were tried in this order for one request"
		}
		seq.Content = append(seq.Content, m.n)
	}
	return seq
}

// upstreamNode writes one rule per provider, connection and model: a
// sequence of the recorded answers in time order, active for the window.
// Rules never overlap, so "the last matching rule wins" never matters.
func (x *exporter) upstreamNode(length time.Duration) *yaml.Node {
	type key struct{ p, c, m string }
	groups := map[key][]int{}
	for i := range x.atts {
		r := &x.atts[i].rec
		k := key{r.Provider, r.Connection, r.Model}
		groups[k] = append(groups[k], i)
	}
	keys := slices.SortedFunc(maps.Keys(groups), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.p, b.p), cmp.Compare(a.c, b.c), cmp.Compare(a.m, b.m))
	})
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, k := range keys {
		m := newMap(false)
		m.addNode("match", flowMap("provider", k.p, "connection", k.c, "model", k.m))
		m.addDur("until", length)
		items := &yaml.Node{Kind: yaml.SequenceNode}
		for _, i := range groups[k] {
			a := &x.atts[i]
			it := x.item(&a.rec)
			it.LineComment = fmt.Sprintf("+%v request %d", a.off, a.req+1)
			items.Content = append(items.Content, it)
		}
		m.addNode("sequence", items)
		seq.Content = append(seq.Content, m.n)
		x.sum.Rules++
	}
	return seq
}

// trafficNode writes one item per request, folding requests that arrive at
// the same instant for the same model into a count.
func (x *exporter) trafficNode() *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for i := 0; i < len(x.reqs); {
		r := x.reqs[i]
		j := i + 1
		for j < len(x.reqs) && x.reqs[j].at == r.at && x.reqs[j].model == r.model && x.reqs[j].timeout == r.timeout {
			j++
		}
		m := newMap(true)
		m.addDur("at", r.at)
		m.add("model", r.model)
		if j-i > 1 {
			m.add("count", j-i)
		}
		if r.timeout > 0 {
			m.addDur("timeout", r.timeout)
		}
		if j-i > 1 {
			m.n.LineComment = fmt.Sprintf("requests %d-%d", i+1, j)
		} else {
			m.n.LineComment = fmt.Sprintf("request %d", i+1)
		}
		seq.Content = append(seq.Content, m.n)
		i = j
	}
	return seq
}

// expectNode writes, per window of Options.Window, the recorded facts of
// the requests sent in it.
func (x *exporter) expectNode(length time.Duration) *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	w := x.o.Window
	for from := time.Duration(0); from < length; from += w {
		until := min(from+w, length)
		var sent, calls int
		ok := map[int]int{}
		failed := map[string]int{}
		for _, r := range x.reqs {
			if r.at < from || r.at >= until {
				continue
			}
			sent++
			calls += len(r.atts)
			if r.final != 0 {
				ok[r.final]++
			} else {
				failed[r.finalErr]++
			}
		}
		if sent == 0 {
			continue
		}
		m := newMap(false)
		m.addNode("requests", flowMapDur("from", from, "until", until))
		m.add("count", sent)
		st := newMap(true)
		if len(ok) == 0 {
			st.add("200", 0)
		}
		for _, code := range slices.Sorted(maps.Keys(ok)) {
			st.add(strconv.Itoa(code), ok[code])
		}
		m.addNode("status", st.n)
		m.add("upstreamCalls", calls)
		if len(failed) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(failed)) {
				parts = append(parts, fmt.Sprintf("%d×%s", failed[k], k))
			}
			m.n.HeadComment = "recorded: " + strings.Join(parts, ", ") + " ended on an upstream error (last attempt)"
		}
		seq.Content = append(seq.Content, m.n)
	}
	if len(seq.Content) == 0 {
		return nil
	}
	return seq
}

// yaml node helpers: mappings keep insertion order; scalars are encoded by
// the YAML library so quoting (a status key "200", a body with a colon)
// is always right.

type mapNode struct{ n *yaml.Node }

func newMap(flow bool) mapNode {
	n := &yaml.Node{Kind: yaml.MappingNode}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return mapNode{n}
}

// scalar builds a scalar node directly (Node.Encode per scalar costs a
// marshal and a parse, most of an export's work). A !!str tag makes the encoder
// quote any string that would otherwise read back as a number, a bool or
// null ("200", "true", "~").
func scalar(v any) *yaml.Node {
	switch x := v.(type) {
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: strings.ToValidUTF8(x, "\uFFFD")}
	case int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(x)}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(x)}
	}
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		// Encode fails only for types never passed here (funcs, channels);
		// a plain scalar keeps the output loadable regardless.
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: fmt.Sprint(v)}
	}
	return n
}

func (m mapNode) add(k string, v any) { m.addNode(k, scalar(v)) }

func (m mapNode) addNode(k string, v *yaml.Node) {
	m.n.Content = append(m.n.Content, scalar(k), v)
}

// addDur writes a duration in Go syntax at millisecond grain ("1.25s").
func (m mapNode) addDur(k string, d time.Duration) {
	if d < 0 {
		d = 0
	}
	m.add(k, d.Truncate(time.Millisecond).String())
}

// addLatency writes a latency unless it is zero (the format's default).
func (m mapNode) addLatency(d time.Duration) {
	if d > 0 {
		m.addDur("latency", d)
	}
}

func flowMap(kv ...any) *yaml.Node {
	m := newMap(true)
	for i := 0; i+1 < len(kv); i += 2 {
		m.add(kv[i].(string), kv[i+1])
	}
	return m.n
}

func flowMapDur(k1 string, d1 time.Duration, k2 string, d2 time.Duration) *yaml.Node {
	m := newMap(true)
	m.addDur(k1, d1)
	m.addDur(k2, d2)
	return m.n
}

// actionsNode writes the operator actions of the window as the scenario's
// actions:. An action the simulator cannot take as recorded is noted.
func (x *exporter) actionsNode() *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, op := range x.ops {
		m := newMap(true)
		m.addDur("at", op.off)
		if x.actionFields(m, &op.rec) {
			seq.Content = append(seq.Content, m.n)
		}
	}
	return seq
}

// actionParams are the parameters an operator action's record keeps in
// its error body.
type actionParams struct {
	ConnectionIDs []string `json:"connectionIds"`
	All           bool     `json:"all"`
	Passed        []string `json:"passed"`
	Enabled       *bool    `json:"enabled"`
}

// actionFields adds the fields of the action r records to m; false when
// the scenario cannot take it (noted).
func (x *exporter) actionFields(m mapNode, r *store.LogRecord) bool {
	var params actionParams
	_ = json.Unmarshal([]byte(r.ErrorBody), &params)
	switch r.Reason {
	case "reset-breaker":
		m.add("action", r.Reason)
		return x.optionalProvider(m, r.Provider)
	case "clear-cooldowns":
		m.add("action", r.Reason)
		return x.clearCooldownsFields(m, r, &params)
	case "reset-connection", "new-credentials":
		if !x.knownConn(r.Provider, r.Connection) {
			return false
		}
		if r.Reason == "new-credentials" {
			x.note("a connection's new credentials replay as a reset of the connection")
		}
		m.add("action", "reset-connection")
		m.add("connection", r.Provider+"/"+r.Connection)
		return true
	case "clear-lockout":
		m.add("action", r.Reason)
		if params.All {
			m.add("all", true)
			return true
		}
		if !x.knownConn(r.Provider, r.Connection) || !validModel(r.Model) {
			return false
		}
		m.add("connection", r.Provider+"/"+r.Connection)
		m.add("model", r.Model)
		return true
	case "connection-test":
		return x.connectionTestFields(m, r, &params)
	case "rate-limit":
		return x.rateLimitFields(m, r, &params)
	case "set":
		return x.setFields(m, r)
	case "config-reload":
		x.note("a config reload in the window is not replayed: the scenario runs one config throughout (export the windows before and after it, each with the config it ran)")
		return false
	}
	x.note("skipped an operator action the scenario format has no action for")
	return false
}

// optionalProvider adds the provider an action names, if any; false (noted)
// when the scenario does not have it.
func (x *exporter) optionalProvider(m mapNode, p string) bool {
	if p == "" {
		return true
	}
	if !x.has(p, "") {
		x.note("skipped an operator action naming a provider the scenario does not have")
		return false
	}
	m.add("provider", p)
	return true
}

// knownConn reports whether the scenario has connection p/c (noted when
// not).
func (x *exporter) knownConn(p, c string) bool {
	if !x.has(p, c) {
		x.note("skipped an operator action naming a connection the scenario does not have")
		return false
	}
	return true
}

// clearCooldownsFields: every connection (of a provider), or the listed
// ones the scenario has.
func (x *exporter) clearCooldownsFields(m mapNode, r *store.LogRecord, params *actionParams) bool {
	if params.All || len(params.ConnectionIDs) == 0 {
		return x.optionalProvider(m, r.Provider)
	}
	refs := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, id := range params.ConnectionIDs {
		p, c, _ := strings.Cut(id, "/")
		if x.knownConn(p, c) {
			refs.Content = append(refs.Content, scalar(p+"/"+c))
		}
	}
	if len(refs.Content) == 0 {
		return false
	}
	m.addNode("connections", refs)
	return true
}

// rateLimitFields: the connection and whether its rateLimitProtection
// was turned on or off (POST /api/rate-limits).
func (x *exporter) rateLimitFields(m mapNode, r *store.LogRecord, params *actionParams) bool {
	if params.Enabled == nil {
		x.note("skipped a rate-limit action whose record does not say on or off")
		return false
	}
	if !x.knownConn(r.Provider, r.Connection) {
		return false
	}
	m.add("action", r.Reason)
	m.add("connection", r.Provider+"/"+r.Connection)
	m.add("enabled", *params.Enabled)
	return true
}

// connectionTestFields: a test that passed replays as passed on its first
// passing connection; one where nothing passed changed nothing.
func (x *exporter) connectionTestFields(m mapNode, r *store.LogRecord, params *actionParams) bool {
	if len(params.Passed) == 0 || !x.knownConn(r.Provider, params.Passed[0]) {
		return false
	}
	if p := x.provByID[r.Provider]; p != nil && len(params.Passed) < len(p.conns) {
		x.note("a connection test replays as passed on every connection of its provider (some did not pass)")
	}
	m.add("action", r.Reason)
	m.add("connection", r.Provider+"/"+params.Passed[0])
	return true
}

// setFields: a settings change replays its recorded patch.
func (x *exporter) setFields(m mapNode, r *store.LogRecord) bool {
	var layer map[string]any
	node := &yaml.Node{}
	if err := json.Unmarshal([]byte(r.ErrorBody), &layer); err != nil || len(layer) == 0 || node.Encode(layer) != nil {
		x.note("skipped a settings change whose patch was not kept")
		return false
	}
	m.add("action", r.Reason)
	m.addNode("settings", node)
	return true
}

// has reports whether the scenario's topology has provider p and, when c is
// not "", its connection c.
func (x *exporter) has(p, c string) bool {
	po := x.provByID[p]
	if po == nil {
		return false
	}
	return c == "" || slices.ContainsFunc(po.conns, func(co connOut) bool { return co.id == c })
}
