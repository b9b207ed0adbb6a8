package model

// LockKey names what a model lockout covers on one connection (docs/lockouts.md).
// Name is a model id, or "family:<name>" for a quota family; Exact keys lock
// only the exact provider/connection/model triple.
type LockKey struct {
	Name  string `json:"name"`
	Exact bool   `json:"exact,omitempty"`
}

func (k LockKey) String() string {
	if k.Exact {
		return "exact:" + k.Name
	}
	return k.Name
}

// Lockout is one model lockout entry with its escalation state. The entry
// outlives its timer while it can still escalate a later failure.
type Lockout struct {
	Key            LockKey `json:"key"`
	Reason         Reason  `json:"reason"`
	Until          Time    `json:"until"` // locked while now <= Until
	LockedAt       Time    `json:"lockedAt"`
	FailureCount   int     `json:"failureCount"`
	LastFailureAt  Time    `json:"lastFailureAt"`
	LastCooldownMs int64   `json:"lastCooldownMs"`
}

// Active reports whether the lockout blocks the model at now.
func (l *Lockout) Active(now Time) bool { return l.Until > 0 && now <= l.Until }

// inert reports whether the entry can be forgotten at now: its timer ended
// and it can no longer escalate a failure.
func (l *Lockout) inert(now Time, windowMs int64) bool {
	return now > l.Until && now.Sub(l.LastFailureAt) > windowMs+l.LastCooldownMs
}

// lockoutCooldown computes a new lockout's cooldown (docs/lockouts.md#escalation,
// docs/lockouts.md#quota-reset): a rule's fixed value, else an upstream hint, else the daily reset
// for quota, else base·2^(n-1) capped.
func lockoutCooldown(s *ModelLockoutSettings, cc *ConnectionCooldownSettings, v *Verdict, failures int, untilDailyReset int64) int64 {
	maxMs := int64(s.MaxCooldownMs)
	switch {
	case v.Lockout.CooldownMs > 0:
		return min(v.Lockout.CooldownMs, maxMs)
	case v.Hint.Ms > 0:
		if v.Hint.stated() || v.Lockout.Reason == ReasonQuotaExhausted {
			return min(v.Hint.Ms, int64(cc.MaxStatedResetMs))
		}
		return min(v.Hint.Ms, maxMs)
	case v.Lockout.Reason == ReasonQuotaExhausted:
		return min(untilDailyReset, maxMs)
	}
	var cd int64
	if !s.UseExponentialBackoff {
		cd = min(int64(s.BaseCooldownMs), maxMs)
	} else {
		base := int64(s.BaseCooldownMs)
		if base <= 0 {
			base = 1000
		}
		cd = backoffMs(base, failures-1, s.MaxBackoffSteps, maxMs)
	}
	if v.Lockout.Reason == ReasonServerError && !v.Lockout.Generic {
		// A per-model-quota provider's 5xx lockout stands in for the
		// connection cooldown: it recovers as one does (bounded recovery),
		// and the half-open probe may end it sooner. The operator's generic
		// lockouts (modelLockout.enabled) keep their own escalation.
		cd = transientCap(cc, cd)
	}
	return cd
}

// lockoutSet is one connection's lockouts; small, scanned linearly.
type lockoutSet []Lockout

func (ls lockoutSet) find(k LockKey) int {
	for i := range ls {
		if ls[i].Key == k {
			return i
		}
	}
	return -1
}

// blocking returns the active lockout with the latest Until among the keys
// that cover model (its family, the bare model, the exact triple).
func (ls lockoutSet) blocking(now Time, family, model string) *Lockout {
	var best *Lockout
	for i := range ls {
		l := &ls[i]
		if !l.Active(now) {
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
