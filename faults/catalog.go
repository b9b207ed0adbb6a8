package faults

import (
	"slices"
	"time"
)

// Entry is one named behaviour of the catalog.
type Entry struct {
	Name     string
	Doc      string
	Response Response
}

// catalog is every named behaviour; a scenario item says `use: NAME` and
// may override any field. Bodies are the real wording of the upstreams
// that send them, so that classification sees what it sees in production.
var catalog = []Entry{
	{"ok", "200 with a chat completion (JSON, or an SSE stream with [DONE])", Response{Status: 200}},

	// Rate limits and quota.
	{"rate-limit-retry-after", "429 with Retry-After: 20 (seconds)", Response{Status: 429,
		Headers: map[string]string{"Retry-After": "20"}}},
	{"rate-limit", "429 without any retry hint", Response{Status: 429}},
	{"rate-limit-reset-header", "429 with x-ratelimit-reset-requests: 12s", Response{Status: 429,
		Headers: map[string]string{"x-ratelimit-reset-requests": "12s"}}},
	{"rate-limit-body-hint", `429 whose body says "Please retry after 20s"`, Response{Status: 429,
		Body: `{"error":{"message":"Rate limit reached. Please retry after 20s.","type":"rate_limit_error"}}`}},
	{"quota-exceeded", "429 quota exhausted (no reset stated)", Response{Status: 429,
		Body: `{"error":{"message":"You have exceeded your monthly quota limit. Quota exhausted.","type":"rate_limit_error","code":"quota_exhausted"}}`}},
	{"daily-quota", "429 daily quota: try again tomorrow", Response{Status: 429,
		Body: `{"error":{"message":"You have used up today's quota. Please try again tomorrow.","type":"rate_limit_error","code":"daily_quota"}}`}},
	{"credits-exhausted", "402 credit balance too low (terminal credits_exhausted)", Response{Status: 402,
		Body: `{"error":{"message":"Your credit balance is too low to access this API.","type":"billing_error","code":"insufficient_credits"}}`}},
	{"payment-required", "402 with the default body", Response{Status: 402}},
	{"gemini-retry-info", "429 RESOURCE_EXHAUSTED with google.rpc.RetryInfo retryDelay 30s", Response{Status: 429,
		Body: `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"30s"}]}}`}},
	{"gemini-daily-quota", "429 per-day quota with a long RetryInfo delay", Response{Status: 429,
		Body: `{"error":{"code":429,"message":"Quota exceeded for metric: generate_content_free_tier_requests, limit: 250, per day.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"86399s"}]}}`}},
	{"concurrency-limit", "429 too many concurrent requests (account busy, not exhausted)", Response{Status: 429,
		Body: `{"error":{"message":"Too many concurrent requests for this account. Please reduce concurrency.","type":"rate_limit_error","code":"concurrency_limit"}}`}},
	{"glm-concurrency", "GLM 429 并发数过高 (code 1302)", Response{Status: 429,
		Body: `{"error":{"code":"1302","message":"您当前使用该API的并发数过高，请降低并发，或联系客服增加限额。"}}`}},
	{"misstated-quota-403", "403 with the Chinese quota body 用户额度不足 (restated to 429 for agentrouter)", Response{Status: 403,
		Body: `{"error":{"message":"用户额度不足, 剩余额度: ＄0.000000","type":"new_api_error"}}`}},
	{"misstated-quota-400", "400 with the Chinese quota body 用户额度不足", Response{Status: 400,
		Body: `{"error":{"message":"用户额度不足, 剩余额度: ＄0.000000","type":"new_api_error"}}`}},

	// Accounts.
	{"expired-401", "401 token expired (the expired ladder: 5, 10, 20 min cooldowns, the 4th is terminal)", Response{Status: 401,
		Body: `{"error":{"message":"Your authentication token has expired. Please log in again.","type":"authentication_error","code":"token_expired"}}`}},
	{"banned-403", "403 account banned (terminal banned at once)", Response{Status: 403,
		Body: `{"error":{"message":"Your account has been banned for violating the usage policy.","type":"permission_error"}}`}},
	{"request-rejected-403", `403 "Request not allowed" (request-rejected ladder)`, Response{Status: 403,
		Body: `{"error":{"message":"Request not allowed","type":"permission_error"}}`}},
	{"forbidden-403", "403 with no recognisable text (request-rejected ladder)", Response{Status: 403}},
	{"model-not-found-404", "404 the model does not exist", Response{Status: 404,
		Body: `{"error":{"message":"The model does not exist or you do not have access to it.","type":"invalid_request_error","code":"model_not_found"}}`}},

	// Request-scoped.
	{"context-length", "400 context length exceeded (request-scoped: not retried, no cooldown)", Response{Status: 400,
		Body: `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`}},
	{"content-filter", "400 content filter (request-scoped)", Response{Status: 400,
		Body: `{"error":{"message":"The response was filtered due to the prompt triggering content management policy.","type":"invalid_request_error","code":"content_filter"}}`}},

	// Provider-level.
	{"timeout-408", "408 request timeout", Response{Status: 408}},
	{"server-error-500", "500 internal server error", Response{Status: 500}},
	{"bad-gateway-502", "502 bad gateway", Response{Status: 502}},
	{"unavailable-503", "503 service unavailable", Response{Status: 503}},
	{"unavailable-503-retry-after", "503 with Retry-After: 10", Response{Status: 503,
		Headers: map[string]string{"Retry-After": "10"}}},
	{"gateway-timeout-504", "504 gateway timeout", Response{Status: 504}},
	{"overloaded-529", "529 overloaded (model capacity; breaker-neutral)", Response{Status: 529}},

	// Transport and stream.
	{"reset", "connection reset before any header", Response{Fault: Reset}},
	{"no-response", "no response at all until the client gives up", Response{Fault: Timeout}},
	{"slow-first-token", "the first byte comes after 3 minutes", Response{Latency: 3 * time.Minute}},
	{"stream-cut", "the stream is cut after 3 chunks (mid-answer)", Response{Fault: Cut, Stream: Stream{StallAfter: 3}}},
	{"stall", "the stream goes silent after 2 chunks and never resumes", Response{Fault: Stall, Stream: Stream{StallAfter: 2}}},
	{"slow-stream", "content at 2 bytes per second", Response{Fault: SlowStream, Stream: Stream{BytesPerSecond: 2}}},
	{"malformed-chunk", "the 3rd chunk is not valid JSON", Response{Fault: MalformedChunk, Stream: Stream{StallAfter: 2}}},
	{"no-done", "the stream completes but never sends data: [DONE]", Response{Fault: NoDone}},
	{"prefill-refusal", "400 to a request whose last message is an assistant message (a prefill); others are answered", Response{Fault: PrefillRefusal}},
	{"prefill-restart", "a prefill is ignored: the answer starts over instead of continuing", Response{Fault: PrefillRestart}},
}

// Catalog returns every named behaviour, in a stable order.
func Catalog() []Entry {
	out := make([]Entry, len(catalog))
	for i, e := range catalog {
		out[i] = Entry{Name: e.Name, Doc: e.Doc, Response: e.Response.Clone()}
	}
	return out
}

// Preset returns a copy of the named catalog behaviour.
func Preset(name string) (Response, bool) {
	for _, e := range catalog {
		if e.Name == name {
			r := e.Response.Clone()
			r.Use = name
			return r, true
		}
	}
	return Response{}, false
}

// PresetNames lists the catalog names, sorted.
func PresetNames() []string {
	out := make([]string, len(catalog))
	for i, e := range catalog {
		out[i] = e.Name
	}
	slices.Sort(out)
	return out
}
