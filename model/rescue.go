package model

import "slices"

// Rescue rules: what keeps a request served when its preferred target
// stumbles for a moment (docs/catalogue.md lists the failover catalogue
// cases each rule serves).
//
//   - Bounded recovery: a transient failure (5xx, transport, timeout)
//     escalates the connection's backoff across requests, but its cooldown
//     without a stated hint is capped by connectionCooldown.
//     transientMaxCooldownMs, so a recovered connection is used again within
//     that bound. A model lockout made by a provider-wide failure
//     (server_error) does not keep the breaker's half-open probe out, and a
//     successful probe ends every such lockout of the provider.
//   - Prefer the first target (priorityWait): see Flow.preferFirst.
//   - Another model for a context-length error: see Flow.nextModel.

// transientCap caps an escalated cooldown without a stated hint.
func transientCap(cc *ConnectionCooldownSettings, cd int64) int64 {
	if limit := int64(cc.TransientMaxCooldownMs); limit > 0 && cd > limit {
		return limit
	}
	return cd
}

// outageLock reports whether a lockout was made by a provider-level
// failure (5xx, transport, timeout): evidence about the provider, which its
// breaker tracks, more than about the model.
func outageLock(l *Lockout) bool { return l.Reason == ReasonServerError }

// blockingAt is lockoutSet.blocking for selection: while the provider's
// breaker is half-open (probe), an outage lockout does not block, so the
// probe can find the provider healthy and end it.
func (ls lockoutSet) blockingAt(now Time, family, model string, probe bool) *Lockout {
	if !probe {
		return ls.blocking(now, family, model)
	}
	var best *Lockout
	for i := range ls {
		l := &ls[i]
		if !l.Active(now) || outageLock(l) {
			continue
		}
		if (l.Key.Exact && l.Key.Name == model) || (!l.Key.Exact && (l.Key.Name == model || l.Key.Name == family)) {
			if best == nil || l.Until > best.Until {
				best = l
			}
		}
	}
	return best
}

// endOutageLocks removes every outage lockout of the provider's
// connections: its half-open probe found it healthy.
func (e *Engine) endOutageLocks(now Time, p *provState) {
	for ci := range p.conns {
		c := &p.conns[ci]
		for i := 0; i < len(c.locks); {
			if l := &c.locks[i]; outageLock(l) {
				e.emit(Change{At: now, Kind: ChangeLockoutRemoved, Provider: p.id, Connection: c.id, Lockout: *l})
				c.locks = slices.Delete(c.locks, i, i+1)
				continue
			}
			i++
		}
	}
}

// preferState is a priority combo's pending wait for its first target
// (settings priorityWait).
type preferState struct {
	ref    ConnRef
	target int
	armed  bool // a wait may be made for ref
	used   bool // the request's one wait was spent (or given up)
}

// preferWorthy: an outcome after which the first target is likely back in a
// moment: a stated hint (Retry-After, retry info) on a transient failure, or
// exactly a 500, a one-off internal error. An outage's 502/503/504 or a
// transport failure is not: the request moves on at once, so an outage
// costs at most one first-target attempt per request.
func preferWorthy(v *Verdict) bool {
	if v.Hint.stated() && v.Reason.transient() {
		return true
	}
	return v.ClientStatus == 500 && v.Reason == ReasonServerError && !v.Hint.stated()
}

// armPrefer notes, after a failed attempt on a priority combo's first
// target, that the request may wait for that connection once.
//
//go:noinline
func (f *Flow) armPrefer(e *Engine, a *Attempt, v *Verdict) {
	pw := &e.settings.PriorityWait
	if f.prefer.used || !pw.Enabled || pw.MaxWaitMs <= 0 || a.Target != 0 || !preferWorthy(v) ||
		!f.Route.IsCombo() || int(f.Route.combo) >= len(e.combos) || e.combos[f.Route.combo].cfg.Strategy != Priority {
		return
	}
	f.prefer = preferState{ref: ConnRef{a.Provider, a.Connection}, target: a.Target, armed: true}
}

// preferFirst runs when the request is about to leave the first target
// (a lower target, or nothing, is next): when the failed connection of the
// first target is back within priorityWait.maxWaitMs, inside the request's
// deadline and attempt budget, and only a transient cooldown or lockout
// keeps it out, the request waits for it (wait true) and retries it there.
// A connection that is ready already is simply un-skipped. Either way this
// happens once per request: one attempt per hint, never a loop.
func (f *Flow) preferFirst(now Time, e *Engine, sel *Selection) (Step, bool) {
	f.prefer.armed, f.prefer.used = false, true
	ref := f.prefer.ref
	i := slices.Index(f.tried, ref)
	if i < 0 || f.attempts >= e.settings.RequestBudget.MaxAttempts {
		return Step{}, false
	}
	f.tried = slices.Delete(f.tried, i, i+1)
	req := Request{Route: f.Route, Allowed: f.Allowed, Skip: f.tried, Session: f.Session, Held: f.Held, HeldUntil: f.HeldUntil}
	e.SelectAll(now, &req, sel)
	for _, c := range sel.Candidates {
		if c.Provider == ref.Provider && c.Connection == ref.Connection && c.Target == f.prefer.target {
			return Step{}, false // ready now
		}
	}
	for _, x := range sel.Excluded {
		if x.Provider != ref.Provider || x.Connection != ref.Connection || x.Target != f.prefer.target {
			continue
		}
		wait := x.RemainingMs
		if (x.Reason == ExclConnectionCooldown || x.Reason == ExclModelLockout) && x.LockReason.transient() &&
			wait > 0 && wait <= int64(e.settings.PriorityWait.MaxWaitMs) && now.Add(wait) < f.deadline {
			return Step{Kind: StepWait, WaitMs: wait, PriorityWait: true}, true
		}
		break
	}
	f.tried = append(f.tried, ref) // not worth waiting for: the downgrade stands
	return Step{}, false
}

// refusedForLength notes a model that refused the request for its length:
// the connection is fine (its other models stay candidates), only this
// target and every target of this model are out. Not inlined: Flow.record's
// frame is on every held stream's stack.
//
//go:noinline
func (f *Flow) refusedForLength(e *Engine, a *Attempt) {
	f.skipTargets = append(f.skipTargets, f.targetOf(a))
	if !slices.Contains(f.tooLong, a.Model) {
		f.tooLong = append(f.tooLong, a.Model)
	}
	f.tooLongWindow = max(f.tooLongWindow, e.contextWindow(a.p, a.Model))
}

// largerWindow: after a context-length refusal, the next attempt goes to
// the eligible candidate with the largest known context window above the
// refused model's (any known window when the refused one is unknown); with
// none known, the strategy's order (first) stands.
func (f *Flow) largerWindow(e *Engine, sel *Selection, first int) int {
	best, bestW := first, f.tooLongWindow
	for i := first; i < len(sel.Candidates); i++ {
		c := &sel.Candidates[i]
		if slices.Contains(f.skipTargets, c.Target) || slices.Contains(f.unfit, c.Target) || slices.Contains(f.tooLong, c.Model) {
			continue
		}
		if w := e.contextWindow(c.p, c.Model); w > bestW {
			best, bestW = i, w
		}
	}
	return best
}

// contextWindow is the known context window of a provider's model (0 =
// unknown).
func (e *Engine) contextWindow(p int32, model string) int {
	if int(p) < 0 || int(p) >= len(e.provs) {
		return 0
	}
	return e.provs[p].cfg.ContextWindows[model]
}
