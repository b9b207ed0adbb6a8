package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Outside-in checks of the client API (docs/api.md, docs/errors.md): what a
// client sends is read the way the upstream will read it, and what the
// upstream sends is never passed on broken.

// docs/api.md "bad input gets a 4xx with a typed error saying what is
// wrong; it never changes state" and "model is provider/model, a combo id or
// a bare model": the body's keys are read exactly, as the OpenAI API and the
// upstream read them (and as the model splice writes them). With
// encoding/json's case-insensitive matching, {"model":"a","Model":"b"} was
// routed to b while the upstream was sent a, and "Stream": true made the
// gateway expect a stream the upstream never started.
func TestCheckClientBodyKeysAreExact(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	post := func(body string) resp {
		t.Helper()
		return g.do("POST", "/v1/chat/completions", body, "Content-Type", "application/json")
	}

	// A differently cased "Model" is an unknown parameter, not the model.
	r := post(`{"model":"glm/glm-5","Model":"oa/gpt-5","messages":[]}`)
	if r.code != 200 || r.h.Get("X-Breakwater-Provider") != "glm" {
		t.Fatalf(`{"model":"glm/glm-5","Model":"oa/gpt-5"}: %d provider %q %s; want glm (the exact key)`, r.code, r.h.Get("X-Breakwater-Provider"), r.body)
	}
	if r := post(`{"MODEL":"glm/glm-5","messages":[]}`); r.code != 400 || r.errCode() != "invalid_model" || r.h.Get("X-Breakwater-Attempts") != "0" {
		t.Fatalf(`{"MODEL":...}: %d %v %s; want 400 invalid_model (field "model" is required), X-Breakwater-Attempts: 0 as on every chat answer`, r.code, r.h, r.body)
	}
	// "Stream": true is not a stream request: the answer is JSON.
	r = post(`{"model":"glm/glm-5","Stream":true,"messages":[]}`)
	if r.code != 200 || !strings.HasPrefix(r.h.Get("Content-Type"), "application/json") {
		t.Fatalf(`"Stream": true: %d %q %s; want a JSON answer`, r.code, r.h.Get("Content-Type"), r.body)
	}

	// Wrong types are 400s that name the field, before any upstream call.
	before := up.total()
	for body, want := range map[string]string{
		`{"model":5,"messages":[]}`:                           `field \"model\" must be a string`,
		`{"model":"glm/glm-5","messages":"x"}`:                `field \"messages\" must be an array`,
		`{"model":"glm/glm-5","messages":{"role":"user"}}`:    `field \"messages\" must be an array`,
		`{"model":"glm/glm-5","messages":null}`:               `field \"messages\" must be an array`,
		`{"model":"glm/glm-5","messages":[],"stream":"yes"}`:  `field \"stream\" must be true or false`,
		`{"model":"glm/glm-5","messages":[],"stream":1}`:      `field \"stream\" must be true or false`,
		`{"model":["glm/glm-5"],"messages":[]}`:               `field \"model\" must be a string`,
		`{"model":null,"messages":[]}`:                        `field \"model\" is required`,
		`{"model":"glm/glm-5","messages":[]`:                  `not valid JSON`,
		`{"model":"glm/glm-5","messages":[]} {"model":"x"}`:   `not valid JSON`,
		`{"model":"glm/glm-5","messages":["\xff"],"x":tru}`:   `not valid JSON`,
		`{"model":"glm/glm-5","messages":[],"stream":"true"}`: `field \"stream\" must be true or false`,
	} {
		r := post(body)
		if r.code != 400 || !strings.Contains(r.body, want) || r.errCode() == "" {
			t.Errorf("%s: %d %s; want 400 naming %s", body, r.code, r.body, want)
		}
	}
	if n := up.total() - before; n != 0 {
		t.Fatalf("bad bodies reached the upstream %d times", n)
	}
	// Escapes in the model id are decoded; a repeated model is refused (the
	// upstream would be sent both copies), before any upstream call.
	if r := post(`{"model":"glm\/glm-5","messages":[]}`); r.code != 200 || r.h.Get("X-Breakwater-Provider") != "glm" {
		t.Fatalf(`escaped model: %d %s`, r.code, r.body)
	}
	before = up.total()
	if r := post(`{"model":"oa/gpt-5","model":"glm/glm-5","messages":[]}`); r.code != 400 || !strings.Contains(r.body, `field \"model\" appears more than once`) || up.total() != before {
		t.Fatalf(`duplicate model: %d %s`, r.code, r.body)
	}
}

// The malformed-event rule (model.MalformedEvents): a stream event whose
// data is not JSON is never passed on; one is skipped and counted and the
// client gets the whole answer from the same attempt (the fault catalogue's
// S10); only a run of them past the bound ends the stream — before commit
// the next connection serves, after commit an explicit error event and no
// [DONE], never garbage followed by a clean finish.
func TestCheckClientMalformedStreamChunk(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)

	// One bad event before any content: skipped, k1 serves.
	up.set("glm-k1", sse(streamOpt{chunks: 3, brokenAt: 1}))
	r := g.stream("glm/glm-5")
	ev := sseEvents(r.body)
	if r.code != 200 || r.h.Get("X-Breakwater-Connection") != "k1" || r.h.Get("X-Breakwater-Attempts") != "1" {
		t.Fatalf("one malformed event: %d conn %q attempts %q\n%s", r.code, r.h.Get("X-Breakwater-Connection"), r.h.Get("X-Breakwater-Attempts"), r.body)
	}
	if strings.Contains(r.body, `"lor`+"\n") || len(ev) == 0 || ev[len(ev)-1] != "[DONE]" || !strings.Contains(r.body, "tok2") {
		t.Fatalf("the malformed event reached the client or the stream is not whole:\n%s", r.body)
	}
	if !strings.Contains(g.do("GET", "/metrics", "").body, `breakwater_stream_malformed_events_total{connection="k1",provider="glm"} 1`) {
		t.Fatal("the skipped event is not counted")
	}

	// After commit: two good chunks, then more bad events in a row than
	// the bound (3) allows.
	up.set("oa-o1", func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for i := range 2 {
			fmt.Fprintf(w, "data: {\"id\":\"s\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i)
		}
		for range 4 {
			io.WriteString(w, "data: {\"id\":\"s\",\"choices\":[{\"delta\":{\"content\":\"lor\n\n")
		}
		io.WriteString(w, "data: {\"id\":\"s\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	r = g.stream("oa/gpt-5")
	ev = sseEvents(r.body)
	if r.code != 200 || len(ev) != 3 {
		t.Fatalf("post-commit malformed run: %d, want 2 chunks and an error event:\n%s", r.code, r.body)
	}
	if !strings.Contains(ev[0], "tok0") || !strings.Contains(ev[1], "tok1") {
		t.Fatalf("the good chunks were not passed on:\n%s", r.body)
	}
	if !isErrorEventT([]byte(ev[2])) || !strings.Contains(ev[2], "malformed") {
		t.Fatalf("last event %s: want an error event naming the malformed events", ev[2])
	}
	if strings.Contains(r.body, "[DONE]") || strings.Contains(r.body, `"lor`) {
		t.Fatalf("a broken stream ended cleanly or passed the garbage on:\n%s", r.body)
	}
}

// A base URL with a trailing slash makes clients ask for
// //v1/chat/completions. Served as the clean path (as nginx merges
// slashes), not a 301 that clients follow as a GET and get a 405 for.
func TestCheckClientDoubleSlashPathIsServed(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns)
	if r := g.do("POST", "//v1/chat/completions", `{"model":"glm/glm-5","messages":[]}`); r.code != 200 {
		t.Fatalf("POST //v1/chat/completions: %d %s", r.code, r.body)
	}
	if r := g.do("GET", "/v1//models", ""); r.code != 200 || !strings.Contains(r.body, "glm/glm-5") {
		t.Fatalf("GET /v1//models: %d %s", r.code, r.body)
	}
}

// docs/api.md: errors are OpenAI-shaped {"error":{"message","type","code"}}.
// An upstream error body in another shape (Anthropic's envelope, Gemini's
// numeric code and status, a bare string) reaches the client rewritten with
// its own message; one already in the shape goes out as it came.
func TestCheckClientUpstreamErrorBodyIsOpenAIShaped(t *testing.T) {
	cases := []struct{ in, code, typ, msg string }{
		{`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "overloaded_error", "overloaded_error", "Overloaded"},
		{`{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}`, "RESOURCE_EXHAUSTED", "rate_limit_error", "Resource has been exhausted"},
		{`{"error":"upstream is sad"}`, "upstream_error", "rate_limit_error", "upstream is sad"},
		{`{"error":{"message":"m","type":"t"}}`, "t", "t", "m"},
	}
	for _, c := range cases {
		b := clientErrorBody([]byte(c.in), 429, "p")
		var v errorBody
		if err := json.Unmarshal(b, &v); err != nil || v.Error.Code != c.code || v.Error.Type != c.typ || v.Error.Message != c.msg {
			t.Errorf("%s → %s", c.in, b)
		}
	}
	same := `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	if b := clientErrorBody([]byte(same), 429, "p"); string(b) != same {
		t.Errorf("an OpenAI-shaped body changed: %s", b)
	}
	for _, bad := range []string{`{"error":{}}`, `{"error":""}`, `{"error":{"message":5}}`, `{}`} {
		if b := clientErrorBody([]byte(bad), 502, "p"); b != nil {
			t.Errorf("%s: want nil (the gateway's own error), got %s", bad, b)
		}
	}
}

// docs/errors.md end to end: a client key allowed on none of the route's connections
// gets 404 no_executable_targets (nothing eligible, no timer), and an answer
// no upstream took part in names no provider or connection instead of
// sending the X-Breakwater headers empty.
func TestCheckClientKeyAllowedNowhere(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, twoConns+"clientKeys:\n  - {id: a, key: key-a, allowedConnections: [oa/o1]}\n")
	r := g.chat("glm/glm-5", "Authorization", "Bearer key-a")
	if r.code != 404 || r.errCode() != "no_executable_targets" || r.h.Get("Retry-After") != "" {
		t.Fatalf("key allowed nowhere: %d %s", r.code, r.body)
	}
	if _, ok := r.h["X-Breakwater-Provider"]; ok {
		t.Fatalf("X-Breakwater-Provider sent on an answer no provider took part in: %v", r.h)
	}
	if _, ok := r.h["X-Breakwater-Connection"]; ok {
		t.Fatalf("X-Breakwater-Connection sent on an answer no connection took part in: %v", r.h)
	}
	if up.total() != 0 {
		t.Fatalf("the upstream was called %d times", up.total())
	}
	if r := g.chat("oa/gpt-5", "Authorization", "Bearer key-a"); r.code != 200 || r.h.Get("X-Breakwater-Connection") != "o1" {
		t.Fatalf("the allowed connection: %d %v", r.code, r.h)
	}
}
