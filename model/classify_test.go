package model

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The expected verdict of every generic row, written out independently of
// the classifier (docs/classification.md#verdicts). Each takes the client status it reports.

func wantSuccess(st int) Verdict {
	return Verdict{Breaker: BreakerSuccess, Conn: ConnClear, Next: NextDone, ClientStatus: st}
}

func wantTrip(st int, reason Reason, kind FailureKind, h Hint) Verdict {
	return Verdict{Reason: reason, Scope: ScopeProvider, Breaker: BreakerFailure, Kind: kind, Conn: ConnBackoff,
		Escalate: true, Hint: h, Next: NextConnection, WindowCounts: true, ClientStatus: st,
		Lockout: LockoutAction{Scope: ScopeExactModel, Reason: reason, Generic: true}}
}

func wantNeutral5xx(st int, reason Reason) Verdict {
	return Verdict{Reason: reason, Scope: ScopeConnection, Conn: ConnBackoff, Escalate: true, Next: NextConnection,
		WindowCounts: true, ClientStatus: st, Lockout: LockoutAction{Scope: ScopeExactModel, Reason: reason, Generic: true}}
}

func wantRate(st int, h Hint) Verdict {
	return Verdict{Reason: ReasonRateLimitExceeded, Scope: ScopeConnection, Conn: ConnHint, Escalate: true, Hint: h,
		Next: NextConnection, WindowCounts: true, ClientStatus: st,
		Lockout: LockoutAction{Scope: ScopeModelFamily, Reason: ReasonRateLimitExceeded, Generic: true}}
}

func wantQuota(st int, h Hint) Verdict {
	return Verdict{Reason: ReasonQuotaExhausted, Scope: ScopeConnection, Conn: ConnQuota, Hint: h,
		Next: NextConnection, WindowCounts: true, ClientStatus: st,
		Lockout: LockoutAction{Scope: ScopeModelFamily, Reason: ReasonQuotaExhausted, Generic: true}}
}

func wantConcurrency(st int, cd int64, h Hint) Verdict {
	return Verdict{Reason: ReasonConcurrencyLimited, Scope: ScopeConnection, Conn: ConnFixed, CooldownMs: cd, Hint: h,
		Next: NextConnection, ClientStatus: st}
}

func wantTerminal(st int, reason Reason, status ConnStatus) Verdict {
	return Verdict{Reason: reason, Scope: ScopeConnection, Conn: ConnTerminal, Terminal: status, Next: NextConnection,
		WindowCounts: true, ClientStatus: st}
}

func wantAuth(st int) Verdict {
	return Verdict{Reason: ReasonAuthError, Scope: ScopeConnection, Conn: ConnExpiredLadder, Next: NextConnection,
		WindowCounts: true, ClientStatus: st}
}

func wantLadder(st int, reason Reason) Verdict {
	return Verdict{Reason: reason, Scope: ScopeConnection, Conn: ConnRejectedLadder, Next: NextConnection,
		WindowCounts: true, ClientStatus: st, Lockout: LockoutAction{Scope: ScopeModelFamily, Reason: ReasonForbidden, Generic: true}}
}

func wantNotFound(st int, generic bool) Verdict {
	return Verdict{Reason: ReasonNotFound, Scope: ScopeModel, Next: NextTarget, ClientStatus: st,
		Lockout: LockoutAction{Scope: ScopeModel, Reason: ReasonNotFound, Generic: generic}}
}

func wantRequestScoped(st int) Verdict {
	return Verdict{Reason: ReasonRequestScoped, Scope: ScopeRequest, Next: NextStop, ClientStatus: st}
}

// wantTooLong: a context-length refusal is request-scoped and goes to the
// next target with another model.
func wantTooLong(st int) Verdict {
	v := wantRequestScoped(st)
	v.Next = NextModel
	return v
}

// perModel turns a rate/quota/forbidden row into its per-model-quota form.
func perModel(v Verdict) Verdict {
	v.Scope, v.Conn, v.Escalate = ScopeModelFamily, ConnRecordOnly, false
	v.Lockout.Generic = false
	v.WindowCounts = v.ClientStatus != 429
	return v
}

type clfCase struct {
	name     string
	settings *Settings
	ctx      func(*ClassifyContext)
	o        Outcome
	want     Verdict
}

func resp(status int, body string, h HeaderMap) Outcome {
	return Outcome{Kind: OutcomeResponse, Status: status, Body: body, Headers: h}
}

func typ(t string) func(*ClassifyContext) { return func(c *ClassifyContext) { c.ProviderType = t } }
func provider(id, t string) func(*ClassifyContext) {
	return func(c *ClassifyContext) { c.Provider, c.ProviderType = id, t }
}
func perModelQuota(c *ClassifyContext) { c.PerModelQuota = true }

func runClassifyCases(t *testing.T, cases []clfCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ClassifyContext{Provider: "p1", ProviderType: "openai", Model: "m-1", Profile: ProfileAPIKey, Now: clfNow}
			if tc.ctx != nil {
				tc.ctx(&ctx)
			}
			c := NewClassifier(tc.settings)
			got := c.Classify(ctx, tc.o)
			if got.Message == "" && got.Next != NextDone {
				t.Errorf("failure verdict without a message")
			}
			if !utf8.ValidString(got.Message) {
				t.Errorf("message is not valid UTF-8: %q", got.Message)
			}
			got.Message = ""
			if got != tc.want {
				t.Fatalf("Classify(%v %d %.60q)\n got  %+v\n want %+v", tc.o.Kind, tc.o.Status, tc.o.Body, got, tc.want)
			}
			// Pure: the same inputs give the same verdict.
			again := c.Classify(ctx, tc.o)
			again.Message = ""
			if again != got {
				t.Fatalf("not deterministic: %+v vs %+v", again, got)
			}
		})
	}
}

func TestClassifyGenericRows(t *testing.T) {
	retry20 := HeaderMap{"retry-after": "20"}
	h20 := Hint{20_000, HintHeader}
	runClassifyCases(t, []clfCase{
		// 2xx
		{name: "docs/classification.md#verdicts 200 is success", o: resp(200, "", nil), want: wantSuccess(200)},
		{name: "docs/classification.md#verdicts 204 is success even with error text", o: resp(204, "account has been deactivated", nil), want: wantSuccess(204)},

		// provider-level statuses
		{name: "docs/breaker.md 500 trips the breaker (server_error)", o: resp(500, "internal error", nil), want: wantTrip(500, ReasonServerError, KindServerError, Hint{})},
		{name: "docs/breaker.md 502 trips the breaker", o: resp(502, "bad gateway", nil), want: wantTrip(502, ReasonServerError, KindServerError, Hint{})},
		{name: "docs/breaker.md 503 trips the breaker, hint as floor", o: resp(503, "unavailable", retry20), want: wantTrip(503, ReasonServerError, KindServerError, h20)},
		{name: "docs/breaker.md 503 overloaded is model_capacity but still counts", o: resp(503, `{"error":"The model is overloaded"}`, nil), want: wantTrip(503, ReasonModelCapacity, KindServerError, Hint{})},
		{name: "docs/breaker.md 504 trips with kind timeout", o: resp(504, "", nil), want: wantTrip(504, ReasonServerError, KindTimeout, Hint{})},
		{name: "docs/breaker.md 408 trips with kind timeout", o: resp(408, "", nil), want: wantTrip(408, ReasonServerError, KindTimeout, Hint{})},
		{name: "docs/breaker.md#trip-statuses: 529 is breaker-neutral model_capacity", o: resp(529, "overloaded_error", nil), want: wantNeutral5xx(529, ReasonModelCapacity)},
		{name: "docs/classification.md#verdicts 501 is breaker-neutral", o: resp(501, "", nil), want: wantNeutral5xx(501, ReasonServerError)},
		{name: "docs/classification.md#verdicts 505 is breaker-neutral", o: resp(505, "", nil), want: wantNeutral5xx(505, ReasonServerError)},
		{name: "docs/classification.md#verdicts 599 is breaker-neutral", o: resp(599, "", nil), want: wantNeutral5xx(599, ReasonServerError)},

		// 429
		{name: "docs/classification.md#verdicts 429 rate limit without hint", o: resp(429, `{"error":{"message":"Rate limit exceeded"}}`, nil), want: wantRate(429, Hint{})},
		{name: "docs/cooldowns.md 429 prefers the Retry-After hint", o: resp(429, "", retry20), want: wantRate(429, h20)},
		{name: "docs/cooldowns.md 429 body hint", o: resp(429, "Rate limit reached. Please try again in 7m12s.", nil), want: wantRate(429, Hint{432_000, HintBody})},
		{name: "docs/classification.md#failure-catalogue Gemini-style resource exhausted is not credits", o: resp(429, "Resource has been exhausted (e.g. check quota).", nil), want: wantRate(429, Hint{})},

		// concurrency
		{name: "docs/cooldowns.md concurrency-limit 429 keeps backoff: too many concurrent requests", o: resp(429, "Too many concurrent requests for this account", nil), want: wantConcurrency(429, 1000, Hint{})},
		{name: "docs/cooldowns.md concurrency-limit 429: concurrency limit", o: resp(429, `{"error":{"message":"Concurrency limit exceeded"}}`, nil), want: wantConcurrency(429, 1000, Hint{})},
		{name: "docs/cooldowns.md concurrency-limit 429: parallel request limit", o: resp(429, "parallel request limit reached", nil), want: wantConcurrency(429, 1000, Hint{})},
		{name: "docs/cooldowns.md concurrency-limit 429: concurrent request limit", o: resp(429, "concurrent request limit of 4 reached", nil), want: wantConcurrency(429, 1000, Hint{})},
		{name: "docs/cooldowns.md concurrency-limit 429: max concurrent", o: resp(429, "max concurrent requests: 2", nil), want: wantConcurrency(429, 1000, Hint{})},
		{name: "docs/cooldowns.md concurrency-limit 429: GLM 并发数过高", ctx: typ("glm"),
			o: resp(429, `{"error":{"code":"1302","message":"您当前使用该API的并发数过高，请降低并发，或联系客服增加限额。"}}`, nil), want: wantConcurrency(429, 1000, Hint{})},
		{name: "docs/cooldowns.md concurrency cooldown from settings", settings: concurrencySettings(2500),
			o: resp(429, "too many concurrent requests", nil), want: wantConcurrency(429, 2500, Hint{})},
		{name: "docs/cooldowns.md concurrency cooldown is the upstream hint when present",
			o: resp(429, "too many concurrent requests", HeaderMap{"retry-after": "3"}), want: wantConcurrency(429, 3000, Hint{3000, HintHeader})},
		{name: "docs/cooldowns.md explicit quota body beats concurrency text",
			o: resp(429, "Daily quota exceeded; too many concurrent requests", nil), want: wantQuota(429, Hint{})},
		{name: "decision: broad plan-limit text does not beat concurrency text",
			o: resp(429, "Your plan's concurrency limit has been reached", nil), want: wantConcurrency(429, 1000, Hint{})},

		// quota
		{name: "docs/classification.md#failure-catalogue daily limit is quota", o: resp(429, "You have reached your daily limit for this model", nil), want: wantQuota(429, Hint{})},
		{name: "docs/classification.md#failure-catalogue try again tomorrow", o: resp(429, "Quota used up, try again tomorrow", nil), want: wantQuota(429, Hint{})},
		{name: "docs/classification.md#failure-catalogue weekly text without hint defaults to 24h", o: resp(429, "You have reached your weekly usage limit", nil), want: wantQuota(429, Hint{weeklyDefaultMs, HintBody})},
		{name: "docs/classification.md#failure-catalogue session text without hint defaults to 5h", o: resp(429, "Session limit reached for this plan", nil), want: wantQuota(429, Hint{sessionDefaultMs, HintBody})},
		{name: "docs/classification.md#failure-catalogue reached your session + usage limit", o: resp(429, "You reached your session usage limit", nil), want: wantQuota(429, Hint{sessionDefaultMs, HintBody})},
		{name: "docs/classification.md#failure-catalogue subscription text defaults to 1h", o: resp(429, "Claude Pro usage limit reached", nil), want: wantQuota(429, Hint{subscriptionDefaultMs, HintBody})},
		{name: "docs/classification.md#failure-catalogue stated reset beats the default", o: resp(429, "Usage limit reached. Resets in 2h30m.", nil), want: wantQuota(429, Hint{9_000_000, HintBody})},
		{name: "docs/classification.md#failure-catalogue quota with a header reset", o: resp(429, "quota exceeded", HeaderMap{"x-ratelimit-reset": "120"}), want: wantQuota(429, Hint{120_000, HintHeader})},
		{name: "docs/classification.md#failure-catalogue anthropic account rate-limit text is subscription quota", ctx: typ("anthropic"),
			o: resp(429, "This request would exceed your account's rate limit. Please try again later.", nil), want: wantQuota(429, Hint{subscriptionDefaultMs, HintBody})},
		{name: "the same text on another type is a rate limit",
			o: resp(429, "This request would exceed your account's rate limit. Please try again later.", nil), want: wantRate(429, Hint{})},
		{name: "docs/classification.md#failure-catalogue GLM 使用上限 with its reset", ctx: typ("glm"),
			o: resp(429, `{"error":{"code":"1308","message":"已达到 5 小时的使用上限。您的限额将在 2025-08-19 18:42:10 重置。"}}`, nil), want: wantQuota(429, Hint{})},
		{name: "docs/classification.md#failure-catalogue per day limit", o: resp(429, "Rate limit reached for requests per day (RPD): Limit 200, Used 200. Please try again in 20s.", nil), want: wantQuota(429, Hint{20_000, HintBody})},
		{name: "docs/classification.md#failure-catalogue: a typed short retry delay is a rate limit even with quota text",
			o:    resp(429, `{"error":{"message":"Daily quota nearly used","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"20s"}]}}`, nil),
			want: wantRate(429, Hint{20_000, HintRetryInfo})},
		{name: "docs/classification.md#verdicts 432 plan limit is quota", o: resp(432, "plan limit", nil), want: wantQuota(432, Hint{subscriptionDefaultMs, HintBody})},

		// Gemini
		{name: "docs/classification.md#failure-catalogue Gemini 429 'exceeded your current quota' stays a rate limit", ctx: typ("gemini"),
			o: resp(429, clfGeminiBody("29s"), nil), want: wantRate(429, Hint{29_000, HintRetryInfo})},
		{name: "Gemini 429 quota prose without RetryInfo stays a rate limit", ctx: typ("gemini"),
			o: resp(429, "You exceeded your current quota. Quota exceeded for metric generate_content_free_tier_requests", nil), want: wantRate(429, Hint{})},
		{name: "docs/classification.md#failure-catalogue Gemini per-day metric is quota", ctx: typ("gemini"),
			o: resp(429, strings.Replace(clfGeminiBody("41s"), "PerMinute", "PerDay", 1), nil), want: wantQuota(429, Hint{41_000, HintRetryInfo})},
		{name: "docs/classification.md#failure-catalogue Gemini typed delay of an hour or more is quota", ctx: typ("gemini"),
			o: resp(429, clfGeminiBody("86399s"), nil), want: wantQuota(429, Hint{86_399_000, HintRetryInfo})},
		{name: "docs/classification.md#failure-catalogue the same text on type openai is credits exhausted",
			o:    resp(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota"}}`, nil),
			want: wantTerminal(429, ReasonCreditsExhausted, StatusCreditsExhausted)},

		// credits
		{name: "docs/classification.md#verdicts 402 without text is credits exhausted", o: resp(402, "", nil), want: wantTerminal(402, ReasonCreditsExhausted, StatusCreditsExhausted)},
		{name: "docs/classification.md#verdicts 402 credits text", o: resp(402, "Insufficient Balance", nil), want: wantTerminal(402, ReasonCreditsExhausted, StatusCreditsExhausted)},
		{name: "docs/classification.md#verdicts 402 with quota text is quota", o: resp(402, "daily quota exceeded", nil), want: wantQuota(402, Hint{})},
		{name: "docs/classification.md#failure-catalogue credits text on a 400 (Anthropic)", ctx: typ("anthropic"),
			o:    resp(400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`, nil),
			want: wantTerminal(400, ReasonCreditsExhausted, StatusCreditsExhausted)},
		{name: "docs/classification.md#failure-catalogue suspended for billing", o: resp(403, "Your access was suspended because of an unpaid invoice", nil), want: wantTerminal(403, ReasonCreditsExhausted, StatusCreditsExhausted)},
		{name: "GLM 余额不足 is credits", ctx: typ("glm"), o: resp(429, `{"error":{"code":"1113","message":"余额不足或无可用资源包,请充值。"}}`, nil), want: wantTerminal(429, ReasonCreditsExhausted, StatusCreditsExhausted)},

		// 401
		{name: "docs/classification.md#verdicts 401 is the expired ladder", o: resp(401, `{"error":{"message":"Incorrect API key provided"}}`, nil), want: wantAuth(401)},
		{name: "docs/classification.md#verdicts 401 without text", o: resp(401, "", nil), want: wantAuth(401)},
		{name: "docs/cooldowns.md 401 model not supported is not_found", o: resp(401, "The model gpt-9 is not supported for this account", nil), want: wantNotFound(401, true)},

		// bans
		{name: "docs/classification.md#failure-catalogue deactivation text on 401 is banned", o: resp(401, "This account is deactivated", nil), want: wantTerminal(401, ReasonBanned, StatusBanned)},
		{name: "docs/classification.md#failure-catalogue deactivation text on any status (500)", o: resp(500, `{"error":{"code":"account_deactivated"}}`, nil), want: wantTerminal(500, ReasonBanned, StatusBanned)},
		{name: "docs/classification.md#verdicts 403 ban text is terminal banned", o: resp(403, "Your account has been banned for abuse", nil), want: wantTerminal(403, ReasonBanned, StatusBanned)},
		{name: "docs/classification.md#verdicts 403 bare 'banned' is terminal", o: resp(403, `{"error":"banned"}`, nil), want: wantTerminal(403, ReasonBanned, StatusBanned)},
		{name: "docs/classification.md#failure-catalogue Cloudflare browser_signature_banned is not an account ban", o: resp(403, "error code: 1010 browser_signature_banned", nil), want: wantLadder(403, ReasonForbidden)},
		{name: "docs/classification.md#verdicts settings bannedSignals on a 429", settings: &Settings{BannedSignals: []string{"Org Frozen By Admin"}},
			o: resp(429, "org frozen by admin", nil), want: wantTerminal(429, ReasonBanned, StatusBanned)},
		{name: "docs/classification.md#failure-catalogue verify your account", o: resp(403, "Please verify your account to continue", nil), want: wantTerminal(403, ReasonBanned, StatusBanned)},

		// 403
		{name: "docs/cooldowns.md#ladders: unrecognised 403 enters the rejected ladder", o: resp(403, "Forbidden", nil), want: wantLadder(403, ReasonForbidden)},
		{name: "docs/cooldowns.md 403 'Request not allowed' is request_rejected", ctx: typ("anthropic"), o: resp(403, `{"error":{"type":"permission_error","message":"Request not allowed"}}`, nil), want: wantLadder(403, ReasonRequestRejected)},
		{name: "docs/classification.md#verdicts 403 with quota text is quota", o: resp(403, "hour quota exceeded", nil), want: wantQuota(403, Hint{})},
		{name: "decision: 403 rate-limit text is a rate limit, not a step to banned", o: resp(403, "API rate limit exceeded", retry20), want: wantRate(403, h20)},
		{name: "decision: 403 bad credentials is an auth error", o: resp(403, "Invalid API key", nil), want: wantAuth(403)},
		{name: "decision: 403 model access denied locks the model", o: resp(403, "You do not have access to the model claude-opus", nil), want: wantNotFound(403, true)},

		// 404 / 410
		{name: "docs/classification.md#verdicts 404 model not found locks the bare model", o: resp(404, "The model `gpt-9` does not exist", nil), want: wantNotFound(404, true)},
		{name: "docs/lockouts.md 404 on a local type is a specific lockout", ctx: typ("local"), o: resp(404, `{"error":"model 'llama9' not found"}`, nil), want: wantNotFound(404, false)},
		{name: "docs/lockouts.md 404 on a local profile is a specific lockout", ctx: func(c *ClassifyContext) { c.Profile = ProfileLocal }, o: resp(404, "", nil), want: wantNotFound(404, false)},
		{name: "docs/cooldowns.md request-scoped resource 404", o: resp(404, `{"error":{"message":"No such file: file-abc"}}`, nil), want: wantRequestScoped(404)},
		{name: "docs/classification.md#failure-catalogue 410 retired model is not_found", o: resp(410, "This model has been retired", nil), want: wantNotFound(410, true)},
		{name: "410 without model text is request-scoped", o: resp(410, "gone", nil), want: wantRequestScoped(410)},

		// 400
		{name: "docs/classification.md#verdicts 400 context length is request-scoped, next model", o: resp(400, "This model's maximum context length is 8192 tokens", nil), want: wantTooLong(400)},
		{name: "docs/classification.md#verdicts 400 prompt is too long, next model", ctx: typ("anthropic"), o: resp(400, "prompt is too long: 210000 tokens > 200000 maximum", nil), want: wantTooLong(400)},
		{name: "docs/classification.md#verdicts 400 content filter", o: resp(400, `{"error":{"code":"content_filter","message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy"}}`, nil), want: wantRequestScoped(400)},
		{name: "docs/classification.md#verdicts 400 malformed request", o: resp(400, "messages must alternate between user and assistant", nil), want: wantRequestScoped(400)},
		{name: "docs/classification.md#verdicts 400 a model's token limit is a length refusal: next model", o: resp(400, "max_tokens must be less than 8192", nil), want: wantTooLong(400)},
		{name: "docs/classification.md#verdicts 400 unknown is request-scoped", o: resp(400, "bad request", nil), want: wantRequestScoped(400)},
		{name: "docs/classification.md#failure-catalogue 400 rate-limit text is a 429 rate limit", o: resp(400, "Rate limit exceeded, slow down", retry20), want: wantRate(400, h20)},
		{name: "docs/classification.md#failure-catalogue 400 频率 text is a rate limit", ctx: typ("glm"), o: resp(400, "您的账户已达到速率限制，请您控制请求频率", nil), want: wantRate(400, Hint{})},
		{name: "400 concurrency text is concurrency", o: resp(400, "too many concurrent requests", nil), want: wantConcurrency(400, 1000, Hint{})},
		{name: "400 quota text is quota", o: resp(400, "monthly quota exceeded", nil), want: wantQuota(400, Hint{})},
		{name: "docs/classification.md#failure-catalogue 400 model access denied is not_found", o: resp(400, "invalid model: gpt-9", nil), want: wantNotFound(400, true)},
		{name: "docs/classification.md#failure-catalogue 400 model access denied is not overridden by bad-credential text... it is vetoed by it",
			o: resp(400, "Invalid model or invalid API key", nil), want: wantAuth(400)},
		{name: "400 Gemini API key not valid is an auth error", ctx: typ("gemini"), o: resp(400, "API key not valid. Please pass a valid API key.", nil), want: wantAuth(400)},
		{name: "docs/classification.md#verdicts 409 is request-scoped", o: resp(409, "conflict", nil), want: wantRequestScoped(409)},
		{name: "docs/classification.md#verdicts 413 is request-scoped", o: resp(413, "request entity too large", nil), want: wantRequestScoped(413)},
		{name: "docs/classification.md#verdicts 422 is request-scoped", o: resp(422, "unprocessable", nil), want: wantRequestScoped(422)},

		// odd statuses
		{name: "a 3xx is unknown and backs off", o: resp(302, "", nil),
			want: Verdict{Reason: ReasonUnknown, Scope: ScopeConnection, Conn: ConnBackoff, Escalate: true, Next: NextConnection, WindowCounts: true, ClientStatus: 302}},
		{name: "status 0 is unknown", o: resp(0, "", nil),
			want: Verdict{Reason: ReasonUnknown, Scope: ScopeConnection, Conn: ConnBackoff, Escalate: true, Next: NextConnection, WindowCounts: true}},
	})
}

func concurrencySettings(ms Millis) *Settings {
	s := DefaultSettings()
	s.ConnectionCooldown.ConcurrencyCooldownMs = ms
	return &s
}

func TestClassifyOtherOutcomes(t *testing.T) {
	tr := func(k Transport) Outcome { return Outcome{Kind: OutcomeTransport, Transport: k} }
	wantTr := func(kind FailureKind, st int) Verdict {
		return Verdict{Reason: ReasonServerError, Scope: ScopeProvider, Breaker: BreakerFailure, Kind: kind, Transport: true,
			Conn: ConnBackoff, Escalate: true, Next: NextConnection, WindowCounts: true, ClientStatus: st,
			Lockout: LockoutAction{Scope: ScopeExactModel, Reason: ReasonServerError, Generic: true}}
	}
	runClassifyCases(t, []clfCase{
		{name: "docs/breaker.md connect refused is a transport failure", o: tr(TransportRefused), want: wantTr(KindTransport, 502)},
		{name: "docs/breaker.md connection reset is a transport failure", o: tr(TransportReset), want: wantTr(KindTransport, 502)},
		{name: "docs/breaker.md early EOF is a transport failure", o: tr(TransportEarlyEOF), want: wantTr(KindTransport, 502)},
		{name: "transport without a cause", o: tr(TransportNone), want: wantTr(KindTransport, 502)},
		{name: "docs/classification.md#verdicts connect timeout has kind timeout", o: tr(TransportConnectTimeout), want: wantTr(KindTimeout, 504)},
		{name: "docs/classification.md#verdicts header timeout has kind timeout", o: tr(TransportHeaderTimeout), want: wantTr(KindTimeout, 504)},
		{name: "docs/classification.md#verdicts attempt timeout has kind timeout", o: tr(TransportAttemptTimeout), want: wantTr(KindTimeout, 504)},
		{name: "docs/cooldowns.md content stall records the error only", o: Outcome{Kind: OutcomeStall},
			want: Verdict{Reason: ReasonStreamStall, Scope: ScopeConnection, Conn: ConnRecordOnly, Next: NextRetry}},
		{name: "docs/streams.md throughput abort records the error only", o: Outcome{Kind: OutcomeThroughput},
			want: Verdict{Reason: ReasonStreamStall, Scope: ScopeConnection, Conn: ConnRecordOnly, Next: NextRetry}},
		{name: "docs/classification.md#verdicts client abort is neutral everywhere", o: Outcome{Kind: OutcomeClientAbort},
			want: Verdict{Reason: ReasonClientAbort, Scope: ScopeRequest, Next: NextStop}},
		{name: "docs/classification.md#verdicts local queue is neutral, next connection", o: Outcome{Kind: OutcomeLocalQueue},
			want: Verdict{Reason: ReasonLocalQueue, Next: NextConnection}},
		{name: "docs/lockouts.md quality failure locks the exact model", o: Outcome{Kind: OutcomeQuality},
			want: Verdict{Reason: ReasonQualityFailure, Scope: ScopeExactModel, Next: NextConnection, WindowCounts: true, ClientStatus: 502,
				Lockout: LockoutAction{Scope: ScopeExactModel, Reason: ReasonQualityFailure, Generic: true}}},
		{name: "an unknown outcome kind stops neutrally", o: Outcome{Kind: OutcomeKind(200)},
			want: Verdict{Reason: ReasonUnknown, Next: NextStop}},
	})
}

func TestClassifyPerModelQuota(t *testing.T) {
	exactLock := func(v Verdict) Verdict {
		v.Conn, v.Escalate = ConnRecordOnly, false
		v.Lockout.Generic = false
		return v
	}
	n529 := wantNeutral5xx(529, ReasonModelCapacity)
	n529.Scope, n529.Conn, n529.Escalate = ScopeExactModel, ConnRecordOnly, false
	n529.Lockout.Generic = false
	t500 := wantTrip(500, ReasonServerError, KindServerError, Hint{})
	t500.Conn, t500.Escalate, t500.Lockout, t500.WindowCounts = ConnRecordOnly, false, LockoutAction{}, false
	forb := wantLadder(403, ReasonForbidden)
	forb.Scope, forb.Conn = ScopeModelFamily, ConnRecordOnly
	forb.Lockout.Generic = false
	runClassifyCases(t, []clfCase{
		{name: "docs/classification.md#verdicts per-model 429 rate limit locks the family instead of cooling", ctx: perModelQuota,
			o: resp(429, "rate limited", HeaderMap{"retry-after": "7"}), want: perModel(wantRate(429, Hint{7000, HintHeader}))},
		{name: "docs/classification.md#verdicts per-model 429 quota locks the family", ctx: perModelQuota,
			o: resp(429, "daily quota exceeded", nil), want: perModel(wantQuota(429, Hint{}))},
		{name: "docs/classification.md#verdicts per-model 403 quota locks the family (window counts)", ctx: perModelQuota,
			o: resp(403, "quota exceeded", nil), want: perModel(wantQuota(403, Hint{}))},
		{name: "docs/classification.md#verdicts per-model 403 other locks the family instead of the ladder", ctx: perModelQuota,
			o: resp(403, "forbidden", nil), want: forb},
		{name: "docs/cooldowns.md per-model 403 request-rejected keeps the ladder", ctx: perModelQuota,
			o: resp(403, "Request not allowed", nil), want: wantLadder(403, ReasonRequestRejected)},
		{name: "docs/classification.md#verdicts per-model 502 locks the exact model, breaker still counts", ctx: perModelQuota,
			o: resp(502, "", nil), want: exactLock(wantTrip(502, ReasonServerError, KindServerError, Hint{}))},
		{name: "docs/classification.md#verdicts per-model 503 locks the exact model, breaker still counts", ctx: perModelQuota,
			o: resp(503, "", nil), want: exactLock(wantTrip(503, ReasonServerError, KindServerError, Hint{}))},
		{name: "docs/classification.md#verdicts per-model 504 locks the exact model, breaker still counts", ctx: perModelQuota,
			o: resp(504, "", nil), want: exactLock(wantTrip(504, ReasonServerError, KindTimeout, Hint{}))},
		{name: "docs/classification.md#verdicts per-model exactly 500 records only, breaker still counts", ctx: perModelQuota,
			o: resp(500, "", nil), want: t500},
		{name: "docs/classification.md#verdicts per-model 408 is the normal row", ctx: perModelQuota,
			o: resp(408, "", nil), want: wantTrip(408, ReasonServerError, KindTimeout, Hint{})},
		{name: "docs/classification.md#verdicts per-model 529 locks the exact model", ctx: perModelQuota, o: resp(529, "", nil), want: n529},
		{name: "per-model concurrency stays concurrency", ctx: perModelQuota,
			o: resp(429, "too many concurrent requests", nil), want: wantConcurrency(429, 1000, Hint{})},
		{name: "per-model credits stay terminal", ctx: perModelQuota,
			o: resp(402, "", nil), want: wantTerminal(402, ReasonCreditsExhausted, StatusCreditsExhausted)},
		{name: "per-model 404 is the generic not_found row", ctx: perModelQuota,
			o: resp(404, "model not found", nil), want: wantNotFound(404, true)},
	})
}

func TestClassifyRestatementAndRules(t *testing.T) {
	ar := provider("ar1", "agentrouter")
	arQuota := func(from int, retryMs int64, h Hint) Verdict {
		v := wantQuota(429, h)
		v.Lockout = LockoutAction{}
		v.ClientRetryAfterMs = retryMs
		v.Rule = "agentrouter-quota-misstatus,agentrouter-user-quota-exhausted"
		return v
	}
	arDenied := Verdict{Reason: ReasonAuthError, Scope: ScopeModel, Conn: ConnRecordOnly, Next: NextTarget, WindowCounts: true,
		Hint: Hint{6 * hour, HintRule}, ClientStatus: 403, Rule: "agentrouter-model-access-denied",
		Lockout: LockoutAction{Scope: ScopeModel, Reason: ReasonAuthError, CooldownMs: 6 * hour}}

	opRules := func(rules ...ProviderErrorRule) *Settings {
		s := DefaultSettings()
		s.ProviderErrorRules = map[string][]ProviderErrorRule{"acme": rules}
		return &s
	}
	acme := provider("acme", "openai")
	connRule := func(st int, reason Reason, conn ConnAction, cd int64, h Hint, rule string) Verdict {
		return Verdict{Reason: reason, Scope: ScopeConnection, Conn: conn, CooldownMs: cd, Escalate: conn == ConnBackoff,
			Hint: h, Next: NextConnection, WindowCounts: true, ClientStatus: st, Rule: rule}
	}
	modelRule := func(st int, reason Reason, cd int64, rule string) Verdict {
		return Verdict{Reason: reason, Scope: ScopeModel, Conn: ConnRecordOnly, Next: NextTarget, WindowCounts: true,
			Hint: Hint{cd, HintRule}, ClientStatus: st, Rule: rule,
			Lockout: LockoutAction{Scope: ScopeModel, Reason: reason, CooldownMs: cd}}
	}
	restate := func(rules ...RestatementRule) *Settings {
		s := DefaultSettings()
		s.StatusRestatements = map[string][]RestatementRule{"acme": rules}
		return &s
	}
	acmeRestate := RestatementRule{ID: "acme-misstatus", FromStatuses: []int{400, 403}, ToStatus: 429,
		TextMarkers: []string{"Quota Temporarily Gone"}, ExcludeMarkers: []string{"permanently"}, DefaultRetryAfterMs: 30_000}
	acmeRestated := wantRate(429, Hint{})
	acmeRestated.ClientRetryAfterMs, acmeRestated.Rule = 30_000, "acme-misstatus"

	runClassifyCases(t, []clfCase{
		{name: "docs/classification.md agentrouter 403 额度不足 is restated to 429 with a 60 s client hint", ctx: ar,
			o: resp(403, `{"error":{"message":"用户额度不足, 剩余额度: $0.0000"}}`, nil), want: arQuota(403, 60_000, Hint{})},
		{name: "docs/classification.md agentrouter 400 额度不足 is restated too", ctx: ar,
			o: resp(400, "额度不足", nil), want: arQuota(400, 60_000, Hint{})},
		{name: "docs/classification.md#restatement the upstream hint beats the default retry-after", ctx: ar,
			o: resp(403, "额度不足", HeaderMap{"retry-after": "5"}), want: arQuota(403, 5000, Hint{5000, HintHeader})},
		{name: "docs/classification.md exclude marker vetoes restatement; model access denied locks the model 6h", ctx: ar,
			o: resp(403, "无权访问模型 gpt-5, 额度不足", nil), want: arDenied},
		{name: "docs/classification.md#provider-rules agentrouter model access denied", ctx: ar,
			o: resp(403, "无权访问模型 claude-opus-4", nil), want: arDenied},
		{name: "docs/classification.md#restatement restatement only for its from statuses", ctx: ar,
			o: resp(500, "额度不足", nil), want: wantTrip(500, ReasonServerError, KindServerError, Hint{})},
		{name: "docs/classification.md#restatement a 2xx is never restated", ctx: ar, o: resp(200, "额度不足", nil), want: wantSuccess(200)},
		{name: "docs/classification.md#provider-types built-in restatement is by type, not id", ctx: provider("agentrouter", "openai"),
			o: resp(403, "额度不足", nil), want: wantLadder(403, ReasonForbidden)},
		{name: "docs/classification.md operator restatement (case-insensitive markers)", ctx: acme, settings: restate(acmeRestate),
			o: resp(400, "quota temporarily gone, come back later", nil), want: acmeRestated},
		{name: "docs/classification.md operator restatement exclude marker veto", ctx: acme, settings: restate(acmeRestate),
			o: resp(400, "Quota temporarily gone: account PERMANENTLY closed", nil), want: wantRequestScoped(400)},
		{name: "operator restatement is keyed by provider id", ctx: provider("other", "openai"), settings: restate(acmeRestate),
			o: resp(400, "quota temporarily gone", nil), want: wantRequestScoped(400)},

		{name: "docs/classification.md#restatement: an operator rule on status 400 fires", ctx: acme,
			settings: opRules(ProviderErrorRule{Status: 400, Match: "capacity pool empty", Scope: ScopeConnection, Reason: ReasonModelCapacity, CooldownMs: 45_000}),
			o:        resp(400, `{"error":{"message":"Capacity Pool Empty"}}`, nil), want: connRule(400, ReasonModelCapacity, ConnFixed, 45_000, Hint{45_000, HintRule}, "operator:acme#0")},
		{name: "docs/classification.md operator rule beats the generic 400 context row", ctx: acme,
			settings: opRules(ProviderErrorRule{Status: 400, Match: "context", Scope: ScopeConnection, Reason: ReasonRateLimitExceeded}),
			o:        resp(400, "context length exceeded", nil), want: connRule(400, ReasonRateLimitExceeded, ConnBackoff, 0, Hint{}, "operator:acme#0")},
		{name: "docs/classification.md operator quota rule without cooldown cools to the reset", ctx: acme,
			settings: opRules(ProviderErrorRule{Status: 429, Match: "weekly", Scope: ScopeConnection, Reason: ReasonQuotaExhausted}),
			o:        resp(429, "weekly cap hit", HeaderMap{"retry-after": "60"}), want: connRule(429, ReasonQuotaExhausted, ConnQuota, 0, Hint{60_000, HintHeader}, "operator:acme#0")},
		{name: "docs/classification.md operator rule with scope model locks the model", ctx: acme,
			settings: opRules(ProviderErrorRule{Status: 429, Match: "model busy", Scope: ScopeModel, Reason: ReasonModelCapacity, CooldownMs: 600_000}),
			o:        resp(429, "Model busy", nil), want: modelRule(429, ReasonModelCapacity, 600_000, "operator:acme#0")},
		{name: "decision: operator rule with scope provider acts on the connection", ctx: acme,
			settings: opRules(ProviderErrorRule{Status: 503, Match: "maintenance", Scope: ScopeProvider, Reason: ReasonServerError, CooldownMs: 90_000}),
			o:        resp(503, "scheduled maintenance", nil), want: connRule(503, ReasonServerError, ConnFixed, 90_000, Hint{90_000, HintRule}, "operator:acme#0")},
		{name: "decision: operator rule reason request_scoped stops the request", ctx: acme,
			settings: opRules(ProviderErrorRule{Status: 429, Match: "prompt blocked", Scope: ScopeConnection, Reason: ReasonRequestScoped}),
			o:        resp(429, "prompt blocked", nil),
			want:     func() Verdict { v := wantRequestScoped(429); v.Rule = "operator:acme#0"; return v }()},
		{name: "operator rules match the status exactly", ctx: acme,
			settings: opRules(ProviderErrorRule{Status: 403, Match: "rate", Scope: ScopeConnection}),
			o:        resp(429, "rate limited", nil), want: wantRate(429, Hint{})},
		{name: "first matching operator rule wins", ctx: acme,
			settings: opRules(ProviderErrorRule{Status: 429, Match: "nomatch", Scope: ScopeConnection},
				ProviderErrorRule{Status: 429, Match: "slow down", Scope: ScopeConnection, Reason: ReasonRateLimitExceeded, CooldownMs: 2000}),
			o: resp(429, "Slow down", nil), want: connRule(429, ReasonRateLimitExceeded, ConnFixed, 2000, Hint{2000, HintRule}, "operator:acme#1")},
		{name: "docs/classification.md operator rules come before built-in rules", ctx: provider("acme", "agentrouter"),
			settings: opRules(ProviderErrorRule{Status: 403, Match: "无权访问模型", Scope: ScopeConnection, Reason: ReasonForbidden, CooldownMs: 1000}),
			o:        resp(403, "无权访问模型", nil), want: connRule(403, ReasonForbidden, ConnFixed, 1000, Hint{1000, HintRule}, "operator:acme#0")},

		{name: "docs/classification.md#provider-rules opencode endpoint unavailable locks the model 5 min", ctx: typ("opencode"),
			o: resp(400, "Endpoint is unavailable", nil), want: modelRule(400, ReasonModelCapacity, 5*minute, "opencode-endpoint-unavailable")},
		{name: "docs/classification.md#provider-rules opencode monthly quota with countdown", ctx: typ("opencode"),
			o: resp(429, "Monthly usage limit reached. Resets in 3 days.", nil),
			want: func() Verdict {
				v := connRule(429, ReasonQuotaExhausted, ConnFixed, 3*24*hour, Hint{3 * 24 * hour, HintBody}, "opencode-monthly-quota-resets-in")
				return v
			}()},
		{name: "docs/classification.md#provider-rules opencode quota headers", ctx: typ("opencode"),
			o: resp(429, "slow down", HeaderMap{"x-ratelimit-remaining-requests": "0"}), want: connRule(429, ReasonQuotaExhausted, ConnQuota, 0, Hint{}, "opencode-quota-exhausted-headers")},
		{name: "docs/classification.md#provider-rules opencode quota body", ctx: typ("opencode"),
			o: resp(429, `{"error":{"code":"account_quota_exceeded"}}`, nil), want: connRule(429, ReasonQuotaExhausted, ConnQuota, 0, Hint{}, "opencode-quota-exhausted-body")},
		{name: "docs/classification.md#provider-rules opencode 400 model unavailable locks 1h", ctx: typ("opencode"),
			o: resp(400, "Upstream request failed: model is unavailable.", nil), want: modelRule(400, ReasonModelCapacity, hour, "opencode-400-model-unavailable")},
		{name: "built-in rules are by type: opencode text on openai is generic", ctx: provider("opencode", "openai"),
			o: resp(400, "Endpoint is unavailable", nil), want: wantRequestScoped(400)},
	})
}

func TestRuleScopeNotHonoured(t *testing.T) {
	// docs/classification.md: a built-in rule's scope is informational outside
	// HONORS_RULE_LOCK_SCOPE; the rule then acts on the connection.
	x := &classification{c: NewClassifier(nil), ctx: ClassifyContext{Now: clfNow}, status: 429, t: text{s: "x"}}
	r := &providerRule{id: "r", reason: ReasonQuotaExhausted, scope: ScopeModel}
	v := x.ruleVerdict(r, 0, false)
	if v.Scope != ScopeConnection || v.Conn != ConnQuota || v.Lockout.Scope != ScopeNone || v.Next != NextConnection {
		t.Fatalf("unhonoured model scope: %+v", v)
	}
	v = x.ruleVerdict(r, 0, true)
	if v.Scope != ScopeModel || v.Conn != ConnRecordOnly || v.Lockout.Scope != ScopeModel || v.Lockout.Generic || v.Next != NextTarget {
		t.Fatalf("honoured model scope: %+v", v)
	}
}

func TestNewClassifierAcceptsAnySettings(t *testing.T) {
	s := &Settings{
		ProviderErrorRules: map[string][]ProviderErrorRule{
			"a": {{}, {Status: -1, Match: "", CooldownMs: -5}, {Status: 429, Scope: Scope(99), Reason: Reason(99), CooldownMs: 1 << 62}},
			"":  {{Status: 400}},
		},
		StatusRestatements: map[string][]RestatementRule{
			"a": {{}, {ID: "x", FromStatuses: []int{403}, ToStatus: 200, TextMarkers: []string{"m"}},
				{ID: "y", FromStatuses: []int{403}, ToStatus: 429, TextMarkers: []string{"", "  "}},
				{ID: "z", FromStatuses: []int{403}, ToStatus: 429, TextMarkers: []string{"M"}, DefaultRetryAfterMs: -1}},
		},
		BannedSignals: []string{"", "  ", "X"},
	}
	s.ConnectionCooldown.ConcurrencyCooldownMs = -3
	c := NewClassifier(s)
	ctx := ClassifyContext{Provider: "a", ProviderType: "openai", Now: clfNow}
	// A restatement to 200 is dropped; blank markers are dropped.
	if v := c.Classify(ctx, resp(403, "m", nil)); v.ClientStatus != 429 || !strings.HasPrefix(v.Rule, "z,") || v.ClientRetryAfterMs != 0 {
		t.Fatalf("restatement z: %+v", v)
	}
	// Blank banned signals never match everything.
	if v := c.Classify(ctx, resp(429, "slow", nil)); v.Reason == ReasonBanned {
		t.Fatalf("blank banned signal matched: %+v", v)
	}
	if v := c.Classify(ctx, resp(400, "too many concurrent requests", nil)); v.CooldownMs != 1000 {
		t.Fatalf("negative concurrency cooldown not defaulted: %+v", v)
	}
	// An operator rule with a huge cooldown is clamped.
	if v := c.Classify(ctx, resp(429, "anything", nil)); v.CooldownMs > maxHintMs || v.Rule == "" {
		t.Fatalf("huge rule cooldown: %+v", v)
	}
	// A nil classifier works with built-in behaviour.
	var nilC *Classifier
	if v := nilC.Classify(ctx, resp(429, "", nil)); v.Reason != ReasonRateLimitExceeded {
		t.Fatalf("nil classifier: %+v", v)
	}
}

func TestClassifierIsImmutable(t *testing.T) {
	s := DefaultSettings()
	s.BannedSignals = []string{"frozen"}
	s.ProviderErrorRules = map[string][]ProviderErrorRule{"p1": {{Status: 429, Match: "x", Scope: ScopeConnection, CooldownMs: 5}}}
	c := NewClassifier(&s)
	s.BannedSignals[0] = "other"
	s.ProviderErrorRules["p1"][0].CooldownMs = 99
	ctx := ClassifyContext{Provider: "p1", ProviderType: "openai", Now: clfNow}
	if v := c.Classify(ctx, resp(403, "frozen", nil)); v.Reason != ReasonBanned {
		t.Fatalf("banned signal changed under the classifier: %+v", v)
	}
	if v := c.Classify(ctx, resp(429, "x", nil)); v.CooldownMs != 5 {
		t.Fatalf("rule changed under the classifier: %+v", v)
	}
	// Extra banned signals never leak into the shared built-in list.
	if v := NewClassifier(nil).Classify(ctx, resp(403, "frozen", nil)); v.Reason == ReasonBanned {
		t.Fatalf("banned signals leaked between classifiers")
	}
}

func TestClassifyMessage(t *testing.T) {
	c := NewClassifier(nil)
	ctx := ClassifyContext{Provider: "p1", ProviderType: "openai", Now: clfNow}
	cases := []struct {
		name       string
		o          Outcome
		ctx        ClassifyContext
		want       string
		mustNotHas []string
	}{
		{name: "status and reason with the JSON message", o: resp(429, `{"error":{"message":"Rate limit exceeded","type":"requests"}}`, nil),
			want: "429 rate_limit_exceeded: Rate limit exceeded"},
		{name: "docs/store.md#request-log OpenAI key is redacted", o: resp(401, `{"error":{"message":"Incorrect API key provided: sk-proj-abcdefghij1234567890. You can find your API key at https://platform.openai.com/account/api-keys."}}`, nil),
			mustNotHas: []string{"sk-proj", "abcdefghij1234567890"}},
		{name: "bearer token is redacted", o: resp(401, "Authorization: Bearer abc.def.ghi failed", nil), want: "401 auth_error: Authorization: Bearer [redacted] failed"},
		{name: "long base64/hex token is redacted", o: resp(403, "token 0123456789abcdef0123456789abcdef rejected", nil), mustNotHas: []string{"0123456789abcdef"}},
		{name: "Google key is redacted", o: resp(400, "API key not valid: AIzaSyA1234567890abcdefghijklmnopqrstu", nil), mustNotHas: []string{"AIzaSy"}},
		{name: "a key cut at the snippet boundary is still redacted", o: resp(429, strings.Repeat("x ", 45)+"sk-abcdefghijklmnop", nil), mustNotHas: []string{"sk-abc"}},
		{name: "restatement and rule are named", ctx: ClassifyContext{Provider: "a", ProviderType: "agentrouter"}, o: resp(403, "额度不足", nil),
			want: "429 quota_exhausted restated from 403 by rule agentrouter-user-quota-exhausted: 额度不足"},
		{name: "request-scoped detail", o: resp(400, "prompt is too long", nil), want: "400 request_scoped (context_length): prompt is too long"},
		{name: "whitespace is collapsed", o: resp(500, "a\n\n\tb", nil), want: "500 server_error: a b"},
		{name: "transport", o: Outcome{Kind: OutcomeTransport, Transport: TransportReset}, want: "transport reset"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cx := ctx
			if tc.ctx.ProviderType != "" {
				cx = tc.ctx
			}
			got := c.Classify(cx, tc.o).Message
			if tc.want != "" && got != tc.want {
				t.Fatalf("message %q, want %q", got, tc.want)
			}
			for _, s := range tc.mustNotHas {
				if strings.Contains(got, s) {
					t.Fatalf("message %q leaks %q", got, s)
				}
			}
			if len(got) > 220 || !utf8.ValidString(got) {
				t.Fatalf("message too long or invalid: %q", got)
			}
		})
	}
	long := c.Classify(ctx, resp(500, strings.Repeat("é", 500), nil)).Message
	if snip := long[strings.Index(long, ": ")+2:]; len(snip) > maxSnippet || !utf8.ValidString(snip) {
		t.Fatalf("snippet %d bytes or invalid UTF-8", len(snip))
	}
}

func TestClassifySuccessDoesNotAllocate(t *testing.T) {
	c := NewClassifier(nil)
	ctx := ClassifyContext{Provider: "p1", ProviderType: "openai", Now: clfNow}
	o := resp(200, "", HeaderMap{"x": "y"})
	if n := testing.AllocsPerRun(100, func() { _ = c.Classify(ctx, o) }); n != 0 {
		t.Fatalf("success path allocates %.0f times", n)
	}
}

// docs/classification.md#provider-types: built-in rules are keyed by provider
// type, so a key that is not a provider type is a rule nothing can reach.
func TestBuiltinRulesAreReachable(t *testing.T) {
	for typ := range builtinRules {
		if !slices.Contains(ProviderTypes, typ) {
			t.Errorf("built-in rules for %q: not a provider type %v", typ, ProviderTypes)
		}
	}
	for typ := range builtinRestatements {
		if !slices.Contains(ProviderTypes, typ) {
			t.Errorf("built-in restatement for %q: not a provider type %v", typ, ProviderTypes)
		}
	}
	for typ := range honorsRuleScope {
		if !slices.Contains(ProviderTypes, typ) {
			t.Errorf("honorsRuleScope %q: not a provider type %v", typ, ProviderTypes)
		}
	}
}

// Relayable: only a 4xx or 5xx final status reaches a client as an error
// answer; redirects, 1xx and 600+ become the shell's 502.
func TestRelayableOnlyErrorStatuses(t *testing.T) {
	for status, want := range map[int]bool{101: false, 200: false, 301: false, 307: false, 399: false, 400: true, 429: true, 599: true, 600: false, 999: false} {
		if got := Relayable(status); got != want {
			t.Errorf("Relayable(%d) = %v, want %v", status, got, want)
		}
	}
}
