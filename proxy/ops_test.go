package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/internal/jsonscan"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/store"
)

const opsConfig = `
server: {managementKey: "${ADMIN}"}
clientKeys:
  - {id: team-a, key: ka}
providers:
  - id: glm
    baseURL: {{UP}}
    models: [glm-5]
    connections:
      - {id: k1, apiKey: glm-k1}
` + testBase

// usageStream answers a stream whose last chunk carries the usage
// (stream_options.include_usage).
func usageStream(prompt, completion int) behaviour {
	return func(w http.ResponseWriter, r *http.Request, n int) {
		fl := w.(http.Flusher)
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(s string) { io.WriteString(w, "data: "+s+"\n\n"); fl.Flush() }
		send(`{"id":"s","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}`)
		send(`{"id":"s","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		send(fmt.Sprintf(`{"id":"s","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, prompt, completion, prompt+completion))
		send(`[DONE]`)
	}
}

func metricsText(t *testing.T, g *gw) string {
	t.Helper()
	r := g.do("GET", "/metrics", "", "Authorization", "Bearer s3cret")
	if r.code != 200 {
		t.Fatalf("/metrics: %d", r.code)
	}
	return r.body
}

// Requests are counted by provider, model, client key, surface and
// outcome; tokens come from a JSON answer's usage and a stream's final
// usage chunk; a model the config does not name is "other" (bounded
// label values); end-to-end and time-to-first-token histograms fill.
func TestOperatorMetricsByModelKeyAndTokens(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, opsConfig, "ADMIN=s3cret")
	if r := g.chat("glm/glm-5", "Authorization", "Bearer ka"); r.code != 200 {
		t.Fatalf("json: %d %s", r.code, r.body)
	}
	up.set("glm-k1", usageStream(7, 11))
	if r := g.stream("glm/glm-5", "Authorization", "Bearer ka"); r.code != 200 || !strings.Contains(r.body, "[DONE]") {
		t.Fatalf("stream: %d %s", r.code, r.body)
	}
	g.chat("glm/not-configured-"+strings.Repeat("x", 8), "Authorization", "Bearer ka")
	// The histograms are observed when the handler finishes, just after
	// the client has its answer.
	eventually(t, "the handlers finish", func() bool { return g.g.active.Load() == 0 })
	m := metricsText(t, g)
	for _, want := range []string{
		`breakwater_client_requests_total{key="team-a",model="glm/glm-5",outcome="ok",provider="glm",surface="chat_completions"} 2`,
		`breakwater_tokens_total{key="team-a",model="glm/glm-5",provider="glm",type="prompt"} 8`,      // 1 (JSON) + 7 (stream)
		`breakwater_tokens_total{key="team-a",model="glm/glm-5",provider="glm",type="completion"} 12`, // 1 + 11
		`breakwater_request_duration_seconds_count{model="glm/glm-5",provider="glm",stream="true"} 1`,
		`breakwater_time_to_first_token_seconds_count{model="glm/glm-5",provider="glm"} 1`,
		`model="other"`,
		`breakwater_config_reloads_total{result="failure"} 0`,
		`breakwater_build_info{`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(m, "not-configured") {
		t.Errorf("a model the config does not name became a label value")
	}
}

// /livez is 200 while the process serves; /readyz is 503 once the drain
// starts; neither needs a key. MetricsHandler serves /metrics without one.
func TestProbesAndUnauthenticatedMetrics(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, opsConfig, "ADMIN=s3cret")
	if r := g.do("GET", "/livez", ""); r.code != 200 {
		t.Fatalf("livez: %d", r.code)
	}
	if r := g.do("GET", "/readyz", ""); r.code != 200 || !strings.Contains(r.body, `"ready":true`) {
		t.Fatalf("readyz: %d %s", r.code, r.body)
	}
	rec := httptest.NewRecorder()
	g.g.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "breakwater_build_info") {
		t.Fatalf("metrics listener: %d", rec.Code)
	}
	g.g.draining.Store(true)
	defer g.g.draining.Store(false)
	if r := g.do("GET", "/readyz", ""); r.code != 503 || !strings.Contains(r.body, "draining") {
		t.Fatalf("readyz draining: %d %s", r.code, r.body)
	}
	if r := g.do("GET", "/livez", ""); r.code != 200 {
		t.Fatalf("livez draining: %d", r.code)
	}
}

// unreachableStore is a store whose database is unreachable.
type unreachableStore struct{ *store.Memory }

func (unreachableStore) Health() store.Health { return store.Health{Kind: "postgres", Up: false} }

// Ready with an unreachable store only when fail-open (the default).
func TestReadyzStoreFailOpen(t *testing.T) {
	for _, c := range []struct {
		failOpen string
		code     int
	}{{"", 200}, {"store: {failOpen: true}\n", 200}, {"store: {failOpen: false}\n", 503}} {
		cfg, _, err := ParseConfig("t.yaml", []byte(c.failOpen+"providers:\n  - {id: p, baseURL: 'http://127.0.0.1:1/v1', connections: [{id: c}]}\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := New(context.Background(), cfg, Options{Store: unreachableStore{newMemStore()}})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		g.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), "unreachable") {
			t.Errorf("%q: %d %s", c.failOpen, rec.Code, rec.Body.String())
		}
		g.Close(context.Background())
	}
}

// An upstream that answers 404 (a baseURL without /v1) gets the hint in
// the connection test's answer.
func TestConnectionTest404Hint(t *testing.T) {
	nf := httptest.NewServer(http.NotFoundHandler())
	defer nf.Close()
	up := newFakeUp(t)
	g := newGW(t, up, strings.Replace(opsConfig, "{{UP}}", nf.URL, 1), "ADMIN=s3cret")
	r := admin(g, "POST", "/api/providers/glm/test", "")
	if r.code != 200 || !strings.Contains(r.body, "upstream answered 404: does baseURL include the version segment, e.g. /v1?") {
		t.Fatalf("test: %d %s", r.code, r.body)
	}
}

// Token counts come from the answer's own usage object: a "usage" quoted
// inside the content is escaped and never read, a null usage counts
// nothing, and the *_details objects do not confuse the keys.
func TestNoteUsage(t *testing.T) {
	for _, c := range []struct {
		body       string
		prompt, cc int64
	}{
		{`{"choices":[{"message":{"content":"say \"usage\": {\"prompt_tokens\": 99}"}}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`, 3, 4},
		{`{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens":20,"completion_tokens_details":{"reasoning_tokens":5}}}`, 10, 20},
		{`{"choices":[],"usage":null}`, 0, 0},
		{`{"choices":[{"delta":{"content":"hi"}}]}`, 0, 0},
		{`{"usage" : { "completion_tokens" : 7 , "prompt_tokens" : 8 }}`, 8, 7},
		// A native Messages answer: input_tokens leave out the cached prompt.
		{`{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":8,"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":32}}`, 113, 32},
		// A native Responses answer: input_tokens count the cached prompt in.
		{`{"object":"response","usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":4},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":21}}`, 12, 9},
		{`{"type":"response.created","response":{"usage":null}}`, 0, 0},
	} {
		rs := &reqState{}
		rs.noteUsage([]byte(c.body))
		if rs.promptTokens != c.prompt || rs.completionTokens != c.cc {
			t.Errorf("%s: got %d/%d, want %d/%d", c.body, rs.promptTokens, rs.completionTokens, c.prompt, c.cc)
		}
	}
}

// A non-streamed answer's token counts are its top-level usage member's,
// found by the pass that validates it: a "usage" nested in a choice or a
// tool's object, or written with an escape in its key, is read only when
// it is the top-level one; an answer that is not whole JSON counts nothing.
func TestValidAnswerUsage(t *testing.T) {
	for _, c := range []struct {
		body       string
		ok         bool
		prompt, cc int64
	}{
		{`{"choices":[{"usage":{"prompt_tokens":99,"completion_tokens":98}}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`, true, 3, 4},
		{`{"usag\u0065":{"prompt_tokens":5,"completion_tokens":6}}`, true, 5, 6},
		{`{"choices":[{"message":{"content":"say \"usage\": {\"prompt_tokens\": 99}"}}]}`, true, 0, 0},
		{`{"usage":{"prompt_tokens":1,"completion_tokens":2},"usage":{"prompt_tokens":7,"completion_tokens":8}}`, true, 1, 2},
		{`{"usage":null}`, true, 0, 0},
		{`[{"usage":{"prompt_tokens":9}}]`, true, 0, 0},
		{`{"type":"message","usage":{"input_tokens":8,"cache_read_input_tokens":100,"output_tokens":32}}`, true, 108, 32},
		{`{"usage":{"prompt_tokens":1,"completion_tokens":2}`, false, 0, 0},
	} {
		rs := &reqState{}
		usage, ok := validAnswer([]byte(c.body))
		if ok && usage != nil {
			rs.noteUsageIn(usage)
		}
		if ok != c.ok || rs.promptTokens != c.prompt || rs.completionTokens != c.cc {
			t.Errorf("%s: got ok=%v %d/%d, want ok=%v %d/%d", c.body, ok, rs.promptTokens, rs.completionTokens, c.ok, c.prompt, c.cc)
		}
	}
}

// A native Messages stream splits its usage over two events: the input in
// message_start, the cumulative output in message_delta; both are counted.
func TestNoteUsageMessagesStream(t *testing.T) {
	rs := &reqState{}
	for _, ev := range []string{
		`{"type":"message_start","message":{"id":"msg_1","content":[],"usage":{"input_tokens":8,"cache_read_input_tokens":2,"output_tokens":1}}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\"usage\": {\"output_tokens\": 99}"}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":32}}`,
		`{"type":"message_stop"}`,
	} {
		rs.noteUsage([]byte(ev))
	}
	if rs.promptTokens != 10 || rs.completionTokens != 32 {
		t.Fatalf("got %d/%d, want 10/32", rs.promptTokens, rs.completionTokens)
	}
}

func newLoggedGW(t *testing.T, y string, st StateStore, env ...string) (*Gateway, *syncBuf) {
	t.Helper()
	cfg, _, err := ParseConfig("t.yaml", []byte(y), env)
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuf{}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(buf, nil)), Store: st, Environ: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	return g, buf
}

// Start-up logs each saved setting that beats the file.
func TestStartupLogsSavedOverrides(t *testing.T) {
	st := newMemStore()
	st.SaveSettings(context.Background(), settings.Layer{"sessionAffinityTtlMs": json.Number("5000")})
	y := "providers:\n  - {id: p, baseURL: 'http://127.0.0.1:1/v1', connections: [{id: c}]}\nresilience:\n  sessionAffinityTtlMs: 60000\n"
	_, logs := newLoggedGW(t, y, st)
	if !strings.Contains(logs.String(), "a saved setting overrides the file value") || !strings.Contains(logs.String(), "field=sessionAffinityTtlMs fileValue=60000 savedValue=5000") {
		t.Fatalf("logs:\n%s", logs)
	}
}

// A provider whose upstream answers 404 gets the baseURL hint in the log
// (chat attempts and the start-up test), once per provider per period.
func TestBaseURL404HintLogged(t *testing.T) {
	nf := httptest.NewServer(http.NotFoundHandler())
	defer nf.Close()
	y := "server: {testProvidersAtStart: true}\nproviders:\n  - {id: p, baseURL: '" + nf.URL + "', models: [m], connections: [{id: c, apiKey: sk-secret}]}\n" + testBase
	g, logs := newLoggedGW(t, y, nil)
	g.TestProvidersAtStart(context.Background())
	if !strings.Contains(logs.String(), "provider test failed") || !strings.Contains(logs.String(), "does baseURL include the version segment, e.g. /v1?") {
		t.Fatalf("start-up test logs:\n%s", logs)
	}
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	for i := 0; i < 3; i++ {
		res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"p/m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	if n := strings.Count(logs.String(), "upstream answered 404 to a chat request"); n != 1 {
		t.Fatalf("want the chat hint once, got %d:\n%s", n, logs)
	}
	if strings.Contains(logs.String(), "sk-secret") {
		t.Fatal("a key reached the log")
	}
}

// server.metricsListen must be host:port and not the main listener.
func TestMetricsListenValidated(t *testing.T) {
	for _, c := range []struct{ v, want string }{{"9090", "want host:port"}, {"127.0.0.1:8080", "is the same address as server.listen"}} {
		y := "server: {listen: '127.0.0.1:8080', metricsListen: '" + c.v + "'}\nproviders:\n  - {id: p, baseURL: 'http://x/v1', connections: [{id: c}]}\n"
		if _, _, err := ParseConfig("t.yaml", []byte(y), nil); err == nil || !strings.Contains(err.Error(), "t.yaml:1: server.metricsListen: "+c.want) {
			t.Errorf("%s: %v", c.v, err)
		}
	}
}

// usageEvents are stream events with and without token counts, the ones
// that only mention "usage" in their text included.
var usageEvents = []string{
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`,
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":10,"total_tokens":34}}`,
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"\"usage"},"finish_reason":null}],"prompt_tokens":5}`,
	`{"choices":[{"delta":{"content":"usage"}}],"completion_tokens":6}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":32}}`,
	`["usage",{"prompt_tokens":7}]`, `[DONE]`, ``, `{"usage":`,
}

// FuzzStreamEventUsage: skipping the events whose parse says they do not
// mention "usage" never changes the token counts a stream's events give
// (the final chunk's counts are what the request log and metrics report).
func FuzzStreamEventUsage(f *testing.F) {
	for _, a := range usageEvents {
		for _, b := range usageEvents {
			f.Add([]byte(a), []byte(b))
		}
	}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		var p jsonscan.Prefix
		all, skipping := &reqState{}, &reqState{}
		for _, data := range [][]byte{first, second} {
			ev := model.ParseStreamEventAfter(data, &p)
			all.noteUsage(data)
			skipping.noteEventUsage(&ev, data)
			if all.promptTokens != skipping.promptTokens || all.completionTokens != skipping.completionTokens {
				t.Fatalf("after %q: %d/%d searching every event, %d/%d skipping", data,
					all.promptTokens, all.completionTokens, skipping.promptTokens, skipping.completionTokens)
			}
		}
	})
}
