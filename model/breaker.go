package model

// Breaker is one provider's circuit breaker as a plain value (docs/breaker.md,
// docs/breaker.md with the fixes of docs/breaker.md#half-open to docs/breaker.md#trip-statuses).
//
// It has no clock: every method takes now and refreshes lazily, so an OPEN
// breaker whose deadline passed reads as HALF_OPEN without any timer, and a
// quiet DEGRADED breaker reads as CLOSED.
type Breaker struct {
	State        BreakerState `json:"state"`
	FailureCount int          `json:"failureCount"`
	SuccessCount int          `json:"successCount"` // probe successes, informational
	// LastFailureAt is meaningful when HasFailure.
	LastFailureAt   Time        `json:"lastFailureAt"`
	HasFailure      bool        `json:"hasFailure"`
	LastFailureKind FailureKind `json:"lastFailureKind"`
	// OpenedAt is when the breaker last went OPEN; the deadline is derived
	// from it and the current options, so a settings change re-evaluates it.
	OpenedAt   Time `json:"openedAt"`
	OpenCycles int  `json:"openCycles"` // HALF_OPEN→OPEN cycles since the last close
	// Generation changes on every open, half-open, close and reset. A result
	// admitted under an older generation never changes newer state.
	Generation uint64 `json:"generation"`
	// ProbesLeft is the number of HALF_OPEN probe permits still free.
	ProbesLeft int     `json:"probesLeft"`
	Probes     []Probe `json:"probes,omitempty"` // permits handed out, not yet answered
	NextProbe  uint64  `json:"nextProbe"`
	// LastTransportAt dedups transport failures per provider.
	LastTransportAt  Time `json:"lastTransportAt"`
	HasTransportFail bool `json:"hasTransportFail"`
}

// Probe is an outstanding HALF_OPEN probe permit.
type Probe struct {
	ID       uint64 `json:"id"`
	Deadline Time   `json:"deadline"` // the permit frees itself here if no result came
}

// Permit is what Acquire hands out; results carry it back.
type Permit struct {
	Generation uint64 `json:"generation"`
	Probe      uint64 `json:"probe,omitempty"` // 0 = not a probe
}

// Transition describes a breaker state change for the change log.
type Transition struct {
	From, To BreakerState
	Reason   string
}

// Changed reports whether a transition happened.
func (t Transition) Changed() bool { return t.Reason != "" }

// breakerOpts are the resolved options one breaker runs with.
type breakerOpts struct {
	p            *BreakerProfile
	probeTimeout int64
	// hold is each failure kind's cooldownByKind open duration (-1: no
	// override) and quiet each kind's quiet period, resolved once per
	// settings (resolveBreakerOpts): every selection refreshes the breaker
	// of every target after the one that serves (docs/model.md#lazy-selection),
	// so a read looks nothing up by name.
	hold, quiet [numFailureKinds]int64
}

// resolveBreakerOpts resolves one profile's breaker options.
func resolveBreakerOpts(s *Settings, prof Profile) breakerOpts {
	// A copy: the options point into no engine (UpdateTopology copies
	// the engine whole).
	p := *s.ProviderBreaker.For(prof)
	o := breakerOpts{p: &p, probeTimeout: s.ProbeTimeout(prof)}
	for k := range numFailureKinds {
		o.hold[k] = -1
		if d, ok := p.CooldownByKind[k.String()]; ok && k != KindNone && d >= 0 {
			o.hold[k] = int64(d)
		}
		hold := int64(p.ResetTimeoutMs)
		if o.hold[k] >= 0 {
			hold = o.hold[k]
		}
		o.quiet[k] = max(hold*int64(max(1, p.MaxBackoffMultiplier)), hold)
	}
	return o
}

// effectiveResetTimeout escalates the reset timeout after
// backoffEscalationCount open cycles, up to maxBackoffMultiplier × base.
func (o *breakerOpts) effectiveResetTimeout(cycles int) int64 {
	base := int64(o.p.ResetTimeoutMs)
	if cycles <= o.p.BackoffEscalationCount {
		return base
	}
	limit := base * int64(o.p.MaxBackoffMultiplier)
	shift := cycles - o.p.BackoffEscalationCount
	if shift > 30 {
		return limit
	}
	return min(base<<shift, limit)
}

// openDuration is how long an OPEN lasts for a failure kind: its
// cooldownByKind value as is, else the escalated reset timeout.
func (o *breakerOpts) openDuration(kind FailureKind, cycles int) int64 {
	if int(kind) < len(o.hold) && o.hold[kind] >= 0 {
		return o.hold[kind]
	}
	return o.effectiveResetTimeout(cycles)
}

// quietPeriod is how long DEGRADED (or CLOSED with failures) must see no
// failure before it forgets them: the longest OPEN hold for the last kind.
func (o *breakerOpts) quietPeriod(kind FailureKind) int64 {
	if int(kind) < len(o.quiet) {
		return o.quiet[kind]
	}
	return o.quiet[KindNone] // a kind without a name has no override
}

// OpenUntil is the instant an OPEN breaker becomes HALF_OPEN.
func (b *Breaker) openUntil(o *breakerOpts) Time {
	return b.OpenedAt.Add(o.openDuration(b.LastFailureKind, b.OpenCycles))
}

// due reports whether refresh may have a transition to apply at now; when
// false, refresh would change nothing. Every selection refreshes the
// breaker of every target after the one that serves
// (docs/model.md#lazy-selection), and most have nothing due: this answers
// them without building a transition.
func (b *Breaker) due(now Time, o *breakerOpts) bool {
	switch b.State {
	case Open:
		return now >= b.openUntil(o)
	case HalfOpen:
		return len(b.Probes) > 0 // refresh looks at each probe's deadline
	case Degraded, Closed:
		return b.FailureCount > 0 && b.HasFailure && now.Sub(b.LastFailureAt) >= o.quietPeriod(b.LastFailureKind)
	}
	return false
}

// refresh applies every lazy transition due at now. It is idempotent and
// composes: refresh(t1) then refresh(t2) equals refresh(t2) for t1 <= t2.
func (b *Breaker) refresh(now Time, o *breakerOpts) (tr Transition, changed bool) {
	switch b.State {
	case Open:
		if now >= b.openUntil(o) {
			tr = b.moveTo(HalfOpen, "timeout-elapsed")
			b.ProbesLeft = max(1, o.p.HalfOpenRequests)
			b.Probes = b.Probes[:0]
			changed = true
		}
	case Degraded, Closed:
		if b.FailureCount > 0 && b.HasFailure && now.Sub(b.LastFailureAt) >= o.quietPeriod(b.LastFailureKind) {
			b.FailureCount = 0
			changed = true
			if b.State == Degraded {
				tr = b.moveTo(Closed, "quiet-period")
			}
		}
	}
	if b.State == HalfOpen && len(b.Probes) > 0 {
		// A probe whose result never came frees its permit at its deadline.
		kept := b.Probes[:0]
		for _, p := range b.Probes {
			if now >= p.Deadline {
				b.ProbesLeft++
				changed = true
				continue
			}
			kept = append(kept, p)
		}
		b.Probes = kept
	}
	return tr, changed
}

func (b *Breaker) moveTo(s BreakerState, reason string) Transition {
	tr := Transition{From: b.State, To: s, Reason: reason}
	if s == Open || s == HalfOpen || (s == Closed && b.State != Degraded) {
		b.Generation++
	}
	b.State = s
	return tr
}

// admits reports whether the breaker lets a request through at now without
// taking a permit (selection uses it; Acquire takes the permit).
func (b *Breaker) admits() bool {
	switch b.State {
	case Closed, Degraded:
		return true
	case HalfOpen:
		return b.ProbesLeft > 0
	}
	return false
}

// retryAfter is how long until the breaker admits again (0 = admits now).
func (b *Breaker) retryAfter(now Time, o *breakerOpts) int64 {
	switch b.State {
	case Open:
		return max(0, b.openUntil(o).Sub(now))
	case HalfOpen:
		if b.ProbesLeft > 0 || len(b.Probes) == 0 {
			return 0
		}
		earliest := b.Probes[0].Deadline
		for _, p := range b.Probes[1:] {
			earliest = min(earliest, p.Deadline)
		}
		return max(0, earliest.Sub(now))
	}
	return 0
}

// acquire is the one try-acquire permit operation every path uses (
// docs/breaker.md#half-open): CLOSED/DEGRADED hand out a plain permit, HALF_OPEN hands
// out at most halfOpenRequests probe permits, OPEN refuses.
func (b *Breaker) acquire(now Time, o *breakerOpts) (Permit, bool) {
	switch b.State {
	case Closed, Degraded:
		return Permit{Generation: b.Generation}, true
	case HalfOpen:
		if b.ProbesLeft <= 0 {
			return Permit{}, false
		}
		b.ProbesLeft--
		b.NextProbe++
		b.Probes = append(b.Probes, Probe{ID: b.NextProbe, Deadline: now.Add(o.probeTimeout)})
		return Permit{Generation: b.Generation, Probe: b.NextProbe}, true
	}
	return Permit{}, false
}

// takeProbe removes an outstanding probe; false if it is not outstanding
// (it timed out, or belongs to another cycle).
func (b *Breaker) takeProbe(id uint64) bool {
	for i, p := range b.Probes {
		if p.ID == id {
			b.Probes = append(b.Probes[:i], b.Probes[i+1:]...)
			return true
		}
	}
	return false
}

// record applies one result admitted under permit. counted=false means the
// failure was deduplicated: it still frees a probe permit but moves no counter.
func (b *Breaker) record(now Time, pm Permit, eff BreakerEffect, kind FailureKind, counted bool, o *breakerOpts) Transition {
	if pm.Generation != b.Generation {
		return Transition{} // a late result from an older generation
	}
	switch b.State {
	case Open:
		// Failures while OPEN do not extend the open period (docs/breaker.md#open).
		return Transition{}
	case HalfOpen:
		if pm.Probe == 0 || !b.takeProbe(pm.Probe) {
			return Transition{}
		}
		switch eff {
		case BreakerSuccess:
			b.SuccessCount++
			b.FailureCount = 0
			b.OpenCycles = 0
			b.LastFailureKind = KindNone
			b.ProbesLeft = 0
			b.Probes = b.Probes[:0]
			return b.moveTo(Closed, "probe-success")
		case BreakerFailure:
			b.FailureCount++
			b.noteFailure(now, kind)
			b.OpenCycles++
			b.OpenedAt = now
			b.ProbesLeft = 0
			b.Probes = b.Probes[:0]
			return b.moveTo(Open, "probe-failed")
		default:
			b.ProbesLeft++ // neutral: the permit goes back, nothing counted
			return Transition{}
		}
	}
	// CLOSED or DEGRADED.
	switch eff {
	case BreakerSuccess:
		if b.FailureCount == 0 {
			return Transition{}
		}
		b.FailureCount--
		if b.State == Degraded && b.FailureCount <= b.degradeAt(o) {
			return b.moveTo(Closed, "recovery")
		}
	case BreakerFailure:
		if !counted {
			return Transition{}
		}
		b.FailureCount++
		b.noteFailure(now, kind)
		if b.FailureCount >= o.p.FailureThreshold {
			b.OpenedAt = now
			return b.moveTo(Open, "failure-threshold")
		}
		if b.State == Closed && b.FailureCount >= b.degradeAt(o) {
			return b.moveTo(Degraded, "degradation-threshold")
		}
	}
	return Transition{}
}

func (b *Breaker) degradeAt(o *breakerOpts) int {
	return o.p.DegradationThreshold
}

func (b *Breaker) noteFailure(now Time, kind FailureKind) {
	b.LastFailureAt = now
	b.HasFailure = true
	b.LastFailureKind = kind
}

// reset is the operator reset: CLOSED with every counter zeroed.
func (b *Breaker) reset() Transition {
	from := b.State
	gen := b.Generation
	*b = Breaker{Generation: gen + 1, Probes: b.Probes[:0], NextProbe: b.NextProbe}
	return Transition{From: from, To: Closed, Reason: "manual-reset"}
}

// connectionTestPassed moves a DEGRADED breaker to CLOSED (docs/api.md#operator-actions).
func (b *Breaker) connectionTestPassed() Transition {
	if b.State != Degraded {
		return Transition{}
	}
	b.FailureCount = 0
	return b.moveTo(Closed, "connection-test")
}

// clone returns a copy that shares no memory with b.
func (b Breaker) clone() Breaker {
	if len(b.Probes) > 0 {
		b.Probes = append([]Probe(nil), b.Probes...)
	} else {
		b.Probes = nil
	}
	return b
}
