package model

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Fuzz targets for every parser of untrusted upstream input (docs/testing.md#kinds-of-tests:
// fuzz targets for every parser of upstream text). Seed corpora
// live in testdata/fuzz/<FuzzName>/ besides the f.Add seeds below.

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "1.5", "5m", "1m30s", "500ms", "Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "-1", "NaN", "1e309", "", "999999999999999999999"} {
		f.Add(s, int64(clfNow))
	}
	f.Fuzz(func(t *testing.T, v string, now int64) {
		ms, ok := parseRetryAfter(v, Time(now))
		if ms < 0 || ms > maxHintMs {
			t.Fatalf("parseRetryAfter(%q) = %d out of [0, %d]", v, ms, maxHintMs)
		}
		if !ok && ms != 0 {
			t.Fatalf("parseRetryAfter(%q) = %d with !ok", v, ms)
		}
		ms2, ok2 := parseRetryAfter(v, Time(now))
		if ms2 != ms || ok2 != ok {
			t.Fatalf("not deterministic")
		}
	})
}

func FuzzRetryHint(f *testing.F) {
	f.Add("retry-after", "20", "", int64(clfNow))
	f.Add("x-ratelimit-reset", "1748779260", "", int64(clfNow))
	f.Add("anthropic-ratelimit-unified-reset", "2025-06-01T13:00:00Z", "", int64(clfNow))
	f.Add("x-ratelimit-reset-requests", "1m30s", "please retry in 2s", int64(clfNow))
	f.Add("", "", clfGeminiBody("30s"), int64(clfNow))
	f.Add("", "", `{"details":[{"@type":"google.rpc.RetryInfo","retryDelay":{"seconds":"9","nanos":1}}]}`, int64(0))
	f.Add("", "", "try again at 2025-06-01T12:00:30.5+01:30 or resets in 1 hour and 2 minutes", int64(clfNow))
	f.Fuzz(func(t *testing.T, name, value, body string, now int64) {
		h := HeaderMap{strings.ToLower(name): value}
		got := retryHint(h, body, Time(now))
		if got.Ms < 0 || got.Ms > maxHintMs {
			t.Fatalf("hint %d out of [0, %d]", got.Ms, maxHintMs)
		}
		if (got.Ms == 0) != (got.Source == HintNone) {
			t.Fatalf("hint %+v: source and value disagree", got)
		}
		if got.Source != HintNone && got.Source != HintHeader && got.Source != HintRetryInfo && got.Source != HintBody {
			t.Fatalf("unexpected source %v", got.Source)
		}
	})
}

func FuzzClassify(f *testing.F) {
	f.Add(429, "Too many concurrent requests", "20", "glm", false, uint8(0), uint8(0))
	f.Add(403, "用户额度不足", "", "agentrouter", false, uint8(0), uint8(0))
	f.Add(429, clfGeminiBody("86399s"), "", "gemini", true, uint8(0), uint8(0))
	f.Add(400, "This model's maximum context length is 8192 tokens", "", "openai", false, uint8(0), uint8(0))
	f.Add(503, "overloaded", "Wed, 21 Oct 2015 07:28:00 GMT", "anthropic", true, uint8(0), uint8(0))
	f.Add(0, "", "", "local", false, uint8(1), uint8(4))
	f.Add(200, "account has been deactivated", "", "openai", false, uint8(0), uint8(0))
	s := DefaultSettings()
	s.BannedSignals = []string{"frozen"}
	s.ProviderErrorRules = map[string][]ProviderErrorRule{"p": {{Status: 400, Match: "pool", Scope: ScopeModel, CooldownMs: 1000}}}
	s.StatusRestatements = map[string][]RestatementRule{"p": {{ID: "r", FromStatuses: []int{400, 403}, ToStatus: 429, TextMarkers: []string{"again"}}}}
	c := NewClassifier(&s)
	f.Fuzz(func(t *testing.T, status int, body, hval, typ string, perModel bool, kind, transport uint8) {
		ctx := ClassifyContext{Provider: "p", ProviderType: typ, Model: "m", PerModelQuota: perModel, Now: clfNow}
		o := Outcome{Kind: OutcomeKind(kind % 8), Status: status, Transport: Transport(transport % 8), Body: body,
			Headers: HeaderMap{"retry-after": hval, "x-ratelimit-reset": hval}}
		v := c.Classify(ctx, o)
		if o.Kind == OutcomeResponse && status >= 200 && status <= 299 {
			if v != wantSuccess(status) {
				t.Fatalf("2xx is not plain success: %+v", v)
			}
			return
		}
		if v.Breaker == BreakerSuccess || v.Conn == ConnClear || v.Next == NextDone {
			t.Fatalf("a failure classified as success: %+v", v)
		}
		for _, ms := range []int64{v.Hint.Ms, v.CooldownMs, v.ClientRetryAfterMs, v.Lockout.CooldownMs} {
			if ms < 0 || ms > maxHintMs {
				t.Fatalf("duration %d out of [0, %d]: %+v", ms, maxHintMs, v)
			}
		}
		if v.Breaker == BreakerFailure && v.Kind == KindNone {
			t.Fatalf("breaker failure without a kind: %+v", v)
		}
		if (v.Conn == ConnTerminal) != v.Terminal.Terminal() {
			t.Fatalf("terminal action and status disagree: %+v", v)
		}
		if v.Breaker == BreakerFailure && o.Kind == OutcomeResponse {
			switch v.ClientStatus {
			case 408, 500, 502, 503, 504:
			default:
				t.Fatalf("status %d trips the breaker", v.ClientStatus)
			}
		}
		if !utf8.ValidString(v.Message) || len(v.Message) > 400 {
			t.Fatalf("bad message %q", v.Message)
		}
		if again := c.Classify(ctx, o); again != v {
			t.Fatalf("not deterministic")
		}
	})
}
