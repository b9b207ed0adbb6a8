package store

import (
	"cmp"
	"reflect"
	"slices"

	"github.com/breakwater-gw/breakwater/model"
)

// Conflict rules between replicas (docs/store.md "Conflicts").
//
// A replica writes its value straight through when the row still has the
// version its value descends from: then it has seen every earlier write and
// last-writer-wins is exact (a single replica always takes this path, so a
// restore equals what it had in memory). Otherwise the two values are
// concurrent and merge3 reconciles them against their common ancestor, the
// value at the version this replica last saw (the row's history is linear:
// every write descends from the row it replaced). What only one side changed
// is taken from that side — so a success that cleared a cooldown survives a
// concurrent write that only counted uses. What both sides changed follows
// rules that never lose a protective state:
//
//   - connection, field by field: status — a terminal status wins over a
//     transient one (a terminal connection carries no cooldown); cooldown
//     end, herd-guard instant, backoff level, failure instants, use counters
//     — the greater; last error — the later; refusal streaks — the longer;
//   - lockout: present wins over removed; until only extends; counts take
//     the greater;
//   - breaker: the higher generation wins; at equal generation the one that
//     saw more failures (then the later failure, then the more severe state);
//     outstanding probes are the union, free probes the lesser;
//   - provider window: the later cooling end; failure instants are the union;
//   - cursor: the greater; pin: the later expiry (last slide), present over
//     removed.
func merge3(k kind, anc, mine, theirs value) value {
	if equalVal(k, mine, anc) {
		return theirs
	}
	if equalVal(k, theirs, anc) {
		return mine
	}
	if k == kindConn && mine.present && theirs.present {
		out := mine
		out.at = max(mine.at, theirs.at)
		out.conn = mergeConn3(anc.conn, mine.conn, theirs.conn)
		return out
	}
	return merge(k, mine, theirs)
}

// equalVal compares the part of two values their kind uses.
func equalVal(k kind, a, b value) bool {
	if a.present != b.present {
		return false
	}
	if !a.present {
		return true
	}
	switch k {
	case kindBreaker:
		x, y := a.breaker, b.breaker
		return slices.Equal(x.Probes, y.Probes) && reflect.DeepEqual(withoutProbes(x), withoutProbes(y))
	case kindWindow:
		return a.window.CoolUntil == b.window.CoolUntil && slices.Equal(a.window.Failures, b.window.Failures)
	case kindCursor:
		return a.cursor == b.cursor
	case kindConn:
		return a.conn == b.conn
	case kindLockout:
		return a.lock == b.lock
	case kindPin:
		return a.pin == b.pin
	}
	return false
}

func withoutProbes(b model.Breaker) model.Breaker { b.Probes = nil; return b }

// pick3 takes the side that changed a field; conflict decides when both did.
func pick3[T comparable](anc, mine, theirs T, conflict func(T, T) T) T {
	switch {
	case theirs == anc:
		return mine
	case mine == anc:
		return theirs
	}
	return conflict(mine, theirs)
}

func greater[T cmp.Ordered](a, b T) T { return max(a, b) }

func mergeConn3(anc, mine, theirs model.Conn) model.Conn {
	var out model.Conn
	mergeConnHealth(&out, &anc, &mine, &theirs)
	mergeConnErrors(&out, &anc, &mine, &theirs)
	mergeConnUse(&out, &anc, &mine, &theirs)
	out.InFlight = mine.InFlight
	out.Retired = pick3(anc.Retired, mine.Retired, theirs.Retired, model.MergeRetired)
	if out.Status.Terminal() {
		out.RateLimitedUntil = 0 // a terminal connection carries no cooldown
	}
	return out
}

// mergeConnHealth merges status (terminal wins, else the worse), cooldown
// and backoff level (the later / higher).
func mergeConnHealth(out, anc, mine, theirs *model.Conn) {
	out.Status = pick3(anc.Status, mine.Status, theirs.Status, func(m, t model.ConnStatus) model.ConnStatus {
		if m.Terminal() != t.Terminal() {
			if m.Terminal() {
				return m
			}
			return t
		}
		return max(m, t)
	})
	type cooldown struct{ until, set model.Time }
	cd := pick3(cooldown{anc.RateLimitedUntil, anc.CooldownSetAt}, cooldown{mine.RateLimitedUntil, mine.CooldownSetAt},
		cooldown{theirs.RateLimitedUntil, theirs.CooldownSetAt}, func(m, t cooldown) cooldown {
			return cooldown{max(m.until, t.until), max(m.set, t.set)}
		})
	out.RateLimitedUntil, out.CooldownSetAt = cd.until, cd.set
	out.BackoffLevel = pick3(anc.BackoffLevel, mine.BackoffLevel, theirs.BackoffLevel, greater[int])
}

// failure is a last-failure instant with whether there was one; merged,
// the later instant and either's flag.
type failure struct {
	at  model.Time
	has bool
}

func mergeFailure(m, t failure) failure { return failure{max(m.at, t.at), m.has || t.has} }

// mergeConnErrors merges what the connection's failures recorded: the last
// failure, the last error (the later one), the refusal streaks, the
// breaker failure and the provider-window count.
func mergeConnErrors(out, anc, mine, theirs *model.Conn) {
	f := pick3(failure{anc.LastFailureAt, anc.HasFailure}, failure{mine.LastFailureAt, mine.HasFailure},
		failure{theirs.LastFailureAt, theirs.HasFailure}, mergeFailure)
	out.LastFailureAt, out.HasFailure = f.at, f.has
	type lastErr struct {
		msg  string
		typ  model.Reason
		code int
		at   model.Time
	}
	le := pick3(lastErr{anc.LastError, anc.LastErrorType, anc.ErrorCode, anc.LastErrorAt},
		lastErr{mine.LastError, mine.LastErrorType, mine.ErrorCode, mine.LastErrorAt},
		lastErr{theirs.LastError, theirs.LastErrorType, theirs.ErrorCode, theirs.LastErrorAt}, func(m, t lastErr) lastErr {
			if t.at > m.at || (t.at == m.at && t.code > m.code) {
				return t
			}
			return m
		})
	out.LastError, out.LastErrorType, out.ErrorCode, out.LastErrorAt = le.msg, le.typ, le.code, le.at
	out.Rejected = pick3(anc.Rejected, mine.Rejected, theirs.Rejected, mergeStreak)
	out.Auth = pick3(anc.Auth, mine.Auth, theirs.Auth, mergeStreak)
	bf := pick3(failure{anc.LastBreakerFailAt, anc.HasBreakerFail}, failure{mine.LastBreakerFailAt, mine.HasBreakerFail},
		failure{theirs.LastBreakerFailAt, theirs.HasBreakerFail}, mergeFailure)
	out.LastBreakerFailAt, out.HasBreakerFail = bf.at, bf.has
	out.WindowFailures = pick3(anc.WindowFailures, mine.WindowFailures, theirs.WindowFailures, greater[int])
	out.WindowLastAt = pick3(anc.WindowLastAt, mine.WindowLastAt, theirs.WindowLastAt, greater[model.Time])
}

// mergeConnUse merges use counts, the last seen egress IP
// (docs/cooldowns.md#egress-buckets) and the operator's
// rateLimitProtection switch (docs/admission.md); on a true conflict the
// later sighting / "off" wins.
func mergeConnUse(out, anc, mine, theirs *model.Conn) {
	out.Uses = pick3(anc.Uses, mine.Uses, theirs.Uses, greater[uint64])
	out.LastUsedAt = pick3(anc.LastUsedAt, mine.LastUsedAt, theirs.LastUsedAt, greater[model.Time])
	type egress struct {
		ip string
		at model.Time
	}
	eg := pick3(egress{anc.EgressIP, anc.EgressAt}, egress{mine.EgressIP, mine.EgressAt}, egress{theirs.EgressIP, theirs.EgressAt},
		func(m, t egress) egress {
			if t.at > m.at || (t.at == m.at && t.ip > m.ip) {
				return t
			}
			return m
		})
	out.EgressIP, out.EgressAt = eg.ip, eg.at
	out.RateLimitProtection = pick3(anc.RateLimitProtection, mine.RateLimitProtection, theirs.RateLimitProtection, greater[model.Toggle])
}

// merge reconciles two concurrent values without an ancestor (both
// changed): the rules above, commutative.
func merge(k kind, a, b value) value {
	if a.present != b.present {
		if k == kindLockout || k == kindPin {
			if a.present {
				return a
			}
			return b
		}
	}
	out := a
	out.at = max(a.at, b.at)
	out.present = a.present || b.present
	switch k {
	case kindBreaker:
		out.breaker = mergeBreaker(a.breaker, b.breaker)
	case kindWindow:
		out.window = mergeWindow(a.window, b.window)
	case kindCursor:
		out.cursor = max(a.cursor, b.cursor)
	case kindConn:
		out.conn = mergeConn(a.conn, b.conn)
	case kindLockout:
		out.lock = mergeLockout(a.lock, b.lock)
	case kindPin:
		// The later slide wins (a pin slides its expiry on every use).
		if b.pin.ExpiresAt > a.pin.ExpiresAt || (b.pin.ExpiresAt == a.pin.ExpiresAt && b.pin.Connection > a.pin.Connection) {
			out.pin = b.pin
		}
	}
	return out
}

// mergeConn merges two connection values that both changed everything.
func mergeConn(a, b model.Conn) model.Conn {
	at, bt := a.Status.Terminal(), b.Status.Terminal()
	switch {
	case at && !bt:
		return a
	case bt && !at:
		return b
	case at && bt:
		// Both terminal: the later error decides which terminal status.
		if b.LastErrorAt > a.LastErrorAt || (b.LastErrorAt == a.LastErrorAt && b.Status > a.Status) {
			return b
		}
		return a
	}
	out := a
	if b.LastErrorAt > a.LastErrorAt || (b.LastErrorAt == a.LastErrorAt && b.ErrorCode > a.ErrorCode) {
		out.LastError, out.LastErrorType, out.ErrorCode, out.LastErrorAt = b.LastError, b.LastErrorType, b.ErrorCode, b.LastErrorAt
	}
	out.RateLimitedUntil = max(a.RateLimitedUntil, b.RateLimitedUntil)
	out.CooldownSetAt = max(a.CooldownSetAt, b.CooldownSetAt)
	out.BackoffLevel = max(a.BackoffLevel, b.BackoffLevel)
	out.LastFailureAt = max(a.LastFailureAt, b.LastFailureAt)
	out.HasFailure = a.HasFailure || b.HasFailure
	out.Rejected = mergeStreak(a.Rejected, b.Rejected)
	out.Auth = mergeStreak(a.Auth, b.Auth)
	out.LastBreakerFailAt = max(a.LastBreakerFailAt, b.LastBreakerFailAt)
	out.HasBreakerFail = a.HasBreakerFail || b.HasBreakerFail
	out.WindowFailures = max(a.WindowFailures, b.WindowFailures)
	out.WindowLastAt = max(a.WindowLastAt, b.WindowLastAt)
	out.Uses = max(a.Uses, b.Uses)
	out.LastUsedAt = max(a.LastUsedAt, b.LastUsedAt)
	out.InFlight = max(a.InFlight, b.InFlight)
	if b.EgressAt > a.EgressAt || (b.EgressAt == a.EgressAt && b.EgressIP > a.EgressIP) {
		out.EgressIP, out.EgressAt = b.EgressIP, b.EgressAt
	}
	out.RateLimitProtection = max(a.RateLimitProtection, b.RateLimitProtection)
	out.Retired = model.MergeRetired(a.Retired, b.Retired)
	return out
}

func mergeStreak(a, b model.Streak) model.Streak {
	out := a
	if b.Count > a.Count || (b.Count == a.Count && b.LastAt > a.LastAt) {
		out = b
	}
	out.CooldownUntil = max(a.CooldownUntil, b.CooldownUntil)
	return out
}

func mergeLockout(a, b model.Lockout) model.Lockout {
	out := a
	if b.Until > a.Until || (b.Until == a.Until && b.LockedAt > a.LockedAt) {
		out = b
	}
	out.FailureCount = max(a.FailureCount, b.FailureCount)
	out.LastFailureAt = max(a.LastFailureAt, b.LastFailureAt)
	return out
}

func mergeBreaker(a, b model.Breaker) model.Breaker {
	if a.Generation != b.Generation {
		if b.Generation > a.Generation {
			return cloneBreaker(b)
		}
		return cloneBreaker(a)
	}
	win, other := a, b
	if breakerAhead(b, a) {
		win, other = b, a
	}
	out := cloneBreaker(win)
	for _, p := range other.Probes {
		if !slices.ContainsFunc(out.Probes, func(q model.Probe) bool { return q.ID == p.ID }) {
			out.Probes = append(out.Probes, p)
		}
	}
	slices.SortFunc(out.Probes, func(x, y model.Probe) int { return cmp.Compare(x.ID, y.ID) })
	out.ProbesLeft = min(a.ProbesLeft, b.ProbesLeft)
	out.NextProbe = max(a.NextProbe, b.NextProbe)
	out.LastTransportAt = max(a.LastTransportAt, b.LastTransportAt)
	out.HasTransportFail = a.HasTransportFail || b.HasTransportFail
	out.SuccessCount = max(a.SuccessCount, b.SuccessCount)
	return out
}

// breakerAhead reports whether x wins over y at equal generation.
func breakerAhead(x, y model.Breaker) bool {
	if x.FailureCount != y.FailureCount {
		return x.FailureCount > y.FailureCount
	}
	if x.LastFailureAt != y.LastFailureAt {
		return x.LastFailureAt > y.LastFailureAt
	}
	return severity(x.State) > severity(y.State)
}

func severity(s model.BreakerState) int {
	switch s {
	case model.Open:
		return 3
	case model.HalfOpen:
		return 2
	case model.Degraded:
		return 1
	}
	return 0
}

func cloneBreaker(b model.Breaker) model.Breaker {
	b.Probes = slices.Clone(b.Probes)
	return b
}

func mergeWindow(a, b model.Window) model.Window {
	out := model.Window{CoolUntil: max(a.CoolUntil, b.CoolUntil)}
	out.Failures = append(slices.Clone(a.Failures), b.Failures...)
	slices.Sort(out.Failures)
	out.Failures = slices.Compact(out.Failures)
	if len(out.Failures) == 0 {
		out.Failures = nil
	}
	return out
}
