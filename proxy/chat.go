package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

const defaultMaxBodyBytes = 16 << 20

var selPool = sync.Pool{New: func() any { return new(model.Selection) }}

// reqState is one client chat request across all its attempts.
type reqState struct {
	g       *Gateway
	w       http.ResponseWriter
	r       *http.Request
	ctx     context.Context
	s       *model.Settings
	req     chatRequest
	key     *clientKey
	id      string
	start   time.Time
	dl      time.Time // whole-request deadline (requestBudget.deadlineMs)
	route   model.Route
	skip    []model.ConnRef
	sel     *model.Selection
	pins    map[string]string
	session [32]byte
	hasSess bool
	shared  bool // quota-share combo: admission fails open

	attempts  int
	committed bool
	lastFail  *failure
	lastLocal *model.Error
	retried   map[model.ConnRef]bool
	provider  string // what served (or was tried) last
	conn      string
	status    int
}

// failure is the last upstream error, what the client gets when nothing
// else works.
type failure struct {
	status  int
	header  http.Header
	body    []byte
	verdict model.Verdict
	local   *model.Error // a gateway error standing in for the upstream's
}

func newRequestID(r *http.Request) string {
	if v := r.Header.Get("X-Request-Id"); v != "" && len(v) <= 128 {
		return v
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (g *Gateway) handleChat(w http.ResponseWriter, r *http.Request) {
	g.met.inflight.Inc()
	defer g.met.inflight.Dec()
	rs := &reqState{g: g, w: w, r: r, ctx: r.Context(), s: g.settings(), start: g.now(), id: newRequestID(r)}
	w.Header().Set("X-Request-Id", rs.id)
	key, ok := g.authClient(r)
	if !ok {
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "missing or invalid API key (Authorization: Bearer <key>)")
		return
	}
	rs.key = key
	limit := g.cfg.Server.MaxBodyBytes
	if limit <= 0 {
		limit = defaultMaxBodyBytes
	}
	body, err := readBody(w, r, limit)
	if err == nil {
		rs.req, err = parseChatRequest(body)
	}
	if err != nil {
		var be *errBadRequest
		if errors.As(err, &be) {
			writeError(w, be.status, be.code, be.msg)
			rs.finish(be.status)
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		rs.finish(http.StatusBadRequest)
		return
	}
	rs.session, rs.hasSess = sessionKey(r)
	rs.dl = rs.start.Add(rs.s.RequestBudget.DeadlineMs.Duration())
	rs.sel = selPool.Get().(*model.Selection)
	defer selPool.Put(rs.sel)
	rs.finish(rs.run())
}

func (rs *reqState) finish(status int) {
	g := rs.g
	rs.status = status
	g.met.requests.WithLabelValues(rs.provider, rs.conn, statusLabel(status)).Inc()
	g.met.attempts.Observe(float64(rs.attempts))
	lvl := slog.LevelDebug
	if status >= 500 || g.cfg.Server.LogRequests {
		lvl = slog.LevelInfo
	}
	if g.log.Enabled(rs.ctx, lvl) {
		g.log.LogAttrs(context.Background(), lvl, "chat request", slog.String("request_id", rs.id),
			slog.String("model", rs.req.Model), slog.String("provider", rs.provider), slog.String("connection", rs.conn),
			slog.Int("status", status), slog.Int("attempts", rs.attempts), slog.Bool("stream", rs.req.Stream),
			slog.Duration("duration", g.now().Sub(rs.start)))
	}
}

// run is the fallback loop: select, try candidates in the model's order,
// follow each verdict, wait for short cooldowns when the model says so,
// and answer with the model's typed error when nothing can serve.
func (rs *reqState) run() int {
	g := rs.g
	g.lock()
	route, err := g.eng.Resolve(rs.req.Model)
	g.unlock()
	if err != nil {
		var me *model.Error
		if errors.As(err, &me) {
			return rs.answerModelError(me)
		}
		writeError(rs.w, http.StatusBadRequest, "invalid_model", err.Error())
		return http.StatusBadRequest
	}
	rs.route = route
	rs.setShared()
	waits, fallbackUsed := 0, false
	waitBudget := rs.waitBudget()
	for {
		if rs.ctx.Err() != nil {
			return rs.clientGone()
		}
		now := g.modelNow()
		req := model.Request{Route: rs.route, Skip: rs.skip}
		if rs.key != nil {
			req.Allowed = rs.key.allowed
		}
		g.lock()
		g.eng.Select(now, &req, rs.sel)
		if len(rs.sel.Candidates) == 0 && len(rs.skip) > 0 {
			// Every candidate of this pass was tried: look again without the
			// skip list so the answer and the wait see the fresh timers.
			req.Skip = nil
			g.eng.Select(now, &req, rs.sel)
			if len(rs.sel.Candidates) > 0 {
				g.unlock()
				return rs.answerLast(nil)
			}
		}
		var unavailable *model.Error
		var waitMs int64
		var wait bool
		if len(rs.sel.Candidates) == 0 {
			unavailable = model.Unavailable(now, &rs.route, rs.sel)
			waitMs, wait = rs.waitDecision(now, waits, waitBudget)
		}
		g.unlock()

		if unavailable != nil {
			if wait {
				g.met.waits.WithLabelValues(rs.waitKind()).Inc()
				if !sleepCtx(rs.ctx, time.Duration(waitMs)*time.Millisecond) {
					return rs.clientGone()
				}
				waits++
				waitBudget -= time.Duration(waitMs) * time.Millisecond
				rs.skip = rs.skip[:0]
				continue
			}
			if !fallbackUsed && rs.s.EmergencyFallback.Enabled && rs.s.EmergencyFallback.Target != "" {
				fallbackUsed = true
				g.lock()
				fb, err := g.eng.Resolve(rs.s.EmergencyFallback.Target)
				g.unlock()
				if err == nil && (fb.Provider != rs.route.Provider || fb.Model != rs.route.Model || fb.Combo != rs.route.Combo) {
					g.log.Warn("every target excluded; routing to the emergency fallback", "request_id", rs.id,
						"model", rs.req.Model, "fallback", rs.s.EmergencyFallback.Target)
					rs.route = fb
					rs.setShared()
					rs.skip = rs.skip[:0]
					continue
				}
			}
			if rs.lastFail != nil || rs.lastLocal != nil {
				return rs.answerLast(unavailable)
			}
			return rs.answerModelError(unavailable)
		}

		if rs.attempts >= rs.s.RequestBudget.MaxAttempts || !g.now().Before(rs.dl) {
			return rs.answerBudget()
		}
		rs.applyPins()
		// Try the first candidate; every failure re-selects, so the next
		// choice sees what the failure changed (a breaker that opened, a
		// family lockout).
		cand := rs.sel.Candidates[0]
		res := rs.attempt(cand)
		switch res.kind {
		case resDone:
			return res.status
		case resGone:
			return rs.clientGone()
		case resCommittedFail:
			return res.status
		case resSkip:
			rs.skip = append(rs.skip, model.ConnRef{Provider: cand.Provider, Connection: cand.Connection})
			continue
		}
		ref := model.ConnRef{Provider: cand.Provider, Connection: cand.Connection}
		switch res.verdict.Next {
		case model.NextStop:
			return rs.answerLast(nil)
		case model.NextTarget:
			for _, c := range rs.sel.Candidates {
				if c.Target == cand.Target {
					rs.skip = append(rs.skip, model.ConnRef{Provider: c.Provider, Connection: c.Connection})
				}
			}
		case model.NextRetry:
			// Before commit a watchdog abort may re-open the attempt on the
			// same account once (SPEC §6); then it moves on.
			if rs.retried == nil {
				rs.retried = map[model.ConnRef]bool{}
			}
			if rs.retried[ref] {
				rs.skip = append(rs.skip, ref)
			}
			rs.retried[ref] = true
		default:
			rs.skip = append(rs.skip, ref)
		}
	}
}

func (rs *reqState) setShared() {
	rs.shared = false
	if rs.route.IsCombo() && rs.s.QuotaShareConcurrencyLimit.Enabled {
		if c := rs.g.combos[rs.route.Combo]; c != nil && c.Mode == "quota-share" {
			rs.shared = true
		}
	}
}

func (rs *reqState) waitKind() string {
	if rs.route.IsCombo() {
		return "combo_cooldown_wait"
	}
	return "wait_for_cooldown"
}

func (rs *reqState) waitBudget() time.Duration {
	if rs.route.IsCombo() {
		return rs.s.ComboCooldownWait.BudgetMs.Duration()
	}
	return rs.s.WaitForCooldown.BudgetMs.Duration()
}

// waitDecision asks the model whether a short transient cooldown is worth
// waiting for (SPEC §4b); the budget left is the smaller of the wait
// budget and the request deadline.
func (rs *reqState) waitDecision(now model.Time, waits int, budget time.Duration) (int64, bool) {
	left := min(budget, rs.dl.Sub(rs.g.now())).Milliseconds()
	if rs.route.IsCombo() {
		c := &rs.s.ComboCooldownWait
		return model.WaitDecision(now, rs.sel, c.Enabled, int64(c.MaxWaitMs), waits, c.MaxAttempts, left)
	}
	c := &rs.s.WaitForCooldown
	return model.WaitDecision(now, rs.sel, c.Enabled, int64(c.MaxRetryWaitSec)*1000, waits, c.MaxRetries, left)
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

// applyPins puts a session's pinned connection first (SPEC §2c).
func (rs *reqState) applyPins() {
	if !rs.hasSess || rs.s.SessionAffinityTTLMs <= 0 {
		return
	}
	if rs.pins == nil {
		rs.pins = map[string]string{}
	}
	clear(rs.pins)
	rs.g.aff.lookup(rs.session, rs.sel.Candidates, rs.g.now(), rs.pins)
	for _, p := range pinOrder(rs.sel.Candidates, rs.pins) {
		rs.g.aff.drop(rs.session, p, rs.pins[p])
	}
}

func (rs *reqState) setHeaders(h http.Header) {
	h.Set("X-Breakwater-Provider", rs.provider)
	h.Set("X-Breakwater-Connection", rs.conn)
	h.Set("X-Breakwater-Attempts", strconv.Itoa(rs.attempts))
}

func (rs *reqState) clientGone() int {
	// The client is gone; 499 is for the logs and metrics (REFERENCE M11).
	if !rs.committed {
		rs.setHeaders(rs.w.Header())
		writeError(rs.w, 499, "client_closed_request", "Request aborted")
	}
	return 499
}

func (rs *reqState) answerModelError(e *model.Error) int {
	rs.setHeaders(rs.w.Header())
	return writeModelError(rs.w, e)
}

func (rs *reqState) answerBudget() int {
	msg := fmt.Sprintf("the request budget is spent (%d attempts, deadline %s)", rs.attempts, rs.s.RequestBudget.DeadlineMs.Duration())
	if rs.lastFail != nil {
		msg += fmt.Sprintf("; the last upstream answer was %d", rs.lastFail.status)
	}
	e := &model.Error{Code: model.CodeBudgetExhausted, Model: rs.req.Model, Message: msg}
	if rs.lastFail != nil && rs.lastFail.verdict.Hint.Ms > 0 {
		e.RetryAfterMs = rs.lastFail.verdict.Hint.Ms
	}
	return rs.answerModelError(e)
}

// answerLast gives the client the last upstream error (or the last local
// admission error), with Retry-After when the gateway knows when to come
// back.
func (rs *reqState) answerLast(unavailable *model.Error) int {
	f := rs.lastFail
	if f == nil {
		if rs.lastLocal != nil {
			return rs.answerModelError(rs.lastLocal)
		}
		if unavailable != nil {
			return rs.answerModelError(unavailable)
		}
		writeError(rs.w, http.StatusBadGateway, "upstream_error", "no upstream answered")
		return http.StatusBadGateway
	}
	if f.local != nil {
		return rs.answerModelError(f.local)
	}
	h := rs.w.Header()
	rs.setHeaders(h)
	status := f.status
	if f.verdict.ClientStatus != 0 {
		status = f.verdict.ClientStatus
	}
	retryMs := f.verdict.ClientRetryAfterMs
	if retryMs <= 0 && (status == 429 || status == 503) {
		if unavailable != nil && unavailable.RetryAfterMs > 0 {
			retryMs = unavailable.RetryAfterMs
		} else if f.verdict.Hint.Ms > 0 {
			retryMs = f.verdict.Hint.Ms
		}
	}
	if retryMs > 0 {
		h.Set("Retry-After", strconv.FormatInt(max(1, (retryMs+999)/1000), 10))
	}
	if len(f.body) > 0 && looksLikeErrorJSON(f.body) {
		ct := "application/json"
		if f.header != nil && f.header.Get("Content-Type") != "" {
			ct = f.header.Get("Content-Type")
		}
		h.Set("Content-Type", ct)
		h.Set("Content-Length", strconv.Itoa(len(f.body)))
		rs.w.WriteHeader(status)
		rs.w.Write(f.body)
		return status
	}
	msg := f.verdict.Message
	if msg == "" {
		msg = fmt.Sprintf("upstream answered %d", f.status)
	}
	code := f.verdict.Reason.String()
	if code == "" {
		code = "upstream_error"
	}
	writeJSON(rs.w, status, errorBody{Error: apiError{Message: msg, Type: typeForStatus(status), Code: code, Provider: rs.provider}})
	return status
}
