package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

const defaultMaxBodyBytes = 16 << 20

// maxBodyBytes bounds a client request body: server.maxBodyBytes, or the
// default.
func (g *Gateway) maxBodyBytes() int64 {
	if n := g.conf().Server.MaxBodyBytes; n > 0 {
		return n
	}
	return defaultMaxBodyBytes
}

var selPool = sync.Pool{New: func() any { return new(model.Selection) }}

// reqState is one client chat request across all its attempts. The request
// loop itself is the model's Flow (shared with the simulator); reqState
// only executes its steps.
type reqState struct {
	g       *Gateway
	w       http.ResponseWriter
	r       *http.Request
	ctx     context.Context
	s       *model.Settings
	req     chatRequest
	key     *clientKey
	id      string // echoed to the client as X-Request-Id, as it sent it
	logID   string // id as logs and the request log keep it: a client's own id redacted
	start   time.Time
	dl      time.Time // the flow's whole-request deadline (requestBudget.deadlineMs)
	flow    model.Flow
	step    model.Step // the flow's current step (run)
	stepAt  model.Time // the gateway's clock as the model decided it (a wait's instant counts from it)
	sel     *model.Selection
	session string // hex SHA-256 of the session header; never the raw id
	shared  bool   // quota-share combo: admission fails open

	// lease is the fence claim of a managed request (docs/leases.md), nil for
	// others; leaseOwner its raw token, kept for the arbiter only (never
	// logged).
	lease      *model.LeaseClaim
	leaseOwner string

	cw          clientWrites // bounds a write to a client that stopped reading (request.go)
	committed   bool
	counted     bool         // in the request metrics (count)
	lastFail    *failure     // the last upstream failure (body for the client)
	lastLocal   *model.Error // the last local refusal (admission, pacing, execution bound)
	headersAt   time.Time    // when the current attempt's response headers came (zero = none)
	recordedAt  time.Time    // when record last reported an attempt to the flow (its end)
	lastV       model.Verdict
	lastIsLocal bool   // the last failure was local
	provider    string // what served (or was tried) last
	conn        string
	cr          *connRuntime // the connection tried last (its metric series)
	status      int

	// The current attempt's native request (provider types with a wire
	// adapter): encoded before admission, so a target that cannot express
	// the request is passed over without queueing for it.
	wireURL  string
	wireBody []byte
	// wireOver replaces the providers' chat adapters for a non-chat
	// surface (embeddings: proxy/surface_embed.go); nil for chat.
	wireOver func(*provRuntime) wireAdapter
	// nr is a Messages or Responses request's native pass-through state
	// (surface_native.go); nil otherwise.
	nr *nativeReq

	// The operator metrics' readings (metrics_ops.go): when a stream's
	// first event went to the client, and the answer's usage.
	firstOut         time.Time
	promptTokens     int64
	completionTokens int64
	trace            *reqTrace // its trace when tracing is on and it is sampled (tracing.go)
	traceOff         bool      // not sampled
	opsSeries        *opsSeries
	// Stream resume and malformed events (proxy/resume.go).
	rsm       *resumeShell
	malformed model.MalformedEvents

	// hv backs the values of the response headers this request sets
	// (X-Request-Id, X-Breakwater-*, Content-Length): slices of it go into
	// the header map instead of one []string allocation per header.
	// net/http copies the map when the header is written, so nothing
	// outlives the request. Three-index slices keep an Add from spilling
	// into a neighbour.
	hv [hvLen]string

	// rec is the response recorder of a request served through wrap
	// (mgmt.go), allocated with the request's state; unused otherwise.
	rec statusRecorder
}

const (
	hvID = iota
	hvProvider
	hvConn
	hvAttempts
	hvLength
	hvLen
)

// hvSet puts v into the header map as key's only value, backed by rs.hv[i].
func (rs *reqState) hvSet(h http.Header, key string, i int, v string) {
	rs.hv[i] = v
	h[key] = rs.hv[i : i+1 : i+1]
}

// failure is the last upstream error, what the client gets when nothing
// else works.
type failure struct {
	status  int
	header  http.Header
	body    []byte
	verdict model.Verdict
}

// newRequestID returns the request's id (the client's X-Request-Id when it
// sent a usable one) and the form logs keep: a client may put anything in
// its id, a key included, so what is logged and stored has anything shaped
// like a key (sk-…, key_…, Bearer …) redacted. Not the request log's
// broader rules: they take any long opaque token, a UUID included, and an
// operator looks requests up by the id the client sent.
func newRequestID(r *http.Request) (id, logID string) {
	if v := headerValue(r.Header, "X-Request-Id"); v != "" && len(v) <= 128 {
		if secretPattern.MatchString(v) {
			return v, secretPattern.ReplaceAllString(v, "[redacted]")
		}
		return v, v
	}
	// 96 bits from the runtime's ChaCha8 generator (math/rand/v2, seeded
	// from the OS): an id is unique, not a secret, and this costs no
	// crypto/rand call per request.
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	var x [24]byte
	hex.Encode(x[:], b[:])
	id = string(x[:])
	return id, id
}

func (g *Gateway) handleChat(w http.ResponseWriter, r *http.Request) {
	g.serveChat(w, r, nil)
}

// serveChat serves a chat request; sr, when not nil, is a surface's
// request (surface.go): its id, client key and translated body are taken
// as they are, without a second read of the client's connection.
func (g *Gateway) serveChat(w http.ResponseWriter, r *http.Request, sr *surfaceReq) {
	g.serveChatIn(&reqState{}, w, r, sr)
}

// serveChatIn is serveChat into rs, a zero reqState the caller allocated
// (wrap allocates the response recorder with it).
func (g *Gateway) serveChatIn(rs *reqState, w http.ResponseWriter, r *http.Request, sr *surfaceReq) {
	g.active.Add(1) // also breakwater_inflight_requests (metrics.go)
	defer func() {
		if g.draining.Load() {
			// Shutdown closes the connections once no request is active:
			// the answer (a cut request's 503) must be on the wire first,
			// not in net/http's buffer, which it flushes after we return.
			_ = http.NewResponseController(w).Flush()
		}
		g.active.Add(-1)
	}()
	ok := g.startChat(rs, w, r, sr)
	defer rs.cw.release()
	if !ok {
		return
	}
	rs.sel = selPool.Get().(*model.Selection)
	defer selPool.Put(rs.sel)
	rs.finish(rs.run())
}

// startChat authenticates and reads the request; false when it was
// answered already. Out of line, so its locals are not under run while a
// stream is held (stack per held stream, docs/gateway.md "Measuring").
//
//go:noinline
func (g *Gateway) startChat(rs *reqState, w http.ResponseWriter, r *http.Request, sr *surfaceReq) bool {
	rs.g, rs.w, rs.r, rs.ctx, rs.s, rs.start = g, w, r, r.Context(), g.settings(), g.now()
	var body []byte
	if sr != nil { // authenticated and read by the surface
		rs.id, rs.logID, rs.key, rs.nr, body = sr.id, sr.logID, sr.key, sr.nr, sr.chat
		rs.hvSet(w.Header(), "X-Request-Id", hvID, rs.id)
	} else {
		rs.id, rs.logID = newRequestID(r)
		rs.hvSet(w.Header(), "X-Request-Id", hvID, rs.id)
		key, ok := g.authClient(r)
		if !ok {
			rs.setHeaders(w.Header()) // X-Breakwater-Attempts: 0, like every chat answer
			writeError(w, http.StatusUnauthorized, "invalid_api_key", "missing or invalid API key (Authorization: Bearer <key>)")
			return false
		}
		rs.key = key
	}
	rs.wireOver = surfaceWire(r, rs.nr, rs.s.UpstreamTimeouts.ResponseHeaderMs.Duration())
	rs.cw.watch(rs.ctx, w, g.clientWriteGrace) // cuts the body read and the attempts' writes (request.go)
	var err error
	if body == nil {
		rs.cw.setReading(true)
		body, err = readBodyWatched(w, r, g.maxBodyBytes(), g.bodyReadTimeout)
		rs.cw.setReading(false)
	}
	if err == nil {
		rs.req, err = parseChatRequest(body)
	}
	if err != nil {
		rs.refuseBody(err)
		return false
	}
	keyID := ""
	if rs.key != nil {
		keyID = rs.key.id
	}
	if k, ok := sessionKey(r, keyID); ok {
		rs.session = hex.EncodeToString(k[:])
	}
	return true
}

// refuseBody answers a request whose body could not be read or is not a
// chat request.
func (rs *reqState) refuseBody(err error) {
	w := rs.w
	rs.setHeaders(w.Header())
	if context.Cause(rs.ctx) == errShutdown {
		// The drain ran out while the body was still arriving: not the
		// client's bad request.
		rs.finish(rs.answerModelError(shuttingDown()))
		return
	}
	var be *errBadRequest
	if errors.As(err, &be) {
		writeError(w, be.status, be.code, be.msg)
		rs.finish(be.status)
		return
	}
	writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
	rs.finish(http.StatusBadRequest)
}

// count adds the request to the request metrics, once: before a delivered
// answer is flushed (so a scrape after the response counts it), else when
// the request finishes.
func (rs *reqState) count(status int) {
	if rs.counted {
		return
	}
	rs.counted = true
	if status == http.StatusOK && rs.cr.is(rs.provider, rs.conn) {
		rs.g.met.requestsOK(rs.cr).Inc()
	} else {
		rs.g.met.Requests.WithLabelValues(rs.countedProvider(), rs.conn, statusLabel(status)).Inc()
	}
	rs.g.met.Attempts.Observe(float64(rs.flow.Attempts()))
	rs.countOps(status) // proxy/metrics_ops.go
}

// countedProvider is the provider a request is counted and logged under:
// who answered last, or, answered before any connection was chosen (a
// typed refusal), a single-model request's own provider.
func (rs *reqState) countedProvider() string {
	if rs.provider == "" {
		return rs.flow.Route.Provider
	}
	return rs.provider
}

func (rs *reqState) finish(status int) {
	g := rs.g
	rs.status = status
	rs.count(status)
	lvl := slog.LevelDebug
	if status >= 500 || g.conf().Server.LogRequests {
		lvl = slog.LevelInfo
	}
	elapsed := g.now().Sub(rs.start)
	rs.observeOps(elapsed) // proxy/metrics_ops.go
	if g.ops.tracer != nil {
		rs.endTrace(status) // proxy/tracing.go
	}
	if g.log.Enabled(rs.ctx, lvl) {
		keyID := ""
		if rs.key != nil {
			keyID = rs.key.id
		}
		g.log.LogAttrs(context.Background(), lvl, "chat request", slog.String("request_id", rs.logID),
			slog.String("model", rs.req.Model), slog.String("provider", rs.countedProvider()), slog.String("connection", rs.conn),
			slog.String("client_key", keyID),
			slog.Int("status", status), slog.Int("attempts", rs.flow.Attempts()), slog.Int("waits", rs.flow.Waits()),
			slog.Bool("stream", rs.req.Stream), slog.Int64("duration_ms", elapsed.Milliseconds()))
	}
}

// run drives the model's Flow: it says which connection to try next (the
// attempt is already begun), when to wait for a short cooldown, and what to
// answer; the shell executes each step.
func (rs *reqState) run() int {
	g := rs.g
	var allowed []model.ConnRef
	if rs.key != nil {
		allowed = rs.key.allowed
	}
	// A request that presents no lease takes its first step under the lock
	// that starts its flow, at the same instant: one engine lock per
	// request fewer. A managed request checks its lease between the two
	// (leaseDispatch: the arbiter may be asked), so it steps in the loop.
	managed := rs.presentsLease()
	stepped, err := rs.startFlow(allowed, !managed)
	if err != nil {
		var me *model.Error
		if errors.As(err, &me) {
			return rs.answerModelError(me)
		}
		writeError(rs.w, http.StatusBadRequest, "invalid_model", err.Error())
		return http.StatusBadRequest
	}
	if managed {
		if done, status := rs.leaseDispatch(); done {
			return status
		}
	}
	rs.dl = rs.flow.Deadline().Std()
	for {
		if !stepped {
			if rs.ctx.Err() != nil {
				return rs.clientGone()
			}
			rs.refreshHeld()
			rs.nextStep()
		}
		stepped = false
		step := &rs.step
		if g.log.Enabled(rs.ctx, slog.LevelDebug) {
			rs.explain(step)
		}
		switch step.Kind {
		case model.StepWait:
			kind := rs.waitKind()
			if step.PriorityWait {
				kind = "priority_wait" // settings priorityWait: the first target is back in a moment
			}
			g.met.Waits.WithLabelValues(kind).Inc()
			switch how, left := rs.wait(time.Duration(step.WaitMs) * time.Millisecond); how {
			case waitClientGone:
				return rs.clientGone()
			case waitDrained:
				// The gateway is shutting down: a cooldown wait is not worth
				// holding the drain for; the client can come back (to another
				// replica) when the wait would have ended.
				e := shuttingDown()
				e.RetryAfterMs = max(e.RetryAfterMs, left.Milliseconds())
				return rs.answerModelError(e)
			}
		case model.StepAnswer:
			return rs.answer(step)
		case model.StepAttempt:
			if done, status := rs.attempt(&step.Attempt); done {
				return status
			}
		case model.StepLimitReset: // docs/spendwall.md (proxy/spendwall.go)
			if done, status := rs.limitReset(step); done {
				return status
			}
		}
	}
}

// nextStep asks the flow for its next step, into rs.step (a Step is large:
// kept in reqState, not in run's frame under every later call).
func (rs *reqState) nextStep() {
	g := rs.g
	// The debug explanation lists every candidate and exclusion; otherwise
	// selection may stop at the first candidate (docs/model.md#lazy-selection).
	rs.sel.Full = g.log.Enabled(rs.ctx, slog.LevelDebug)
	g.lock()
	rs.stepAt = g.modelNow()
	rs.step = rs.flow.Next(rs.stepAt, g.eng, rs.sel)
	g.unlock()
}

// startFlow resolves the requested model and starts the request's flow;
// with step (and the client still there) it also takes the flow's first
// step into rs.step under the same lock, as the loop's first nextStep
// would (the connections leased now read before it, as refreshHeld does).
// stepped reports whether it did. The flow is started in place
// (StartFlowIn: a Flow is 1 KiB). Out of line: the Step that Next returns
// by value is a large temporary, which inlined into run would stay in
// run's frame under every later call of the request (stack per held
// stream, docs/gateway.md "Measuring").
//
//go:noinline
func (rs *reqState) startFlow(allowed []model.ConnRef, step bool) (stepped bool, err error) {
	g := rs.g
	var held []model.ConnRef
	var heldUntil []model.Time
	if step {
		rs.sel.Full = g.log.Enabled(rs.ctx, slog.LevelDebug)
		if len(g.leases.managed) > 0 { // refreshHeld, read before the engine lock
			held, heldUntil = g.leases.heldUntilFor(g.modelNow())
		}
	}
	g.lock()
	defer g.unlock()
	route, err := g.eng.Resolve(rs.req.Model)
	if err != nil {
		return false, err
	}
	now := g.modelNow()
	g.eng.StartFlowIn(&rs.flow, now, route, rs.session, allowed)
	rs.resumeStart() // proxy/resume.go
	if !step || rs.ctx.Err() != nil {
		return false, nil
	}
	rs.flow.Held, rs.flow.HeldUntil = held, heldUntil
	rs.stepAt = now
	rs.step = rs.flow.Next(now, g.eng, rs.sel)
	return true, nil
}

// answer writes the flow's final answer (a served request was already
// delivered by the attempt).
func (rs *reqState) answer(st *model.Step) int {
	if c := st.LastConnection; c.Provider != "" {
		rs.provider, rs.conn = c.Provider, c.Connection
	}
	if st.Result == model.ResultStreamError {
		rs.flushStreamError(st) // an error event held back while a resume could come
	}
	switch st.Result {
	case model.ResultServed, model.ResultFallback, model.ResultStreamError:
		if st.Status == 0 {
			return http.StatusOK
		}
		return st.Status
	case model.ResultRejected:
		return rs.answerModelError(st.Err)
	}
	if st.Status == 499 {
		return rs.clientGone()
	}
	if rs.lastIsLocal && rs.lastLocal != nil {
		return rs.answerModelError(rs.lastLocal)
	}
	return rs.answerUpstream(st)
}

func (rs *reqState) waitKind() string {
	if rs.flow.Route.IsCombo() {
		return "combo_cooldown_wait"
	}
	return "wait_for_cooldown"
}

const (
	waitDone = iota
	waitClientGone
	waitDrained
)

// wait sleeps a flow's cooldown wait; it ends early when the client goes
// away, or when the gateway begins to shut down and the wait would not end
// (with a second to spare for the attempt after it) before the drain's
// deadline.
func (rs *reqState) wait(d time.Duration) (int, time.Duration) {
	rs.g.waiting(1)
	defer rs.g.waiting(-1)
	rep := rs.g.newDeadlineReport(rs.logID) // Options.Deadlines; nil = unset
	if rep != nil {
		rep.arm(rs.stepAt.Std().Add(d)) // the model's instant: the cooldown's end
		defer rep.end(false)            // it did not run out (a no-op once it has)
	}
	end := time.Now().Add(d)
	t := time.NewTimer(d)
	defer t.Stop()
	drain := rs.g.drainCh
	for {
		select {
		case <-t.C:
			if rep != nil {
				if early := rep.early(); early > 0 {
					t.Reset(early) // the reporting shell's clock has not reached it yet
					continue
				}
				rep.end(true) // before the next step, which is owed now
			}
			return waitDone, 0
		case <-rs.ctx.Done():
			return waitClientGone, 0
		case <-drain:
			if by := rs.g.drainBy.Load(); by == 0 || end.After(time.Unix(0, by).Add(-cutGrace)) {
				return waitDrained, time.Until(end) // what was left of it: the Retry-After
			}
			drain = nil // it fits in the drain: keep waiting
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (rs *reqState) setHeaders(h http.Header) {
	rs.setOwnHeaders(h)
	h["Date"] = httpDate(time.Now())
}

// setOwnHeaders sets the X-Breakwater-* headers of setHeaders, without
// the Date.
func (rs *reqState) setOwnHeaders(h http.Header) {
	// An answer no upstream took part in (refused before any attempt) names
	// no provider or connection rather than sending them empty.
	if rs.provider != "" {
		rs.hvSet(h, "X-Breakwater-Provider", hvProvider, rs.provider)
	}
	if rs.conn != "" {
		rs.hvSet(h, "X-Breakwater-Connection", hvConn, rs.conn)
	}
	rs.hvSet(h, "X-Breakwater-Attempts", hvAttempts, strconv.Itoa(rs.flow.Attempts()))
	if w := rs.flow.Waits(); w > 0 {
		// The answer came after a cooldown wait: a fallback, as after a
		// fail-over, though one attempt was made.
		h["X-Breakwater-Waits"] = []string{strconv.Itoa(w)}
	}
}

// dateNow caches the Date header value of the current second. Without a
// Date of its own net/http formats one for every response, which cost
// about 1 % of the gateway's instructions per request (make bench-instr).
var dateNow atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	v   []string // shared by every response of that second: never appended to
}

func httpDate(now time.Time) []string {
	sec := now.Unix()
	if d := dateNow.Load(); d != nil && d.sec == sec {
		return d.v
	}
	d := &dateValue{sec: sec, v: []string{now.UTC().Format(http.TimeFormat)}}
	dateNow.Store(d)
	return d.v
}

func (rs *reqState) clientGone() int {
	if context.Cause(rs.ctx) == errShutdown && !rs.committed {
		// Not the client: the shutdown's drain ran out of time.
		return rs.answerModelError(shuttingDown())
	}
	// The client is gone; 499 is for the logs and metrics (docs/selection.md#waiting-for-a-cooldown).
	if !rs.committed {
		rs.setHeaders(rs.w.Header())
		writeError(rs.w, model.CodeClientClosed.HTTPStatus(), string(model.CodeClientClosed), "Request aborted")
	}
	return 499
}

func (rs *reqState) answerModelError(e *model.Error) int {
	rs.setHeaders(rs.w.Header())
	return writeModelError(rs.w, e)
}

// answerUpstream gives the client the last upstream error with the flow's
// status and Retry-After.
func (rs *reqState) answerUpstream(st *model.Step) int {
	h := rs.w.Header()
	rs.setHeaders(h)
	status := st.Status
	if st.RetryAfterMs > 0 {
		h.Set("Retry-After", strconv.FormatInt(max(1, (st.RetryAfterMs+999)/1000), 10))
	}
	f := rs.lastFail
	if !model.Relayable(status) { // a redirect, a 1xx that ended the head, 600 and up
		var hdr http.Header
		if f != nil {
			hdr = f.header
		}
		writeJSON(rs.w, http.StatusBadGateway, errorBody{Error: apiError{Message: unrelayableStatus(status, hdr),
			Type: typeForStatus(http.StatusBadGateway), Code: "upstream_bad_status", Provider: rs.provider}})
		return http.StatusBadGateway
	}
	if f != nil && len(f.body) > 0 {
		if body := clientErrorBody(f.body, status, rs.provider); body != nil {
			ct := "application/json"
			if f.header != nil && strings.HasPrefix(f.header.Get("Content-Type"), "application/json") && bytes.Equal(body, f.body) {
				ct = f.header.Get("Content-Type")
			}
			h.Set("Content-Type", ct)
			h.Set("Content-Length", strconv.Itoa(len(body)))
			rs.w.WriteHeader(status)
			rs.w.Write(body)
			return status
		}
	}
	v := st.Verdict
	msg := v.Message
	if msg == "" {
		msg = fmt.Sprintf("upstream answered %d", status)
	}
	code := v.Reason.String()
	if code == "" {
		code = "upstream_error"
	}
	writeJSON(rs.w, status, errorBody{Error: apiError{Message: msg, Type: typeForStatus(status), Code: code, Provider: rs.provider}})
	return status
}

// unrelayableStatus says what the upstream answered instead of an answer
// or an error; for a redirect, where to (scheme and host only: the rest
// may carry anything), the usual cause being a baseURL with the wrong
// scheme or host.
func unrelayableStatus(status int, h http.Header) string {
	msg := fmt.Sprintf("the upstream answered %d", status)
	if t := http.StatusText(status); t != "" {
		msg += " " + t
	}
	if status < 300 || status > 399 {
		return msg + ", which is neither an answer nor an error"
	}
	msg += "; the gateway does not follow redirects"
	if u, err := url.Parse(headerValue(h, "Location")); err == nil && u.Host != "" && len(u.Host) <= 255 {
		msg += fmt.Sprintf(" (it points to %s://%s: check the provider's baseURL)", u.Scheme, u.Host)
	}
	return msg
}

// explain logs what the model considered and why each excluded target or
// connection was left out (docs/selection.md#explanations), at debug level.
func (rs *reqState) explain(st *model.Step) {
	var cands, excl strings.Builder
	for i, c := range rs.sel.Candidates {
		if i > 0 {
			cands.WriteString(" ")
		}
		cands.WriteString(c.Provider + "/" + c.Connection + ":" + c.Model)
	}
	for i, x := range rs.sel.Excluded {
		if i > 0 {
			excl.WriteString(" ")
		}
		fmt.Fprintf(&excl, "%s/%s:%s=%s", x.Provider, x.Connection, x.Model, x.Reason)
		if x.LockReason != model.ReasonNone {
			fmt.Fprintf(&excl, "(%s)", x.LockReason)
		}
		if x.RemainingMs > 0 {
			fmt.Fprintf(&excl, "[%dms]", x.RemainingMs)
		}
	}
	attrs := []slog.Attr{slog.String("request_id", rs.logID), slog.String("model", rs.req.Model), slog.String("step", st.Kind.String()),
		slog.String("candidates", cands.String()), slog.String("excluded", excl.String()), slog.Int("attempts", rs.flow.Attempts())}
	switch st.Kind {
	case model.StepAttempt:
		attrs = append(attrs, slog.String("try", st.Attempt.Provider+"/"+st.Attempt.Connection))
		if st.Attempt.Resume {
			attrs = append(attrs, slog.String("resume", st.Attempt.Continuation.String()))
		}
	case model.StepWait:
		attrs = append(attrs, slog.Int64("wait_ms", st.WaitMs))
	case model.StepAnswer:
		attrs = append(attrs, slog.String("result", st.Result.String()), slog.Int("status", st.Status))
		if st.Err != nil {
			attrs = append(attrs, slog.String("code", string(st.Err.Code)))
		}
	}
	rs.g.log.LogAttrs(context.Background(), slog.LevelDebug, "flow step", attrs...)
}
