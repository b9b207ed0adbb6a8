package model

import (
	"slices"
	"strings"
)

// Text signals of classification (REFERENCE M4.1, M4.4). Every list is
// lower-case and matched against the lower-cased body prefix. The reference
// writes several of them as regexps with ".*"; they are expressed here as
// ordered substring sequences (seq) and proximity checks (near), which mean
// the same thing for "a.*b" and cost a few SIMD substring searches instead of
// an NFA pass over up to 4 KB. (The one difference: "." in a regexp does not
// cross a newline; these do. Error bodies are one JSON line in practice.)

// containsAny reports whether s contains any of subs.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// seq is an ordered pattern: one alternative of every step must occur, each
// after the previous one ("a.*b.*(c|d)").
type seq [][]string

func (q seq) in(s string) bool {
	for _, step := range q {
		best := -1
		for _, alt := range step {
			if i := strings.Index(s, alt); i >= 0 && (best < 0 || i+len(alt) < best) {
				best = i + len(alt)
			}
		}
		if best < 0 {
			return false
		}
		s = s[best:]
	}
	return true
}

func anySeq(s string, qs []seq) bool {
	for _, q := range qs {
		if q.in(s) {
			return true
		}
	}
	return false
}

// near reports whether an occurrence of one of as and one of bs lie within
// dist bytes of each other, in either order.
func near(s string, as, bs []string, dist int) bool {
	for _, a := range as {
		from := 0
		for tries := 0; tries < 16; tries++ {
			i := strings.Index(s[from:], a)
			if i < 0 {
				break
			}
			i += from
			lo := max(0, i-dist-32)
			hi := min(len(s), i+len(a)+dist+32)
			for _, b := range bs {
				w := s[lo:hi]
				for off := 0; ; {
					j := strings.Index(w[off:], b)
					if j < 0 {
						break
					}
					j += lo + off
					gap := j - (i + len(a)) // b after a
					if j < i {
						gap = i - (j + len(b)) // b before a
					}
					if gap <= dist {
						return true
					}
					off = j - lo + 1
				}
			}
			from = i + 1
		}
	}
	return false
}

// containsWord reports whether s contains w delimited by non-letters.
func containsWord(s, w string) bool {
	for from := 0; from < len(s); {
		i := strings.Index(s[from:], w)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(w)
		if (i == 0 || !isLetter(s[i-1])) && (end == len(s) || !isLetter(s[end])) {
			return true
		}
		from = i + 1
	}
	return false
}

// deactivatedSignals are ACCOUNT_DEACTIVATED_SIGNALS (REFERENCE M4.4) plus
// explicit account-ban phrases. On any non-2xx status they make the
// connection terminal `banned` at once (REFERENCE 4a, SPEC "does better" 11).
// Settings.BannedSignals are appended per classifier.
var deactivatedSignals = []string{
	"account_deactivated",
	"account has been deactivated",
	"account has been disabled",
	"your account has been suspended",
	"this account is deactivated",
	"verify your account to continue",
	"this service has been disabled in this account for violation",
	"this service has been disabled in this account",
	"account has been banned",
	"account is banned",
	"account was banned",
	"account banned",
	"account has been terminated",
	"organization has been disabled",
	"organization has been deactivated",
}

// creditsSignals are CREDITS_EXHAUSTED_SIGNALS (REFERENCE M4.4) plus the
// Chinese "insufficient balance". Gemini's "resource has been exhausted" is
// deliberately absent (#8631).
var creditsSignals = []string{
	"insufficient_quota",
	"billing_hard_limit_reached",
	"exceeded your current quota",
	"exceeded your current usage quota",
	"credit_balance_too_low",
	"your credit balance is too low",
	"credits exhausted",
	"out of credits",
	"payment required",
	"free tier of the model has been exhausted",
	"tier has been exhausted",
	"insufficient balance",
	"insufficient_balance",
	"insufficient account balance",
	"insufficient credit balance",
	"insufficient credits",
	"insufficient credit",
	"余额不足",
}

// geminiRateLimitCredits are the credits signals a gemini 429 uses for its
// ordinary free-tier rate limit (REFERENCE M4.4 step 4e runs before 4f), so
// they are not credits for type gemini.
var geminiRateLimitCredits = []string{"exceeded your current quota", "exceeded your current usage quota"}

// isCredits reports credits-exhausted text: the signal list, or "suspended"
// near billing words (REFERENCE 4d, within 120 chars in either order).
func isCredits(lower, typ string) bool {
	for _, sig := range creditsSignals {
		if strings.Contains(lower, sig) && !(typ == "gemini" && slices.Contains(geminiRateLimitCredits, sig)) {
			return true
		}
	}
	return strings.Contains(lower, "suspended") &&
		near(lower, []string{"suspended"}, []string{"billing", "invoice", "payment", "spending limit"}, 120)
}

// Quota-exhausted text. weekly/session/subscription carry a default reset
// when no hint is stated (REFERENCE 4i, 4j, 4h); daily text relies on the
// provider's daily reset (SPEC "does better" 9).
var (
	weeklySignals       = []string{"weekly usage limit", "weekly limit", "reached your weekly"}
	sessionSignals      = []string{"session usage limit", "session limit reached"}
	dailySignals        = []string{"today's quota", "daily quota", "try again tomorrow", "tpd rate limit"}
	subscriptionSignals = []string{"usage limit reached", "usage limit has been", "claude pro usage limit",
		"you've reached your usage limit", "you have reached your usage limit"}
	anthropicSubscriptionSignals = []string{"this request would exceed your account's rate limit"}
)

const (
	weeklyDefaultMs       = 24 * hour // REFERENCE 4i
	sessionDefaultMs      = 5 * hour  // REFERENCE 4j
	subscriptionDefaultMs = 1 * hour  // REFERENCE 4h
)

// explicitQuota are the reference's QUOTA patterns (M4.1 step 4) and the
// quota ERROR_RULES (M4.3) that name a quota, credit, period or plan wall.
var explicitQuota = []seq{
	{{"daily"}, {"limit"}},
	{{"daily"}, {"quota"}},
	{{"perday", "per day", "per_day", "per-day"}, {"limit"}},
	{{"monthly"}, {"limit"}},
	{{"monthly"}, {"quota"}},
	{{"permonth", "per month", "per_month", "per-month"}, {"limit"}},
	{{"quota"}, {"exceed"}},
	{{"exceed"}, {"quota"}},
	{{"insufficient"}, {"quota"}},
	{{"billing"}, {"cap"}},
	{{"credit"}, {"exhaust"}},
	{{"resource has been exhausted"}, {"reset after"}},
	{{"限额将在"}, {"重置"}},
	{{
		"out of credits", "individual quota reached", "enable overages", "insufficient_g1_credits_balance",
		"daily free allocation", "have exhausted their quota", "tpd rate limit", "insufficient balance",
		"hour quota", "quota has been exceeded", "quota will reset", "quota exhausted", "quota depleted",
		"exhausted your capacity", "使用上限", "调用上限", "额度已用尽", "额度已用完",
	}},
}

// broadQuota are the QUOTA patterns that also match throttling prose
// ("your plan's concurrency limit"); they are consulted after the
// concurrency markers so that a busy account is not mistaken for an
// exhausted one.
var broadQuota = []seq{
	{{"hard limit", "hardlimit", "hard_limit", "hard-limit"}},
	{{"plan"}, {"limit"}},
}

// concurrencySignals: the account is busy, not exhausted (SPEC §2).
var concurrencySignals = []string{
	"too many concurrent requests", "concurrency limit", "concurrent request limit",
	"concurrent requests limit", "concurrency exceeded", "concurrency_limit", "parallel request limit",
	"parallel requests limit", "max concurrent", "maximum concurrent", "并发",
}

// rateLimitSignals: throttling prose that turns a 400 or 403 into a rate
// limit (REFERENCE 4.4 step 8; "non-compliant" is left out: content
// moderation uses the word too).
var rateLimitSignals = []string{
	"rate limit", "ratelimit", "rate_limit", "rate-limit", "too many requests",
	"high frequency", "high-frequency", "high_frequency", "highfrequency", "频繁", "频率",
}

// perDaySignals mark a gemini 429 as a per-day quota (REFERENCE 4e "rpd").
var perDaySignals = []string{"perday", "per day", "per_day", "per-day"}

func isGeminiPerDay(lower string) bool {
	return containsAny(lower, perDaySignals) || containsWord(lower, "rpd")
}

// capacitySignals make a 503 a model_capacity failure (REFERENCE M4.3).
var capacitySignals = []string{"overloaded", "capacity", "high demand"}

// credentialSignals are bad-credential texts (AUTH_CREDENTIAL_ERROR_PATTERNS
// and OAUTH_INVALID_TOKEN_SIGNALS). They veto a model-access-denied reading
// and make a 400/403 an auth error.
var credentialSignals = []string{
	"invalid api key", "invalid_api_key", "incorrect api key", "expired api key", "missing api key",
	"revoked api key", "api key not valid", "api key is invalid", "api key expired", "api_key_invalid",
	"invalid x-api-key", "authentication failed", "authentication error", "authentication_error",
	"authentication required", "invalid token", "expired token", "token expired", "token has expired",
	"token is expired", "invalid credentials", "expired credentials", "invalid bearer", "expired bearer",
	"unauthorized", "not authenticated", "invalid authentication", "valid authentication credential",
	"oauth 2", "login cookie",
}

// modelAccessDenied is the 400 model-access-denied family (REFERENCE M4.4):
// the model is unusable on this connection whatever the request says. The
// reference's "model ... does not support X" phrasing is left out: it names
// a capability the request needs (tools, images), which is request-scoped,
// and would lock a working model.
var modelAccessDenied = []seq{
	{{"invalid model", "unsupported model", "please select a different model"}},
	{{"model"}, {"not"}, {"available", "found", "supported", "accessible"}},
	{{"model"}, {"does not exist", "doesn't exist"}},
	{{"access"}, {"denied"}, {"model"}},
	{{"model"}, {"access"}, {"denied"}},
}

func isModelAccessDenied(lower string) bool {
	if !strings.Contains(lower, "model") {
		return false
	}
	return anySeq(lower, modelAccessDenied) ||
		near(lower, []string{"model"}, []string{"access", "permission"}, 60)
}

// Request-scoped 400 text (REFERENCE M4.4): the request itself cannot
// succeed anywhere; the client gets the upstream error.
var (
	contextOverflow = []seq{
		{{"input is too long", "input too long", "too many tokens", "prompt is too long", "context window",
			"maximum context", "token limit", "request too large", "context_length_exceeded"}},
		{{"context"}, {"too long", "exceeded", "overflow", "limit"}},
		{{"max"}, {"token"}},
	}
	contentFilter = []string{"content_filter", "content management policy", "safety", "content policy",
		"content_policy", "responsible ai"}
	malformedRequest = []seq{
		{{"improperly formed request", "messages must alternate", "empty message", "empty content",
			"invalid_request_error", "invalid request"}},
		{{"invalid"}, {"message"}, {"format"}},
		{{"tool", "function"}, {"name"}, {"empty", "blank", "missing", "required"}},
		{{"empty", "blank", "missing"}, {"tool", "function"}, {"name"}},
		{{"max_tokens"}, {"illegal", "must be", "range"}},
		{{"parameter is illegal"}},
		{{"is illegal"}, {"range"}},
	}
)

// requestScopedDetail names the request-scoped kind of a 400 body, or "".
func requestScopedDetail(lower string) string {
	switch {
	case anySeq(lower, contextOverflow):
		return "context_length"
	case containsAny(lower, contentFilter):
		return "content_filter"
	case anySeq(lower, malformedRequest):
		return "invalid_request"
	}
	return ""
}

// modelRetiredSignals make a 404/410 a not-found model (REFERENCE 4b, 4c).
var modelRetiredSignals = []string{"no longer available", "end-of-life", "end of life", "deprecated", "retired",
	"decommissioned", "endpoint has moved", "no longer works", "update your base url"}

// resource404 recognises a 404 about a request-scoped resource (a file, a
// previous response, a thread...), which says nothing about the model
// (REFERENCE M5 step 2).
var resource404 = []seq{
	{{"no such file", "file not found", "previous_response", "response not found", "item not found",
		"thread not found", "conversation not found", "batch not found", "upload not found",
		"vector store not found"}},
	{{"file", "response", "item", "thread", "assistant", "vector_store", "vector store", "batch", "conversation",
		"upload"}, {"with id"}, {"not found"}},
}

func isResource404(lower string) bool {
	return !strings.Contains(lower, "model") && anySeq(lower, resource404)
}
