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

func TestStreamEventHelpers(t *testing.T) {
	if !isErrorEvent([]byte(`{"type":"error","error":{"message":"x"}}`)) || isErrorEvent([]byte(`{"error":null}`)) ||
		isErrorEvent([]byte(`{"choices":[{"delta":{"content":"\"error\": no"}}]}`)) {
		t.Fatal("isErrorEvent")
	}
	if finishReason([]byte(`{"choices":[{"delta":{},"finish_reason":"length"}]}`)) != "length" || finishReason([]byte(`{}`)) != "" {
		t.Fatal("finishReason")
	}
	for f, want := range map[string]bool{"length": true, "tool_calls": true, "content_filter": true, "stop": false, "": false} {
		if legitimateEmpty(f) != want {
			t.Errorf("legitimateEmpty(%q) != %v", f, want)
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
