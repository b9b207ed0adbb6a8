package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Why an attempt's context was cancelled: the phase timers of SPEC §11.6,
// the stream watchdogs of §6 and the execution bound of §5.
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

type resKind uint8

const (
	resFailed        resKind = iota // not committed: follow the verdict
	resDone                         // delivered
	resGone                         // the client went away
	resCommittedFail                // failed after bytes reached the client; the SSE error event was sent
	resSkip                         // not attempted (breaker refused the permit)
)

type attemptRes struct {
	kind    resKind
	status  int
	verdict model.Verdict
}

// execResult is what one upstream attempt produced, as the shell saw it.
type execResult struct {
	outcome   model.Outcome
	delivered bool // success delivered to the client
	committed bool // bytes reached the client
	status    int  // status the client got (when committed)
	errBody   []byte
	header    http.Header
	local     *model.Error // a local bound (execution, deadline) that ended it
}

// attempt runs one candidate: admission, Begin, the upstream call, Record.
// Every Begin is matched by exactly one Record, whatever happens.
func (rs *reqState) attempt(cand model.Candidate) attemptRes {
	g := rs.g
	prov := g.provider(cand.Provider)
	if prov == nil || prov.conns[cand.Connection] == nil {
		return attemptRes{kind: resSkip}
	}
	conn := prov.conns[cand.Connection]
	ov := conn.cfg.RateLimitOverrides
	maxWait, execMax := rs.s.QueueBudgets(model.ConnOverrides{MaxWaitMs: model.Millis(ov.MaxWaitMs), ExecutionMaxWaitMs: model.Millis(ov.ExecutionMaxWaitMs)})
	queueLeft := min(time.Duration(maxWait)*time.Millisecond-g.now().Sub(rs.start), rs.dl.Sub(g.now()))
	qStart := time.Now()
	rs.provider, rs.conn = cand.Provider, cand.Connection
	if paced(prov, conn, rs.s) {
		w, perr := g.pace.wait(rs.ctx, model.ConnRef{Provider: cand.Provider, Connection: cand.Connection}, ov, rs.s.RequestQueue.MaxQueueDepth, queueLeft)
		if perr != nil {
			return rs.localRefusal(cand, perr)
		}
		queueLeft -= w
	}
	sl, aerr := g.gate.acquire(rs.ctx, cand.Provider, cand.Connection, cand.Model, rs.s.RequestQueue.MaxQueueDepth, queueLeft, rs.shared)
	if w := time.Since(qStart); w > time.Millisecond || aerr != nil {
		g.met.queueWait.WithLabelValues(cand.Provider, cand.Connection).Observe(w.Seconds())
	}
	if aerr != nil {
		return rs.localRefusal(cand, aerr.err)
	}
	defer sl.release()

	now := g.modelNow()
	g.lock()
	att, err := g.eng.Begin(now, cand)
	g.unlock()
	if err != nil {
		// The breaker admits nothing (OPEN, or HALF_OPEN with its probe
		// taken): remember its typed answer in case nothing else serves.
		if me, ok := err.(*model.Error); ok && rs.lastFail == nil {
			rs.lastLocal = me
		}
		return attemptRes{kind: resSkip}
	}
	rs.attempts++
	recorded := false
	defer func() {
		if !recorded { // a panic: free the permit, neutrally
			g.lock()
			g.eng.Record(g.modelNow(), &att, model.Outcome{Kind: model.OutcomeClientAbort})
			g.unlock()
		}
	}()
	out := rs.execute(prov, conn, cand, time.Duration(execMax)*time.Millisecond)
	g.lock()
	v := g.eng.Record(g.modelNow(), &att, out.outcome)
	g.unlock()
	recorded = true
	g.met.upstream.WithLabelValues(cand.Provider, cand.Connection, resultLabel(out.outcome)).Inc()

	if rs.hasSess && rs.s.SessionAffinityTTLMs > 0 {
		if out.delivered {
			g.aff.set(rs.session, cand.Provider, cand.Connection, g.now().Add(rs.s.SessionAffinityTTLMs.Duration()))
		} else if out.outcome.Kind != model.OutcomeClientAbort {
			g.aff.drop(rs.session, cand.Provider, cand.Connection)
		}
	}
	switch {
	case out.delivered:
		return attemptRes{kind: resDone, status: out.status}
	case out.outcome.Kind == model.OutcomeClientAbort && rs.ctx.Err() != nil:
		if out.committed {
			return attemptRes{kind: resCommittedFail, status: 499}
		}
		return attemptRes{kind: resGone}
	case out.committed:
		return attemptRes{kind: resCommittedFail, status: out.status}
	}
	if out.local != nil {
		rs.lastFail = &failure{local: out.local, verdict: v}
	} else if out.outcome.Kind == model.OutcomeResponse {
		rs.lastFail = &failure{status: out.outcome.Status, header: out.header, body: redact(out.errBody, conn.cfg.APIKey), verdict: v}
	} else {
		rs.lastFail = &failure{status: v.ClientStatus, verdict: v}
		if rs.lastFail.status == 0 {
			rs.lastFail.status = http.StatusBadGateway
		}
	}
	return attemptRes{kind: resFailed, verdict: v}
}

// localRefusal reports a local queue refusal to the model (neutral: never
// upstream health); the verdict says where to go next.
func (rs *reqState) localRefusal(cand model.Candidate, e *model.Error) attemptRes {
	g := rs.g
	if rs.ctx.Err() != nil {
		return attemptRes{kind: resGone}
	}
	g.met.queueRej.WithLabelValues(cand.Provider, cand.Connection, string(e.Code)).Inc()
	now := g.modelNow()
	g.lock()
	att, err := g.eng.Begin(now, cand)
	var v model.Verdict
	if err == nil {
		v = g.eng.Record(now, &att, model.Outcome{Kind: model.OutcomeLocalQueue})
	}
	g.unlock()
	rs.lastLocal = e
	if err != nil {
		return attemptRes{kind: resSkip}
	}
	g.met.upstream.WithLabelValues(cand.Provider, cand.Connection, "local_queue").Inc()
	return attemptRes{kind: resFailed, verdict: v}
}

// execute makes one upstream call under the phase timers and, on success,
// delivers it to the client.
func (rs *reqState) execute(prov *provRuntime, conn *connRuntime, cand model.Candidate, execMax time.Duration) execResult {
	to := &rs.s.UpstreamTimeouts
	actx, cancel := context.WithCancelCause(rs.ctx)
	defer cancel(nil)

	// The whole attempt: attemptMs, cut by the request deadline and by the
	// execution bound (raised to the header timeout when that is longer).
	attemptD, cause := to.AttemptMs.Duration(), errAttemptTimeout
	if exec := max(execMax, to.ResponseHeaderMs.Duration()); exec < attemptD {
		attemptD, cause = exec, errExecTimeout
	}
	if left := rs.dl.Sub(rs.g.now()); left < attemptD {
		attemptD, cause = max(left, time.Millisecond), errDeadline
	}
	at := time.AfterFunc(attemptD, func() { cancel(cause) })
	defer at.Stop()

	req, err := http.NewRequestWithContext(actx, http.MethodPost, prov.chatURL, bytes.NewReader(rs.req.bodyFor(cand.Model)))
	if err != nil {
		return execResult{outcome: model.Outcome{Kind: model.OutcomeTransport, Transport: model.TransportRefused}}
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	if rs.req.Stream {
		h.Set("Accept", "text/event-stream")
	} else {
		h.Set("Accept", "application/json")
	}
	if conn.auth != "" {
		h.Set("Authorization", conn.auth)
	}
	h.Set("User-Agent", "breakwater")

	var ht *time.Timer
	if d := to.ResponseHeaderMs.Duration(); d > 0 {
		ht = time.AfterFunc(d, func() { cancel(errHeaderTimeout) })
	}
	t0 := time.Now()
	resp, err := rs.g.client.Do(req)
	if ht != nil {
		ht.Stop()
	}
	rs.g.met.latency.WithLabelValues(cand.Provider, cand.Connection).Observe(time.Since(t0).Seconds())
	if err != nil {
		return rs.failure(actx, err, false)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if rerr != nil && len(b) == 0 && actx.Err() != nil {
			return rs.failure(actx, rerr, true)
		}
		return execResult{outcome: model.Outcome{Kind: model.OutcomeResponse, Status: resp.StatusCode, Headers: resp.Header,
			Body: string(b[:min(len(b), model.MaxBodyPrefix)])}, errBody: b, header: resp.Header}
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return rs.pipeStream(actx, cancel, resp)
	}
	return rs.deliverJSON(actx, cancel, resp)
}

// failure maps an error of the upstream call to the outcome the model
// classifies (SPEC §11.3 "transport" rows), or to a local cause.
func (rs *reqState) failure(actx context.Context, err error, afterHeaders bool) execResult {
	if rs.ctx.Err() != nil {
		return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort}}
	}
	switch context.Cause(actx) {
	case errHeaderTimeout:
		return transport(model.TransportHeaderTimeout)
	case errAttemptTimeout:
		return transport(model.TransportAttemptTimeout)
	case errStall:
		return execResult{outcome: model.Outcome{Kind: model.OutcomeStall}}
	case errThroughput:
		return execResult{outcome: model.Outcome{Kind: model.OutcomeThroughput}}
	case errExecTimeout:
		return execResult{outcome: model.Outcome{Kind: model.OutcomeLocalQueue},
			local: &model.Error{Code: model.CodeExecutionTimeout, Message: "the upstream attempt reached the execution bound (requestQueue.executionMaxWaitMs)"}}
	case errDeadline:
		// Our own whole-request deadline cut the attempt: neutral for the
		// upstream's health.
		return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort},
			local: &model.Error{Code: model.CodeBudgetExhausted, Message: "the request deadline (requestBudget.deadlineMs) was reached"}}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		if op.Timeout() {
			return transport(model.TransportConnectTimeout)
		}
		return transport(model.TransportRefused)
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

// progressWatch cancels an attempt when no progress arrives within the
// budget: first content, then idle between chunks. It is driven by a timer,
// not only by arriving chunks (SPEC "does better" 18).
type progressWatch struct {
	base    time.Time
	last    atomic.Int64 // ns since base of the last progress
	budget  atomic.Int64 // ns
	t       *time.Timer
	fire    func()
	stopped atomic.Bool
}

func newProgressWatch(budget time.Duration, fire func()) *progressWatch {
	p := &progressWatch{base: time.Now(), fire: fire}
	p.budget.Store(int64(budget))
	if budget > 0 {
		p.t = time.AfterFunc(budget, p.check)
	}
	return p
}

func (p *progressWatch) check() {
	if p.stopped.Load() {
		return
	}
	b := time.Duration(p.budget.Load())
	if b <= 0 {
		return
	}
	idle := time.Since(p.base) - time.Duration(p.last.Load())
	if idle >= b {
		p.fire()
		return
	}
	p.t.Reset(b - idle)
}

func (p *progressWatch) progress(budget time.Duration) {
	p.last.Store(int64(time.Since(p.base)))
	if old := time.Duration(p.budget.Swap(int64(budget))); budget > 0 && (old <= 0 || budget < old) {
		// A shorter budget than the armed one: re-arm now (the common
		// first-content → idle step); a longer one is found by check.
		if p.t == nil {
			p.t = time.AfterFunc(budget, p.check)
		} else {
			p.t.Reset(budget)
		}
	}
}

func (p *progressWatch) stop() {
	p.stopped.Store(true)
	if p.t != nil {
		p.t.Stop()
	}
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// deliverJSON reads a non-streamed answer whole (so a broken body can still
// be retried elsewhere), then writes it to the client.
func (rs *reqState) deliverJSON(actx context.Context, cancel context.CancelCauseFunc, resp *http.Response) execResult {
	to := &rs.s.UpstreamTimeouts
	pw := newProgressWatch(to.FirstContentMs.Duration(), func() { cancel(errStall) })
	defer pw.stop()
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 1<<20 {
			bufPool.Put(buf)
		}
	}()
	if resp.ContentLength > 0 && resp.ContentLength < maxResponseBody {
		buf.Grow(int(resp.ContentLength))
	}
	for {
		if buf.Available() < 4<<10 {
			buf.Grow(8 << 10)
		}
		free := buf.AvailableBuffer()[:buf.Available()]
		n, err := resp.Body.Read(free)
		if n > 0 {
			buf.Write(free[:n]) // in place: free is buf's own spare capacity
			pw.progress(to.StreamIdleMs.Duration())
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
	h := rs.w.Header()
	rs.setHeaders(h)
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	h.Set("Content-Type", ct)
	if v := resp.Header.Get("X-Request-Id"); v != "" {
		h.Set("X-Upstream-Request-Id", v)
	}
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	rs.committed = true
	rs.w.WriteHeader(resp.StatusCode)
	rs.w.Write(buf.Bytes())
	return execResult{outcome: model.Outcome{Kind: model.OutcomeResponse, Status: resp.StatusCode, Headers: resp.Header},
		delivered: true, committed: true, status: resp.StatusCode}
}

// pipeStream passes an SSE stream through, event by event. Events are held
// back until the first content or reasoning frame (the readiness gate), so
// an error or a stall before that is retried elsewhere; after commit a
// failure ends the stream with an explicit SSE error event, never a
// truncated success.
func (rs *reqState) pipeStream(actx context.Context, cancel context.CancelCauseFunc, resp *http.Response) execResult {
	to := &rs.s.UpstreamTimeouts
	pw := newProgressWatch(to.FirstContentMs.Duration(), func() { cancel(errStall) })
	defer pw.stop()

	var tw *throughputWatchdog
	var twMu sync.Mutex
	if twc := rs.s.StreamRecovery.ThroughputWatchdog; twc.Enabled {
		base := time.Now()
		ms := func() int64 { return time.Since(base).Milliseconds() }
		tw = newThroughputWatchdog(twc, 0)
		tick := min(time.Second, max(10*time.Millisecond, twc.WindowMs.Duration()/4))
		var timer *time.Timer
		var stopped atomic.Bool
		timer = time.AfterFunc(tick, func() {
			if stopped.Load() {
				return
			}
			twMu.Lock()
			abort := tw.abort(ms())
			twMu.Unlock()
			if abort {
				cancel(errThroughput)
				return
			}
			timer.Reset(tick)
		})
		defer func() { stopped.Store(true); timer.Stop() }()
		observe := func(f frame) {
			twMu.Lock()
			tw.observe(ms(), f)
			twMu.Unlock()
		}
		return rs.streamLoop(actx, resp, pw, observe)
	}
	return rs.streamLoop(actx, resp, pw, nil)
}

func (rs *reqState) streamLoop(actx context.Context, resp *http.Response, pw *progressWatch, observe func(frame)) execResult {
	to := &rs.s.UpstreamTimeouts
	rd := newSSEReader(resp.Body)
	defer rd.release()
	w := rs.w
	flusher, _ := w.(http.Flusher)
	var raw, data, held []byte
	committed, sawContent, sawEvent := false, false, false
	finish := ""
	ok := model.Outcome{Kind: model.OutcomeResponse, Status: resp.StatusCode, Headers: resp.Header}

	commit := func() bool {
		h := w.Header()
		rs.setHeaders(h)
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		committed, rs.committed = true, true
		w.WriteHeader(http.StatusOK)
		_, err := w.Write(held)
		held = nil
		return err == nil
	}
	fail := func(res execResult, code, msg string) execResult {
		if !committed {
			return res
		}
		// After commit: never replay, never a truncated success.
		writeSSEError(w, code, msg)
		if flusher != nil {
			flusher.Flush()
		}
		res.committed, res.status = true, http.StatusOK
		return res
	}
	for {
		var err error
		raw, data, err = rd.next(raw, data)
		if err != nil {
			if err == io.EOF && finish != "" && (sawContent || legitimateEmpty(finish)) {
				if !committed && !commit() {
					return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort}, committed: true}
				}
				if flusher != nil {
					flusher.Flush()
				}
				return execResult{outcome: ok, delivered: true, committed: true, status: http.StatusOK}
			}
			if err == io.EOF && !sawEvent && !committed {
				err = io.ErrUnexpectedEOF
			}
			res := rs.failure(actx, err, true)
			code, msg := streamFailureText(res)
			return fail(res, code, msg)
		}
		sawEvent = true
		f := classifyData(data)
		if observe != nil {
			observe(f)
		}
		if f.finish != "" {
			finish = f.finish
		}
		switch f.kind {
		case frameContent:
			sawContent = true
			pw.progress(to.StreamIdleMs.Duration())
		case frameReasoning:
			pw.progress(to.StreamIdleMs.Duration())
		case frameError:
			status, _ := streamErrorStatus(data)
			o := model.Outcome{Kind: model.OutcomeResponse, Status: status, Headers: resp.Header,
				Body: string(data[:min(len(data), model.MaxBodyPrefix)])}
			if !committed {
				return execResult{outcome: o, errBody: append([]byte(nil), data...), header: http.Header{"Content-Type": {"application/json"}}}
			}
			w.Write(raw)
			if flusher != nil {
				flusher.Flush()
			}
			return execResult{outcome: o, committed: true, status: http.StatusOK}
		case frameDone:
			if !sawContent && !legitimateEmpty(finish) {
				// Nothing but metadata (or reasoning only): the model's
				// output validation case (SPEC §3 synthetic 502).
				res := execResult{outcome: model.Outcome{Kind: model.OutcomeQuality}}
				return fail(res, "empty_response", "the upstream stream ended without any content")
			}
			if !committed {
				held = append(held, raw...)
				if !commit() {
					return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort}, committed: true}
				}
			} else if _, err := w.Write(raw); err != nil {
				return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort}, committed: true}
			}
			if flusher != nil {
				flusher.Flush()
			}
			return execResult{outcome: ok, delivered: true, committed: true, status: http.StatusOK}
		}
		if !committed {
			held = append(held, raw...)
			if f.kind != frameContent && f.kind != frameReasoning {
				continue
			}
			if !commit() {
				return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort}, committed: true}
			}
		} else if _, err := w.Write(raw); err != nil {
			return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort}, committed: true}
		}
		if flusher != nil && rd.buffered() == 0 {
			flusher.Flush()
		}
	}
}

func streamFailureText(res execResult) (string, string) {
	if res.local != nil {
		return string(res.local.Code), res.local.Message
	}
	switch res.outcome.Kind {
	case model.OutcomeStall:
		return "stream_stall", "the upstream stream stalled: no content within the stall budget (upstreamTimeouts.streamIdleMs)"
	case model.OutcomeThroughput:
		return "stream_throughput_too_low", "the upstream stream fell below the minimum useful output rate"
	case model.OutcomeClientAbort:
		return "client_closed_request", "request aborted"
	}
	return "upstream_stream_interrupted", "the upstream stream ended early (" + res.outcome.Transport.String() + ")"
}

// writeSSEError ends a committed stream with an explicit error event.
func writeSSEError(w io.Writer, code, msg string) {
	b, _ := json.Marshal(errorBody{Error: apiError{Message: msg, Type: "server_error", Code: code}})
	w.Write([]byte("data: "))
	w.Write(b)
	w.Write([]byte("\n\n"))
}

func looksLikeErrorJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return false
	}
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal(b, &v) == nil && len(v.Error) > 0
}
