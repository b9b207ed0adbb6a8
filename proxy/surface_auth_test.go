package proxy

import (
	"strings"
	"testing"
)

// A missing or wrong client key on the OpenAI surfaces (Responses,
// embeddings) is a 401 with OpenAI's invalid_api_key code, as on chat.
func TestOpenAISurfacesNameABadKeyAsChatDoes(t *testing.T) {
	g, _ := newMsgGW(t)
	for _, path := range []string{"/v1/responses", "/v1/embeddings", "/v1/chat/completions"} {
		r := g.do("POST", path, `{"model":"m","input":"hi","messages":[]}`, "Authorization", "Bearer wrong")
		if r.code != 401 || !strings.Contains(r.body, `"code":"invalid_api_key"`) {
			t.Errorf("%s: %d %s, want 401 invalid_api_key", path, r.code, r.body)
		}
	}
}

// Chat completions takes the client key from x-api-key too (Anthropic's
// header, what an Anthropic client pointed at an OpenAI endpoint sends),
// as every other client surface does; Authorization wins when both come.
func TestChatCompletionsTakesXAPIKey(t *testing.T) {
	g, _ := newMsgGW(t)
	body := `{"model":"oa/gpt","messages":[{"role":"user","content":"hi"}]}`
	if r := g.do("POST", "/v1/chat/completions", body, "X-Api-Key", "team-key"); r.code != 200 {
		t.Fatalf("x-api-key: %d %s", r.code, r.body)
	}
	if r := g.do("POST", "/v1/chat/completions", body, "X-Api-Key", "wrong"); r.code != 401 {
		t.Fatalf("a wrong x-api-key: %d %s", r.code, r.body)
	}
	if r := g.do("POST", "/v1/chat/completions", body, "X-Api-Key", "team-key", "Authorization", "Bearer wrong"); r.code != 401 {
		t.Fatalf("Authorization wins over x-api-key: %d %s", r.code, r.body)
	}
}

// A Messages text block without its text is Anthropic's 400
// invalid_request_error naming the field, before any attempt.
func TestMessagesTextBlockWithoutText(t *testing.T) {
	g, _ := newMsgGW(t)
	r := g.do("POST", "/v1/messages", `{"model":"oa/gpt","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "X-Api-Key", "team-key")
	if r.code != 400 || !strings.Contains(r.body, `"type":"error"`) || !strings.Contains(r.body, `"invalid_request_error"`) ||
		!strings.Contains(r.body, "messages[0].content[0].text") || r.h.Get("X-Breakwater-Attempts") != "0" {
		t.Fatalf("%d %s", r.code, r.body)
	}
}
