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
