package proxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// The admission-queue limiter (docs/admission.md#pacing): per connection,
// pacing from rateLimitOverrides.rpm (over 60 s) and .minTimeMs, pauses
// from body-declared retries and learned x-ratelimit-* windows. Limits are
// per connection, never a process-wide counter. Every rule and step is
// model.Limiter's (shared with the simulator); the pacers only keep one
// limiter per connection under a mutex and sleep on the wall clock.
// Which attempts go through it is the engine's decision (Attempt.Limited:
// rateLimitProtection or the apikey safety net).

// pacers holds one limiter per provider/connection.
type pacers struct {
	mu sync.Mutex
	by map[model.ConnRef]*model.Limiter
	// now is the gateway's clock (Options.Now): the pauses LimiterFeedback
	// sets are instants on it, so the slots must be read on it too.
	now func() time.Time
	// waiting is Options.Waiting: a paced attempt waits on purpose.
	waiting func(int)
}

func newPacers(now func() time.Time, waiting func(int)) *pacers {
	if now == nil {
		now = time.Now
	}
	return &pacers{by: map[model.ConnRef]*model.Limiter{}, now: now, waiting: waiting}
}

func limitsOf(o RateLimitOverrides) model.ConnLimits {
	return model.ConnLimits{RPM: o.RPM, MinTimeMs: int64(o.MinTimeMs)}
}

// limiterIn is limiter(ref), kept in *cached (a connection's runtime,
// guarded by ps.mu like the map) so that a later call skips the map's
// hash of ref: a limiter, once made, is never removed or replaced.
func (ps *pacers) limiterIn(ref model.ConnRef, cached **model.Limiter) *model.Limiter {
	if *cached == nil {
		*cached = ps.limiter(ref)
	}
	return *cached
}

func (ps *pacers) limiter(ref model.ConnRef) *model.Limiter {
	l := ps.by[ref]
	if l == nil {
		l = &model.Limiter{}
		ps.by[ref] = l
	}
	return l
}

// waitFrom books a dispatch slot for modelID on ref and sleeps until it
// (model.Limiter.Enter / Wake: every decision is the model's, the same
// steps the simulator schedules). It returns how long it slept (0, read
// on no clock, when the slot was free at once), or a typed refusal
// (neutral for upstream health). rep (Options.Deadlines; nil = unset)
// names the attempt: a sibling of it is told the slot's instant on the
// gateway's clock while it sleeps.
//
// The attempt asks for its slot at at, a reading of the pacers' clock
// the caller has just taken; cached keeps ref's limiter for the next
// call (limiterIn).
func (ps *pacers) waitFrom(ctx context.Context, at time.Time, ref model.ConnRef, cached **model.Limiter, modelID string, o RateLimitOverrides, depth int, queueLeft time.Duration, rep *deadlineReport) (time.Duration, *model.Error) {
	now := at.UnixMilli()
	ps.mu.Lock()
	l := ps.limiterIn(ref, cached)
	pw, st := l.Enter(now, modelID, limitsOf(o), depth, queueLeft.Milliseconds())
	ps.mu.Unlock()
	if st.Go {
		return 0, nil
	}
	ps.waiting(1)
	defer ps.waiting(-1)
	if rep != nil {
		rep = rep.sibling()  // the gate's report of the attempt is done with
		defer rep.end(false) // the slot came, or the client went away
	}
	start := time.Now()
	for !st.Go {
		if st.Code != "" {
			if rep != nil {
				rep.end(true) // the refusal's flow step is owed
			}
			return time.Since(start), refusal(ref, modelID, o, depth, st)
		}
		if rep != nil {
			rep.arm(time.UnixMilli(st.WakeAtMs)) // the slot's instant on the gateway's clock
		}
		if w := time.Duration(st.WakeAtMs-now) * time.Millisecond; w > 0 && !sleepOn(ctx, w, rep) {
			ps.mu.Lock()
			l.Leave(pw)
			ps.mu.Unlock()
			return time.Since(start), &model.Error{Code: model.CodeRateLimitQueueTimeout, Provider: ref.Provider, Model: modelID,
				Message: "client went away while queued"}
		}
		now = ps.now().UnixMilli()
		ps.mu.Lock()
		st = l.Wake(now, modelID, pw)
		ps.mu.Unlock()
	}
	return time.Since(start), nil
}

func refusal(ref model.ConnRef, modelID string, o RateLimitOverrides, depth int, st model.PaceStep) *model.Error {
	e := &model.Error{Code: st.Code, Provider: ref.Provider, Model: modelID, RetryAfterMs: st.RetryAfterMs}
	if st.Code == model.CodeRateLimitQueueFull {
		e.Message = fmt.Sprintf("admission queue for %s is full (maxQueueDepth %d)", ref, depth)
		return e
	}
	e.Message = fmt.Sprintf("%s is paced or paused (rpm %d, minTimeMs %d): the next slot is in %d ms, after the queue budget",
		ref, o.RPM, o.MinTimeMs, st.RetryAfterMs)
	return e
}

// feedback applies what an upstream answer taught the connection's limiter
// (model.Engine.LimiterFeedback).
func (ps *pacers) feedback(ref model.ConnRef, fb model.LimiterFeedback) {
	if fb.ConnPauseUntil == 0 && fb.ModelPauseUntil == 0 {
		return
	}
	ps.mu.Lock()
	fb.Apply(ps.limiter(ref))
	ps.mu.Unlock()
}

// pausedUntil reports until when ref's limiter holds modelID (0 = not
// paused), for GET /api/rate-limits.
func (ps *pacers) pausedUntil(ref model.ConnRef, modelID string) int64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	l := ps.by[ref]
	if l == nil {
		return 0
	}
	return l.PausedUntilFor(ps.now().UnixMilli(), modelID)
}

// maxWaitOf is the queue budget of a's connection (rateLimitOverrides beats
// requestQueue), which decides pacing vs lockout for body-declared retries.
// The connection the attempt was admitted on (rs.cr, set by target) is
// read without the provider lookup and its lock: its budget is the one
// admission held the attempt to.
func (rs *reqState) maxWaitOf(a *model.Attempt) int64 {
	cr := rs.cr
	if !cr.is(a.Provider, a.Connection) {
		cr = nil
		if p := rs.g.provider(a.Provider); p != nil {
			cr = p.conns[a.Connection]
		}
	}
	var o RateLimitOverrides
	if cr != nil {
		o = cr.cfg.RateLimitOverrides
	}
	w, _ := rs.s.QueueBudgets(model.ConnOverrides{MaxWaitMs: model.Millis(o.MaxWaitMs), ExecutionMaxWaitMs: model.Millis(o.ExecutionMaxWaitMs)})
	return w
}

// protection is a connection's effective rateLimitProtection: POST
// /api/rate-limits' choice (model state) beats the config file. Lock order:
// callers may hold provMu; the engine lock is taken inside it, never the
// other way round.
func (g *Gateway) protection(provider string, c ConnectionConfig) bool {
	g.lock()
	on, _, err := g.eng.RateLimitProtection(model.ConnRef{Provider: provider, Connection: c.ID})
	g.unlock()
	if err != nil {
		return c.RateLimitProtection
	}
	return on
}
