package proxy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/model"
)

// SPEC §4, §5: the composite gate's admission check.
func TestAdmit(t *testing.T) {
	free := Slots{}
	full1 := Slots{InUse: 1, Cap: 1}
	cases := []struct {
		name string
		in   AdmitInput
		want AdmitDecision
	}{
		{"all unlimited goes", AdmitInput{QueueLeftMs: 10}, AdmitDecision{Action: AdmitGo}},
		{"below every cap goes", AdmitInput{Global: Slots{1, 2}, Provider: Slots{0, 1}, Connection: Slots{3, 4}, Model: Slots{0, 1}, QueueLeftMs: 1}, AdmitDecision{Action: AdmitGo}},
		{"free goes even with others queued (no head-of-line blocking)", AdmitInput{Queued: 5, MaxQueueDepth: 1}, AdmitDecision{Action: AdmitGo}},
		{"global cap blocks first", AdmitInput{Global: full1, Connection: full1, QueueLeftMs: 5}, AdmitDecision{Action: AdmitWait, Blocking: LevelGlobal}},
		{"provider cap", AdmitInput{Provider: full1, QueueLeftMs: 5}, AdmitDecision{Action: AdmitWait, Blocking: LevelProvider}},
		{"connection cap", AdmitInput{Connection: full1, QueueLeftMs: 5}, AdmitDecision{Action: AdmitWait, Blocking: LevelConnection}},
		{"model cap", AdmitInput{Connection: free, Model: full1, QueueLeftMs: 5}, AdmitDecision{Action: AdmitWait, Blocking: LevelModel}},
		{"queue full on a connection cap", AdmitInput{Connection: full1, Queued: 2, MaxQueueDepth: 2, QueueLeftMs: 5},
			AdmitDecision{Action: AdmitReject, Code: model.CodeRateLimitQueueFull, Blocking: LevelConnection}},
		{"queue full on a global cap", AdmitInput{Global: full1, Queued: 1, MaxQueueDepth: 1, QueueLeftMs: 5},
			AdmitDecision{Action: AdmitReject, Code: model.CodeSemaphoreQueueFull, Blocking: LevelGlobal}},
		{"depth 0 is unbounded", AdmitInput{Connection: full1, Queued: 1000, QueueLeftMs: 5}, AdmitDecision{Action: AdmitWait, Blocking: LevelConnection}},
		{"queue budget spent", AdmitInput{Connection: full1, QueueLeftMs: 0},
			AdmitDecision{Action: AdmitReject, Code: model.CodeSemaphoreTimeout, Blocking: LevelConnection}},
		{"quota-share fails open when full", AdmitInput{Connection: full1, Queued: 1, MaxQueueDepth: 1, QueueLeftMs: 5, FailOpen: true},
			AdmitDecision{Action: AdmitBypass, Blocking: LevelConnection}},
		{"quota-share fails open on timeout", AdmitInput{Connection: full1, FailOpen: true}, AdmitDecision{Action: AdmitBypass, Blocking: LevelConnection}},
		{"quota-share still queues within budget", AdmitInput{Connection: full1, QueueLeftMs: 5, FailOpen: true}, AdmitDecision{Action: AdmitWait, Blocking: LevelConnection}},
	}
	for _, c := range cases {
		if got := Admit(c.in); got != c.want {
			t.Errorf("%s: Admit(%+v) = %+v, want %+v", c.name, c.in, got, c.want)
		}
	}
}

func TestPinOrder(t *testing.T) {
	c := func(p, conn string, target int) model.Candidate {
		return model.Candidate{Provider: p, Connection: conn, Target: target}
	}
	cands := []model.Candidate{c("a", "k1", 0), c("a", "k2", 0), c("a", "k3", 0), c("b", "x1", 1), c("b", "x2", 1)}
	stale := pinOrder(cands, map[string]string{"a": "k3", "b": "gone"})
	var got []string
	for _, x := range cands {
		got = append(got, x.Provider+"/"+x.Connection)
	}
	if strings.Join(got, " ") != "a/k3 a/k1 a/k2 b/x1 b/x2" {
		t.Fatalf("order = %v", got)
	}
	if len(stale) != 1 || stale[0] != "b" {
		t.Fatalf("stale = %v, want [b]", stale)
	}
	if pinOrder(cands, nil) != nil {
		t.Fatal("no pins: nothing stale")
	}
}

// SPEC §6: what restarts the stall budget and what is output.
func TestClassifyData(t *testing.T) {
	cases := []struct {
		data   string
		kind   frameKind
		useful int
		finish string
	}{
		{``, frameHeartbeat, 0, ""},
		{`[DONE]`, frameDone, 0, ""},
		{`{"choices":[{"delta":{"role":"assistant"}}]}`, frameOther, 0, ""},
		{`{"choices":[{"delta":{"content":"héllo"}}]}`, frameContent, 6, ""},
		{`{"choices":[{"delta":{"content":""},"finish_reason":"stop"}]}`, frameOther, 0, "stop"},
		{`{"choices":[{"delta":{"reasoning_content":""}}]}`, frameReasoning, 0, ""},
		{`{"choices":[{"delta":{"reasoning":"thinking..."}}]}`, frameReasoning, 0, ""},
		{`{"type":"response.reasoning_summary_text.delta","delta":"x"}`, frameReasoning, 0, ""},
		{`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, frameContent, 0, ""},
		{`{"choices":[],"usage":{"total_tokens":3}}`, frameOther, 0, ""},
		{`{"error":{"message":"boom","code":503}}`, frameError, 0, ""},
		{`not json`, frameOther, 0, ""},
		{`{"choices":[{"text":"abc"}]}`, frameContent, 3, ""},
	}
	for _, c := range cases {
		f := classifyData([]byte(c.data))
		if f.kind != c.kind || f.useful != c.useful || f.finish != c.finish {
			t.Errorf("classifyData(%s) = %+v, want kind %d useful %d finish %q", c.data, f, c.kind, c.useful, c.finish)
		}
	}
}

func TestStreamErrorStatus(t *testing.T) {
	cases := map[string]int{
		`{"error":{"code":429,"message":"slow down"}}`:                    429,
		`{"error":{"code":"503"}}`:                                        503,
		`{"error":{"status":502}}`:                                        502,
		`{"error":{"type":"rate_limit_error","message":"x"}}`:             429,
		`{"error":{"type":"overloaded_error"}}`:                           529,
		`{"error":{"type":"invalid_request_error","code":"context_len"}}`: 400,
		`{"error":{"message":"internal"}}`:                                500,
		`{"error":"plain"}`:                                               500,
	}
	for in, want := range cases {
		if got, _ := streamErrorStatus([]byte(in)); got != want {
			t.Errorf("streamErrorStatus(%s) = %d, want %d", in, got, want)
		}
	}
}

// SPEC §6 / REFERENCE M14: warm-up plus a full window, protected phases,
// measurable windows.
func TestThroughputWatchdog(t *testing.T) {
	cfg := model.ThroughputWatchdog{Enabled: true, WarmupMs: 1000, WindowMs: 1000, MinUsefulBytesPerSecond: 10, MinUsefulBytes: 1}
	w := newThroughputWatchdog(cfg, 0)
	w.observe(100, frame{kind: frameContent, useful: 2})
	if w.abort(1999) {
		t.Fatal("aborted before warm-up + window")
	}
	if !w.abort(2000) {
		t.Fatal("2 bytes in the window (< 10 B/s) after warm-up+window: want abort")
	}
	w.observe(2000, frame{kind: frameContent, useful: 50})
	if w.abort(2100) {
		t.Fatal("50 B/s: no abort")
	}
	w.observe(2200, frame{kind: frameReasoning})
	if w.abort(4000) {
		t.Fatal("reasoning in flight: judgement suspended")
	}
	w.observe(4000, frame{kind: frameContent, useful: 1})
	if !w.abort(4500) {
		t.Fatal("1 byte in the window after reasoning ended: want abort")
	}
	off := newThroughputWatchdog(model.ThroughputWatchdog{}, 0)
	if off.abort(1e9) {
		t.Fatal("disabled watchdog aborted")
	}
	// windowBytes below minUsefulBytes (but not 0) is not measurable
	cfg.MinUsefulBytes = 5
	w = newThroughputWatchdog(cfg, 0)
	w.observe(1500, frame{kind: frameContent, useful: 2})
	if w.abort(2100) {
		t.Fatal("2 bytes < minUsefulBytes 5: not measurable, no abort")
	}
}

func TestTopLevelValueAndBodyFor(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"say \"model\": x"}], "model" : "combo" ,"stream":true,"nested":{"model":"inner"}}`
	r, err := parseChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "combo" || !r.Stream {
		t.Fatalf("parsed %+v", r)
	}
	out := r.bodyFor("glm-5")
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("bodyFor produced invalid JSON %s: %v", out, err)
	}
	if v["model"] != "glm-5" || v["nested"].(map[string]any)["model"] != "inner" || v["stream"] != true {
		t.Fatalf("bodyFor = %s", out)
	}
	if got := r.bodyFor("combo"); &got[0] != &r.body[0] {
		t.Fatal("same model should forward the original bytes")
	}
	// duplicate keys: the last one wins, as encoding/json decodes it
	r, err = parseChatRequest([]byte(`{"model":"a","model":"b"}`))
	if err != nil || r.Model != "b" {
		t.Fatalf("dup: %+v %v", r, err)
	}
	if string(r.bodyFor("z")) != `{"model":"a","model":"z"}` {
		t.Fatalf("dup bodyFor = %s", r.bodyFor("z"))
	}
	for _, bad := range []string{``, `[]`, `{"model":1}`, `{"model":""}`, `{}`, `{"model":"x","stream":"yes"}`, `{"model":"x"`, `{"model":"x"} trailing`} {
		if _, err := parseChatRequest([]byte(bad)); err == nil {
			t.Errorf("parseChatRequest(%q): want an error", bad)
		}
	}
}

func TestRedact(t *testing.T) {
	out := string(redact([]byte(`{"error":{"message":"Incorrect API key provided: sk-abc123456789xyz. Bearer tok_abcdefghijk and mysecret"}}`), "mysecret"))
	for _, leak := range []string{"sk-abc123456789xyz", "tok_abcdefghijk", "mysecret"} {
		if strings.Contains(out, leak) {
			t.Errorf("redact left %q in %s", leak, out)
		}
	}
}

// SPEC §5: per-connection pacing (rpm over 60 s, minTimeMs spacing).
func TestPace(t *testing.T) {
	cases := []struct {
		name string
		in   PaceInput
		want PaceDecision
	}{
		{"no limits", PaceInput{NowMs: 1000, Hits: []int64{999}, QueueLeftMs: 0}, PaceDecision{AtMs: 1000}},
		{"rpm not reached", PaceInput{NowMs: 1000, Hits: []int64{10, 20}, RPM: 3, QueueLeftMs: 0}, PaceDecision{AtMs: 1000}},
		{"rpm reached: wait for the oldest to leave", PaceInput{NowMs: 1000, Hits: []int64{10, 20, 30}, RPM: 3, QueueLeftMs: 60000},
			PaceDecision{AtMs: 60010}},
		{"rpm: the RPM-th most recent hit", PaceInput{NowMs: 1000, Hits: []int64{10, 20, 30}, RPM: 2, QueueLeftMs: 60000},
			PaceDecision{AtMs: 60020}},
		{"minTime spacing", PaceInput{NowMs: 1000, Hits: []int64{900}, MinTimeMs: 350, QueueLeftMs: 1000}, PaceDecision{AtMs: 1250}},
		{"minTime already passed", PaceInput{NowMs: 1000, Hits: []int64{500}, MinTimeMs: 350}, PaceDecision{AtMs: 1000}},
		{"FIFO behind a future reservation", PaceInput{NowMs: 1000, Hits: []int64{1200}, QueueLeftMs: 1000}, PaceDecision{AtMs: 1200}},
		{"slot after the queue budget: refused at once", PaceInput{NowMs: 1000, Hits: []int64{900}, MinTimeMs: 350, QueueLeftMs: 100},
			PaceDecision{AtMs: 1250, Code: model.CodeRateLimitQueueTimeout}},
		{"queue full", PaceInput{NowMs: 1000, Hits: []int64{1100}, Waiting: 2, MaxQueueDepth: 2, QueueLeftMs: 1000},
			PaceDecision{Code: model.CodeRateLimitQueueFull}},
		{"queue depth only matters when waiting", PaceInput{NowMs: 1000, Hits: []int64{10}, Waiting: 5, MaxQueueDepth: 1}, PaceDecision{AtMs: 1000}},
	}
	for _, c := range cases {
		if got := Pace(c.in); got != c.want {
			t.Errorf("%s: Pace = %+v, want %+v", c.name, got, c.want)
		}
	}
}
