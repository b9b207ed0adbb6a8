package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/breakwater-gw/breakwater/faults"
)

// End-to-end runs of the failover catalogue (docs/catalogue.md): two
// OpenAI-compatible apikey providers on one fault upstream, a priority
// combo primary → fallback, a streaming openai-go client, the gateway's
// default settings apart from the catalogue's timeouts. Cases marked
// "scaled" shrink the catalogue's durations (timeouts, outage length,
// cooldowns) by the factor they name, keeping the shape; the others run at
// the catalogue's full timings.

const catalogueConfig = `
server: {managementKey: "${ADMIN}"}
providers:
  - id: primary
    profile: apikey
    baseURL: {{F}}/primary/v1
    models: [primary-model]
    connections: [{id: k, apiKey: pk}]
  - id: fallback
    profile: apikey
    baseURL: {{F}}/fallback/v1
    models: [fallback-model]
    connections: [{id: k, apiKey: fk}]
combos:
  - {id: catalogue, strategy: priority, targets: [primary/primary-model, fallback/fallback-model]}
resilience:
  upstreamTimeouts: {responseHeaderMs: {{HDR}}, firstContentMs: {{FIRST}}}
`

// catalogueGW starts the catalogue's gateway; extra is appended under
// resilience: (two-space indented keys). hdr and first are the
// responseHeaderMs and firstContentMs (the catalogue's: 10 s each).
func catalogueGW(t *testing.T, opts faults.Options, hdr, first, extra string, rules ...faults.Rule) (*gw, *faults.Server) {
	t.Helper()
	if opts.MaxHold == 0 {
		opts.MaxHold = 30 * time.Second
	}
	fs := faults.NewServer(rules, opts)
	ts := httptest.NewServer(fs)
	t.Cleanup(ts.Close)
	cfg := strings.NewReplacer("{{F}}", ts.URL, "{{HDR}}", hdr, "{{FIRST}}", first).Replace(catalogueConfig) + extra
	return newGW(t, newFakeUp(t), cfg, "ADMIN=s3cret"), fs
}

// catalogueAnswer is what the streaming client saw.
type catalogueAnswer struct {
	text, finish, model string
	usage               int64
	err                 error
	provider            string // X-Breakwater-Provider
	attempts            int    // X-Breakwater-Attempts
	took                time.Duration
}

func catalogueStream(t *testing.T, g *gw) catalogueAnswer {
	t.Helper()
	var hr *http.Response
	client := openai.NewClient(option.WithBaseURL(g.srv.URL+"/v1"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0), option.WithResponseInto(&hr))
	params := openai.ChatCompletionNewParams{Model: "catalogue",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	st := client.Chat.Completions.NewStreaming(ctx, params)
	var a catalogueAnswer
	var text strings.Builder
	for st.Next() {
		c := st.Current()
		if c.Model != "" {
			a.model = c.Model
		}
		if c.Usage.TotalTokens > 0 {
			a.usage = c.Usage.TotalTokens
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				a.finish = ch.FinishReason
			}
		}
	}
	a.took = time.Since(start)
	a.err = st.Err()
	a.text = text.String()
	if hr != nil {
		a.provider = hr.Header.Get("X-Breakwater-Provider")
		a.attempts, _ = strconv.Atoi(hr.Header.Get("X-Breakwater-Attempts"))
	}
	return a
}

// servedBy checks a complete answer from provider after attempts attempts.
func (a catalogueAnswer) servedBy(t *testing.T, provider string, attempts int) {
	t.Helper()
	if a.err != nil || a.text != wantText || a.finish != "stop" || a.usage == 0 {
		t.Fatalf("want a complete answer with usage: err %v, text %q, finish %q, usage %d", a.err, a.text, a.finish, a.usage)
	}
	if a.provider != provider || a.attempts != attempts {
		t.Fatalf("served by %q after %d attempts, want %q after %d", a.provider, a.attempts, provider, attempts)
	}
}

// upstreamCalls is how many attempts reached provider's connection.
func upstreamCalls(fs *faults.Server, provider string) int {
	key := map[string]string{"primary": "primary/pk", "fallback": "fallback/fk"}[provider]
	n := 0
	for _, c := range fs.Stats().ByConnection[key] {
		n += c
	}
	return n
}

func expectCalls(t *testing.T, fs *faults.Server, primary, fallback int) {
	t.Helper()
	if p, f := upstreamCalls(fs, "primary"), upstreamCalls(fs, "fallback"); p != primary || f != fallback {
		t.Fatalf("upstream attempts: primary %d, fallback %d; want %d, %d (%v)", p, f, primary, fallback, fs.Stats().ByConnection)
	}
}

func primaryRule(r faults.Response) faults.Rule {
	return faults.Rule{Match: faults.Match{Provider: "primary"}, Respond: &r}
}

func primarySequence(rs ...faults.Response) faults.Rule {
	return faults.Rule{Match: faults.Match{Provider: "primary"}, Sequence: rs}
}

func preset(t *testing.T, name string) faults.Response {
	t.Helper()
	r, ok := faults.Preset(name)
	if !ok {
		t.Fatalf("no catalog entry %q", name)
	}
	return r
}

func TestCatalogueE2E(t *testing.T) {
	t.Run("S01 429 Retry-After 2 s once: waits, the primary serves (full timings)", func(t *testing.T) {
		t.Parallel()
		ra := preset(t, "rate-limit-retry-after")
		ra.Headers = map[string]string{"Retry-After": "2"}
		g, fs := catalogueGW(t, faults.Options{}, "10s", "10s", "", primarySequence(ra, faults.Response{Status: 200}))
		a := catalogueStream(t, g)
		a.servedBy(t, "primary", 2)
		if a.took < 1800*time.Millisecond {
			t.Fatalf("the second attempt came %v after the first, before the stated 2 s", a.took)
		}
		expectCalls(t, fs, 2, 0)
	})
	t.Run("S02 persistent 429: the fallback serves, the primary is not hammered (full timings)", func(t *testing.T) {
		t.Parallel()
		g, fs := catalogueGW(t, faults.Options{}, "10s", "10s", "", primaryRule(preset(t, "rate-limit")))
		catalogueStream(t, g).servedBy(t, "fallback", 2)
		for range 4 { // inside the primary's 3 s cooldown: straight to the fallback
			catalogueStream(t, g).servedBy(t, "fallback", 1)
		}
		expectCalls(t, fs, 1, 5)
	})
	t.Run("S03 a single 500 then healthy: the primary serves (full timings)", func(t *testing.T) {
		t.Parallel()
		g, fs := catalogueGW(t, faults.Options{}, "10s", "10s", "", primarySequence(preset(t, "server-error-500"), faults.Response{Status: 200}))
		a := catalogueStream(t, g)
		a.servedBy(t, "primary", 2)
		if a.took < 2900*time.Millisecond { // the apikey base cooldown
			t.Fatalf("retried after %v, inside the 3 s cooldown", a.took)
		}
		expectCalls(t, fs, 2, 0)
	})
	t.Run("S04 persistent 503: every request served by the fallback, one primary attempt at most (full timings)", func(t *testing.T) {
		t.Parallel()
		g, fs := catalogueGW(t, faults.Options{}, "10s", "10s", "", primaryRule(preset(t, "unavailable-503")))
		for range 4 {
			a := catalogueStream(t, g)
			if a.err != nil || a.provider != "fallback" || a.attempts > 2 || a.text != wantText {
				t.Fatalf("%+v", a)
			}
		}
		if p := upstreamCalls(fs, "primary"); p < 1 || p > 4 {
			t.Fatalf("primary attempts %d for 4 requests", p)
		}
	})
	t.Run("S05 reset before headers: the fallback serves (full timings)", func(t *testing.T) {
		t.Parallel()
		g, fs := catalogueGW(t, faults.Options{}, "10s", "10s", "", primaryRule(preset(t, "reset")))
		catalogueStream(t, g).servedBy(t, "fallback", 2)
		expectCalls(t, fs, 1, 1)
	})
	t.Run("S06 silent upstream: responseHeaderMs cuts it, the fallback serves (scaled 1/10: 1 s)", func(t *testing.T) {
		t.Parallel()
		g, fs := catalogueGW(t, faults.Options{MaxHold: 20 * time.Second}, "1s", "1s", "", primaryRule(preset(t, "no-response")))
		a := catalogueStream(t, g)
		a.servedBy(t, "fallback", 2)
		if a.took < time.Second {
			t.Fatalf("took %v: the primary was given up before responseHeaderMs", a.took)
		}
		expectCalls(t, fs, 1, 1)
	})
	t.Run("S07 first token after 20 s: firstContentMs moves to the fallback, never back (scaled: firstContentMs 1 s)", func(t *testing.T) {
		t.Parallel()
		slow := preset(t, "slow-first-token")
		slow.Latency = 20 * time.Second
		g, fs := catalogueGW(t, faults.Options{}, "10s", "1s", "", primaryRule(slow))
		a := catalogueStream(t, g)
		a.servedBy(t, "fallback", 2)
		if a.took < time.Second || a.took >= 15*time.Second {
			t.Fatalf("took %v: want the fallback's answer after firstContentMs, long before the slow token", a.took)
		}
		expectCalls(t, fs, 1, 1)
	})
	t.Run("S11 missing [DONE]: finalised promptly with usage (full timings)", func(t *testing.T) {
		t.Parallel()
		g, fs := catalogueGW(t, faults.Options{}, "10s", "10s", "", primaryRule(preset(t, "no-done")))
		a := catalogueStream(t, g)
		a.servedBy(t, "primary", 1)
		if a.took >= 10*time.Second {
			t.Fatalf("took %v: the finished stream waited for a [DONE] that never came", a.took)
		}
		expectCalls(t, fs, 1, 0)
	})
	t.Run("S12 context_length_exceeded: one attempt on that model, the fallback's model serves (full timings)", func(t *testing.T) {
		t.Parallel()
		g, fs := catalogueGW(t, faults.Options{}, "10s", "10s", "", primaryRule(preset(t, "context-length")))
		a := catalogueStream(t, g)
		a.servedBy(t, "fallback", 2)
		expectCalls(t, fs, 1, 1)
	})
	t.Run("S13 content policy: one attempt, the client gets the 400 (full timings)", func(t *testing.T) {
		t.Parallel()
		g, fs := catalogueGW(t, faults.Options{}, "10s", "10s", "", primaryRule(preset(t, "content-filter")))
		a := catalogueStream(t, g)
		var apiErr *openai.Error
		if !errors.As(a.err, &apiErr) || apiErr.StatusCode != 400 || a.text != "" {
			t.Fatalf("want the upstream 400: %v %q", a.err, a.text)
		}
		expectCalls(t, fs, 1, 0)
	})
	t.Run("S16 fallback model reported with usage (full timings)", func(t *testing.T) {
		t.Parallel()
		g, fs := catalogueGW(t, faults.Options{}, "10s", "10s", "", primaryRule(preset(t, "bad-gateway-502")))
		a := catalogueStream(t, g)
		a.servedBy(t, "fallback", 2)
		if a.model != "fallback-model" {
			t.Fatalf("the stream reports model %q, want the fallback's", a.model)
		}
		expectCalls(t, fs, 1, 1)
	})
	t.Run("S15 primary 503 for 60 s: the fallback serves, the primary serves again within 30 s of recovery (scaled 1/5)", func(t *testing.T) {
		t.Parallel()
		// Scaled 1/5: a 12 s outage, one request every 800 ms, the apikey
		// base cooldown 600 ms and transientMaxCooldownMs 4 s; the bound
		// of 30 s after recovery becomes 6 s.
		const scale = 5
		outage := faults.Rule{Match: faults.Match{Provider: "primary"}, Until: 60 * time.Second,
			Respond: &faults.Response{Status: 503}}
		g, fs := catalogueGW(t, faults.Options{Speed: scale}, "10s", "10s", `
  connectionCooldown: {apikey: {baseCooldownMs: 600ms}, transientMaxCooldownMs: 4s}
`, outage)
		start := time.Now()
		end := 12 * time.Second // the outage, in real time
		var back time.Duration = -1
		for i := 0; ; i++ {
			sent := time.Since(start)
			a := catalogueStream(t, g)
			if a.err != nil || a.text != wantText {
				t.Fatalf("request %d at %v: %+v", i, sent, a)
			}
			done := time.Since(start)
			if done < end-500*time.Millisecond && (a.provider != "fallback" || a.attempts > 2) {
				// during the outage: the fallback serves, after at most one primary attempt
				t.Fatalf("request %d at %v during the outage: served by %s after %d attempts", i, sent, a.provider, a.attempts)
			}
			if sent > end && a.provider == "primary" {
				back = sent - end
				break
			}
			if sent > end+30*time.Second {
				t.Fatalf("the primary never served again after the outage")
			}
			time.Sleep(time.Until(start.Add(time.Duration(i+1) * 800 * time.Millisecond)))
		}
		if back > 6*time.Second {
			t.Fatalf("the primary served again %v after its recovery, want within 6 s (30 s at full timings)", back)
		}
		t.Logf("primary back %v after the outage; upstream %v", back, fs.Stats().ByConnection)
	})
}
