package model

import (
	"slices"
	"strconv"
	"strings"
)

// Restatement and provider rules (docs/classification.md, docs/classification.md#restatement, docs/classification.md#provider-rules).
//
// Both are consulted for every non-2xx response status, 400 included (the
// reference never reached its rules on a 400: docs/classification.md#restatement). Both
// match against the lower-cased body prefix (MaxBodyPrefix bytes).
//
// Built-in entries are keyed by provider TYPE (docs/classification.md#provider-types), never by the id
// an operator picks; operator entries (Settings.StatusRestatements,
// Settings.ProviderErrorRules) are keyed by provider id and come first.
//
// The reference shows built-in rules the full error text only for
// FULL_TEXT_RULE_PROVIDERS = {agentrouter} and a parsed structured error for
// the others. breakwater has no structured-error parser to feed them, so
// every rule sees the same text, the body prefix; the built-in rules' markers
// are specific enough that this changes nothing in practice.
//
// A built-in rule's scope is honoured only for types in
// HONORS_RULE_LOCK_SCOPE = {agentrouter, opencode}; for any other type the
// scope is informational and the rule acts on the connection. Operator rules
// always have their scope honoured.

// restatement is a compiled RestatementRule.
type restatement struct {
	id                  string
	from                []int
	to                  int
	markers, exclude    phrases // lower-case, non-empty
	defaultRetryAfterMs int64
}

// builtinRestatements by provider type (docs/classification.md#restatement).
var builtinRestatements = map[string][]restatement{
	"agentrouter": {{
		id:                  "agentrouter-quota-misstatus",
		from:                []int{403, 400},
		to:                  429,
		markers:             mk("额度不足"),
		exclude:             mk("无权访问"),
		defaultRetryAfterMs: 60 * second,
	}},
}

// compileRestatement lower-cases the markers and drops unusable rules: one
// whose target is not an error status (400..599) or that has no marker (a
// rule fires only on a marker hit, as in the reference).
func compileRestatement(r RestatementRule) (restatement, bool) {
	out := restatement{
		id:                  r.ID,
		from:                slices.Clone(r.FromStatuses),
		to:                  r.ToStatus,
		markers:             mk(lowerMarkers(r.TextMarkers)...),
		exclude:             mk(lowerMarkers(r.ExcludeMarkers)...),
		defaultRetryAfterMs: min(max(int64(r.DefaultRetryAfterMs), 0), maxHintMs),
	}
	return out, out.to >= 400 && out.to <= 599 && len(out.markers) > 0 && len(out.from) > 0
}

func lowerMarkers(in []string) []string {
	var out []string
	for _, m := range in {
		if m = strings.ToLower(m); strings.TrimSpace(m) != "" {
			out = append(out, m)
		}
	}
	return out
}

func (r *restatement) matches(status int, t *text) bool {
	return slices.Contains(r.from, status) && t.any(r.markers) && !t.any(r.exclude)
}

// providerRule is a compiled built-in or operator classification rule.
type providerRule struct {
	id       string
	statuses []int
	// markers: one must occur in the body; none means any body.
	markers phrases
	// zeroHeaders: one of these headers (lower-case names) must read "0".
	zeroHeaders []string
	// countdown: the body must state "reset(s) in N unit"; the rule's
	// cooldown is that countdown.
	countdown  bool
	reason     Reason
	scope      Scope
	cooldownMs int64
}

// honorsRuleScope is HONORS_RULE_LOCK_SCOPE, by provider type.
var honorsRuleScope = map[string]bool{"agentrouter": true, "opencode": true}

// builtinRules by provider type (docs/classification.md#provider-rules). opencode-zen/-go/-cli map
// to type opencode. minimax (per-model quota header) and cloudflare-ai are
// not provider types of breakwater and are left out. agentrouter's
// model-access-denied rule is checked before its quota rule (the reference
// lists it after) so that a body carrying both markers is never taken for a
// temporary quota wall, in the spirit of the restatement's exclude marker.
var builtinRules = map[string][]providerRule{
	"opencode": {
		{id: "opencode-endpoint-unavailable", statuses: []int{400, 429}, markers: mk("endpoint is unavailable"),
			reason: ReasonModelCapacity, scope: ScopeModel, cooldownMs: 5 * minute},
		{id: "opencode-monthly-quota-resets-in", statuses: []int{429}, markers: mk("monthly usage limit reached"),
			countdown: true, reason: ReasonQuotaExhausted, scope: ScopeConnection},
		{id: "opencode-quota-exhausted-headers", statuses: []int{429},
			zeroHeaders: []string{"x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens"},
			reason:      ReasonQuotaExhausted, scope: ScopeConnection},
		{id: "opencode-quota-exhausted-body", statuses: []int{429},
			markers: mk("organization_quota_exceeded", "account_quota_exceeded", "plan_limit_reached"),
			reason:  ReasonQuotaExhausted, scope: ScopeConnection},
		{id: "opencode-400-model-unavailable", statuses: []int{400},
			markers: mk("upstream request failed: model is unavailable."),
			reason:  ReasonModelCapacity, scope: ScopeModel, cooldownMs: hour},
	},
	"agentrouter": {
		{id: "agentrouter-model-access-denied", statuses: []int{403}, markers: mk("无权访问模型"),
			reason: ReasonAuthError, scope: ScopeModel, cooldownMs: 6 * hour},
		{id: "agentrouter-user-quota-exhausted", statuses: []int{400, 403, 429}, markers: mk("额度不足"),
			reason: ReasonQuotaExhausted, scope: ScopeConnection},
	},
}

// compileRule turns an operator rule into a providerRule named
// "operator:<provider>#<index>". An empty match is a status-only rule (the
// settings normaliser requires one, so this only happens for hand-built
// settings). The reason defaults to quota_exhausted, the scope to
// connection.
func compileRule(provider string, i int, r ProviderErrorRule) providerRule {
	out := providerRule{
		id:         "operator:" + provider + "#" + strconv.Itoa(i),
		statuses:   []int{r.Status},
		markers:    mk(lowerMarkers([]string{r.Match})...),
		reason:     r.Reason,
		scope:      r.Scope,
		cooldownMs: min(max(int64(r.CooldownMs), 0), maxHintMs),
	}
	if out.reason == ReasonNone {
		out.reason = ReasonQuotaExhausted
	}
	if out.scope == ScopeNone {
		out.scope = ScopeConnection
	}
	return out
}

// match reports whether the rule fires and the cooldown it states.
func (r *providerRule) match(status int, t *text, h Headers) (cooldownMs int64, ok bool) {
	if !slices.Contains(r.statuses, status) {
		return 0, false
	}
	if len(r.markers) > 0 && !t.any(r.markers) {
		return 0, false
	}
	if len(r.zeroHeaders) > 0 {
		zero := false
		for _, name := range r.zeroHeaders {
			if strings.TrimSpace(getHeader(h, canonicalHeader(name), name)) == "0" {
				zero = true
				break
			}
		}
		if !zero {
			return 0, false
		}
	}
	if r.countdown {
		ms := resetCountdownMs(t)
		if ms <= 0 {
			return 0, false
		}
		return ms, true
	}
	return r.cooldownMs, true
}

// resetCountdownMs is parseResetCountdownMs: "reset(s) in N unit" with
// N > 0, in ms (capped at maxHintMs).
func resetCountdownMs(t *text) int64 {
	for i := range resetCountdown {
		a := &resetCountdown[i]
		if !t.may(a) {
			continue
		}
		if j := strings.Index(t.s, a.s); j >= 0 {
			if ms, _, ok := parseDuration(t.s[j+len(a.s):], false); ok && ms > 0 {
				return min(ms, maxHintMs)
			}
		}
	}
	return 0
}

// canonicalHeader turns a lower-case header name into its canonical MIME
// form ("x-ratelimit-remaining-requests" → "X-Ratelimit-Remaining-Requests").
// Only used for the few rule headers, on the failure path.
func canonicalHeader(lower string) string {
	b := []byte(lower)
	up := true
	for i, c := range b {
		if up && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		up = c == '-'
	}
	return string(b)
}
