package model

import (
	"net/http"
	"strings"
	"testing"
)

// Targets (checked here, never by timed assertions): a failure with a ~1 KB
// body classifies in ≤ 20 µs; the success path in tens of ns with 0 allocs.

var benchVerdict Verdict

// openAI429Body is a real-shaped ~1 KB OpenAI rate-limit body.
var openAI429Body = `{
    "error": {
        "message": "Rate limit reached for gpt-4o in organization org-AbCdEfGhIjKlMnOp on tokens per min (TPM): Limit 30000, Used 29533, Requested 1022. Please try again in 1.11s. Visit https://platform.openai.com/account/rate-limits to learn more. You can increase your rate limit by adding a payment method to your account at https://platform.openai.com/account/billing.",
        "type": "tokens",
        "param": null,
        "code": "rate_limit_exceeded"
    }
}` + strings.Repeat(" ", 1024-560)

func benchClassify(b *testing.B, ctx ClassifyContext, o Outcome) {
	c := NewClassifier(nil)
	ctx.Now = clfNow
	b.ReportAllocs()
	b.SetBytes(int64(len(o.Body)))
	b.ResetTimer()
	for range b.N {
		benchVerdict = c.Classify(ctx, o)
	}
}

func BenchmarkClassifySuccess(b *testing.B) {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	benchClassify(b, ClassifyContext{Provider: "p", ProviderType: "openai"}, Outcome{Kind: OutcomeResponse, Status: 200, Headers: h})
}

func BenchmarkClassify429WithBody(b *testing.B) {
	h := http.Header{}
	h.Set("X-Ratelimit-Reset-Requests", "120ms")
	h.Set("X-Ratelimit-Reset-Tokens", "1.11s")
	h.Set("Content-Type", "application/json")
	benchClassify(b, ClassifyContext{Provider: "p", ProviderType: "openai"}, Outcome{Kind: OutcomeResponse, Status: 429, Headers: h, Body: openAI429Body})
}

func BenchmarkClassify429BodyHintOnly(b *testing.B) {
	benchClassify(b, ClassifyContext{Provider: "p", ProviderType: "openai"}, Outcome{Kind: OutcomeResponse, Status: 429, Body: openAI429Body})
}

func BenchmarkClassifyGemini429RetryInfo(b *testing.B) {
	benchClassify(b, ClassifyContext{Provider: "g", ProviderType: "gemini", PerModelQuota: true}, Outcome{Kind: OutcomeResponse, Status: 429, Body: clfGeminiBody("29s")})
}

func BenchmarkClassify400ContextLength(b *testing.B) {
	body := `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}` + strings.Repeat(" ", 800)
	benchClassify(b, ClassifyContext{Provider: "p", ProviderType: "openai"}, Outcome{Kind: OutcomeResponse, Status: 400, Body: body})
}

func BenchmarkClassify400Unrecognised(b *testing.B) {
	body := strings.Repeat("lorem ipsum dolor sit amet ", 38)
	benchClassify(b, ClassifyContext{Provider: "p", ProviderType: "openai"}, Outcome{Kind: OutcomeResponse, Status: 400, Body: body})
}

func BenchmarkClassify403Forbidden(b *testing.B) {
	body := `{"error":{"type":"permission_error","message":"Request not allowed"}}` + strings.Repeat(" ", 950)
	benchClassify(b, ClassifyContext{Provider: "p", ProviderType: "anthropic", Profile: ProfileOAuth}, Outcome{Kind: OutcomeResponse, Status: 403, Body: body})
}

func BenchmarkClassify503(b *testing.B) {
	benchClassify(b, ClassifyContext{Provider: "p", ProviderType: "openai"}, Outcome{Kind: OutcomeResponse, Status: 503, Body: "upstream connect error or disconnect/reset before headers"})
}

func BenchmarkClassifyRestatedAgentrouter(b *testing.B) {
	body := `{"error":{"message":"用户额度不足, 剩余额度: $0.000000","type":"new_api_error","code":"insufficient_user_quota"}}`
	benchClassify(b, ClassifyContext{Provider: "ar", ProviderType: "agentrouter"}, Outcome{Kind: OutcomeResponse, Status: 403, Body: body})
}

func BenchmarkClassifyTransport(b *testing.B) {
	benchClassify(b, ClassifyContext{Provider: "p", ProviderType: "openai"}, Outcome{Kind: OutcomeTransport, Transport: TransportReset})
}

func BenchmarkRetryHintHeaders(b *testing.B) {
	h := http.Header{}
	h.Set("Anthropic-Ratelimit-Unified-Reset", "2025-06-01T13:00:00Z")
	b.ReportAllocs()
	for range b.N {
		benchVerdict.Hint = retryHint(h, "", clfNow)
	}
}

func BenchmarkParseRetryAfter(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		benchVerdict.Hint.Ms, _ = parseRetryAfter("Sun, 01 Jun 2025 12:00:30 GMT", clfNow)
	}
}
