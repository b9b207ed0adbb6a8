package model

import (
	"maps"
	"slices"
	"strings"
)

// Conn is one connection's resilience state as a plain value (docs/cooldowns.md).
type Conn struct {
	// Status is active or a terminal status; "cooldown" is derived from
	// RateLimitedUntil at read time (see StatusAt).
	Status ConnStatus `json:"status"`
	// RateLimitedUntil: selection skips the connection while it is > now.
	RateLimitedUntil Time `json:"rateLimitedUntil"`
	// CooldownSetAt is when the current cooldown was set: failures of
	// attempts that started before it are one herd and do not escalate.
	CooldownSetAt Time `json:"cooldownSetAt"`
	// BackoffLevel is kept across requests; a success resets it, a quiet
	// period lowers it by one per connectionCooldown.backoffDecayMs.
	BackoffLevel  int  `json:"backoffLevel"`
	LastFailureAt Time `json:"lastFailureAt"`
	HasFailure    bool `json:"hasFailure"`
	// Last error, for operators; never a credential.
	LastError     string `json:"lastError,omitempty"`
	LastErrorType Reason `json:"lastErrorType,omitempty"`
	ErrorCode     int    `json:"errorCode,omitempty"`
	LastErrorAt   Time   `json:"lastErrorAt,omitempty"`
	// Rejected is the request-rejected streak (docs/cooldowns.md#ladders).
	Rejected Streak `json:"rejected"`
	// Auth is the expired-retry streak (EXPIRED_RETRY_MAX).
	Auth Streak `json:"auth"`
	// LastBreakerFailAt dedups breaker failures per connection.
	LastBreakerFailAt Time `json:"lastBreakerFailAt"`
	HasBreakerFail    bool `json:"hasBreakerFail"`
	// Window is the provider:connection entry of the optional provider
	// cooldown tracker (docs/breaker.md#provider-cooldown).
	WindowFailures int  `json:"windowFailures,omitempty"`
	WindowLastAt   Time `json:"windowLastAt,omitempty"`
	// EgressIP is the connection's last known egress address and when it
	// was seen (docs/cooldowns.md#egress-buckets); older than 24 h it is not used.
	EgressIP string `json:"egressIP,omitempty"`
	EgressAt Time   `json:"egressAt,omitempty"`
	// RateLimitProtection is POST /api/rate-limits' choice (docs/admission.md); unset
	// keeps the config file's rateLimitProtection.
	RateLimitProtection Toggle `json:"rateLimitProtection,omitempty"`
	// Use accounting for least-used and p2c.
	Uses       uint64 `json:"uses"`
	LastUsedAt Time   `json:"lastUsedAt"`
	InFlight   int    `json:"inFlight"`
	// Retired lists the credentials (one-way fingerprints from the shell,
	// never a credential) that were replaced while this connection was
	// terminal ("fp=status,…", newest first, at most maxRetired). It is
	// shared by every replica and kept across restarts; each replica
	// checks its own key against it (Engine.SetCredential), so a key that
	// comes back — a restart on a config file that still has it, a replica
	// that never got the new key — is terminal there, not a fresh key. A
	// string, not a slice: Conn stays a small comparable value (it is
	// copied by value on the request path, and a held stream's stack is
	// measured).
	Retired string `json:"retired,omitempty"`
}

// maxRetired is how many replaced terminal credentials a connection keeps.
const maxRetired = 8

// retiredList splits a Retired value into its fingerprint=status entries.
func retiredList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// retire records that the credential fp was terminal with status: the
// newest first, the oldest dropped.
func (c *Conn) retire(fp string, status ConnStatus) {
	out := []string{fp + "=" + status.String()}
	for _, e := range retiredList(c.Retired) {
		if f, _, _ := strings.Cut(e, "="); f != fp && len(out) < maxRetired {
			out = append(out, e)
		}
	}
	c.Retired = strings.Join(out, ",")
}

// MergeRetired is the Retired value of two replicas' values (store merges):
// every retired credential of both sides, one entry per credential (the
// higher status on a conflict), in fingerprint order, as many as a
// connection keeps. Commutative, like every replica merge.
func MergeRetired(a, b string) string {
	by := map[string]string{}
	for _, e := range append(retiredList(a), retiredList(b)...) {
		fp, st, _ := strings.Cut(e, "=")
		if cur, ok := by[fp]; !ok || st > cur {
			by[fp] = st
		}
	}
	fps := slices.Sorted(maps.Keys(by))
	out := make([]string, 0, min(len(fps), maxRetired))
	for _, fp := range fps[:min(len(fps), maxRetired)] {
		out = append(out, fp+"="+by[fp])
	}
	return strings.Join(out, ",")
}

// unretire forgets that the credential fp was retired.
func (c *Conn) unretire(fp string) {
	var out []string
	for _, e := range retiredList(c.Retired) {
		if f, _, _ := strings.Cut(e, "="); f != fp {
			out = append(out, e)
		}
	}
	c.Retired = strings.Join(out, ",")
}

// retired is the terminal status the credential fp was retired with.
func (c *Conn) retired(fp string) (ConnStatus, bool) {
	for _, e := range retiredList(c.Retired) {
		if f, st, _ := strings.Cut(e, "="); f == fp {
			var s ConnStatus
			if s.UnmarshalText([]byte(st)) == nil && s.Terminal() {
				return s, true
			}
		}
	}
	return StatusActive, false
}

// Streak counts consecutive refusals of one kind inside a 24 h window.
type Streak struct {
	Count         int  `json:"count"`
	LastAt        Time `json:"lastAt"`
	CooldownUntil Time `json:"cooldownUntil"`
}

const (
	// expiredRetryMax is how many retries an auth failure gets before the
	// connection becomes terminal `expired` (docs/cooldowns.md).
	expiredRetryMax = 3
	// expiredRetryBaseMs is the expired ladder's first step: 5, 10, 20 min.
	expiredRetryBaseMs = 5 * minute
	// streakWindowMs is the window of both refusal streaks.
	streakWindowMs = 24 * hour
	// rejectedThreshold: the 3rd request rejection within 24 h bans.
	rejectedThreshold = 3
)

// rejectedLadder are the request-rejected cooldowns before the ban.
var rejectedLadder = [...]int64{5 * minute, 15 * minute}

// statusAt is the connection's status as shown to operators at now.
func (c *Conn) statusAt(now Time) ConnStatus {
	if c.Status.Terminal() {
		return c.Status
	}
	if c.RateLimitedUntil > now {
		return StatusCooldown
	}
	return StatusActive
}

// cooldownRemaining is how long the connection stays cooling (0 = eligible).
func (c *Conn) cooldownRemaining(now Time) int64 {
	if c.Status.Terminal() || c.RateLimitedUntil <= now {
		return 0
	}
	return c.RateLimitedUntil.Sub(now)
}

// levelAt is the backoff level after quiet-period decay at now.
func (c *Conn) levelAt(now Time, decayMs int64) int {
	if c.BackoffLevel == 0 || decayMs <= 0 || !c.HasFailure {
		return c.BackoffLevel
	}
	quiet := now.Sub(c.LastFailureAt)
	// The quiet period starts when the failure's cooldown ends, so a long
	// cooldown does not decay the level while it is still running.
	if c.RateLimitedUntil > c.LastFailureAt {
		quiet = now.Sub(c.RateLimitedUntil)
	}
	if quiet <= 0 {
		return c.BackoffLevel
	}
	steps := quiet / decayMs
	if steps >= int64(c.BackoffLevel) {
		return 0
	}
	return c.BackoffLevel - int(steps)
}

// clean reports whether a success has nothing to clear.
func (c *Conn) clean() bool {
	return c.RateLimitedUntil == 0 && c.BackoffLevel == 0 && !c.HasFailure && c.ErrorCode == 0 &&
		c.LastErrorType == ReasonNone && c.Rejected == (Streak{}) && c.Auth == (Streak{}) && c.WindowFailures == 0
}

// liftStrikeTimers ends the 401 / 403 ladders' current steps but keeps
// their strikes: after a cleared cooldown the next failure is the next
// strike, so a key that keeps failing still reaches its terminal state.
func (c *Conn) liftStrikeTimers() {
	c.Auth.CooldownUntil, c.Rejected.CooldownUntil = 0, 0
}

// clearErrors is a success: every error field and the backoff level go.
func (c *Conn) clearErrors() {
	c.RateLimitedUntil = 0
	c.CooldownSetAt = 0
	c.BackoffLevel = 0
	c.LastFailureAt = 0
	c.HasFailure = false
	c.LastError = ""
	c.LastErrorType = ReasonNone
	c.ErrorCode = 0
	c.LastErrorAt = 0
	c.Rejected = Streak{}
	c.Auth = Streak{}
	c.WindowFailures = 0
	c.WindowLastAt = 0
}

// noteError records the last error fields.
func (c *Conn) noteError(now Time, v *Verdict) {
	c.LastError = v.Message
	c.LastErrorType = v.Reason
	c.ErrorCode = v.ClientStatus
	c.LastErrorAt = now
}

// extend sets the cooldown to end at until unless it already ends later:
// cooldowns only extend, never shorten.
func (c *Conn) extend(now, until Time) bool {
	if until <= c.RateLimitedUntil || until <= now {
		return false
	}
	c.RateLimitedUntil = until
	return true
}

// backoffMs is base·2^level capped.
func backoffMs(base int64, level, steps int, capMs int64) int64 {
	level = min(max(level, 0), steps)
	if level > 40 {
		return capMs
	}
	return min(base<<level, capMs)
}

// ladder applies one step of a refusal streak: same episode while its
// cooldown runs (not counted again), else count it if it continues the
// streak within 24 h. It returns the new count and whether it counted.
func (s *Streak) step(now Time) (count int, counted bool) {
	if s.Count > 0 && now < s.CooldownUntil {
		return s.Count, false
	}
	if s.Count > 0 && now.Sub(s.LastAt) < streakWindowMs {
		s.Count++
	} else {
		s.Count = 1
	}
	s.LastAt = now
	return s.Count, true
}
