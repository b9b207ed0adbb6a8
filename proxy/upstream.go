package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
	"github.com/breakwater-gw/breakwater/model"
)

// Why an attempt's context was cancelled: the phase timers of docs/settings.md#defaults,
// the stream watchdogs of docs/streams.md and the execution bound of docs/admission.md.
var (
	errHeaderTimeout  = errors.New("response header timeout")
	errAttemptTimeout = errors.New("attempt timeout")
	errExecTimeout    = errors.New("execution bound reached")
	errDeadline       = errors.New("request deadline reached")
	errStall          = errors.New("stream stalled")
	errThroughput     = errors.New("stream throughput below minimum")
)

const maxErrorBody = 64 << 10
const maxResponseBody = 64 << 20

// firstAnswerBuffer bounds what a declared Content-Length reserves before
// the body arrives.
const firstAnswerBuffer = 64 << 10

type resKind uint8

const (
	resFailed        resKind = iota // not committed: follow the verdict
	resDone                         // delivered
	resGone                         // the client went away
	resCommittedFail                // failed after bytes reached the client; the SSE error event was sent
	resSkip                         // not attempted (breaker refused the permit)
)

// execResult is what one upstream attempt produced, as the shell saw it.
type execResult struct {
	outcome   model.Outcome
	delivered bool // success delivered to the client
	committed bool // bytes reached the client
	status    int  // status the client got (when committed)
	// dispatched: the attempt went to the upstream (not refused by the
	// admission stage, nor given up while queued).
	dispatched bool
	errBody    []byte
	header     http.Header
	local      *model.Error // a local bound (execution) that ended it
	egressIP   string       // the local address the attempt went out from (docs/classification.md)
}

// attempt executes one attempt the flow began: pacing and admission, the
// upstream call, then Flow.Record. Every attempt is recorded exactly once,
// whatever happens (a panic records a neutral outcome). It reports whether
// the flow is over, with the status the client got.
func (rs *reqState) attempt(a *model.Attempt) (bool, int) {
	g := rs.g
	recorded := false
	defer func() {
		if !recorded { // a panic: free the permit, neutrally
			g.lock()
			rs.flow.Record(g.modelNow(), g.eng, a, model.Report{Outcome: model.Outcome{Kind: model.OutcomeClientAbort}, Committed: rs.committed})
			g.unlock()
		}
	}()
	prov, conn, over, done, status := rs.target(a)
	if over {
		recorded = true
		return done, status
	}
	sl, execMax, refusal := rs.admit(a, conn)
	if refusal != nil {
		recorded = true
		return rs.refused(a, refusal)
	}
	defer sl.release() // a no-op once settle released it
	if len(g.leases.managed) > 0 {
		if stop, done, status := rs.leasedWhileQueued(a); stop {
			recorded = true
			return done, status
		}
	}
	out, sent := rs.dispatch(prov, conn, a, execMax)
	recorded = true
	return rs.settle(a, conn, &out, sent, &sl)
}

// target finds the attempt's provider and connection and encodes the
// request for a native wire format; over: the attempt ended before
// admission (a lease fence, a connection no longer there, a request the
// provider type cannot express) and was recorded.
func (rs *reqState) target(a *model.Attempt) (prov *provRuntime, conn *connRuntime, over, done bool, status int) {
	rs.provider, rs.conn = a.Provider, a.Connection
	if done, status := rs.leaseFenceRefuses(a); done { // docs/leases.md: before every managed dispatch
		return nil, nil, true, done, status
	}
	if prov = rs.g.provider(a.Provider); prov != nil {
		conn = prov.conns[a.Connection]
	}
	if conn == nil {
		done, status = rs.record(a, &execResult{outcome: model.Outcome{Kind: model.OutcomeLocalQueue}})
		return nil, nil, true, done, status
	}
	rs.cr = conn
	if wa := rs.wireFor(prov); wa != nil {
		var err error
		if rs.wireURL, rs.wireBody, err = wa.encode(rs.reqFor(a), a.Model); err != nil {
			done, status = rs.unsupported(a, err)
			return nil, nil, true, done, status
		}
	}
	return prov, conn, false, false, 0
}

// refused records an attempt the admission stage refused. A local refusal
// is reported to the model (neutral: never upstream health); the flow
// moves on, and answers with it if nothing serves.
func (rs *reqState) refused(a *model.Attempt, refusal *model.Error) (bool, int) {
	var out execResult
	if rs.ctx.Err() != nil {
		out.outcome.Kind = model.OutcomeClientAbort
		return rs.record(a, &out)
	}
	// A local refusal is reported to the model (neutral: never upstream
	// health); the flow moves on, and answers with it if nothing serves.
	rs.g.met.QueueRej.WithLabelValues(a.Provider, a.Connection, string(refusal.Code)).Inc()
	out.outcome.Kind, out.local = model.OutcomeLocalQueue, refusal
	return rs.record(a, &out)
}

// dispatch sends the admitted attempt upstream; sent is when.
func (rs *reqState) dispatch(prov *provRuntime, conn *connRuntime, a *model.Attempt, execMax int64) (out execResult, sent time.Time) {
	sent = rs.g.now()
	a.Dispatch(model.TimeOf(sent)) // request-local; the herd guard counts from dispatch, not from the queue
	rs.headersAt = time.Time{}
	if prov.egress {
		// Learn the attempt's egress IP (docs/classification.md, proxy/egress.go); only
		// egress-bucketed providers need it, the others skip the trace.
		ctx0, probe := rs.ctx, &egressProbe{}
		rs.ctx = probe.trace(ctx0)
		out = rs.execute(prov, conn, a, execMax, sent)
		rs.ctx = ctx0
		out.egressIP = egressOf(conn, probe)
	} else {
		out = rs.execute(prov, conn, a, execMax, sent)
	}
	out.dispatched = true
	return out, sent
}

// settle records a dispatched attempt and, when it delivered, frees its
// slot and flushes the answer.
func (rs *reqState) settle(a *model.Attempt, conn *connRuntime, out *execResult, sent time.Time, sl *slot) (bool, int) {
	if a.Resume {
		rs.resumeResult(a, out) // proxy/resume.go
	}
	if out.outcome.Kind == model.OutcomeResponse && out.errBody != nil {
		out.errBody = redact(out.errBody, conn.cfg.APIKey)
	}
	if out.outcome.Body != "" {
		// The model keeps a snippet of an error body as the connection's
		// lastError (health, cooldowns, the store): redacted like the
		// client's copy, since an upstream may quote the credential and
		// the model does not know it.
		out.outcome.Body = string(redact([]byte(out.outcome.Body), conn.cfg.APIKey))
	}
	done, status := rs.record(a, out)
	rs.logAttempt(a, out, sent)
	if out.delivered {
		// The model and the request log have the outcome and the slot is
		// free (a read or a next request after the response sees that); the
		// rest (metrics, the request's log line) need not delay the client.
		sl.release()
		rs.count(status)
		if f, ok := rs.w.(http.Flusher); ok {
			f.Flush()
		}
	}
	return done, status
}

// leasedWhileQueued runs the lease checks again once admission is over:
// it may have waited (a full connection's queue, pacing) while leases
// changed. The fence runs right before the request goes out (docs/leases.md), and
// a connection leased meanwhile by another owner is left to it
// (model.LeasedWhileQueued, as in the simulator: a local refusal). stop: the attempt is over (recorded).
// Out of line, so its locals are not under the upstream call (stack per
// held stream, docs/gateway.md "Measuring").
//
//go:noinline
func (rs *reqState) leasedWhileQueued(a *model.Attempt) (stop, done bool, status int) {
	if done, status := rs.leaseFenceRefuses(a); done {
		return true, done, status
	}
	if rs.lease != nil {
		return false, false, 0
	}
	now := rs.g.modelNow()
	held, until := rs.g.leases.heldUntilFor(now)
	if err := model.LeasedWhileQueued(now, a, held, until); err != nil {
		out := execResult{outcome: model.Outcome{Kind: model.OutcomeLocalQueue}, local: err}
		done, status := rs.record(a, &out)
		return true, done, status
	}
	return false, false, 0
}

// unsupported reports an attempt whose provider type cannot express the
// request (encode refused it): no upstream call, no admission, neutral for
// health; the flow passes the target over (model.ReportUnsupported)
// and answers 400 unsupported_by_provider_type only when nothing else can
// serve. Anything but a wireError is a provider fault of ours: the
// attempt is recorded as a refused connection.
func (rs *reqState) unsupported(a *model.Attempt, err error) (bool, int) {
	g := rs.g
	merr, ok := unsupportedError(a.Provider, err)
	if !ok {
		return rs.record(a, &execResult{outcome: model.Outcome{Kind: model.OutcomeTransport, Transport: model.TransportRefused}})
	}
	g.lock()
	rs.flow.Record(g.modelNow(), g.eng, a, model.Report{Kind: model.ReportUnsupported, Err: merr})
	g.unlock()
	g.log.Debug("target passed over: its provider type cannot express the request",
		"request_id", rs.logID, "provider", a.Provider, "model", a.Model, "error", merr.Message)
	return false, 0
}

// admit takes the attempt's slot, then paces it (docs/admission.md#concurrency-gates, docs/admission.md, docs/admission.md#concurrency-gates
// quota-share): the slot, the execution bound in ms (for
// model.AttemptBound) and, when refused, why. The gate comes first so that
// a pacing slot is booked only for an attempt that will dispatch when it
// comes: a request the gate refuses (queue full, timeout) leaves no phantom
// use in the rpm window and is refused at once, and attempts released by the
// gate together are still spaced minTimeMs apart. The simulator admits in
// the same order (sim/admission.go). Out of line, so its locals are not
// under the upstream call (stack per held stream, docs/gateway.md
// "Measuring").
//
//go:noinline
func (rs *reqState) admit(a *model.Attempt, conn *connRuntime) (slot, int64, *model.Error) {
	if a.Resume {
		if err := rs.prefillError(a); err != nil { // proxy/resume.go: never sent, neutral
			return slot{}, 0, err
		}
	}
	g := rs.g
	ov := conn.cfg.RateLimitOverrides
	maxWait, execMax := rs.s.QueueBudgets(model.ConnOverrides{MaxWaitMs: model.Millis(ov.MaxWaitMs), ExecutionMaxWaitMs: model.Millis(ov.ExecutionMaxWaitMs)})
	now := g.now()
	queueLeft := min(time.Duration(maxWait)*time.Millisecond-now.Sub(rs.start), rs.dl.Sub(now))
	var refusal *model.Error
	failOpen, noConnCap := rs.quotaShareAdmission() // docs/admission.md#concurrency-gates quota-share
	// The gate and the pacer each say how long they held the attempt
	// (0 without a clock read when they let it through at once).
	rep := g.newDeadlineReport(rs.logID) // Options.Deadlines: a queue budget, a paced slot (nil = unset)
	sl, waited, aerr := g.gate.acquire(rs.ctx, a.Provider, a.Connection, a.Model, rs.s.RequestQueue.MaxQueueDepth, queueLeft, failOpen, noConnCap, rep)
	if aerr != nil {
		refusal = aerr.err
	}
	if refusal == nil && a.Limited { // docs/admission.md: the engine says this connection goes through the admission queue
		queueLeft -= waited
		var paced time.Duration
		at := now // the gate let it through at once: the same instant
		if waited > 0 {
			at = g.now()
		}
		if paced, refusal = g.pace.waitFrom(rs.ctx, at, model.ConnRef{Provider: a.Provider, Connection: a.Connection}, &conn.limiter, a.Model, ov, rs.s.RequestQueue.MaxQueueDepth, queueLeft, rep); refusal != nil {
			sl.release()
		}
		waited += paced
	}
	if waited > time.Millisecond || refusal != nil {
		g.met.QueueWait.WithLabelValues(a.Provider, a.Connection).Observe(waited.Seconds())
	}
	return sl, execMax, refusal
}

// record reports an attempt's outcome to the flow and keeps what the client
// may get if nothing else serves.
func (rs *reqState) record(a *model.Attempt, out *execResult) (bool, int) {
	g := rs.g
	var maxWait int64
	if a.Limited {
		maxWait = rs.maxWaitOf(a) // before the engine lock: provMu is never taken under it
	}
	var v model.Verdict
	var ans *model.Step
	var fb model.LimiterFeedback
	g.lock()
	// One reading for the whole record, and the end of a dispatched
	// attempt's request log record (logAttempt).
	rs.recordedAt = g.now()
	now := model.TimeOf(rs.recordedAt)
	if out.egressIP != "" {
		// Before Record: a 429 on an egress-bucketed provider cools the
		// siblings sharing this attempt's egress IP (docs/classification.md).
		_ = g.eng.SetEgressIP(now, model.ConnRef{Provider: a.Provider, Connection: a.Connection}, out.egressIP)
	}
	if out.local != nil && out.local.Code == model.CodeShuttingDown {
		v, ans = rs.flow.Record(now, g.eng, a, model.Report{Kind: model.ReportCut, Err: out.local, Committed: out.committed})
	} else if !out.dispatched && out.local != nil {
		// The admission stage refused it: as the simulator records it.
		v, ans = rs.flow.Record(now, g.eng, a, model.Report{Kind: model.ReportLocal, Err: out.local})
	} else {
		v, ans = rs.flow.Record(now, g.eng, a, model.Report{Outcome: out.outcome, Committed: out.committed})
	}
	if a.Limited && out.outcome.Kind == model.OutcomeResponse {
		fb = g.eng.LimiterFeedback(now, a, &out.outcome, &v, maxWait)
	}
	g.unlock()
	g.pace.feedback(model.ConnRef{Provider: a.Provider, Connection: a.Connection}, fb)
	rs.lastV = v
	switch {
	case !out.dispatched:
		// Refused or given up in the admission stage: never an upstream
		// attempt (the refusal has its own counter).
	case out.outcome.Kind == model.OutcomeResponse && out.outcome.Status == http.StatusOK && rs.cr.is(a.Provider, a.Connection):
		g.met.upstreamOK(rs.cr).Inc()
	default:
		g.met.Upstream.WithLabelValues(a.Provider, a.Connection, resultLabel(out)).Inc()
		if out.outcome.Kind == model.OutcomeResponse && out.outcome.Status == http.StatusNotFound {
			g.ops.note404(a.Provider, a.Model) // the baseURL hint (proxy/ops.go)
		}
	}
	if g.ops.tracer != nil && out.dispatched {
		rs.traceAttempt(a, out) // the attempt's span (proxy/tracing.go)
	}
	switch {
	case out.delivered:
	case out.local != nil:
		rs.lastLocal, rs.lastIsLocal = out.local, true
	case out.outcome.Kind == model.OutcomeResponse:
		rs.lastFail = &failure{status: out.outcome.Status, header: out.header, body: out.errBody, verdict: v}
		rs.lastIsLocal = false
	case out.outcome.Kind != model.OutcomeClientAbort:
		rs.lastFail = &failure{status: v.ClientStatus, verdict: v}
		rs.lastIsLocal = false
	}
	if ans == nil {
		return false, 0
	}
	if out.delivered {
		return true, out.status
	}
	return true, rs.answer(ans)
}

// execute makes one upstream call under the phase timers and, on success,
// delivers it to the client; sent is when it was dispatched.
func (rs *reqState) execute(prov *provRuntime, conn *connRuntime, cand *model.Attempt, execMaxMs int64, sent time.Time) (res execResult) {
	// The attempt's parent and its clock, in one allocation per attempt
	// (not reused in reqState: a finished attempt's timer may still be
	// unlinking its context from it).
	run := &attemptRun{}
	// The dialer finds the clock (dialUpstream); the request's end cancels
	// the attempt through clientWrites when it watches the request.
	run.clockCtx = clockCtx{Context: rs.ctx, clock: &run.clock, detached: rs.cw.watching()}
	actx, cancel := context.WithCancelCause(&run.clockCtx)
	defer cancel(nil)
	// A cut attempt (its clock, a stream watchdog) does not wait on a
	// client that reads nothing (clientWrites, request.go): the cut gives
	// the client grace. end runs before cancel(nil) above.
	rs.cw.begin(cancel)
	defer func() {
		rs.cw.end(res.committed, res.committed && res.outcome.Kind == model.OutcomeClientAbort)
	}()
	run.clock.cw = &rs.cw
	rs.startClock(&run.clock, execMaxMs, sent, cancel)
	defer run.clock.stop()
	req, err := rs.upstreamRequest(withReuseGuard(actx, &run.conn, prov.plain), prov, conn, cand, &run.body) // the reuse guard (transport.go)
	if err != nil {
		return transport(model.TransportRefused)
	}
	if !prov.plain {
		run.conn.sendOnce(req) // HTTP/2 resends a written request on some resets (transport.go)
	}
	return rs.exchange(actx, cancel, run, prov, conn, cand, req)
}

// attemptRun is an attempt's parent context with the clock it carries,
// and the stream watchdogs of an attempt that streams: one allocation.
type attemptRun struct {
	clockCtx
	clock attemptClock
	watch streamWatch
	conn  connWatch // the reuse guard's view of the attempt's connection
	// body reads the upstream request's body. In the attempt's own
	// allocation, not in reqState: the Transport may still be writing
	// the body after the attempt has its answer, while a next attempt
	// sends its own.
	body bytes.Reader
}

// startClock starts the attempt's clock: the model's bound of the whole
// attempt (attemptMs, the execution bound, the request's deadline: the
// same rule the simulator times by), then the header budget.
func (rs *reqState) startClock(c *attemptClock, execMaxMs int64, sent time.Time, cancel context.CancelCauseFunc) {
	boundMs, why := model.AttemptBound(rs.s, execMaxMs, rs.dl.Sub(sent).Milliseconds())
	cause := errAttemptTimeout
	switch why {
	case model.CutExecution:
		cause = errExecTimeout
	case model.CutDeadline:
		cause = errDeadline
	}
	c.rep = rs.g.newDeadlineReport(rs.logID)
	c.start(time.Duration(boundMs)*time.Millisecond, cause, rs.s.UpstreamTimeouts.ResponseHeaderMs.Duration(), cancel)
}

// upstreamRequest builds the attempt's upstream request on ctx: the
// provider's native wire format (encoded by attempt) or the client's body
// with the upstream model id, and the gateway's headers; rd, the
// attempt's own, reads an OpenAI-compatible provider's body.
func (rs *reqState) upstreamRequest(ctx context.Context, prov *provRuntime, conn *connRuntime, cand *model.Attempt, rd *bytes.Reader) (*http.Request, error) {
	wa := rs.wireFor(prov) // native wire format (proxy/adapter.go)
	if wa == nil {
		if prov.chatErr != nil {
			return nil, prov.chatErr
		}
		body := rs.reqFor(cand).bodyFor(cand.Model)
		if !cand.SlowLane && !rs.passesHeaders() {
			// Nothing of this request's own goes into the head: the
			// connection's shared one (connRuntime.head), which the
			// upstream call only reads.
			return newPostRequest(ctx, prov.chatReq, body, rd, conn.head(rs.req.Stream)), nil
		}
		req := newPostRequest(ctx, prov.chatReq, body, rd, make(http.Header, 6))
		setUpstreamHead(req.Header, conn, rs.req.Stream)
		rs.setOwnUpstreamHead(req, cand)
		return req, nil
	}
	var req *http.Request
	var err error
	if t, ok := wa.(postTemplater); ok && t.postTemplate() != nil {
		req = newPostRequest(ctx, t.postTemplate(), rs.wireBody, nil, make(http.Header, 6)) // a surface's chat attempt: the chat URL
	} else if req, err = newJSONRequest(ctx, rs.wireURL, rs.wireBody); err != nil {
		return nil, err
	}
	wa.setAuth(req.Header, conn.cfg.APIKey)
	setUpstreamHead(req.Header, conn, rs.req.Stream)
	rs.setOwnUpstreamHead(req, cand)
	return req, nil
}

// setUpstreamHead sets the headers every upstream request of conn
// carries. Shared value slices (hdrJSON, conn.authHdr, …): the upstream
// call only reads the request's header, so one copy serves every request.
func setUpstreamHead(h http.Header, conn *connRuntime, stream bool) {
	h["Content-Type"] = hdrJSON
	if stream {
		h["Accept"] = hdrSSE
	} else {
		h["Accept"] = hdrJSON
	}
	if conn.authHdr != nil {
		h["Authorization"] = conn.authHdr
	}
	h["User-Agent"] = hdrUserAgent
}

// setOwnUpstreamHead adds the headers of the request's own to its
// upstream request's head.
func (rs *reqState) setOwnUpstreamHead(req *http.Request, cand *model.Attempt) {
	setSpendWallHeader(req.Header, cand) // docs/spendwall.md: the model put this attempt on the lane
	// The client's allow-listed headers (surface_config.go).
	if rs.passHeaders(req.Header) {
		// With an idempotency key and a GetBody the Transport would send
		// a written POST again when its connection fails (transport.go):
		// without GetBody it never does. The cost: such a request is not
		// re-sent either when nothing of it was written (a kept-alive
		// connection the upstream had just closed); that attempt fails and
		// the model decides.
		req.GetBody = nil
	}
}

// exchange sends the attempt's request and reads what came back: an
// error status, a stream, or one JSON answer.
func (rs *reqState) exchange(actx context.Context, cancel context.CancelCauseFunc, run *attemptRun, prov *provRuntime, conn *connRuntime, cand *model.Attempt, req *http.Request) execResult {
	clock := &run.clock
	resp, err := prov.roundTrip(req)
	head := time.Since(clock.base) // the latency from the clock's start, read once
	if err == nil {
		rs.headersAt = rs.g.now() // the request log's first-byte time
	}
	rs.g.met.latencyOf(conn).Observe(head.Seconds())
	if err != nil {
		return rs.failure(actx, err, false)
	}
	// Nothing reads the request from the response: let it (its headers,
	// URL and body reader) go while a stream is held.
	resp.Request = nil
	scrubHeader(resp.Header, conn.cfg.APIKey)
	defer resp.Body.Close()
	to := &rs.s.UpstreamTimeouts
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		clock.headersInAt(head, to.StreamIdleMs.Duration()) // see errorAnswer
		return rs.errorAnswer(actx, resp)
	}
	if ce := headerValue(resp.Header, "Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// Encoded in a way the gateway did not ask for and does not decode
		// (gzip is decoded, transport.go): not an answer it can validate.
		return execResult{outcome: model.Outcome{Kind: model.OutcomeQuality}}
	}
	if wa := rs.wireFor(prov); wa != nil { // error bodies above stay native; a success reads as OpenAI
		wa.wrap(resp, cand.Model)
	}
	// Read once: a JSON answer passes the same value on (deliverJSON).
	ct := resp.Header["Content-Type"]
	if len(ct) > 0 && strings.HasPrefix(ct[0], "text/event-stream") {
		if !rs.req.Stream {
			// A stream to a request that asked for one JSON answer: a
			// client of the API cannot read it, so it is not relayed (the
			// output validation case, retried elsewhere).
			return execResult{outcome: model.Outcome{Kind: model.OutcomeQuality}}
		}
		clock.headersInAt(head, 0) // the stream watchdogs take over (streamWatch)
		if cand.Resume {
			return rs.pipeContinuation(actx, run, resp, cand) // proxy/resume.go
		}
		return rs.pipeStream(actx, run, resp, conn.cfg.APIKey)
	}
	clock.headersInAt(head, to.FirstContentMs.Duration())
	return rs.deliverJSON(actx, clock, resp, ct)
}

// errorAnswer reads an upstream's error status and body. An error body is
// small and comes at once: it reads under the idle budget, so an upstream
// that sends a status and then stalls is cut like a stalled stream, not
// after the whole attempt's bound (attemptMs, 600 s by default).
func (rs *reqState) errorAnswer(actx context.Context, resp *http.Response) execResult {
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	// Cut by the idle budget, the answer is still the status the
	// upstream sent (with what of its body came): classified as such.
	stalled := context.Cause(actx) == errStall && rs.ctx.Err() == nil
	if rerr != nil && len(b) == 0 && actx.Err() != nil && !stalled {
		return rs.failure(actx, rerr, true)
	}
	return execResult{outcome: model.Outcome{Kind: model.OutcomeResponse, Status: resp.StatusCode, Headers: upstreamHeader(resp.Header),
		Body: string(b[:min(len(b), model.MaxBodyPrefix)])}, errBody: b, header: resp.Header}
}

// postTemplater is a wire adapter whose URL is a provider's chat URL,
// parsed once (postTemplate, nil when it is not).
type postTemplater interface {
	postTemplate() *http.Request
}

// newPostRequest is http.NewRequestWithContext(ctx, tmpl.Method, tmpl.URL,
// bytes.NewReader(body)) for a URL parsed once per provider: parsing it
// for every attempt was about 2 % of the gateway's instructions per
// request (make bench-instr). The URL is the template's own: nothing
// changes a request's URL once built (a RoundTripper must not), so one
// copy serves every attempt. rd, when not nil, is the reader to read
// body with (the attempt's own); h is the request's header.
func newPostRequest(ctx context.Context, tmpl *http.Request, body []byte, rd *bytes.Reader, h http.Header) *http.Request {
	req := tmpl.WithContext(ctx)
	req.Header = h
	req.ContentLength = int64(len(body))
	if len(body) == 0 {
		req.Body = http.NoBody
		req.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
		return req
	}
	if rd == nil {
		rd = new(bytes.Reader)
	}
	rd.Reset(body)
	// A bytes.Reader behind io.NopCloser, which the Transport recognises
	// as in memory: it then writes head and body in one write. Any other
	// reader type makes it flush the head first, one more syscall (and
	// one more wake-up of the upstream) per attempt.
	req.Body = io.NopCloser(rd)
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return req
}

// failure maps an error of the upstream call to the outcome the model
// classifies (docs/classification.md#verdicts "transport" rows), or to a local cause.
func (rs *reqState) failure(actx context.Context, err error, afterHeaders bool) execResult {
	if rs.ctx.Err() != nil {
		if context.Cause(rs.ctx) == errShutdown {
			// The drain ran out of time and cut the request (not the
			// client's doing): neutral, and the client is told.
			return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort}, local: shuttingDown()}
		}
		return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort}}
	}
	if plan, x, ok := timerCause(context.Cause(actx)); ok {
		// A timer of the attempt's plan ran out: the model says what that
		// is (the gateway's own bounds are neutral for upstream health).
		o, local := plan.TimerOutcome(x)
		return execResult{outcome: o, local: local}
	}
	if context.Cause(actx) == errThroughput {
		return execResult{outcome: model.Outcome{Kind: model.OutcomeThroughput}}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		if op.Timeout() {
			return transport(model.TransportConnectTimeout)
		}
		return transport(model.TransportRefused)
	}
	var te interface{ Timeout() bool }
	if !afterHeaders && errors.As(err, &te) && te.Timeout() {
		// The Transport's ResponseHeaderTimeout (the attempt clock's
		// backstop) ran out.
		return transport(model.TransportHeaderTimeout)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return transport(model.TransportRefused)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return transport(model.TransportRefused)
	}
	if afterHeaders && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return transport(model.TransportEarlyEOF)
	}
	return transport(model.TransportReset)
}

func transport(t model.Transport) execResult {
	return execResult{outcome: model.Outcome{Kind: model.OutcomeTransport, Transport: t}}
}

// Header values shared by every request; never modified (three-index
// slices, so even an Add copies).
var (
	hdrJSON      = []string{"application/json"}[:1:1]
	hdrSSE       = []string{"text/event-stream"}[:1:1]
	hdrUserAgent = []string{"breakwater"}[:1:1]
	hdrNoCache   = []string{"no-cache"}[:1:1]
	hdrNo        = []string{"no"}[:1:1]
)

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// deliverJSON reads a non-streamed answer whole (so a broken body can still
// be retried elsewhere), then writes it to the client; ct is the answer's
// Content-Type values (resp.Header's own, as exchange read them).
func (rs *reqState) deliverJSON(actx context.Context, clock *attemptClock, resp *http.Response, ct []string) execResult {
	to := &rs.s.UpstreamTimeouts
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 1<<20 {
			bufPool.Put(buf)
		}
	}()
	// Sized from the declared length only up to firstAnswerBuffer: past
	// it the buffer grows with the bytes that arrive, so an answer that
	// declares 60 MiB and sends one byte costs what arrived.
	if resp.ContentLength > 0 {
		buf.Grow(int(min(resp.ContentLength, firstAnswerBuffer)))
	}
	for {
		if buf.Available() < 4<<10 {
			buf.Grow(8 << 10)
		}
		free := buf.AvailableBuffer()[:buf.Available()]
		n, err := resp.Body.Read(free)
		if n > 0 {
			buf.Write(free[:n]) // in place: free is buf's own spare capacity
			clock.progress(to.StreamIdleMs.Duration())
			if buf.Len() > maxResponseBody {
				return transport(model.TransportReset)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return rs.failure(actx, err, true)
		}
	}
	usage, ok := validAnswer(buf.Bytes())
	if !ok {
		// A 200 whose body is not one whole JSON document (cut short, or
		// garbled) is never delivered as a success: the model's output
		// validation case (the synthetic 502), retried elsewhere.
		return execResult{outcome: model.Outcome{Kind: model.OutcomeQuality}}
	}
	if usage != nil {
		rs.noteUsageIn(usage) // token counts (metrics_ops.go)
	}
	h := rs.w.Header()
	rs.setHeaders(h)
	// The upstream's first value is passed on in its own slice (nothing
	// else reads or changes resp.Header now; maps net/http parses are keyed
	// canonically, see headerValue).
	if v := firstOf(ct); v != nil {
		h["Content-Type"] = v
	} else {
		h["Content-Type"] = hdrJSON
	}
	if id := firstValue(resp.Header, "X-Request-Id"); id != nil {
		h["X-Upstream-Request-Id"] = id
	}
	if cl := firstValue(resp.Header, "Content-Length"); cl != nil && isLength(cl[0], buf.Len()) {
		h["Content-Length"] = cl // the upstream's own, which the body matched: no formatting
	} else {
		rs.hvSet(h, "Content-Length", hvLength, strconv.Itoa(buf.Len()))
	}
	rs.committed = true
	rs.w.WriteHeader(resp.StatusCode)
	rs.w.Write(buf.Bytes()) // flushed by attempt once the outcome is recorded and counted
	return execResult{outcome: model.Outcome{Kind: model.OutcomeResponse, Status: resp.StatusCode, Headers: upstreamHeader(resp.Header)},
		delivered: true, committed: true, status: resp.StatusCode}
}

// validAnswer reports whether a non-streamed answer is one whole JSON
// document and returns the value of its top-level "usage" member (nil
// without one): the pass that validates the answer also finds its usage,
// so the body is not searched a second time, and a "usage" nested deeper
// (a tool's arguments, a choice's own object) is never taken for it.
func validAnswer(b []byte) (usage []byte, ok bool) {
	ok = jsonvalid.Members(b, func(ks, ke, vs, ve int) {
		if k := b[ks:ke]; usage == nil && (plainKeyEquals(k, "usage") || escapedKeyEquals(k, "usage")) {
			usage = b[vs:ve]
		}
	})
	return usage, ok
}

// isLength reports whether v is n in decimal as strconv writes it (no
// sign, space or leading zero).
func isLength(v string, n int) bool {
	if v == "" || len(v) > 18 || (v[0] == '0' && len(v) > 1) {
		return false
	}
	m := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
		m = m*10 + int(v[i]-'0')
	}
	return m == n
}

// streamWatch runs the model's stream watchdogs (docs/streams.md) for one attempt:
// fed every event, and checked at Watchdog.Deadline so a silent stream is
// caught by time. The timer is the attempt clock's (one per attempt): the
// clock's fire checks its own bound, then calls fire, which re-arms the
// timer for the earlier of the two. An abort cancels the attempt with its
// cause.
type streamWatch struct {
	mu      sync.Mutex
	g       *Gateway
	w       model.Watchdog
	armed   model.Time
	tick    int64         // re-check period once the throughput watchdog is ready
	clock   *attemptClock // the attempt's: its timer, and a watchdog's abort cuts it (attemptClock.cut)
	stopped bool
	drain   io.Closer       // the body drainAfterDone reads: the timer closes it
	rep     *deadlineReport // Options.Deadlines (proxy/deadlines.go); nil = unset
}

// start arms a zero streamWatch (the attempt's own, in its attemptRun).
func (sw *streamWatch) start(g *Gateway, s *model.Settings, clock *attemptClock) *streamWatch {
	now := g.modelNow()
	sw.mu.Lock()
	sw.g, sw.w, sw.clock = g, model.NewWatchdog(s, now), clock
	sw.rep = clock.rep.sibling()
	sw.tick = min(1000, max(10, int64(s.StreamRecovery.ThroughputWatchdog.WindowMs)/4))
	clock.sw.Store(sw)
	sw.armLocked(now, clock.rest())
	sw.mu.Unlock()
	return sw
}

// armLocked sets the clock's timer to the watchdogs' next deadline, or to
// the clock's own (rest from now) when that comes first.
func (sw *streamWatch) armLocked(now model.Time, rest time.Duration) {
	next := sw.w.Deadline()
	if next <= now {
		next = now.Add(sw.tick)
	}
	sw.armed = next
	if sw.rep != nil {
		sw.rep.arm(next.Std())
		// The shared timer no longer fires at the clock's own last
		// reported instant: report the plan's next deadline instead.
		sw.clock.reportPlan()
	}
	sw.clock.t.Reset(min(time.Duration(next.Sub(now))*time.Millisecond, rest))
}

// rearm re-arms the timer for what is due next (attemptClock.fire).
func (sw *streamWatch) rearm() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if !sw.stopped && sw.drain == nil {
		sw.armLocked(sw.g.modelNow(), sw.clock.rest())
	}
}

func (sw *streamWatch) checkLocked(now model.Time) bool {
	kind, abort := sw.w.Check(now)
	if !abort {
		return false
	}
	sw.stopped = true
	if sw.rep != nil {
		sw.rep.end(true) // before the cut: the flow step after it comes later
	}
	if kind == model.OutcomeThroughput {
		sw.clock.cut(errThroughput)
	} else {
		sw.clock.cut(errStall)
	}
	return true
}

// fire runs from the clock's timer once the clock's own plan has nothing
// due (rest until it has); false when the watch is over and the clock
// re-arms the timer for its own plan.
func (sw *streamWatch) fire(rest time.Duration) bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.stopped {
		return false
	}
	if sw.drain != nil {
		sw.drain.Close() // drainAfterDone's time is up
		return true
	}
	now := sw.g.modelNow()
	if !sw.checkLocked(now) {
		sw.armLocked(now, rest)
	}
	return true
}

// observe feeds one event; it re-arms the timer when the next deadline
// moved earlier (first content → idle budget).
func (sw *streamWatch) observe(ev model.StreamEvent) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.stopped {
		return
	}
	now := sw.g.modelNow()
	sw.w.Observe(now, ev)
	if sw.checkLocked(now) {
		return
	}
	if next := sw.w.Deadline(); next < sw.armed {
		sw.armLocked(now, sw.clock.rest())
	}
}

func (sw *streamWatch) producedOutput() bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.w.ProducedOutput()
}

// drainAfterDone is drainAfterDone (transport.go) on the attempt's timer,
// which has nothing left to watch once the stream's [DONE] came: one
// timer per stream, not a second one for the drain.
func (sw *streamWatch) drainAfterDone(body io.ReadCloser) {
	sw.mu.Lock()
	if sw.stopped || sw.clock == nil {
		sw.mu.Unlock()
		drainAfterDone(body)
		return
	}
	sw.drain = body
	sw.clock.t.Reset(drainWait)
	if sw.rep != nil {
		sw.rep.end(false) // the drain's time is no deadline of the attempt
	}
	sw.mu.Unlock()
	drainBody(body)
	sw.stop()
}

// stop ends the watch; the timer is the clock's, stopped with it.
func (sw *streamWatch) stop() {
	sw.mu.Lock()
	sw.stopped = true
	if sw.rep != nil {
		sw.rep.end(false)
	}
	sw.mu.Unlock()
}

var doneEvent = []byte("data: [DONE]\n\n")

// pipeStream passes an SSE stream through, event by event. Events are held
// back until the first content, reasoning or tool-call frame (the readiness
// gate; server.streamCommit: first-event turns it off), so an error or a
// stall before that is retried elsewhere; after commit a failure ends the
// stream with an explicit SSE error event, never a truncated success.
func (rs *reqState) pipeStream(actx context.Context, run *attemptRun, resp *http.Response, secret string) execResult {
	sw := run.watch.start(rs.g, rs.s, &run.clock)
	defer sw.stop()
	rd := newSSEReader(resp.Body)
	p := ssePipe{rs: rs, w: rs.w, resp: resp, sw: sw, rd: rd, secret: secret,
		eager: rs.g.conf().Server.StreamCommit == "first-event"}
	p.raw, p.buf, p.held = rd.buffers() // the last stream's, pooled with the reader
	defer func() {
		rd.keep(p.raw, p.buf, p.held) // nothing holds them once the stream is over
		rd.release()
	}()
	p.flusher, _ = rs.w.(http.Flusher)
	for {
		var err error
		p.raw, p.buf, p.data, err = rd.next(p.raw, p.buf)
		if err != nil {
			return p.end(actx, err)
		}
		if res, done := p.event(); done {
			return res
		}
	}
}

// ssePipe is pipeStream's state: what the upstream sent last (raw, data),
// what is held back before commit, and how far the stream got.
type ssePipe struct {
	rs      *reqState
	w       http.ResponseWriter
	flusher http.Flusher
	resp    *http.Response
	sw      *streamWatch
	rd      *sseReader
	secret  string

	raw, data, held, finishHeld   []byte
	buf                           []byte // where data is assembled (sseReader.next)
	committed, sawEvent, terminal bool
	eager                         bool // server.streamCommit: first-event
	finish                        string
}

// gone is the client going away mid-stream.
func (p *ssePipe) gone() execResult {
	return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort}, committed: true}
}

// delivered is the stream passed through to its end. attempt flushes the
// end once the outcome is recorded and counted.
func (p *ssePipe) delivered() execResult {
	ok := model.Outcome{Kind: model.OutcomeResponse, Status: p.resp.StatusCode, Headers: upstreamHeader(p.resp.Header)}
	return execResult{outcome: ok, delivered: true, committed: true, status: http.StatusOK}
}

// commit opens the client's stream with what was held back; false when
// the client is gone.
func (p *ssePipe) commit() bool {
	rs, w := p.rs, p.w
	rs.setStreamHeaders(w.Header(), p.resp.Header)
	p.committed, rs.committed = true, true
	rs.firstOut = rs.g.now() // time to first token (metrics_ops.go)
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(p.held)
	p.held = kept(p.held) // not read again: a large one goes now, not with the stream
	// The first event goes out now, not after the rest of what the
	// upstream sent in the same read has been checked: time to first
	// token is what a streaming client waits on. Later events are
	// flushed once the read buffer is drained.
	if err == nil && p.flusher != nil {
		p.flusher.Flush()
	}
	return err == nil
}

// fail ends the attempt with res: before commit as it is (retried
// elsewhere), after commit with the stream's SSE error event unless the
// flow continues the stream elsewhere.
func (p *ssePipe) fail(res execResult, code, msg string) execResult {
	if !p.committed {
		return res
	}
	res.committed, res.status = true, http.StatusOK
	if p.rs.holdStreamError(code, msg) {
		return res // proxy/resume.go: the flow may continue the stream elsewhere
	}
	// After commit: never replay, never a truncated success.
	writeSSEError(p.w, code, msg)
	if p.flusher != nil {
		p.flusher.Flush()
	}
	res.committed, res.status = true, http.StatusOK
	return res
}

// end is the attempt's result when reading the stream stopped with err.
func (p *ssePipe) end(actx context.Context, err error) execResult {
	if err == io.EOF && (p.finish != "" || p.terminal) && (p.sw.producedOutput() || model.LegitimateEmpty(p.finish)) {
		if !p.committed && !p.commit() {
			return p.gone()
		}
		if !p.terminal {
			// The upstream finished (finish_reason) but never sent
			// [DONE]: the client gets one, so a finished stream is
			// never mistaken for a cut one.
			if _, err := p.w.Write(doneEvent); err != nil {
				return p.gone()
			}
		}
		return p.delivered()
	}
	if err == errEventTooLarge {
		// Not a stream anyone can read: the model's output
		// validation case, as a malformed event is.
		res, code := qualityFailure()
		return p.fail(res, code, fmt.Sprintf("the upstream sent a stream event over %d bytes", maxStreamEvent))
	}
	if err == io.EOF && !p.sawEvent && !p.committed {
		err = io.ErrUnexpectedEOF
	}
	res := p.rs.failure(actx, err, true)
	code, msg := streamFailureText(res)
	return p.fail(res, code, msg)
}

// event handles the event just read; done: the attempt is over with res.
func (p *ssePipe) event() (res execResult, done bool) {
	rs, data := p.rs, p.data
	p.sawEvent = true
	// One parse per event: progress for the watchdogs, the finish
	// reason and an in-stream error all come from the model's reading.
	ev := model.ParseStreamEventAfter(data, &p.rd.prefix)
	if ev.Malformed {
		// Never passed on as a chunk; skipped and counted while the
		// model's bound allows (proxy/resume.go skipMalformed), else
		// the output validation case (the synthetic 502): retried
		// elsewhere before commit, the stream's error event after.
		if rs.skipMalformed(data) {
			return execResult{}, false
		}
		res, code := qualityFailure()
		return p.fail(res, code, "the upstream sent malformed stream events (their data is not JSON)"), true
	}
	rs.streamEvent(&ev, data) // proxy/resume.go
	p.sw.observe(ev)
	rs.noteEventUsage(&ev, data) // the final usage chunk's token counts (metrics_ops.go)
	if ev.FinishReason != "" {
		p.finish = ev.FinishReason
	}
	if ev.Error {
		return p.errorEvent(&ev), true
	}
	if ev.Done {
		if res, done := p.doneEvent(); done {
			return res, true
		}
	}
	return p.relay(&ev)
}

// errorEvent ends the attempt on the upstream's in-stream error event.
func (p *ssePipe) errorEvent(ev *model.StreamEvent) execResult {
	o := model.Outcome{Kind: model.OutcomeResponse, Status: ev.ErrorStatus, Headers: upstreamHeader(p.resp.Header),
		Body: string(p.data[:min(len(p.data), model.MaxBodyPrefix)])}
	if !p.committed {
		return execResult{outcome: o, errBody: append([]byte(nil), p.data...), header: http.Header{"Content-Type": {"application/json"}}}
	}
	p.rs.relayErrorEvent(p.raw, p.data, ev.ErrorStatus, p.secret)
	return execResult{outcome: o, committed: true, status: http.StatusOK}
}

// doneEvent handles the stream's end ([DONE], or a Responses / Messages
// terminal event, which is relayed and the body ends next).
func (p *ssePipe) doneEvent() (res execResult, done bool) {
	if !p.sw.producedOutput() && !model.LegitimateEmpty(p.finish) {
		// Nothing but metadata (or reasoning only): the model's
		// output validation case (docs/lockouts.md synthetic 502).
		return p.fail(execResult{outcome: model.Outcome{Kind: model.OutcomeQuality}},
			string(model.CodeStreamEmpty), "the upstream stream ended without any content"), true
	}
	if !bytes.Equal(bytes.TrimSpace(p.data), []byte("[DONE]")) {
		p.terminal = true // a terminal event (Responses / Messages): pass it on, the body ends next
		return execResult{}, false
	}
	if !p.committed {
		p.held = append(p.held, p.raw...)
		if !p.commit() {
			return p.gone(), true
		}
	} else if _, err := p.w.Write(p.raw); err != nil {
		return p.gone(), true
	}
	p.sw.drainAfterDone(p.resp.Body) // transport.go: keeps the connection for the next request
	return p.delivered(), true
}

// relay holds the event back before commit (the readiness gate) and
// commits on the first content, reasoning or tool-call frame, or writes
// it through after commit.
func (p *ssePipe) relay(ev *model.StreamEvent) (res execResult, done bool) {
	if !p.committed {
		if len(p.held)+len(p.raw) > maxStreamEvent {
			// Metadata without end before any content: bounded as
			// one event is.
			res, code := qualityFailure()
			return p.fail(res, code, fmt.Sprintf("the upstream sent over %d bytes of stream events before any content", maxStreamEvent)), true
		}
		p.held = append(p.held, p.raw...)
		if ev.UsefulBytes == 0 && !ev.Reasoning && !ev.ToolCall && !(p.eager && len(p.data) > 0) {
			return execResult{}, false
		}
		if !p.commit() {
			return p.gone(), true
		}
	} else if ev.FinishReason != "" && !p.sw.producedOutput() && !model.LegitimateEmpty(ev.FinishReason) {
		// A finish after reasoning only: if [DONE] follows, the
		// stream ends with the empty-answer error instead, and the
		// client must not have been told the turn ended normally
		// first. Held until something else comes.
		p.finishHeld = append(p.finishHeld[:0], p.raw...)
		return execResult{}, false
	} else {
		if len(p.finishHeld) > 0 {
			if _, err := p.w.Write(p.finishHeld); err != nil {
				return p.gone(), true
			}
			p.finishHeld = p.finishHeld[:0]
		}
		if _, err := p.w.Write(p.raw); err != nil {
			return p.gone(), true
		}
	}
	if p.flusher != nil && p.rd.buffered() == 0 {
		p.flusher.Flush()
	}
	return execResult{}, false
}

// setStreamHeaders sets the head of a committed stream: the gateway's
// headers, SSE framing without buffering, and the upstream's request id
// as on a JSON answer. The Date is net/http's: with it the map would
// hold nine headers, past the eight a Go map keeps in its small form, and
// it and the copy net/http makes of it at WriteHeader would each be built
// as a full table (allocations and hashing per stream for the same bytes
// on the wire).
func (rs *reqState) setStreamHeaders(h, up http.Header) {
	rs.setOwnHeaders(h)
	h["Content-Type"] = hdrSSE
	h["Cache-Control"] = hdrNoCache
	h["X-Accel-Buffering"] = hdrNo
	if id := firstValue(up, "X-Request-Id"); id != nil {
		h["X-Upstream-Request-Id"] = id // as on a JSON answer
	}
}

// qualityFailure is a stream no one can read (an oversized or malformed
// event): the output validation case (docs/streams.md#malformed-events),
// with its stream error code.
func qualityFailure() (execResult, string) {
	q := model.Outcome{Kind: model.OutcomeQuality}
	code, _ := model.StreamErrorCode(q)
	return execResult{outcome: q}, string(code)
}

// relayErrorEvent passes an upstream's in-stream error event to a client
// whose stream is committed. Redacted like every other copy of an upstream
// error a client or a log sees: it may quote the credential. A native
// error event (anthropic's {"type":"error",…}, gemini's
// {"error":{"code","status"}}) goes out in the OpenAI shape, as the same
// error before commit or in a JSON answer does; one already in that shape
// goes out as it came. Out of line, so its locals are not under the
// stream's loop (stack per held stream, docs/gateway.md "Measuring").
//
//go:noinline
func (rs *reqState) relayErrorEvent(raw, data []byte, status int, secret string) {
	w := rs.w
	d := redact(data, secret)
	if body := clientErrorBody(d, status, rs.provider); body != nil && !bytes.Equal(body, d) {
		writeSSEData(w, body)
	} else {
		w.Write(redact(raw, secret))
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func streamFailureText(res execResult) (string, string) {
	if res.local != nil {
		return string(res.local.Code), res.local.Message
	}
	code, msg := model.StreamErrorCode(res.outcome)
	return string(code), msg
}

// writeSSEError ends a committed stream with an explicit error event.
func writeSSEError(w io.Writer, code, msg string) {
	b, _ := json.Marshal(errorBody{Error: apiError{Message: msg, Type: "server_error", Code: code}})
	writeSSEData(w, b)
}

// writeSSEData writes one SSE event carrying data.
func writeSSEData(w io.Writer, data []byte) {
	w.Write([]byte("data: "))
	w.Write(data)
	w.Write([]byte("\n\n"))
}
