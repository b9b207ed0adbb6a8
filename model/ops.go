package model

import (
	"fmt"
	"slices"
)

// Refresh applies every lazy change due at now everywhere: OPEN breakers
// past their deadline become HALF_OPEN, quiet DEGRADED breakers CLOSED,
// timed-out probes free their permits, window failures age out and inert
// lockouts are forgotten. Reads do the same for what they touch; Refresh is
// for dashboards and snapshots.
func (e *Engine) Refresh(now Time) {
	e.expirePins(now)
	for i := range e.provs {
		p := &e.provs[i]
		e.refreshProvider(now, p)
		if w := &p.window; len(w.Failures) > 0 {
			wp := e.settings.ProviderCooldown.For(p.profile)
			n := len(w.Failures)
			w.Failures = slices.DeleteFunc(w.Failures, func(t Time) bool { return now.Sub(t) >= int64(wp.ProviderFailureWindowMs) })
			if len(w.Failures) != n {
				e.emit(Change{At: now, Kind: ChangeWindow, Provider: p.id, Window: w.clone()})
			}
		}
		for j := range p.conns {
			e.forgetInert(now, p, &p.conns[j])
		}
	}
}

// forgetInert drops lockouts whose timer ended and that can no longer
// escalate a failure. Every path whose answer depends on which lockouts
// exist calls it first, so a lazy read equals having ticked.
func (e *Engine) forgetInert(now Time, p *provState, c *connState) {
	window := int64(e.settings.ModelLockout.EscalationWindowMs)
	for k := 0; k < len(c.locks); {
		if c.locks[k].inert(now, window) {
			e.emit(Change{At: now, Kind: ChangeLockoutRemoved, Provider: p.id, Connection: c.id, Lockout: c.locks[k]})
			c.locks = slices.Delete(c.locks, k, k+1)
			continue
		}
		k++
	}
}

// ProviderView is one provider's breaker as GET /api/monitoring/health
// shows it.
type ProviderView struct {
	Provider     string       `json:"provider"`
	State        BreakerState `json:"state"`
	FailureCount int          `json:"failureCount"`
	RetryAfterMs int64        `json:"retryAfterMs"`
	// ProviderCooldownMs is the optional window gate's remaining cooling.
	ProviderCooldownMs int64 `json:"providerCooldownMs,omitempty"`
}

// ConnectionView is one connection as the health and cooldown endpoints
// show it (never a credential).
type ConnectionView struct {
	Provider            string        `json:"provider"`
	Connection          string        `json:"connection"`
	Status              ConnStatus    `json:"status"`
	CooldownRemainingMs int64         `json:"cooldownRemainingMs"`
	BackoffLevel        int           `json:"backoffLevel"`
	LastErrorType       Reason        `json:"lastErrorType,omitempty"`
	LastError           string        `json:"lastError,omitempty"`
	ErrorCode           int           `json:"errorCode,omitempty"`
	InFlight            int           `json:"inFlight"`
	Uses                uint64        `json:"uses"`
	Lockouts            []LockoutView `json:"lockouts"`
	// The refusal ladders' strikes still counting at now: auth failures
	// toward `expired` and request rejections toward `banned`; the Max-th
	// strike makes the connection terminal.
	AuthStrikes        int `json:"authStrikes"`
	AuthStrikesMax     int `json:"authStrikesMax"`
	RejectedStrikes    int `json:"rejectedStrikes"`
	RejectedStrikesMax int `json:"rejectedStrikesMax"`
}

// live is the streak's count while it still counts at now (a strike older
// than the streak window starts the ladder over).
func (s Streak) live(now Time) int {
	if s.Count > 0 && now.Sub(s.LastAt) < streakWindowMs {
		return s.Count
	}
	return 0
}

// LockoutView is one active model lockout.
type LockoutView struct {
	Provider     string `json:"provider"`
	Connection   string `json:"connection"`
	Model        string `json:"model"`
	Exact        bool   `json:"exact,omitempty"`
	Reason       Reason `json:"reason"`
	ExpiresAt    Time   `json:"expiresAt"`
	RemainingMs  int64  `json:"remainingMs"`
	FailureCount int    `json:"failureCount"`
}

// Providers reports every breaker at now, refreshing lazily (a dashboard
// never shows a provider OPEN past its deadline).
func (e *Engine) Providers(now Time) []ProviderView {
	out := make([]ProviderView, 0, len(e.provs))
	for i := range e.provs {
		p := &e.provs[i]
		e.refreshProvider(now, p)
		out = append(out, ProviderView{Provider: p.id, State: p.breaker.State, FailureCount: p.breaker.FailureCount,
			RetryAfterMs: p.breaker.retryAfter(now, e.opts(p)), ProviderCooldownMs: e.windowCooling(now, p)})
	}
	return out
}

// Connections reports every connection of provider ("" = all) at now.
func (e *Engine) Connections(now Time, provider string) []ConnectionView {
	var out []ConnectionView
	decay := int64(e.settings.ConnectionCooldown.BackoffDecayMs)
	for i := range e.provs {
		p := &e.provs[i]
		if provider != "" && p.id != provider {
			continue
		}
		for j := range p.conns {
			c := &p.conns[j]
			v := ConnectionView{Provider: p.id, Connection: c.id, Status: c.st.statusAt(now),
				CooldownRemainingMs: c.st.cooldownRemaining(now), BackoffLevel: c.st.levelAt(now, decay),
				LastErrorType: c.st.LastErrorType, LastError: c.st.LastError, ErrorCode: c.st.ErrorCode,
				InFlight: c.inflight, Uses: c.st.Uses, Lockouts: []LockoutView{},
				AuthStrikes: c.st.Auth.live(now), AuthStrikesMax: expiredRetryMax + 1,
				RejectedStrikes: c.st.Rejected.live(now), RejectedStrikesMax: rejectedThreshold}
			if !c.st.Status.Terminal() && c.retiredAs.Terminal() {
				// This process's key was retired while terminal.
				v.Status, v.CooldownRemainingMs = c.retiredAs, 0
				v.LastErrorType = terminalReason(c.retiredAs)
				v.LastError = "the key this gateway uses was replaced while " + c.retiredAs.String() + "; put the new key in its config, or reset the connection"
			}
			v.Lockouts = e.appendLockouts(now, p, c, v.Lockouts)
			out = append(out, v)
		}
	}
	return out
}

func (e *Engine) appendLockouts(now Time, p *provState, c *connState, out []LockoutView) []LockoutView {
	for _, l := range c.locks {
		if !l.Active(now) {
			continue
		}
		out = append(out, LockoutView{Provider: p.id, Connection: c.id, Model: l.Key.Name, Exact: l.Key.Exact,
			Reason: l.Reason, ExpiresAt: l.Until, RemainingMs: l.Until.Sub(now), FailureCount: l.FailureCount})
	}
	return out
}

// Lockouts lists every active model lockout, longest remaining first.
func (e *Engine) Lockouts(now Time) []LockoutView {
	out := []LockoutView{}
	for i := range e.provs {
		p := &e.provs[i]
		for j := range p.conns {
			out = e.appendLockouts(now, p, &p.conns[j], out)
		}
	}
	slices.SortStableFunc(out, func(a, b LockoutView) int {
		if a.RemainingMs != b.RemainingMs {
			return int(b.RemainingMs - a.RemainingMs)
		}
		return 0
	})
	return out
}

// NotFoundError says an operator action named something the topology lacks.
type NotFoundError struct{ What string }

func (e *NotFoundError) Error() string { return e.What + " not found" }

func (e *Engine) conn(ref ConnRef) (*provState, *connState, error) {
	pi, ok := e.provIdx[ref.Provider]
	if !ok {
		return nil, nil, &NotFoundError{fmt.Sprintf("provider %q", ref.Provider)}
	}
	p := &e.provs[pi]
	ci, ok := p.connIdx[ref.Connection]
	if !ok {
		return nil, nil, &NotFoundError{fmt.Sprintf("connection %q", ref.String())}
	}
	return p, &p.conns[ci], nil
}

// ResetBreakers is POST /api/resilience/reset: the named provider's breaker
// (or every one when provider is "") goes CLOSED with its counters zeroed.
// It returns how many breakers were reset.
func (e *Engine) ResetBreakers(now Time, provider string) (int, error) {
	if provider != "" {
		if _, ok := e.provIdx[provider]; !ok {
			return 0, &NotFoundError{fmt.Sprintf("provider %q", provider)}
		}
	}
	n := 0
	for i := range e.provs {
		p := &e.provs[i]
		if provider != "" && p.id != provider {
			continue
		}
		e.refreshProvider(now, p) // every entry point refreshes first
		e.emitBreaker(now, p, p.breaker.reset())
		for ci := range p.conns {
			// The per-connection dedup of breaker failures starts over
			// too: the first failure after a reset counts.
			if c := &p.conns[ci]; c.st.HasBreakerFail {
				c.st.HasBreakerFail, c.st.LastBreakerFailAt = false, 0
				e.emit(Change{At: now, Kind: ChangeConnection, Provider: p.id, Connection: c.id, Conn: c.st})
			}
		}
		if len(p.window.Failures) > 0 || p.window.CoolUntil != 0 {
			p.window = Window{}
			e.emit(Change{At: now, Kind: ChangeWindow, Provider: p.id})
		}
		n++
	}
	return n, nil
}

// ClearResult is the cooldown manager's answer (docs/api.md#cooldown-manager).
type ClearResult struct {
	Cleared         int `json:"cleared"`
	Unchanged       int `json:"unchanged"`
	SkippedTerminal int `json:"skippedTerminal"`
	LockoutsCleared int `json:"lockoutsCleared"`
}

// ClearCooldowns is POST /api/resilience/cooldowns: clears the non-terminal
// cooldowns and the lockouts of the named connections, or of every
// connection (of provider, when given) with all. Terminal states are counted
// and left alone. Unknown connections are an error and change nothing.
func (e *Engine) ClearCooldowns(now Time, refs []ConnRef, all bool, provider string) (ClearResult, error) {
	var targets []*connState
	var provs []*provState
	if all {
		if provider != "" {
			if _, ok := e.provIdx[provider]; !ok {
				return ClearResult{}, &NotFoundError{fmt.Sprintf("provider %q", provider)}
			}
		}
		for i := range e.provs {
			p := &e.provs[i]
			if provider != "" && p.id != provider {
				continue
			}
			for j := range p.conns {
				targets, provs = append(targets, &p.conns[j]), append(provs, p)
			}
		}
	} else {
		for _, r := range refs {
			p, c, err := e.conn(r)
			if err != nil {
				return ClearResult{}, err
			}
			targets, provs = append(targets, c), append(provs, p)
		}
	}
	var res ClearResult
	for i, c := range targets {
		p := provs[i]
		e.forgetInert(now, p, c)
		if c.st.Status.Terminal() {
			res.SkippedTerminal++
			continue
		}
		changed := false
		if c.st.RateLimitedUntil > now || c.st.BackoffLevel > 0 {
			// The timer and the backoff go; the 401 / 403 ladders' strikes
			// stay (docs/cooldowns.md, docs/api.md#cooldown-manager: terminal states are never cleared here,
			// and wiping the evidence would let a key that keeps failing
			// never reach one — each clear restarted it at 5 min). Their
			// step timers go with the cooldown, so the next failure is the
			// next strike. A reset (ResetConnection) or new credentials
			// clear the strikes.
			c.st.RateLimitedUntil, c.st.CooldownSetAt, c.st.BackoffLevel = 0, 0, 0
			c.st.liftStrikeTimers()
			changed = true
			e.emit(Change{At: now, Kind: ChangeConnection, Provider: p.id, Connection: c.id, Conn: c.st})
		}
		for _, l := range c.locks {
			if l.Active(now) {
				res.LockoutsCleared++
			}
			e.emit(Change{At: now, Kind: ChangeLockoutRemoved, Provider: p.id, Connection: c.id, Lockout: l})
			changed = true
		}
		c.locks = c.locks[:0]
		if changed {
			res.Cleared++
		} else {
			res.Unchanged++
		}
	}
	return res, nil
}

// ResetConnection clears a connection's terminal state and every error
// (POST /api/resilience/connections/{provider}/{connection}/reset, or new
// credentials). It reports whether anything changed.
func (e *Engine) ResetConnection(now Time, ref ConnRef) (bool, error) {
	p, c, err := e.conn(ref)
	if err != nil {
		return false, err
	}
	e.forgetInert(now, p, c)
	wasRetired := c.retiredAs.Terminal()
	if c.st.Status == StatusActive && c.st.clean() && len(c.locks) == 0 && !wasRetired {
		return false, nil
	}
	c.st.Status = StatusActive
	c.st.clearErrors()
	if wasRetired {
		// The operator vouches for this process's key: it is no longer
		// one to treat as terminal, here or on a replica that holds it.
		c.st.unretire(c.cred)
		c.retiredAs = StatusActive
	}
	e.startOver(now, p, c)
	return true, nil
}

// startOver records a connection's new state and drops its lockouts: the
// end of a reset or of a credential change.
func (e *Engine) startOver(now Time, p *provState, c *connState) {
	e.emit(Change{At: now, Kind: ChangeConnection, Provider: p.id, Connection: c.id, Conn: c.st})
	for _, l := range c.locks {
		e.emit(Change{At: now, Kind: ChangeLockoutRemoved, Provider: p.id, Connection: c.id, Lockout: l})
	}
	c.locks = c.locks[:0]
}

// SetCredential tells the engine which key this process uses for a
// connection, by its fingerprint fp (the shell's one-way hash; "" = none):
// at start for every connection, and when PUT /api/providers changes a
// key. A change of key on this process starts the connection over (
// docs/api.md#operator-actions: new credentials clear a terminal state), the old key recorded as
// retired when it was terminal. Whether the key in use is a retired one is
// this process's own judgement (a replica, or a restart on a config file,
// that still has the old key keeps it terminal; one with the new key does
// not): the shared state is never flipped by a replica's key. It reports
// whether the shared state changed.
func (e *Engine) SetCredential(now Time, ref ConnRef, fp string) (bool, error) {
	p, c, err := e.conn(ref)
	if err != nil || fp == "" {
		return false, err
	}
	old := c.cred
	c.cred = fp
	changed := false
	if old != "" && old != fp {
		if c.st.Status.Terminal() {
			c.st.retire(old, c.st.Status)
		}
		c.st.clearErrors()
		c.st.Status = StatusActive
		e.startOver(now, p, c)
		changed = true
	}
	c.refreshRetired()
	return changed, nil
}

// RefreshCredentials re-checks every connection's key against the shared
// Retired lists, after other replicas' changes were applied.
func (e *Engine) RefreshCredentials() {
	for i := range e.provs {
		for j := range e.provs[i].conns {
			e.provs[i].conns[j].refreshRetired()
		}
	}
}

// ClearLockout is DELETE /api/resilience/model-cooldowns for one
// provider/connection/model (docs/api.md#model-cooldowns): it removes every key
// covering the model on that connection. It reports how many were removed.
func (e *Engine) ClearLockout(now Time, ref ConnRef, model string) (int, error) {
	p, c, err := e.conn(ref)
	if err != nil {
		return 0, err
	}
	e.forgetInert(now, p, c)
	fam := p.family(model)
	n := 0
	for k := 0; k < len(c.locks); {
		l := c.locks[k]
		if (l.Key.Exact && l.Key.Name == model) || (!l.Key.Exact && (l.Key.Name == model || l.Key.Name == fam)) {
			e.emit(Change{At: now, Kind: ChangeLockoutRemoved, Provider: p.id, Connection: c.id, Lockout: l})
			c.locks = slices.Delete(c.locks, k, k+1)
			n++
			continue
		}
		k++
	}
	return n, nil
}

// ClearAllLockouts removes every model lockout; it returns how many.
func (e *Engine) ClearAllLockouts(now Time) int {
	n := 0
	for i := range e.provs {
		p := &e.provs[i]
		for j := range p.conns {
			c := &p.conns[j]
			e.forgetInert(now, p, c)
			for _, l := range c.locks {
				e.emit(Change{At: now, Kind: ChangeLockoutRemoved, Provider: p.id, Connection: c.id, Lockout: l})
				n++
			}
			c.locks = c.locks[:0]
		}
	}
	return n
}

// ProviderTested records a provider test: a test checks every connection
// of the provider (one cheap authenticated call each), and each connection
// whose call passed is recorded as by connectionTestPassed, in the
// provider's connection order. passed names the connections that passed;
// a name that is not one of the provider's is a NotFoundError, recorded
// nothing. Both shells call it, so a test on a DEGRADED provider clears the
// backoff and last error of every connection that answered, not only of
// the one an operator had in mind.
func (e *Engine) ProviderTested(now Time, provider string, passed []string) error {
	pi, ok := e.provIdx[provider]
	if !ok {
		return &NotFoundError{fmt.Sprintf("provider %q", provider)}
	}
	p := &e.provs[pi]
	for _, id := range passed {
		if _, ok := p.connIdx[id]; !ok {
			return &NotFoundError{fmt.Sprintf("connection %q", ConnRef{provider, id}.String())}
		}
	}
	for i := range p.conns {
		if slices.Contains(passed, p.conns[i].id) {
			if err := e.connectionTestPassed(now, ConnRef{provider, p.conns[i].id}); err != nil {
				return err
			}
		}
	}
	return nil
}

// connectionTestPassed records a valid connection test (docs/api.md#operator-actions): the
// connection's non-terminal cooldown clears and a DEGRADED breaker closes.
func (e *Engine) connectionTestPassed(now Time, ref ConnRef) error {
	p, c, err := e.conn(ref)
	if err != nil {
		return err
	}
	if !c.st.Status.Terminal() && !c.st.clean() {
		// The 401 / 403 ladders' strikes stay, as under the cooldown
		// manager: a /models that answers proves the key reaches the
		// upstream, not that the requests it refused will pass (a key
		// tested between refusals never reached banned).
		rej, auth := c.st.Rejected, c.st.Auth
		c.st.clearErrors()
		c.st.Rejected, c.st.Auth = rej, auth
		c.st.liftStrikeTimers()
		e.emit(Change{At: now, Kind: ChangeConnection, Provider: p.id, Connection: c.id, Conn: c.st})
	}
	e.refreshProvider(now, p)
	if tr := p.breaker.connectionTestPassed(); tr.Changed() {
		e.emitBreaker(now, p, tr)
	}
	return nil
}
