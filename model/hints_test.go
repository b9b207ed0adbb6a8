package model

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clfNow is the fixed "now" of the hint and classification tests.
var clfNow = TimeOf(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))

func TestParseRetryAfter(t *testing.T) {
	httpDate := func(d time.Duration, layout string) string { return clfNow.Std().Add(d).Format(layout) }
	cases := []struct {
		name, v string
		ms      int64
		ok      bool
	}{
		{"docs/classification.md#failure-catalogue plain seconds", "120", 120_000, true},
		{"zero seconds", "0", 0, true},
		{"surrounding spaces", "  30 ", 30_000, true},
		{"decision: decimal seconds are accepted", "1.5", 1500, true},
		{"decision: sub-ms remainder rounds up", "0.0001", 1, true},
		{"docs/classification.md#failure-catalogue Nm form", "5m", 300_000, true},
		{"docs/classification.md#failure-catalogue Ns form", "30s", 30_000, true},
		{"docs/classification.md#failure-catalogue Nh form", "2h", 7_200_000, true},
		{"compound duration", "1m30s", 90_000, true},
		{"milliseconds unit", "500ms", 500, true},
		{"HTTP-date IMF-fixdate", httpDate(90*time.Second, "Mon, 02 Jan 2006 15:04:05 GMT"), 90_000, true},
		{"HTTP-date RFC 850", httpDate(2*time.Minute, "Monday, 02-Jan-06 15:04:05 GMT"), 120_000, true},
		{"HTTP-date asctime", httpDate(time.Hour, "Mon Jan _2 15:04:05 2006"), 3_600_000, true},
		{"docs/classification.md#failure-catalogue past HTTP-date is 0", httpDate(-time.Hour, "Mon, 02 Jan 2006 15:04:05 GMT"), 0, true},
		{"30-day cap on huge seconds", "99999999999999999999999999", maxHintMs, true},
		{"30-day cap on a far HTTP-date", "Fri, 01 Jan 2100 00:00:00 GMT", maxHintMs, true},
		{"garbage", "soon", 0, false},
		{"negative", "-5", 0, false},
		{"NaN text", "NaN", 0, false},
		{"exponent is not a number here", "1e3", 0, false},
		{"trailing garbage", "12abc", 0, false},
		{"unknown unit", "3 fortnights", 0, false},
		{"empty", "", 0, false},
		{"bad HTTP-date", "Mon, 32 Foo 2025 99:99:99 GMT", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ms, ok := parseRetryAfter(tc.v, clfNow)
			if ms != tc.ms || ok != tc.ok {
				t.Fatalf("parseRetryAfter(%q) = %d, %v; want %d, %v", tc.v, ms, ok, tc.ms, tc.ok)
			}
		})
	}
}

func TestRetryHintHeaders(t *testing.T) {
	epochS := func(d time.Duration) string { return clfItoa(clfNow.Std().Add(d).Unix()) }
	epochMs := func(d time.Duration) string { return clfItoa(clfNow.Std().Add(d).UnixMilli()) }
	rfc3339 := func(d time.Duration) string { return clfNow.Std().Add(d).Format(time.RFC3339) }
	cases := []struct {
		name string
		h    HeaderMap
		want Hint
	}{
		{"docs/cooldowns.md retry-after-ms", HeaderMap{"retry-after-ms": "1500"}, Hint{1500, HintHeader}},
		{"retry-after-ms beats retry-after", HeaderMap{"retry-after-ms": "250", "retry-after": "20"}, Hint{250, HintHeader}},
		{"docs/cooldowns.md Retry-After seconds", HeaderMap{"retry-after": "20"}, Hint{20_000, HintHeader}},
		{"docs/cooldowns.md Retry-After HTTP-date", HeaderMap{"retry-after": clfNow.Std().Add(45 * time.Second).Format(http.TimeFormat)}, Hint{45_000, HintHeader}},
		{"past Retry-After falls through to the next header",
			HeaderMap{"retry-after": clfNow.Std().Add(-time.Hour).Format(http.TimeFormat), "x-ratelimit-reset": epochS(time.Minute)}, Hint{60_000, HintHeader}},
		{"garbage Retry-After falls through", HeaderMap{"retry-after": "later", "x-ratelimit-reset-requests": "2s"}, Hint{2000, HintHeader}},
		{"docs/cooldowns.md#hints x-ratelimit-reset epoch seconds", HeaderMap{"x-ratelimit-reset": epochS(time.Minute)}, Hint{60_000, HintHeader}},
		{"docs/cooldowns.md#hints x-ratelimit-reset above 1e10 is epoch ms", HeaderMap{"x-ratelimit-reset": epochMs(1500 * time.Millisecond)}, Hint{1500, HintHeader}},
		{"x-ratelimit-reset relative duration", HeaderMap{"x-ratelimit-reset": "1m30s"}, Hint{90_000, HintHeader}},
		{"decision: small bare x-ratelimit-reset is relative seconds", HeaderMap{"x-ratelimit-reset": "45"}, Hint{45_000, HintHeader}},
		{"past epoch is no hint", HeaderMap{"x-ratelimit-reset": epochS(-time.Minute)}, Hint{}},
		{"OpenAI x-ratelimit-reset-requests", HeaderMap{"x-ratelimit-reset-requests": "6m0s"}, Hint{360_000, HintHeader}},
		{"OpenAI x-ratelimit-reset-tokens ms", HeaderMap{"x-ratelimit-reset-tokens": "20ms"}, Hint{20, HintHeader}},
		{"requests reset beats tokens reset", HeaderMap{"x-ratelimit-reset-tokens": "9s", "x-ratelimit-reset-requests": "3s"}, Hint{3000, HintHeader}},
		{"docs/cooldowns.md anthropic unified reset RFC 3339", HeaderMap{"anthropic-ratelimit-unified-reset": rfc3339(2 * time.Hour)}, Hint{7_200_000, HintHeader}},
		{"anthropic unified reset epoch seconds", HeaderMap{"anthropic-ratelimit-unified-reset": epochS(10 * time.Minute)}, Hint{600_000, HintHeader}},
		{"anthropic requests reset", HeaderMap{"anthropic-ratelimit-requests-reset": rfc3339(30 * time.Second)}, Hint{30_000, HintHeader}},
		{"anthropic tokens reset", HeaderMap{"anthropic-ratelimit-tokens-reset": rfc3339(40 * time.Second)}, Hint{40_000, HintHeader}},
		{"anthropic input tokens reset", HeaderMap{"anthropic-ratelimit-input-tokens-reset": rfc3339(50 * time.Second)}, Hint{50_000, HintHeader}},
		{"anthropic output tokens reset", HeaderMap{"anthropic-ratelimit-output-tokens-reset": "2025-06-01T12:01:00.250+00:00"}, Hint{60_250, HintHeader}},
		{"RFC 3339 offset is honoured (14:00+02:00 is now)", HeaderMap{"anthropic-ratelimit-unified-reset": "2025-06-01T14:00:00+02:00"}, Hint{}},
		{"unified beats requests", HeaderMap{"anthropic-ratelimit-unified-reset": rfc3339(time.Hour), "anthropic-ratelimit-requests-reset": rfc3339(time.Second)}, Hint{3_600_000, HintHeader}},
		{"30-day cap on headers", HeaderMap{"retry-after": "999999999"}, Hint{maxHintMs, HintHeader}},
		{"30-day cap on epoch", HeaderMap{"x-ratelimit-reset": epochS(365 * 24 * time.Hour)}, Hint{maxHintMs, HintHeader}},
		{"no headers", HeaderMap{}, Hint{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryHint(tc.h, "", clfNow); got != tc.want {
				t.Fatalf("retryHint(%v) = %+v; want %+v", tc.h, got, tc.want)
			}
		})
	}
}

func TestRetryHintHTTPHeader(t *testing.T) {
	h := http.Header{}
	h.Set("x-ratelimit-reset-requests", "1m")
	if got := retryHint(h, "", clfNow); got != (Hint{60_000, HintHeader}) {
		t.Fatalf("http.Header: got %+v", got)
	}
	if got := retryHint(nil, "", clfNow); got != (Hint{}) {
		t.Fatalf("nil headers: got %+v", got)
	}
	var nilMap HeaderMap
	if got := retryHint(nilMap, "please retry in 2s", clfNow); got != (Hint{2000, HintBody}) {
		t.Fatalf("nil HeaderMap: got %+v", got)
	}
}

const clfGeminiDetails = `{
  "error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
          {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
            "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"},
            "quotaValue": "15"
          }
        ]
      },
      {
        "@type": "type.googleapis.com/google.rpc.Help",
        "links": [{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]
      },
      {
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": "%s"
      }
    ]
  }
}`

func clfGeminiBody(delay string) string { return strings.Replace(clfGeminiDetails, "%s", delay, 1) }

func TestRetryHintBody(t *testing.T) {
	cases := []struct {
		name string
		h    HeaderMap
		body string
		want Hint
	}{
		{"docs/cooldowns.md Gemini RetryInfo in error.details", nil, clfGeminiBody("30s"), Hint{30_000, HintRetryInfo}},
		{"Gemini RetryInfo in root details",
			nil, `{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"12s"}]}`, Hint{12_000, HintRetryInfo}},
		{"RetryInfo with retryDelay before @type",
			nil, `{"error":{"details":[{"retryDelay":"7s","@type":"type.googleapis.com/google.rpc.RetryInfo"}]}}`, Hint{7000, HintRetryInfo}},
		{"RetryInfo decimal seconds", nil, clfGeminiBody("1.5s"), Hint{1500, HintRetryInfo}},
		{"RetryInfo daily quota 86399s", nil, clfGeminiBody("86399s"), Hint{86_399_000, HintRetryInfo}},
		{"RetryInfo ms", nil, clfGeminiBody("500ms"), Hint{500, HintRetryInfo}},
		{"RetryInfo minutes", nil, clfGeminiBody("2m"), Hint{120_000, HintRetryInfo}},
		{"RetryInfo hours", nil, clfGeminiBody("1h"), Hint{3_600_000, HintRetryInfo}},
		{"RetryInfo bare seconds", nil, clfGeminiBody("30"), Hint{30_000, HintRetryInfo}},
		{"RetryInfo as a proto Duration object",
			nil, `{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":{"seconds":"30","nanos":500000000}}]}`, Hint{30_500, HintRetryInfo}},
		{"RetryInfo in a JSON array root (streaming API)",
			nil, `[{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"3s"}]}}]`, Hint{3000, HintRetryInfo}},
		{"RetryInfo in a body cut mid-way", nil, `{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"9s"`, Hint{9000, HintRetryInfo}},
		{"RetryInfo 30-day cap", nil, clfGeminiBody("9999999999s"), Hint{maxHintMs, HintRetryInfo}},
		{"untyped retryDelay is not RetryInfo (falls to prose: none)", nil, `{"retryDelay":"30s"}`, Hint{}},
		{"headers beat RetryInfo", HeaderMap{"retry-after": "5"}, clfGeminiBody("30s"), Hint{5000, HintHeader}},
		{"RetryInfo beats prose", nil, clfGeminiBody("30s") + " please retry in 2s", Hint{30_000, HintRetryInfo}},

		{"docs/cooldowns.md#hints please retry in N.Ns (rounded up)", nil, "Please retry in 29.508219391s.", Hint{29_509, HintBody}},
		{"docs/cooldowns.md retry after Ns", nil, "Rate limited: retry after 20s", Hint{20_000, HintBody}},
		{"retry after N seconds", nil, "Please retry after 20 seconds.", Hint{20_000, HintBody}},
		{"retry after bare N", nil, "please retry after 15.", Hint{15_000, HintBody}},
		{"OpenAI try again in XmYs", nil, "Rate limit reached. Please try again in 7m12s. Visit https://platform.openai.com/account/rate-limits", Hint{432_000, HintBody}},
		{"OpenAI try again in N.Ns", nil, "Please try again in 1.054s.", Hint{1054, HintBody}},
		{"OpenAI try again in Nms", nil, "Please try again in 6ms.", Hint{6, HintBody}},
		{"docs/cooldowns.md#hints try again at ISO", nil, "Quota hit; try again at 2025-06-01T13:00:00Z.", Hint{3_600_000, HintBody}},
		{"wait until ISO with offset", nil, "wait until 2025-06-01T14:30:00+02:00", Hint{1_800_000, HintBody}},
		{"resets at ISO with space and UTC", nil, "Your limit resets at 2025-06-01 14:00:00 UTC", Hint{7_200_000, HintBody}},
		{"reset at ISO", nil, "reset at 2025-06-01T12:10:00Z", Hint{600_000, HintBody}},
		{"available at ISO with fraction", nil, "capacity available at 2025-06-01T12:00:30.500Z", Hint{30_500, HintBody}},
		{"retry after ISO", nil, "retry after 2025-06-01T12:01:00Z", Hint{60_000, HintBody}},
		{"ISO without zone is UTC", nil, "try again at 2025-06-01T12:05:00", Hint{300_000, HintBody}},
		{"docs/cooldowns.md#hints reset after XhYmZs", nil, "Resource has been exhausted; quota will reset after 1h2m3s", Hint{3_723_000, HintBody}},
		{"will reset after", nil, "Your usage will reset after 30m.", Hint{1_800_000, HintBody}},
		{"resets after", nil, "limit resets after 45s", Hint{45_000, HintBody}},
		{"docs/cooldowns.md#hints resets in XhYmZs", nil, "Usage limit reached. Limit resets in 2h30m.", Hint{9_000_000, HintBody}},
		{"docs/cooldowns.md#hints resets in N days", nil, "Monthly usage limit reached, resets in 2 days", Hint{172_800_000, HintBody}},
		{"reset in N hours", nil, "quota reset in 3 hours", Hint{10_800_000, HintBody}},
		{"resets in N minutes", nil, "resets in 5 minutes", Hint{300_000, HintBody}},
		{"resets in N seconds", nil, "resets in 45 seconds", Hint{45_000, HintBody}},
		{"resets in 1 hour and 30 minutes", nil, "resets in 1 hour and 30 minutes", Hint{5_400_000, HintBody}},
		{"uppercase prose", nil, "PLEASE RETRY IN 4S", Hint{4000, HintBody}},
		{"past ISO is no hint", nil, "try again at 2025-06-01T11:00:00Z", Hint{}},
		{"a past date after retry after is not N seconds", nil, "retry after 2024-01-01", Hint{}},
		{"a clock time is not seconds", nil, "retry after 12:30", Hint{}},
		{"vague prose is no hint", nil, "try again in a few minutes", Hint{}},
		{"unknown unit is no hint", nil, "resets in 3 months", Hint{}},
		{"30-day cap on prose", nil, "resets in 400 days", Hint{maxHintMs, HintBody}},
		{"later occurrence is used when the first does not parse", nil, "retry in a moment; retry in 3s", Hint{3000, HintBody}},
		{"only the first MaxBodyPrefix bytes are read", nil, strings.Repeat(" ", MaxBodyPrefix) + "retry after 20s", Hint{}},
		{"invalid UTF-8 around the hint", nil, "\xff\xfe retry after 20s \xc3", Hint{20_000, HintBody}},
		{"no hint", nil, `{"error":{"message":"Rate limit exceeded"}}`, Hint{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryHint(tc.h, tc.body, clfNow); got != tc.want {
				t.Fatalf("retryHint(%q) = %+v; want %+v", tc.body, got, tc.want)
			}
		})
	}
}

func TestRetryHintExtremes(t *testing.T) {
	// Never panic and never leave [0, maxHintMs], whatever now is.
	for _, now := range []Time{0, -1, 1 << 62, -(1 << 62), 1<<63 - 1, -1 << 63} {
		for _, h := range []HeaderMap{
			{"retry-after": "Fri, 01 Jan 2100 00:00:00 GMT"},
			{"x-ratelimit-reset": "99999999999999999999"},
			{"anthropic-ratelimit-unified-reset": "9999-12-31T23:59:59Z"},
			{"x-ratelimit-reset": "0001-01-01T00:00:00-23:59"},
		} {
			got := retryHint(h, "try again at 9999-12-31T23:59:59Z", now)
			if got.Ms < 0 || got.Ms > maxHintMs {
				t.Fatalf("now=%d %v: hint %d out of range", now, h, got.Ms)
			}
		}
	}
}

func clfItoa(n int64) string { return strconv.FormatInt(n, 10) }

// canonOnly is a CanonicalGetter whose Get must not be used: it answers
// only lookups by canonical name.
type canonOnly struct {
	t *testing.T
	h http.Header
}

func (c canonOnly) Get(name string) string {
	c.t.Fatalf("Get(%q) called on a CanonicalGetter for a fixed name", name)
	return ""
}

func (c canonOnly) GetCanonical(canon string) string {
	if v := c.h[canon]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// The fixed names the model reads on every answer (retry hints, the
// learned pause) go to a CanonicalGetter by canonical name, and give what
// http.Header's Get gives.
func TestFixedHeadersUseCanonicalGetter(t *testing.T) {
	h := http.Header{}
	h.Set("x-ratelimit-reset-requests", "1m")
	h.Set("x-ratelimit-remaining-requests", "0")
	c := canonOnly{t: t, h: h}
	if got, want := retryHint(c, "", clfNow), retryHint(h, "", clfNow); got != want || got != (Hint{60_000, HintHeader}) {
		t.Fatalf("retry hint: CanonicalGetter %+v, http.Header %+v", got, want)
	}
	if got, want := learnedPause(c, clfNow), learnedPause(h, clfNow); got != want || got != 60_000 {
		t.Fatalf("learned pause: CanonicalGetter %d, http.Header %d", got, want)
	}
}
