package model

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Classification (docs/classification.md, docs/classification.md#verdicts): one upstream outcome in, one Verdict out,
// naming every effect. The order is restatement → provider rules (operator,
// then built-in for the provider type) → the generic rows below. Rules are
// consulted for every status; a rule's effects replace the generic row.
//
// Generic rows (after restatement), first match wins:
//
//	2xx                        success; clear the connection
//	any, ban/deactivation text banned (terminal)
//	408 500 502 503 504,       breaker failure (kind timeout for 408/504 and
//	transport errors           connect/header/attempt timeouts, transport for
//	                           refused/reset/early EOF, else server_error);
//	                           backoff; exact-model lockout
//	529                        model_capacity; breaker neutral; backoff
//	other 5xx                  server_error; breaker neutral; backoff
//	429                        credits text → credits_exhausted (terminal);
//	                           quota text → quota_exhausted; concurrency text
//	                           → concurrency_limited; else rate_limit_exceeded
//	402                        quota text → quota_exhausted, else credits
//	401                        auth_error (expired ladder)
//	403                        ban word, credits, quota, concurrency and rate-limit
//	                           text as for 429; model-access-denied → not_found;
//	                           bad credentials → auth_error; "request not
//	                           allowed" → request_rejected; else forbidden
//	                           (request-rejected ladder)
//	404, 410                   not_found (bare-model lockout), unless the body
//	                           names a request-scoped resource
//	400                        credits; context length → request_scoped,
//	                           next model; content-filter/malformed →
//	                           request_scoped; model-access-denied →
//	                           not_found; bad credentials → auth_error;
//	                           quota/concurrency/rate-limit text → as a 429;
//	                           else request_scoped
//	432                        quota_exhausted (plan limit)
//	other 4xx                  credits text, else request_scoped
//	anything else              unknown; backoff
//
// A per-model-quota provider (ClassifyContext.PerModelQuota) turns 429s, a
// quota 402/403, a forbidden 403 and 5xx other than exactly 500 into
// specific model lockouts instead of connection cooldowns; exactly 500 only
// records the error (docs/classification.md#provider-types, docs/classification.md#verdicts).

// Classifier turns outcomes into verdicts. It is compiled once from settings
// (lower-cased markers and signals, operator rules by provider id) and is
// immutable, so one Classifier may serve any number of goroutines.
type Classifier struct {
	concurrencyMs int64
	banned        phrases
	rules         map[string][]providerRule // operator rules by provider id
	restate       map[string][]restatement  // operator restatements by provider id
}

// defaultClassifier serves a nil *Classifier.
var defaultClassifier = NewClassifier(nil)

// NewClassifier compiles a classifier from normalised settings. It accepts
// any Settings (nil included: built-in behaviour only) and never panics;
// unusable operator entries (a restatement to a non-error status or without
// markers) are skipped.
func NewClassifier(s *Settings) *Classifier {
	c := &Classifier{concurrencyMs: second, banned: deactivatedSignals}
	if s == nil {
		return c
	}
	if v := int64(s.ConnectionCooldown.ConcurrencyCooldownMs); v > 0 {
		c.concurrencyMs = min(v, maxHintMs)
	}
	if extra := lowerMarkers(s.BannedSignals); len(extra) > 0 {
		c.banned = append(append(phrases(nil), deactivatedSignals...), mk(extra...)...)
	}
	for prov, rules := range s.ProviderErrorRules {
		for i, r := range rules {
			if c.rules == nil {
				c.rules = map[string][]providerRule{}
			}
			c.rules[prov] = append(c.rules[prov], compileRule(prov, i, r))
		}
	}
	for prov, rules := range s.StatusRestatements {
		for _, r := range rules {
			if cr, ok := compileRestatement(r); ok {
				if c.restate == nil {
					c.restate = map[string][]restatement{}
				}
				c.restate[prov] = append(c.restate[prov], cr)
			}
		}
	}
	return c
}

// Classify turns one outcome into its verdict. It is pure: the same inputs
// always give the same verdict. A nil Classifier uses built-in behaviour.
func (c *Classifier) Classify(ctx ClassifyContext, o Outcome) Verdict {
	if c == nil {
		c = defaultClassifier
	}
	switch o.Kind {
	case OutcomeResponse:
		if o.Status >= 200 && o.Status <= 299 {
			return Verdict{Breaker: BreakerSuccess, Conn: ConnClear, Next: NextDone, ClientStatus: o.Status}
		}
		return c.classifyResponse(ctx, &o)
	case OutcomeTransport:
		// The gateway answers a transport failure with 502 (504 for a
		// timeout); that status also gates the generic exact-model lockout.
		v := Verdict{Reason: ReasonServerError, Scope: ScopeProvider, Breaker: BreakerFailure, Kind: KindTransport,
			Transport: true, Conn: ConnBackoff, Escalate: true, Next: NextConnection, WindowCounts: true,
			ClientStatus: 502, Lockout: LockoutAction{Scope: ScopeExactModel, Reason: ReasonServerError, Generic: true}}
		switch o.Transport {
		case TransportConnectTimeout, TransportHeaderTimeout, TransportAttemptTimeout:
			v.Kind, v.ClientStatus = KindTimeout, 504
		}
		v.Hint = retryHint(o.Headers, o.Body, ctx.Now)
		v.Message = "transport " + transportLabel(o.Transport)
		return v
	case OutcomeStall, OutcomeThroughput:
		// The error is recorded, no cooldown: the engine turns it into one
		// when streamStallCooldown.enabled (docs/cooldowns.md).
		msg := "stream stall"
		if o.Kind == OutcomeThroughput {
			msg = "stream throughput below minimum"
		}
		return Verdict{Reason: ReasonStreamStall, Scope: ScopeConnection, Conn: ConnRecordOnly, Next: NextRetry,
			Message: msg}
	case OutcomeClientAbort:
		return Verdict{Reason: ReasonClientAbort, Scope: ScopeRequest, Next: NextStop, Message: "client aborted"}
	case OutcomeLocalQueue:
		return Verdict{Reason: ReasonLocalQueue, Next: NextConnection, Message: "local queue refused or timed out"}
	case OutcomeQuality:
		// The gateway's own synthetic 502 (docs/lockouts.md).
		return Verdict{Reason: ReasonQualityFailure, Scope: ScopeExactModel, Next: NextConnection, WindowCounts: true,
			Lockout:      LockoutAction{Scope: ScopeExactModel, Reason: ReasonQualityFailure, Generic: true},
			ClientStatus: 502, Message: "502 quality_failure: output validation rejected the answer"}
	}
	return Verdict{Reason: ReasonUnknown, Next: NextStop, Message: "unknown outcome kind " + strconv.Itoa(int(o.Kind))}
}

func transportLabel(t Transport) string {
	if t == TransportNone {
		return "error"
	}
	return t.String()
}

// classification is the working state of one response's classification.
type classification struct {
	c      *Classifier
	ctx    ClassifyContext
	h      Headers
	typ    string // lower-case provider type
	status int    // after restatement
	from   int    // the upstream status when restated, else 0
	t      text   // the lower-cased body prefix
	detail string // a sub-kind for the message ("context_length", ...)
	rule   string // the provider rule that decided, if any
	hint   Hint
	hinted bool
}

// upstreamHint computes the retry hint once, on the paths that need it.
func (x *classification) upstreamHint() Hint {
	if !x.hinted {
		x.hint = headerHint(x.h, x.ctx.Now)
		if x.hint.Ms <= 0 {
			x.hint = bodyHint(&x.t, x.ctx.Now)
		}
		x.hinted = true
	}
	return x.hint
}

func (c *Classifier) classifyResponse(ctx ClassifyContext, o *Outcome) Verdict {
	x := classification{c: c, ctx: ctx, h: o.Headers, typ: strings.ToLower(ctx.ProviderType), status: o.Status,
		t: text{s: strings.ToLower(bodyPrefix(o.Body))}}

	// Step 1: restatement (docs/classification.md): operator rules for the provider id, then
	// the built-in ones of its type; the first match wins.
	r := findRestatement(c.restate[ctx.Provider], x.status, &x.t)
	if r == nil {
		r = findRestatement(builtinRestatements[x.typ], x.status, &x.t)
	}
	if r != nil {
		x.from, x.status = x.status, r.to
	}

	// Step 2: provider rules; step 3: the generic rows.
	v, ok := x.byRule()
	if !ok {
		v = x.generic()
	}
	v.ClientStatus = x.status
	if r != nil {
		// The synthetic retry hint is for the client only; internal cooldowns
		// stay governed by the verdict (docs/classification.md).
		v.ClientRetryAfterMs = r.defaultRetryAfterMs
		if h := x.upstreamHint(); h.Ms > 0 {
			v.ClientRetryAfterMs = h.Ms
		}
		v.Rule = r.id
		if x.rule != "" {
			v.Rule += "," + x.rule
		}
	} else {
		v.Rule = x.rule
	}
	v.Message = x.message(&v, o.Body)
	return v
}

func findRestatement(rules []restatement, status int, t *text) *restatement {
	for i := range rules {
		if rules[i].matches(status, t) {
			return &rules[i]
		}
	}
	return nil
}

// byRule applies the first matching provider rule: operator rules for the
// provider id (scope always honoured), then built-in rules of the type.
func (x *classification) byRule() (Verdict, bool) {
	for i, rules := range [2][]providerRule{x.c.rules[x.ctx.Provider], builtinRules[x.typ]} {
		for j := range rules {
			r := &rules[j]
			if cd, ok := r.match(x.status, &x.t, x.h); ok {
				return x.ruleVerdict(r, cd, i == 0 || honorsRuleScope[x.typ]), true
			}
		}
	}
	return Verdict{}, false
}

// ruleVerdict maps a rule match to its effects (docs/classification.md):
//   - scope model (or family/exact): a specific lockout of the model on this
//     connection with the rule's cooldown; the connection only records the
//     error; the request moves to the next target;
//   - scope connection, and provider (informational: a rule never cools a
//     whole provider): a connection cooldown, never terminal — the rule's
//     cooldown as ConnFixed, else ConnQuota for quota_exhausted, else
//     ConnBackoff; the request moves to the next connection;
//   - reason request_scoped (any scope): the client gets the upstream error.
//
// An unhonoured built-in scope acts as connection. The hint is the upstream
// one, else the rule's cooldown (HintRule).
func (x *classification) ruleVerdict(r *providerRule, cooldownMs int64, honoured bool) Verdict {
	x.rule = r.id
	if r.reason == ReasonRequestScoped {
		return x.requestScoped("")
	}
	v := Verdict{Reason: r.reason, WindowCounts: true, Hint: x.upstreamHint()}
	if v.Hint.Ms <= 0 && cooldownMs > 0 {
		v.Hint = Hint{Ms: cooldownMs, Source: HintRule}
	}
	scope := r.scope
	if !honoured {
		scope = ScopeConnection
	}
	switch scope {
	case ScopeModel, ScopeModelFamily, ScopeExactModel:
		v.Scope, v.Conn, v.Next = scope, ConnRecordOnly, NextTarget
		v.Lockout = LockoutAction{Scope: scope, Reason: r.reason, CooldownMs: cooldownMs}
	default:
		v.Scope, v.Next = ScopeConnection, NextConnection
		switch {
		case cooldownMs > 0:
			v.Conn, v.CooldownMs = ConnFixed, cooldownMs
		case r.reason == ReasonQuotaExhausted:
			v.Conn = ConnQuota
		default:
			v.Conn, v.Escalate = ConnBackoff, true
		}
	}
	return v
}

// generic applies the docs/classification.md#verdicts rows to a non-2xx status.
func (x *classification) generic() Verdict {
	s, t := x.status, &x.t
	if t.any(x.c.banned) {
		return x.terminal(ReasonBanned, StatusBanned)
	}
	switch {
	case s == 408 || s == 500 || s == 502 || s == 503 || s == 504:
		return x.providerFailure()
	case s >= 500 && s <= 599:
		return x.neutralServer()
	case s == 429:
		return x.throttled()
	case s == 402:
		if isCredits(t, x.typ) {
			return x.terminal(ReasonCreditsExhausted, StatusCreditsExhausted)
		}
		if d, ok := x.quotaText(); ok {
			return x.quota(d)
		}
		return x.terminal(ReasonCreditsExhausted, StatusCreditsExhausted)
	case s == 401:
		if isModelAccessDenied(t) && !t.any(credentialSignals) {
			return x.notFound()
		}
		return x.auth()
	case s == 403:
		return x.forbidden()
	case s == 404 || s == 410:
		if isResource404(t) || (s == 410 && !t.any(modelRetiredSignals)) {
			return x.requestScoped("resource")
		}
		return x.notFound()
	case s == 400:
		return x.badRequest()
	case s == 432:
		return x.quota(subscriptionDefaultMs) // plan limit (docs/classification.md#failure-catalogue)
	case s >= 400 && s <= 499:
		if isCredits(t, x.typ) {
			return x.terminal(ReasonCreditsExhausted, StatusCreditsExhausted)
		}
		return x.requestScoped("")
	}
	return Verdict{Reason: ReasonUnknown, Scope: ScopeConnection, Conn: ConnBackoff, Escalate: true,
		Hint: x.upstreamHint(), Next: NextConnection, WindowCounts: true}
}

// providerFailure: 408, 500, 502, 503, 504 count against the provider
// breaker (docs/breaker.md, docs/classification.md#verdicts).
func (x *classification) providerFailure() Verdict {
	reason, kind := ReasonServerError, KindServerError
	switch {
	case x.status == 408 || x.status == 504:
		kind = KindTimeout
	case x.status == 503 && x.t.any(capacitySignals):
		reason = ReasonModelCapacity
	}
	v := Verdict{Reason: reason, Scope: ScopeProvider, Breaker: BreakerFailure, Kind: kind, Conn: ConnBackoff,
		Escalate: true, Hint: x.upstreamHint(), Next: NextConnection, WindowCounts: true,
		Lockout: LockoutAction{Scope: ScopeExactModel, Reason: reason, Generic: true}}
	if x.ctx.PerModelQuota && x.status != 408 {
		v.Conn, v.Escalate = ConnRecordOnly, false
		v.Lockout.Generic = false
		if x.status == 500 {
			// Exactly 500 on a per-model-quota provider records the error only.
			v.Lockout, v.WindowCounts = LockoutAction{}, false
		}
	}
	return v
}

// neutralServer: 529 (overloaded: model_capacity) and 5xx outside the trip
// set are not provider health evidence; they cool the connection.
func (x *classification) neutralServer() Verdict {
	reason := ReasonServerError
	if x.status == 529 {
		reason = ReasonModelCapacity
	}
	v := Verdict{Reason: reason, Scope: ScopeConnection, Conn: ConnBackoff, Escalate: true, Hint: x.upstreamHint(),
		Next: NextConnection, WindowCounts: true, Lockout: LockoutAction{Scope: ScopeExactModel, Reason: reason, Generic: true}}
	if x.ctx.PerModelQuota {
		v.Scope, v.Conn, v.Escalate = ScopeExactModel, ConnRecordOnly, false
		v.Lockout.Generic = false
	}
	return v
}

// throttled classifies a 429 (or a 400/403 whose text says throttling).
func (x *classification) throttled() Verdict {
	t := &x.t
	if isCredits(t, x.typ) {
		return x.terminal(ReasonCreditsExhausted, StatusCreditsExhausted)
	}
	h := x.upstreamHint()
	if x.typ == "gemini" {
		// Gemini says "exceeded your current quota" for its ordinary
		// free-tier rate limit; a per-day metric or a typed retry delay of an
		// hour or more is the exhausted daily quota (docs/classification.md#failure-catalogue,
		// M4.4 step 4e).
		if isGeminiPerDay(t) || (h.Source == HintRetryInfo && h.Ms >= hour) {
			return x.quota(0)
		}
	} else if h.Source == HintRetryInfo && h.Ms < hour {
		// A typed short retry delay is a rate limit (docs/classification.md#failure-catalogue).
		return x.rateLimited()
	}
	if d, ok := x.quotaText(); ok {
		return x.quota(d)
	}
	if t.any(concurrencySignals) {
		return x.concurrency()
	}
	if x.typ != "gemini" && t.anySeq(broadQuota) {
		return x.quota(0)
	}
	return x.rateLimited()
}

// quotaText reports quota-exhausted text and its default reset when no hint
// is stated (docs/classification.md#failure-catalogue, docs/classification.md#failure-catalogue). For type gemini only
// the period and subscription phrases count (see throttled).
func (x *classification) quotaText() (defaultMs int64, ok bool) {
	t := &x.t
	switch {
	case t.any(weeklySignals):
		return weeklyDefaultMs, true
	case t.any(sessionSignals) || (t.any(sessionReached) && t.any(usageLimit)):
		return sessionDefaultMs, true
	case t.any(dailySignals):
		return 0, true
	case t.any(subscriptionSignals) || (x.typ == "anthropic" && t.any(anthropicSubscriptionSignals)):
		return subscriptionDefaultMs, true
	case x.typ != "gemini" && t.anySeq(explicitQuota):
		return 0, true
	}
	return 0, false
}

// forbidden classifies a 403.
func (x *classification) forbidden() Verdict {
	t := &x.t
	switch {
	case t.word(&bannedWord) && !t.has(&browserSignatureBanned):
		return x.terminal(ReasonBanned, StatusBanned)
	case isCredits(t, x.typ):
		return x.terminal(ReasonCreditsExhausted, StatusCreditsExhausted)
	}
	if d, ok := x.quotaText(); ok {
		return x.quota(d)
	}
	if t.any(concurrencySignals) {
		return x.concurrency()
	}
	if t.any(rateLimitSignals) {
		return x.rateLimited()
	}
	cred := t.any(credentialSignals)
	if !cred && isModelAccessDenied(t) {
		return x.notFound()
	}
	if cred {
		return x.auth()
	}
	reason := ReasonForbidden
	if t.any(requestNotAllowed) {
		reason = ReasonRequestRejected
	}
	v := Verdict{Reason: reason, Scope: ScopeConnection, Conn: ConnRejectedLadder, Next: NextConnection,
		WindowCounts: true, Lockout: LockoutAction{Scope: ScopeModelFamily, Reason: ReasonForbidden, Generic: true}}
	if x.ctx.PerModelQuota && reason == ReasonForbidden {
		v.Scope, v.Conn = ScopeModelFamily, ConnRecordOnly
		v.Lockout.Generic = false
	}
	return v
}

// badRequest classifies a 400.
func (x *classification) badRequest() Verdict {
	t := &x.t
	if isCredits(t, x.typ) {
		return x.terminal(ReasonCreditsExhausted, StatusCreditsExhausted)
	}
	if d := requestScopedDetail(t); d != "" {
		v := x.requestScoped(d)
		if d == "context_length" {
			v.Next = NextModel // another model may take it; this one never will
		}
		return v
	}
	cred := t.any(credentialSignals)
	if !cred && isModelAccessDenied(t) {
		return x.notFound()
	}
	if cred {
		return x.auth()
	}
	if _, ok := x.quotaText(); ok || t.any(concurrencySignals) || t.any(rateLimitSignals) {
		return x.throttled()
	}
	return x.requestScoped("")
}

func (x *classification) rateLimited() Verdict {
	v := Verdict{Reason: ReasonRateLimitExceeded, Scope: ScopeConnection, Conn: ConnHint, Escalate: true,
		Hint: x.upstreamHint(), Next: NextConnection, WindowCounts: true,
		Lockout: LockoutAction{Scope: ScopeModelFamily, Reason: ReasonRateLimitExceeded, Generic: true}}
	x.perModelFamily(&v)
	return v
}

// quota is the quota_exhausted row: cool the connection to the stated
// reset, else defaultMs (a body-stated default), else the engine's daily
// reset.
func (x *classification) quota(defaultMs int64) Verdict {
	h := x.upstreamHint()
	if h.Ms <= 0 && defaultMs > 0 {
		h = Hint{Ms: defaultMs, Source: HintBody}
	}
	v := Verdict{Reason: ReasonQuotaExhausted, Scope: ScopeConnection, Conn: ConnQuota, Hint: h,
		Next: NextConnection, WindowCounts: true,
		Lockout: LockoutAction{Scope: ScopeModelFamily, Reason: ReasonQuotaExhausted, Generic: true}}
	x.perModelFamily(&v)
	return v
}

// perModelFamily: on a per-model-quota provider a rate limit or quota wall
// locks the model's quota family on this connection instead of cooling the
// connection (docs/classification.md#verdicts); its 429s stay out of the provider window.
func (x *classification) perModelFamily(v *Verdict) {
	if !x.ctx.PerModelQuota {
		return
	}
	v.Scope, v.Conn, v.Escalate = ScopeModelFamily, ConnRecordOnly, false
	v.Lockout.Generic = false
	v.WindowCounts = x.status != 429
}

// concurrency: the account is busy, not exhausted (docs/cooldowns.md): next
// connection at once, a fixed short cooldown (or the hint), backoff level
// unchanged, breaker neutral, no lockout.
func (x *classification) concurrency() Verdict {
	h := x.upstreamHint()
	cd := x.c.concurrencyMs
	if h.Ms > 0 {
		cd = h.Ms
	}
	return Verdict{Reason: ReasonConcurrencyLimited, Scope: ScopeConnection, Conn: ConnFixed, CooldownMs: cd,
		Hint: h, Next: NextConnection}
}

func (x *classification) terminal(reason Reason, status ConnStatus) Verdict {
	return Verdict{Reason: reason, Scope: ScopeConnection, Conn: ConnTerminal, Terminal: status,
		Next: NextConnection, WindowCounts: true}
}

func (x *classification) auth() Verdict {
	return Verdict{Reason: ReasonAuthError, Scope: ScopeConnection, Conn: ConnExpiredLadder, Next: NextConnection,
		WindowCounts: true}
}

// notFound locks the bare model; the lockout is specific (applies whatever
// modelLockout.enabled says) on a local provider. It stays out of the
// provider window: a missing model says nothing about the provider's health.
func (x *classification) notFound() Verdict {
	local := x.typ == "local" || x.ctx.Profile == ProfileLocal
	return Verdict{Reason: ReasonNotFound, Scope: ScopeModel, Next: NextTarget,
		Lockout: LockoutAction{Scope: ScopeModel, Reason: ReasonNotFound, Generic: !local}}
}

func (x *classification) requestScoped(detail string) Verdict {
	x.detail = detail
	return Verdict{Reason: ReasonRequestScoped, Scope: ScopeRequest, Next: NextStop}
}

// ---- messages ----

// message is the verdict's credential-free description for lastError:
// "<status> <reason>[ (<detail>)][ restated from <status>][ by rule <id>]: <snippet>".
func (x *classification) message(v *Verdict, body string) string {
	var b strings.Builder
	b.Grow(160)
	b.WriteString(strconv.Itoa(x.status))
	b.WriteByte(' ')
	b.WriteString(v.Reason.String())
	if x.detail != "" {
		b.WriteString(" (")
		b.WriteString(x.detail)
		b.WriteByte(')')
	}
	if x.from != 0 {
		b.WriteString(" restated from ")
		b.WriteString(strconv.Itoa(x.from))
	}
	if x.rule != "" {
		b.WriteString(" by rule ")
		b.WriteString(x.rule)
	}
	if snip := errorSnippet(body, maxSnippet); snip != "" {
		b.WriteString(": ")
		b.WriteString(snip)
	}
	return b.String()
}

const maxSnippet = 100

// errorSnippet returns up to max bytes of the error's message — the JSON
// "message" string when there is one, else the body — with whitespace
// collapsed and anything that looks like a credential replaced by
// "[redacted]". It never returns invalid UTF-8.
func errorSnippet(body string, max int) string {
	src := bodyPrefix(body)
	if m, ok := jsonMessage(src); ok {
		src = m
	}
	// Redact over a window wider than the output so that a key cut at the
	// boundary is still recognised as one.
	if len(src) > 4*max {
		src = src[:4*max]
	}
	var b strings.Builder
	space, bearer := false, false
	for i := 0; i < len(src) && b.Len() < max; {
		c := src[i]
		if isTokenByte(c) {
			j := i
			for j < len(src) && isTokenByte(src[j]) {
				j++
			}
			tok := src[i:j]
			if bearer {
				// Everything up to the next space is the credential.
				for j < len(src) && src[j] > ' ' {
					j++
				}
			}
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			if bearer || looksSecret(tok) {
				b.WriteString("[redacted]")
			} else {
				b.WriteString(tok)
			}
			bearer = strings.EqualFold(tok, "bearer")
			i = j
			continue
		}
		if c <= ' ' || c == 0x7f {
			space = true
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(src[i:])
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		if r != utf8.RuneError || n > 1 {
			b.WriteString(src[i : i+n])
		}
		i += n
	}
	out := b.String()
	for len(out) > max {
		_, n := utf8.DecodeLastRuneInString(out)
		out = out[:len(out)-n]
	}
	return out
}

func isTokenByte(c byte) bool {
	return isLetter(c) || isDigit(c) || c == '_' || c == '-' || c == '+' || c == '/' || c == '='
}

// looksSecret recognises API keys and tokens: well-known key prefixes, and
// any long token that contains a digit (keys, JWT segments, hex and base64
// secrets). Long all-letter words stay readable.
func looksSecret(tok string) bool {
	lt := len(tok)
	for _, p := range [...]string{"sk-", "sk_", "pk-", "rk-", "ak-", "aiza", "ghp_", "gho_", "xox", "eyj"} {
		if lt >= len(p)+6 && strings.EqualFold(tok[:len(p)], p) {
			return true
		}
	}
	return lt >= 24 && strings.ContainsAny(tok, "0123456789")
}

// jsonMessage extracts the first "message" string value of a JSON body
// (escapes are kept as written; the snippet is informational).
func jsonMessage(s string) (string, bool) {
	i := strings.Index(s, `"message"`)
	if i < 0 {
		return "", false
	}
	rest := trimLeftJSON(s[i+len(`"message"`):])
	if rest == "" || rest[0] != ':' {
		return "", false
	}
	rest = trimLeftJSON(rest[1:])
	if rest == "" || rest[0] != '"' {
		return "", false
	}
	rest = rest[1:]
	for j := 0; j < len(rest); j++ {
		switch rest[j] {
		case '\\':
			j++
		case '"':
			return rest[:j], j > 0
		}
	}
	return rest, len(rest) > 0
}
