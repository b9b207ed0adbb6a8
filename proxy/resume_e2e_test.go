package proxy

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/store"
)

// End-to-end tests of stream resume and malformed-event skipping (the
// fault catalogue's S08, S09, S10, S14): a streaming openai-go client, a
// real gateway, and the fault upstream serving both providers of a
// priority combo. The fault upstream runs at resumeSpeed: its chunk
// interval and S09's 30 s of silence are divided by it, and the gateway's
// stream idle budget (10 s in the catalogue) is scaled the same way, so
// S09 keeps its shape — silence three times the idle budget — in real time.

const resumeSpeed = 5

const resumeConfig = `
server: {managementKey: "${ADMIN}"}
providers:
  - id: primary
    baseURL: {{F}}/primary/v1
    continuation: assistant
    models: [m]
    connections:
      - {id: k1, apiKey: pk}
  - id: fallback
    baseURL: {{F}}/fallback/v1
    continuation: assistant
    models: [m]
    connections:
      - {id: k1, apiKey: fk}
combos:
  - {id: c, strategy: priority, targets: [primary/m, fallback/m]}
resilience:
  waitForCooldown: {enabled: false}
  comboCooldownWait: {enabled: false}
  upstreamTimeouts: {firstContentMs: 2s, streamIdleMs: 2s}
`

// catalogue answers: 60 numbered content events, 50 ms apart (at speed 1).
func catAnswer(f faults.Fault, stallAfter int, stallFor time.Duration) *faults.Response {
	return &faults.Response{Fault: f, Stream: faults.Stream{Chunks: 60, Interval: 50 * time.Millisecond, StallAfter: stallAfter,
		StallFor: stallFor, Numbered: true}}
}

var catText = faults.AnswerText(catAnswer(faults.None, 0, 0))

func newResumeGW(t *testing.T, rules []faults.Rule) (*gw, *faults.Server) {
	t.Helper()
	fs := faults.NewServer(rules, faults.Options{Speed: resumeSpeed, MaxHold: 10 * time.Second})
	ts := httptest.NewServer(fs)
	t.Cleanup(ts.Close)
	env := []string{"ADMIN=s3cret"}
	cfg, _, err := ParseConfig("resume.yaml", []byte(strings.ReplaceAll(resumeConfig, "{{F}}", ts.URL)), env)
	if err != nil {
		t.Fatal(err)
	}
	// The memory store keeps a request log (GET /api/request-log).
	g, err := New(t.Context(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Store: store.NewMemory(store.MemoryOptions{}), Environ: env})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveGW(t, g)
	t.Cleanup(func() { srv.Close(); g.Close(context.Background()) })
	return &gw{t: t, g: g, srv: srv, up: newFakeUp(t), admin: "s3cret"}, fs
}

// clientView is what a streaming openai-go client saw.
type clientView struct {
	text           string
	roles, finish  int
	usages         int
	ids            map[string]bool
	promptTokens   int64
	completionToks int64
	err            error
}

func streamWithSDK(t *testing.T, g *gw) clientView {
	t.Helper()
	client := openai.NewClient(option.WithBaseURL(g.srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "c",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me")}})
	v := clientView{ids: map[string]bool{}}
	var b strings.Builder
	for st.Next() {
		c := st.Current()
		v.ids[c.ID] = true
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
			if ch.Delta.Role != "" {
				v.roles++
			}
			if ch.FinishReason != "" {
				v.finish++
			}
		}
		if c.Usage.TotalTokens > 0 {
			v.usages++
			v.promptTokens, v.completionToks = c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
	}
	v.text, v.err = b.String(), st.Err()
	return v
}

func attemptsOf(fs *faults.Server, key string) int {
	n := 0
	for _, c := range fs.Stats().ByConnection[key] {
		n += c
	}
	return n
}

func checkWhole(t *testing.T, v clientView) {
	t.Helper()
	if v.err != nil || v.text != catText {
		t.Fatalf("the client's answer is not the whole text once, in order: err %v\n got %q\nwant %q", v.err, v.text, catText)
	}
	if v.roles != 1 || v.finish != 1 || v.usages != 1 || len(v.ids) != 1 {
		t.Fatalf("one stream: roles %d finishes %d usages %d ids %v", v.roles, v.finish, v.usages, v.ids)
	}
}

// S08: cut after 40 of 60 events; the fallback continues the delivered
// text (prefill) into the same stream.
func TestResumeE2ECutAfter40(t *testing.T) {
	g, fs := newResumeGW(t, []faults.Rule{
		{Match: faults.Match{Provider: "primary"}, Respond: catAnswer(faults.Cut, 40, 0)},
		{Match: faults.Match{Provider: "fallback"}, Respond: catAnswer(faults.None, 0, 0)},
	})
	v := streamWithSDK(t, g)
	checkWhole(t, v)
	if p, f := attemptsOf(fs, "primary/pk"), attemptsOf(fs, "fallback/fk"); p != 1 || f != 1 {
		t.Fatalf("attempts primary %d fallback %d, want 1 and 1", p, f)
	}
	// The continuation's usage is the client's one usage (the cut part
	// reported none): the prefill is in its prompt, 20 events in it.
	if v.completionToks != 20*4 {
		t.Fatalf("usage %d/%d", v.promptTokens, v.completionToks)
	}
	m := admin(g, "GET", "/metrics", "").body
	if !strings.Contains(m, `breakwater_stream_resumes_total{connection="k1",provider="fallback",result="continued"} 1`) {
		t.Fatal("the resume is not in the metrics")
	}
	if r := admin(g, "GET", "/api/request-log?limit=10", ""); !strings.Contains(r.body, `"reason":"stream_resume"`) {
		t.Fatalf("the resume is not in the request log: %s", r.body)
	}
	if r := admin(g, "GET", "/api/providers", ""); strings.Count(r.body, `"continuation":"assistant"`) != 2 {
		t.Fatalf("the providers' continuation is not shown: %s", r.body)
	}
}

// S09: 20 events, then 30 s of silence (6 s here), cut by the idle
// watchdog (10 s, 2 s here), resumed on the fallback.
func TestResumeE2ESilenceAfter20(t *testing.T) {
	g, fs := newResumeGW(t, []faults.Rule{
		{Match: faults.Match{Provider: "primary"}, Respond: catAnswer(faults.Stall, 20, 30*time.Second)},
		{Match: faults.Match{Provider: "fallback"}, Respond: catAnswer(faults.None, 0, 0)},
	})
	checkWhole(t, streamWithSDK(t, g))
	if p, f := attemptsOf(fs, "primary/pk"), attemptsOf(fs, "fallback/fk"); p != 1 || f != 1 {
		t.Fatalf("attempts primary %d fallback %d", p, f)
	}
}

// S10: one event whose data is not JSON before content event 11: skipped
// and counted, the whole answer from the first attempt.
func TestResumeE2EMalformedEventSkipped(t *testing.T) {
	g, fs := newResumeGW(t, []faults.Rule{
		{Match: faults.Match{Provider: "primary"}, Respond: catAnswer(faults.MalformedChunk, 10, 0)},
	})
	checkWhole(t, streamWithSDK(t, g))
	if p, f := attemptsOf(fs, "primary/pk"), attemptsOf(fs, "fallback/fk"); p != 1 || f != 0 {
		t.Fatalf("attempts primary %d fallback %d", p, f)
	}
	if m := admin(g, "GET", "/metrics", "").body; !strings.Contains(m, `breakwater_stream_malformed_events_total{connection="k1",provider="primary"} 1`) {
		t.Fatal("the malformed event is not counted")
	}
}

// S14: as S08, but the fallback refuses the prefill (400); the primary,
// whose stream broke, continues. The refusal is never the client's error.
func TestResumeE2EFallbackRefusesPrefill(t *testing.T) {
	g, fs := newResumeGW(t, []faults.Rule{
		{Match: faults.Match{Provider: "primary"}, Sequence: []faults.Response{*catAnswer(faults.Cut, 40, 0), *catAnswer(faults.None, 0, 0)}},
		{Match: faults.Match{Provider: "fallback"}, Respond: catAnswer(faults.PrefillRefusal, 0, 0)},
	})
	checkWhole(t, streamWithSDK(t, g))
	st := fs.Stats().ByConnection
	if attemptsOf(fs, "primary/pk") != 2 || st["fallback/fk"]["prefill-refusal"] != 1 {
		t.Fatalf("attempts %v", st)
	}
	m := admin(g, "GET", "/metrics", "").body
	if !strings.Contains(m, `breakwater_stream_resumes_total{connection="k1",provider="fallback",result="refused"} 1`) ||
		!strings.Contains(m, `breakwater_stream_resumes_total{connection="k1",provider="primary",result="continued"} 1`) {
		t.Fatalf("resume metrics:\n%s", grepLines(m, "stream_resumes"))
	}
}

// Bad input: an upstream that restarts the answer instead of continuing it
// is caught before any of its text reaches the client; with no target left
// that continues, the stream ends with its error event — the delivered 40
// events, never duplicated, never a manufactured finish.
func TestResumeE2ERestartedAnswerIsNotSpliced(t *testing.T) {
	g, _ := newResumeGW(t, []faults.Rule{
		{Match: faults.Match{Provider: "primary"}, Sequence: []faults.Response{*catAnswer(faults.Cut, 40, 0), *catAnswer(faults.PrefillRestart, 0, 0)}},
		{Match: faults.Match{Provider: "fallback"}, Respond: catAnswer(faults.PrefillRestart, 0, 0)},
	})
	v := streamWithSDK(t, g)
	if v.err == nil || v.text != catText[:40*faults.ChunkBytes] || v.finish != 0 {
		t.Fatalf("want the 40 delivered events then the error event: err %v finish %d\n%q", v.err, v.finish, v.text)
	}
	if m := admin(g, "GET", "/metrics", "").body; !strings.Contains(m, `provider="fallback",result="restarted"} 1`) {
		t.Fatalf("restart not counted:\n%s", grepLines(m, "stream_resumes"))
	}
}

// The runtime switch: with streamResume off, S08 ends with the error event
// as a stream that cannot be resumed does.
func TestResumeE2EOffByTheRuntimeSetting(t *testing.T) {
	g, fs := newResumeGW(t, []faults.Rule{
		{Match: faults.Match{Provider: "primary"}, Respond: catAnswer(faults.Cut, 40, 0)},
	})
	if r := admin(g, "PATCH", "/api/resilience", `{"streamResume":{"enabled":false}}`); r.code != 200 {
		t.Fatalf("PATCH: %d %s", r.code, r.body)
	}
	v := streamWithSDK(t, g)
	if v.err == nil || !strings.Contains(v.err.Error(), "stream_interrupted") || v.text != catText[:40*faults.ChunkBytes] {
		t.Fatalf("want the error event after 40 events: %v %q", v.err, v.text)
	}
	if attemptsOf(fs, "fallback/fk") != 0 {
		t.Fatal("resumed with resume off")
	}
}

// The native continuation: an anthropic-type fallback continues the
// delivered text as a trailing assistant turn of the Messages API. Its
// trailing space is left out of the prefill (Anthropic refuses it) and not
// repeated from the continuation.
func TestResumeE2EAnthropicContinuesNatively(t *testing.T) {
	fs := faults.NewServer([]faults.Rule{
		{Match: faults.Match{Provider: "oa"}, Respond: catAnswer(faults.Cut, 40, 0)},
		{Match: faults.Match{Provider: "an"}, Respond: catAnswer(faults.None, 0, 0)},
	}, faults.Options{Speed: resumeSpeed, MaxHold: 10 * time.Second})
	ts := httptest.NewServer(fs)
	t.Cleanup(ts.Close)
	cfg := strings.ReplaceAll(`
providers:
  - id: oa
    baseURL: {{F}}/oa/v1
    continuation: assistant
    models: [m]
    connections: [{id: k1, apiKey: ok}]
  - id: an
    type: anthropic
    baseURL: {{F}}/an/v1
    models: [m]
    connections: [{id: k1, apiKey: ak}]
combos:
  - {id: c, strategy: priority, targets: [oa/m, an/m]}
resilience:
  waitForCooldown: {enabled: false}
  comboCooldownWait: {enabled: false}
`, "{{F}}", ts.URL)
	g := newGW(t, newFakeUp(t), cfg)
	checkWhole(t, streamWithSDK(t, g))
	if n := attemptsOf(fs, "an/ak"); n != 1 {
		t.Fatalf("anthropic attempts %d: %v", n, fs.Stats().ByConnection)
	}
}
