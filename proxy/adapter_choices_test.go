package proxy

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/internal/wire"
	"github.com/breakwater-gw/breakwater/model"
)

// The OpenAI stream shape with n > 1 (docs/gateway.md "Provider types and
// wire adapters"): every choice index gets exactly one role delta, before
// anything else of that choice, and a tool call's delta index counts the
// tool calls of its own choice (0, 1, … in each), while the ids stay unique
// in the answer. openai-node's stream helper throws "missing role for
// choice 1" otherwise, and numbers tool calls per choice. A Gemini stream
// with two candidates through the gateway had a role delta for choice 0
// only, and numbered choice 1's first tool call 1.
func TestGeminiStreamEveryChoiceHasItsRoleAndToolIndex(t *testing.T) {
	g, _ := newCaptureGW(t, "gemini", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"zero\"}]},\"index\":0}],\"responseId\":\"r1\",\"modelVersion\":\"gemini-x\"}\n\n"+
			"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"one\"}]},\"index\":1}]}\n\n"+
			"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":{\"a\":0}}}]},\"finishReason\":\"STOP\",\"index\":0},"+
			"{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"g\",\"args\":{\"b\":1}}}]},\"finishReason\":\"STOP\",\"index\":1}],"+
			"\"usageMetadata\":{\"promptTokenCount\":2,\"candidatesTokenCount\":6,\"totalTokenCount\":8}}\n\n")
	})
	r := g.do("POST", "/v1/chat/completions", `{"model":"p/m","n":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	ev := sseEvents(r.body)
	if len(ev) == 0 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("want [DONE] last:\n%s", r.body)
	}
	type choice struct {
		roles     int
		opened    bool // its role delta came
		text      string
		toolIndex []int
		finish    string
	}
	choices := map[int]*choice{}
	ids := map[string]bool{}
	callIDs := map[string]int{}
	for _, e := range ev[:len(ev)-1] {
		var c wire.AdapterChunk
		if err := json.Unmarshal([]byte(e), &c); err != nil || c.Object != "chat.completion.chunk" {
			t.Fatalf("not a chunk (%v): %s", err, e)
		}
		ids[c.ID] = true
		for _, ch := range c.Choices {
			st := choices[ch.Index]
			if st == nil {
				st = &choice{}
				choices[ch.Index] = st
			}
			d := ch.Delta
			if d.Role != "" {
				if d.Role != "assistant" {
					t.Fatalf("role %q: %s", d.Role, e)
				}
				st.roles++
				st.opened = true
			}
			hasContent := (d.Content != nil && *d.Content != "") || d.ReasoningContent != nil || len(d.ToolCalls) > 0 || ch.FinishReason != nil
			if hasContent && !st.opened {
				t.Fatalf("choice %d: content before its role delta: %s\n%s", ch.Index, e, r.body)
			}
			if d.Content != nil {
				st.text += *d.Content
			}
			for _, tc := range d.ToolCalls {
				if tc.Index == nil {
					t.Fatalf("tool call delta without an index: %s", e)
				}
				st.toolIndex = append(st.toolIndex, *tc.Index)
				if tc.ID != "" {
					callIDs[tc.ID]++
				}
			}
			if ch.FinishReason != nil {
				st.finish = *ch.FinishReason
			}
		}
	}
	if len(ids) != 1 || !ids["r1"] {
		t.Fatalf("all chunks share the answer's id r1, got %v", ids)
	}
	if len(choices) != 2 || choices[0] == nil || choices[1] == nil {
		t.Fatalf("want choices 0 and 1, got %v\n%s", choices, r.body)
	}
	want := map[int]string{0: "zero", 1: "one"}
	for i, st := range choices {
		if st.roles != 1 {
			t.Errorf("choice %d: %d role deltas, want exactly 1\n%s", i, st.roles, r.body)
		}
		if st.text != want[i] || st.finish != "tool_calls" {
			t.Errorf("choice %d: text %q finish %q", i, st.text, st.finish)
		}
		if len(st.toolIndex) != 1 || st.toolIndex[0] != 0 {
			t.Errorf("choice %d: tool call indexes %v, want [0] (counted per choice)\n%s", i, st.toolIndex, r.body)
		}
	}
	if len(callIDs) != 2 {
		t.Errorf("tool call ids must be unique in the answer: %v", callIDs)
	}
	for id, n := range callIDs {
		if n != 1 {
			t.Errorf("tool call id %s sent %d times", id, n)
		}
	}
	// A blocked prompt (no candidates) is a choice too: its role delta
	// comes before its content_filter finish.
	ev = translateStream(t, &geminiWire{}, "data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"}}\n\n")
	if len(ev) != 3 || ev[2] != "[DONE]" || !strings.Contains(ev[0], `"index":0,"delta":{"role":"assistant"`) || !strings.Contains(ev[1], `"finish_reason":"content_filter"`) {
		t.Fatalf("blocked prompt: want role, content_filter finish, [DONE]: %v", ev)
	}
}

// logit_bias cannot be expressed by the anthropic or gemini native
// formats, and a bias of -100 bans a token: dropping it silently changes
// the request as much as dropping logprobs, so a non-empty logit_bias is a
// wireError (400 unsupported_by_provider_type; a combo passes the target
// over). An empty object or null asks nothing and is accepted.
func TestAdapterLogitBiasIsUnsupported(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	build := map[string]func(body []byte) ([]byte, error){
		"anthropic": func(b []byte) ([]byte, error) { return wire.ChatRequestToMessages(b, "m", false) },
		"gemini":    wire.ChatRequestToGemini,
	}
	for typ, f := range build {
		for _, in := range []string{
			`{"model":"m","logit_bias":{"50256":-100},` + msgs + `}`,
			`{"model":"m","logit_bias":{"1":5,"2":-5},` + msgs + `}`,
			`{"model":"m",` + msgs + `,"logit_bias": {"50256": -100}}`,
			// the same field spelled with an escape
			`{"model":"m","logit\u005fbias":{"50256":-100},` + msgs + `}`,
			// not an object: not something to drop either
			`{"model":"m","logit_bias":[1],` + msgs + `}`,
		} {
			req, err := parseChatRequest([]byte(in))
			if err != nil {
				t.Fatalf("%s: the gateway accepts the body: %v", in, err)
			}
			_, err = f(req.body)
			var we *wireError
			if !errors.As(err, &we) || !strings.Contains(err.Error(), "logit_bias") {
				t.Errorf("%s %s: want a wireError naming logit_bias, got %v", typ, in, err)
				continue
			}
			merr, ok := unsupportedError(typ, err)
			if !ok || merr.Code != model.CodeUnsupportedByProviderType || merr.Code.HTTPStatus() != 400 {
				t.Errorf("%s: rejection %+v", typ, merr)
			}
		}
		for _, in := range []string{
			`{"model":"m","logit_bias":{},` + msgs + `}`,
			`{"model":"m","logit_bias": { },` + msgs + `}`,
			`{"model":"m","logit_bias":null,` + msgs + `}`,
			`{"model":"m",` + msgs + `}`,
			// the words in a message are not the field
			`{"model":"m","messages":[{"role":"user","content":"what does \"logit_bias\":{\"1\":-100} do? \u00e9"}]}`,
		} {
			if out, err := f([]byte(in)); err != nil || !json.Valid(out) {
				t.Errorf("%s %s: want a native body, got %v", typ, in, err)
			}
		}
	}
}
