package model

import "strings"

// Text signals of classification (docs/classification.md#failure-catalogue, docs/classification.md#failure-catalogue). Every list is
// lower-case and matched against the lower-cased body prefix.
//
// Matching cost matters (a failure with a 1 KB body must classify in
// microseconds, with ~250 phrases to look for), so:
//   - the reference's ".*" regexps are ordered substring sequences (seq) and
//     proximity checks (near): "a.*b" holds iff some "a" ends before some "b"
//     starts. (One difference: "." in a regexp does not cross a newline;
//     these do. Error bodies are one JSON line in practice.)
//   - a text carries a bitmap of the byte bigrams it contains, built once on
//     first use; a phrase is searched for only when all of its bigrams are
//     present. The bitmap can only rule phrases out, never in, so results are
//     exactly those of strings.Contains.

// phrase is a lower-case substring with its bigram hashes.
type phrase struct {
	s     string
	grams []uint16
}

type phrases []phrase

const gramBits = 8192

func gramHash(a, b byte) uint16 { return uint16((uint32(a)*31 + uint32(b)) % gramBits) }

func mkPhrase(s string) phrase {
	p := phrase{s: s}
	for i := 0; i+1 < len(s); i++ {
		g := gramHash(s[i], s[i+1])
		dup := false
		for _, h := range p.grams {
			dup = dup || h == g
		}
		if !dup {
			p.grams = append(p.grams, g)
		}
	}
	return p
}

func mk(ss ...string) phrases {
	out := make(phrases, len(ss))
	for i, s := range ss {
		out[i] = mkPhrase(s)
	}
	return out
}

// text is a lower-cased body prefix being matched.
type text struct {
	s     string
	built bool
	bm    [gramBits / 64]uint64
}

func (t *text) may(p *phrase) bool {
	if !t.built {
		t.built = true
		s := t.s
		for i := 0; i+1 < len(s); i++ {
			g := gramHash(s[i], s[i+1])
			t.bm[g>>6] |= 1 << (g & 63)
		}
	}
	for _, g := range p.grams {
		if t.bm[g>>6]&(1<<(g&63)) == 0 {
			return false
		}
	}
	return len(p.s) <= len(t.s)
}

// has reports whether the text contains p.
func (t *text) has(p *phrase) bool { return t.may(p) && strings.Contains(t.s, p.s) }

// any reports whether the text contains any of ps.
func (t *text) any(ps phrases) bool {
	for i := range ps {
		if t.has(&ps[i]) {
			return true
		}
	}
	return false
}

// seq is an ordered pattern: one alternative of every step must occur, each
// after the previous one ("a.*b.*(c|d)").
type seq []phrases

func (t *text) seq(q seq) bool {
	s := t.s
	for _, step := range q {
		best := -1
		for i := range step {
			p := &step[i]
			if !t.may(p) {
				continue
			}
			if j := strings.Index(s, p.s); j >= 0 && (best < 0 || j+len(p.s) < best) {
				best = j + len(p.s)
			}
		}
		if best < 0 {
			return false
		}
		s = s[best:]
	}
	return true
}

func (t *text) anySeq(qs []seq) bool {
	for _, q := range qs {
		if t.seq(q) {
			return true
		}
	}
	return false
}

// near reports whether an occurrence of one of as and one of bs lie within
// dist bytes of each other, in either order.
func (t *text) near(as, bs phrases, dist int) bool {
	if !t.any(bs) {
		return false
	}
	s := t.s
	for ai := range as {
		a := as[ai].s
		if !t.may(&as[ai]) {
			continue
		}
		for from, tries := 0, 0; tries < 16; tries++ {
			i := strings.Index(s[from:], a)
			if i < 0 {
				break
			}
			i += from
			lo := max(0, i-dist-32)
			hi := min(len(s), i+len(a)+dist+32)
			w := s[lo:hi]
			for bi := range bs {
				b := bs[bi].s
				for off := 0; off < len(w); {
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

// word reports whether the text contains p delimited by non-letters.
func (t *text) word(p *phrase) bool {
	if !t.may(p) {
		return false
	}
	s, w := t.s, p.s
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

// deactivatedSignals are ACCOUNT_DEACTIVATED_SIGNALS (docs/classification.md#failure-catalogue) plus
// explicit account-ban phrases. On any non-2xx status they make the
// connection terminal `banned` at once (docs/classification.md#failure-catalogue, docs/cooldowns.md#ladders).
// Settings.BannedSignals are appended per classifier.
var deactivatedSignals = mk(
	"account_deactivated",
	"account has been deactivated",
	"account has been disabled",
	"your account has been suspended",
	"this account is deactivated",
	"verify your account to continue",
	"this service has been disabled in this account", // also "... for violation"
	"account has been banned",
	"account is banned",
	"account was banned",
	"account banned",
	"account has been terminated",
	"organization has been disabled",
	"organization has been deactivated",
)

// bannedWord on a 403 is an explicit ban; Cloudflare's
// browser_signature_banned (error 1010) is not an account ban (docs/classification.md#failure-catalogue).
var (
	bannedWord             = mkPhrase("banned")
	browserSignatureBanned = mkPhrase("signature_banned")
)

// creditsSignals are CREDITS_EXHAUSTED_SIGNALS (docs/classification.md#failure-catalogue) plus the
// Chinese "insufficient balance". Gemini's "resource has been exhausted" is
// deliberately absent (#8631). The first two are what a gemini 429 says for
// its ordinary free-tier rate limit (the per-day check runs before the credits check),
// so they are not credits for type gemini.
var (
	geminiRateLimitCredits = mk("exceeded your current quota", "exceeded your current usage quota")
	creditsSignals         = mk(
		"insufficient_quota",
		"billing_hard_limit_reached",
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
	)
	suspended    = mk("suspended")
	billingWords = mk("billing", "invoice", "payment", "spending limit")
)

// isCredits reports credits-exhausted text: the signal list, or "suspended"
// near billing words (docs/classification.md#failure-catalogue, within 120 chars in either order).
func isCredits(t *text, typ string) bool {
	return t.any(creditsSignals) || (typ != "gemini" && t.any(geminiRateLimitCredits)) ||
		t.near(suspended, billingWords, 120)
}

// Quota-exhausted text. weekly/session/subscription carry a default reset
// when no hint is stated (docs/classification.md#failure-catalogue); daily text relies on the
// provider's daily reset (docs/lockouts.md#quota-reset).
var (
	weeklySignals                = mk("weekly usage limit", "weekly limit", "reached your weekly")
	sessionSignals               = mk("session usage limit", "session limit reached")
	sessionReached               = mk("reached your session")
	usageLimit                   = mk("usage limit")
	dailySignals                 = mk("today's quota", "daily quota", "try again tomorrow", "tpd rate limit")
	subscriptionSignals          = mk("usage limit reached", "usage limit has been", "claude pro usage limit", "you've reached your usage limit", "you have reached your usage limit")
	anthropicSubscriptionSignals = mk("this request would exceed your account's rate limit")
)

const (
	weeklyDefaultMs       = 24 * hour // docs/classification.md#failure-catalogue
	sessionDefaultMs      = 5 * hour  // docs/classification.md#failure-catalogue
	subscriptionDefaultMs = 1 * hour  // docs/classification.md#failure-catalogue
)

// explicitQuota are the reference's QUOTA patterns (M4.1 step 4) and the
// quota ERROR_RULES (M4.3) that name a quota, credit, period or plan wall.
var explicitQuota = []seq{
	{mk("daily"), mk("limit")},
	{mk("daily"), mk("quota")},
	{mk("perday", "per day", "per_day", "per-day"), mk("limit")},
	{mk("monthly"), mk("limit")},
	{mk("monthly"), mk("quota")},
	{mk("permonth", "per month", "per_month", "per-month"), mk("limit")},
	{mk("quota"), mk("exceed")},
	{mk("exceed"), mk("quota")},
	{mk("insufficient"), mk("quota")},
	{mk("billing"), mk("cap")},
	{mk("credit"), mk("exhaust")},
	{mk("resource has been exhausted"), mk("reset after")},
	{mk("限额将在"), mk("重置")},
	{mk("out of credits", "individual quota reached", "enable overages", "insufficient_g1_credits_balance",
		"daily free allocation", "have exhausted their quota", "tpd rate limit", "insufficient balance",
		"hour quota", "quota has been exceeded", "quota will reset", "quota exhausted", "quota depleted",
		"exhausted your capacity", "使用上限", "调用上限", "额度已用尽", "额度已用完")},
}

// broadQuota are the QUOTA patterns that also match throttling prose
// ("your plan's concurrency limit"); they are consulted after the
// concurrency markers so that a busy account is not mistaken for an
// exhausted one.
var broadQuota = []seq{
	{mk("hard limit", "hardlimit", "hard_limit", "hard-limit")},
	{mk("plan"), mk("limit")},
}

// concurrencySignals: the account is busy, not exhausted (docs/cooldowns.md).
var concurrencySignals = mk(
	"too many concurrent requests", "concurrency limit", "concurrent request limit",
	"concurrent requests limit", "concurrency exceeded", "concurrency_limit", "parallel request limit",
	"parallel requests limit", "max concurrent", "maximum concurrent", "并发",
)

// rateLimitSignals: throttling prose that turns a 400 or 403 into a rate
// limit (docs/classification.md#failure-catalogue; its "non-compliant" is left out: content
// moderation uses the word too).
var rateLimitSignals = mk(
	"rate limit", "ratelimit", "rate_limit", "rate-limit", "too many requests",
	"high frequency", "high-frequency", "high_frequency", "highfrequency", "频繁", "频率",
)

// perDaySignals mark a gemini 429 as a per-day quota (docs/classification.md#failure-catalogue "rpd").
var (
	perDaySignals = mk("perday", "per day", "per_day", "per-day")
	rpdWord       = mkPhrase("rpd")
)

func isGeminiPerDay(t *text) bool { return t.any(perDaySignals) || t.word(&rpdWord) }

// capacitySignals make a 503 a model_capacity failure (docs/classification.md#failure-catalogue).
var capacitySignals = mk("overloaded", "capacity", "high demand")

// credentialSignals are bad-credential texts (AUTH_CREDENTIAL_ERROR_PATTERNS
// and OAUTH_INVALID_TOKEN_SIGNALS). They veto a model-access-denied reading
// and make a 400/403 an auth error.
var credentialSignals = mk(
	"invalid api key", "invalid_api_key", "incorrect api key", "expired api key", "missing api key",
	"revoked api key", "api key not valid", "api key is invalid", "api key expired", "api_key_invalid",
	"invalid x-api-key", "authentication failed", "authentication error", "authentication_error",
	"authentication required", "invalid token", "expired token", "token expired", "token has expired",
	"token is expired", "invalid credentials", "expired credentials", "invalid bearer", "expired bearer",
	"unauthorized", "not authenticated", "invalid authentication", "valid authentication credential",
	"oauth 2", "login cookie",
)

// modelAccessDenied is the model-access-denied family (docs/classification.md#failure-catalogue): the
// model is unusable on this connection whatever the request says. The
// reference's "model ... does not support X" phrasing is left out: it names
// a capability the request needs (tools, images), which is request-scoped,
// and would lock a working model.
var (
	modelWord         = mk("model")
	accessWords       = mk("access", "permission")
	modelAccessDenied = []seq{
		{mk("invalid model", "unsupported model", "please select a different model")},
		{modelWord, mk("not"), mk("available", "found", "supported", "accessible")},
		{modelWord, mk("does not exist", "doesn't exist")},
		{mk("access"), mk("denied"), modelWord},
		{modelWord, mk("access"), mk("denied")},
	}
)

func isModelAccessDenied(t *text) bool {
	if !t.any(modelWord) {
		return false
	}
	return t.anySeq(modelAccessDenied) || t.near(modelWord, accessWords, 60)
}

// Request-scoped 400 text (docs/classification.md#failure-catalogue): the request itself cannot
// succeed anywhere; the client gets the upstream error.
var (
	contextOverflow = []seq{
		{mk("input is too long", "input too long", "too many tokens", "prompt is too long", "context window",
			"maximum context", "token limit", "request too large", "context_length_exceeded")},
		{mk("context"), mk("too long", "exceeded", "overflow", "limit")},
		{mk("max"), mk("token")},
	}
	contentFilter = mk("content_filter", "content management policy", "safety", "content policy",
		"content_policy", "responsible ai")
	malformedRequest = []seq{
		{mk("improperly formed request", "messages must alternate", "empty message", "empty content",
			"invalid_request_error", "invalid request", "parameter is illegal")},
		{mk("invalid"), mk("message"), mk("format")},
		{mk("tool", "function"), mk("name"), mk("empty", "blank", "missing", "required")},
		{mk("empty", "blank", "missing"), mk("tool", "function"), mk("name")},
		{mk("max_tokens"), mk("illegal", "must be", "range")},
		{mk("is illegal"), mk("range")},
	}
)

// requestScopedDetail names the request-scoped kind of a 400 body, or "".
func requestScopedDetail(t *text) string {
	switch {
	case t.anySeq(contextOverflow):
		return "context_length"
	case t.any(contentFilter):
		return "content_filter"
	case t.anySeq(malformedRequest):
		return "invalid_request"
	}
	return ""
}

// modelRetiredSignals make a 404/410 a not-found model (docs/classification.md#failure-catalogue).
var modelRetiredSignals = mk("no longer available", "end-of-life", "end of life", "deprecated", "retired",
	"decommissioned", "endpoint has moved", "no longer works", "update your base url")

// resource404 recognises a 404 about a request-scoped resource (a file, a
// previous response, a thread...), which says nothing about the model
// (docs/cooldowns.md).
var resource404 = []seq{
	{mk("no such file", "file not found", "previous_response", "response not found", "item not found",
		"thread not found", "conversation not found", "batch not found", "upload not found",
		"vector store not found")},
	{mk("file", "response", "item", "thread", "assistant", "vector_store", "vector store", "batch", "conversation",
		"upload"), mk("with id"), mk("not found")},
}

func isResource404(t *text) bool { return !t.any(modelWord) && t.anySeq(resource404) }

// Phrases of the remaining generic rows.
var (
	requestNotAllowed = mk("request not allowed")
	resetCountdown    = mk("resets in", "reset in")
)
