package model

import (
	"slices"
	"strings"
)

// Admission-queue limiter (docs/admission.md): the per-connection state behind pacing
// (rpm, minTimeMs), body-declared retry pauses and learned x-ratelimit-*
// windows, as a plain value. The proxy keeps one per connection under its
// own mutex and sleeps on the wall clock; the simulator keeps one per
// connection and schedules events on virtual time. Both ask the same methods
// here, so they queue, pause and refuse alike. Limiters are per connection
// and per process, never a process-wide counter (docs/admission.md#pacing), and
// are not persisted: a pause is at most a queue budget long, or it is also a
// connection cooldown / model lockout, which are persisted by the engine.

// ConnLimits are a connection's pacing limits (rateLimitOverrides.rpm and
// .minTimeMs); zero means no limit.
type ConnLimits struct {
	RPM       int   `json:"rpm,omitempty"`
	MinTimeMs int64 `json:"minTimeMs,omitempty"`
}

// Limiter is one connection's admission-queue state.
type Limiter struct {
	// Hits are dispatch reservations (past dispatches and queued jobs'
	// future slots), ascending; none older than PaceWindowMs is kept, nor
	// more past ones than a decision can read (prune).
	Hits []int64
	// PausedUntil pauses the whole connection (a connection-wide limiter
	// or a learned zero-remaining window); ModelPaused pauses one model of
	// a model-scoped limiter.
	PausedUntil int64
	ModelPaused map[string]int64
	// waits counts the requests told to wait (Enter) that have not yet
	// been let go or refused (Wake) or left (Leave): each may still give
	// its slot back, which is what prune must leave room for.
	waits int
}

// pausedUntil is the later of the connection's and the model's pause.
func (l *Limiter) pausedUntil(model string) int64 {
	p := l.PausedUntil
	if m, ok := l.ModelPaused[model]; ok && m > p {
		p = m
	}
	return p
}

// PausedUntilFor reports until when requests for model wait (0 = none).
func (l *Limiter) PausedUntilFor(now int64, model string) int64 {
	if p := l.pausedUntil(model); p > now {
		return p
	}
	return 0
}

// Reserve decides when a request for model may dispatch (model.Pace with the
// limiter's pause) and, when it may, books that instant. A refusal books
// nothing: RATE_LIMIT_QUEUE_FULL, or RATE_LIMIT_QUEUE_TIMEOUT at once when
// the slot (or the end of a pause) lies after the request's queue budget.
func (l *Limiter) Reserve(now int64, model string, lim ConnLimits, maxQueueDepth int, queueLeftMs int64) PaceDecision {
	l.prune(now, lim.RPM)
	waiting := 0
	for i := len(l.Hits) - 1; i >= 0 && l.Hits[i] > now; i-- {
		waiting++
	}
	d := Pace(PaceInput{NowMs: now, Hits: l.Hits, RPM: lim.RPM, MinTimeMs: lim.MinTimeMs, Waiting: waiting,
		MaxQueueDepth: maxQueueDepth, QueueLeftMs: queueLeftMs, PausedUntilMs: l.pausedUntil(model)})
	if d.Code == "" {
		l.Hits = append(l.Hits, d.AtMs) // d.AtMs >= every hit: stays sorted
	}
	return d
}

// Cancel gives a booked slot back (the request went away while queued).
func (l *Limiter) Cancel(at int64) {
	if i := slices.Index(l.Hits, at); i >= 0 {
		l.Hits = slices.Delete(l.Hits, i, i+1)
	}
}

// recheck runs when a queued request's booked slot (booked, Reserve's AtMs)
// arrives: a pause that began while it waited holds it until the pause ends
// (queued calls run when the limiter refills), or refuses it at once when
// its remaining queue budget ends first (docs/admission.md). A refused request gives
// its slot back: it never dispatches, so it must not count against rpm.
func (l *Limiter) recheck(now int64, model string, queueLeftMs, booked int64) PaceDecision {
	p := l.pausedUntil(model)
	if p <= now {
		return PaceDecision{AtMs: now}
	}
	if p-now > queueLeftMs {
		l.Cancel(booked)
		return PaceDecision{AtMs: p, Code: CodeRateLimitQueueTimeout}
	}
	return PaceDecision{AtMs: p}
}

// PaceWait is one request's place in its connection's limiter: the slot
// it booked and the instant its queue budget ends.
type PaceWait struct {
	Booked     int64
	QueueEndMs int64
	booked     bool // Booked holds a slot (Enter did not refuse)
}

// PaceStep is what the shell does next with a request in the limiter
// (docs/admission.md#pacing): dispatch now (Go), sleep until WakeAtMs and
// call Limiter.Wake, or refuse it with Code (neutral for upstream health;
// RetryAfterMs is how far off the slot was).
type PaceStep struct {
	Go           bool
	WakeAtMs     int64
	Code         Code
	RetryAfterMs int64
}

func paceStep(now int64, d PaceDecision) PaceStep {
	switch {
	case d.Code == CodeRateLimitQueueFull:
		return PaceStep{Code: d.Code}
	case d.Code != "":
		return PaceStep{Code: d.Code, RetryAfterMs: max(d.AtMs-now, 1)}
	case d.AtMs <= now:
		return PaceStep{Go: true}
	}
	return PaceStep{WakeAtMs: d.AtMs}
}

// Enter books a request's dispatch slot (Reserve) and says what to do: the
// one pacing step both shells take, the gateway sleeping on the wall clock,
// the simulator scheduling an event at WakeAtMs.
func (l *Limiter) Enter(now int64, model string, lim ConnLimits, maxQueueDepth int, queueLeftMs int64) (PaceWait, PaceStep) {
	d := l.Reserve(now, model, lim, maxQueueDepth, queueLeftMs)
	w := PaceWait{QueueEndMs: now + queueLeftMs}
	if d.Code == "" {
		w.Booked, w.booked = d.AtMs, true
	}
	st := paceStep(now, d)
	if !st.Go && st.Code == "" {
		l.waits++
	}
	return w, st
}

// Wake runs when a waiting request's WakeAtMs arrives: a pause that began
// meanwhile holds it longer, or refuses it at once when its queue budget
// ends first (recheck).
func (l *Limiter) Wake(now int64, model string, w PaceWait) PaceStep {
	st := paceStep(now, l.recheck(now, model, w.QueueEndMs-now, w.Booked))
	if st.Go || st.Code != "" {
		l.waitEnded()
	}
	return st
}

func (l *Limiter) waitEnded() { l.waits = max(l.waits-1, 0) }

// Leave gives a waiting request's slot back: it went away before it
// dispatched, so it must not count against rpm.
func (l *Limiter) Leave(w PaceWait) {
	if w.booked {
		l.Cancel(w.Booked)
		l.waitEnded()
	}
}

// Pause drains the limiter until until: the whole connection when model is
// "", else that model. A pause never shortens one already running.
func (l *Limiter) Pause(model string, until int64) {
	if model == "" {
		l.PausedUntil = max(l.PausedUntil, until)
		return
	}
	if l.ModelPaused == nil {
		l.ModelPaused = map[string]int64{}
	}
	l.ModelPaused[model] = max(l.ModelPaused[model], until)
}

// prune forgets dispatches that left the rpm window, past dispatches that
// no decision can read any more, and pauses that ended.
//
// Pace reads only the last hit (FIFO, minTimeMs), the rpm-th most recent
// one and the future ones (reservations still waiting), so the limiter
// keeps the last max(rpm, 1) hits plus one per waiting request (each may
// give its slot back with Cancel, which must then find the hit behind it).
// What it keeps is always the newest part of the full history and never
// shorter than those decisions need, so every decision is the one the
// full 60 s history gives. Without the bound a connection with no rpm
// kept every dispatch of the last minute: 8 bytes × requests per minute
// of live heap (6 MB at 12k requests/s), all for no decision.
func (l *Limiter) prune(now int64, rpm int) {
	i := 0
	for i < len(l.Hits) && l.Hits[i] <= now-PaceWindowMs {
		i++
	}
	if drop := len(l.Hits) - (max(rpm, 1) + l.waits); drop > i {
		for i < drop && l.Hits[i] <= now { // a future hit is a reservation: kept
			i++
		}
	}
	if i > 0 {
		// Shift when at least as many hits go as stay (a copy no longer
		// than what was dropped, amortised O(1) per hit, and no new array
		// for a small limiter), else reslice.
		if rest := len(l.Hits) - i; i >= rest {
			l.Hits = l.Hits[:copy(l.Hits, l.Hits[i:])]
		} else {
			l.Hits = l.Hits[i:]
		}
	}
	for m, p := range l.ModelPaused {
		if p <= now {
			delete(l.ModelPaused, m)
		}
	}
}

// LimiterScope says what a connection's limiter covers.
type LimiterScope uint8

const (
	// LimiterConnection: one limiter for the whole connection.
	LimiterConnection LimiterScope = iota
	// LimiterModel: pauses are per model (providers whose quota is per
	// model: gemini, local, perModelQuota: true; docs/admission.md#pacing limiter key
	// p:conn:model).
	LimiterModel
)

// RetryPlan is what a body-declared retry does to the limiter (docs/admission.md).
type RetryPlan struct {
	PauseMs   int64 // drain the limiter this long (0 = no pause)
	LockoutMs int64 // lock the model on the connection this long instead
}

// maxRetryLockoutMs caps a lockout made from a typed retry delay (docs/admission.md).
const maxRetryLockoutMs = 24 * hour

// BodyRetry is docs/admission.md's body-declared retry rule, a pure function of the
// hint's kind, the limiter's scope and the connection's queue budget:
//   - a hint that fits in maxWaitMs is pacing: pause the limiter that long,
//     queued calls run when it refills;
//   - a longer hint from a TYPED retry-info detail (Gemini
//     RetryInfo.retryDelay, e.g. 86399s for an exhausted daily quota) on a
//     model-scoped limiter is not something to queue for: it becomes a model
//     lockout on the connection (capped 24 h) and the limiter stays unpaused;
//   - prose hints ("retry after 20s"), untyped delays and connection-wide
//     limiters keep the pause, however long.
//
// Header hints are not body-declared: they only drive the cooldown (docs/cooldowns.md).
func BodyRetry(h Hint, scope LimiterScope, maxWaitMs int64) RetryPlan {
	if h.Ms <= 0 || (h.Source != HintRetryInfo && h.Source != HintBody) {
		return RetryPlan{}
	}
	if h.Ms > maxWaitMs && h.Source == HintRetryInfo && scope == LimiterModel {
		return RetryPlan{LockoutMs: min(h.Ms, maxRetryLockoutMs)}
	}
	return RetryPlan{PauseMs: min(h.Ms, maxRetryLockoutMs)}
}

// learnedPause is the simple form of learning from upstream x-ratelimit-*
// headers (docs/admission.md): x-ratelimit-remaining-requests: 0 with a parseable
// x-ratelimit-reset-requests pauses the connection's limiter until the
// reset. It returns the pause length from now (0 = nothing learned).
func learnedPause(h Headers, now Time) int64 {
	if h == nil {
		return 0
	}
	// getHeader: no per-call canonicalization (and allocation) of the name
	// on the gateway's every answer.
	if strings.TrimSpace(fixedHeader(h, "X-Ratelimit-Remaining-Requests", "x-ratelimit-remaining-requests")) != "0" {
		return 0
	}
	ms, ok := parseResetValue(fixedHeader(h, "X-Ratelimit-Reset-Requests", "x-ratelimit-reset-requests"), now)
	if !ok || ms <= 0 {
		return 0
	}
	return min(ms, maxRetryLockoutMs)
}

// LimiterFeedback is what one upstream answer does to the connection's
// limiter: pause the connection, or one model, until the given instants
// (0 = no pause).
type LimiterFeedback struct {
	ConnPauseUntil  Time
	Model           string
	ModelPauseUntil Time
	// LockoutMs > 0: a typed long retry delay became a model lockout.
	LockoutMs int64
}

// Apply pauses l as the feedback says.
func (f LimiterFeedback) Apply(l *Limiter) {
	if f.ConnPauseUntil > 0 {
		l.Pause("", int64(f.ConnPauseUntil))
	}
	if f.ModelPauseUntil > 0 {
		l.Pause(f.Model, int64(f.ModelPauseUntil))
	}
}

// Limiter feedback runs only for attempts whose connection goes through the
// admission queue (Attempt.Limited). It applies the lockout half of
// BodyRetry to the engine (persisted like every lockout) and returns the
// pause half for the shell's limiter. maxWaitMs is the connection's queue
// budget (Settings.QueueBudgets): the shell passes it because it owns the
// live rateLimitOverrides.
func (e *Engine) LimiterFeedback(now Time, a *Attempt, o *Outcome, v *Verdict, maxWaitMs int64) LimiterFeedback {
	var fb LimiterFeedback
	if a == nil || !a.Limited || o == nil || o.Kind != OutcomeResponse || !e.relocate(a) {
		return fb
	}
	p := &e.provs[a.p]
	if ms := learnedPause(o.Headers, now); ms > 0 {
		fb.ConnPauseUntil = now.Add(ms)
	}
	if v == nil || v.Breaker == BreakerSuccess || o.Status < 400 {
		return fb
	}
	scope := LimiterConnection
	if p.perModelQuota && a.Model != "" {
		scope = LimiterModel
	}
	plan := BodyRetry(v.Hint, scope, maxWaitMs)
	switch {
	case plan.LockoutMs > 0:
		fb.LockoutMs = plan.LockoutMs
		e.retryLockout(now, p, &p.conns[a.c], a.Model, plan.LockoutMs, v.Reason)
	case plan.PauseMs > 0 && scope == LimiterModel:
		fb.Model, fb.ModelPauseUntil = a.Model, now.Add(plan.PauseMs)
	case plan.PauseMs > 0:
		fb.ConnPauseUntil = max(fb.ConnPauseUntil, now.Add(plan.PauseMs))
	}
	return fb
}

// retryLockout makes sure model is locked on c for at least ms (docs/admission.md: a
// long typed retry delay on a model-scoped limiter). Classification usually
// locked it already (per-model quota); this only extends a shorter lock, or
// adds one on the bare model when none covers it.
func (e *Engine) retryLockout(now Time, p *provState, c *connState, model string, ms int64, reason Reason) {
	if c.cfg.DisableCooling {
		return
	}
	until := now.Add(ms)
	if reason == ReasonNone {
		reason = ReasonQuotaExhausted
	}
	if l := c.locks.blocking(now, p.family(model), model); l != nil {
		if l.Until >= until {
			return
		}
		l.Until, l.LastCooldownMs = until, ms
		e.emit(Change{At: now, Kind: ChangeLockout, Provider: p.id, Connection: c.id, Lockout: *l})
		return
	}
	key := LockKey{Name: model}
	i := c.locks.find(key)
	if i < 0 {
		c.locks = append(c.locks, Lockout{Key: key})
		i = len(c.locks) - 1
	}
	l := &c.locks[i]
	l.FailureCount = max(l.FailureCount, 1)
	l.LastFailureAt, l.LockedAt, l.Until, l.LastCooldownMs, l.Reason = now, now, until, ms, reason
	e.emit(Change{At: now, Kind: ChangeLockout, Provider: p.id, Connection: c.id, Lockout: *l})
}

// Toggle is an operator's runtime switch over a config default: unset keeps
// the config value.
type Toggle uint8

const (
	ToggleUnset Toggle = iota
	ToggleOn
	ToggleOff
)

// limiterApplies: the connection goes through the admission queue (docs/admission.md)
// — rateLimitProtection on (POST /api/rate-limits beats the config file), or
// the apikey safety net.
func (e *Engine) limiterApplies(p *provState, c *connState) bool {
	on := c.cfg.RateLimitProtection
	switch c.st.RateLimitProtection {
	case ToggleOn:
		on = true
	case ToggleOff:
		on = false
	}
	return e.settings.PacingApplies(p.profile, on)
}

// RateLimitProtection reports a connection's effective rateLimitProtection
// flag and whether the connection goes through the admission queue at all
// (the flag, or the apikey safety net).
func (e *Engine) RateLimitProtection(ref ConnRef) (protection, queued bool, err error) {
	p, c, err := e.conn(ref)
	if err != nil {
		return false, false, err
	}
	protection = c.cfg.RateLimitProtection
	switch c.st.RateLimitProtection {
	case ToggleOn:
		protection = true
	case ToggleOff:
		protection = false
	}
	return protection, e.limiterApplies(p, c), nil
}

// SetRateLimitProtection is POST /api/rate-limits (docs/admission.md): it records the
// operator's choice in the connection's state, so it is persisted and shared
// like every other connection field and survives a restart.
func (e *Engine) SetRateLimitProtection(now Time, ref ConnRef, on bool) error {
	p, c, err := e.conn(ref)
	if err != nil {
		return err
	}
	t := ToggleOff
	if on {
		t = ToggleOn
	}
	if c.st.RateLimitProtection == t {
		return nil
	}
	c.st.RateLimitProtection = t
	e.emit(Change{At: now, Kind: ChangeConnection, Provider: p.id, Connection: c.id, Conn: c.st})
	return nil
}
