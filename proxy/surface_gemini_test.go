package proxy

import (
	"strings"
	"testing"
)

// Every client format reaches a gemini-type target through the chat
// translation and the gemini adapter: Messages and Responses, JSON and
// stream.
func TestMessagesAndResponsesToGemini(t *testing.T) {
	g, _ := newWireGW(t)
	r := g.do("POST", "/v1/messages", `{"model":"gm/flash","max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`)
	if r.code != 200 || !strings.Contains(r.body, `"type":"message"`) || !strings.Contains(r.body, `"text":"`+wantText+`"`) || r.h.Get("X-Breakwater-Provider") != "gm" {
		t.Fatalf("messages → gemini: %d %s", r.code, r.body)
	}
	r = g.do("POST", "/v1/messages", `{"model":"gm/flash","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if r.code != 200 || !strings.Contains(r.body, "event: message_stop") || strings.Count(r.body, "event: content_block_delta") < 8 {
		t.Fatalf("messages stream → gemini: %d %s", r.code, r.body)
	}
	r = g.do("POST", "/v1/responses", `{"model":"gm/flash","input":"hi"}`)
	if r.code != 200 || !strings.Contains(r.body, `"object":"response"`) || !strings.Contains(r.body, `"text":"`+wantText+`"`) {
		t.Fatalf("responses → gemini: %d %s", r.code, r.body)
	}
	r = g.do("POST", "/v1/responses", `{"model":"gm/flash","input":"hi","stream":true}`)
	if r.code != 200 || !strings.Contains(r.body, "event: response.completed") {
		t.Fatalf("responses stream → gemini: %d %s", r.code, r.body)
	}
}
