package proxy

import (
	"net/http"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/internal/wire"
)

// anthropicWire speaks the Anthropic Messages API. baseURL follows the
// openai type's convention (it includes the version segment):
// https://api.anthropic.com/v1 → POST {baseURL}/messages, GET {baseURL}/models.
// The format itself (the request, the answer, the stream events) is
// internal/wire's (upstream_anthropic.go), shared with the fault upstream.
type anthropicWire struct{ base string }

// anthropicVersion is the API version header every request carries.
const anthropicVersion = "2023-06-01"

func (a *anthropicWire) modelsURL() string { return a.base + "/models" }

func (a *anthropicWire) setAuth(h http.Header, apiKey string) {
	if apiKey != "" {
		h.Set("X-Api-Key", apiKey)
	}
	h.Set("Anthropic-Version", anthropicVersion)
}

func (a *anthropicWire) encode(req *chatRequest, upstreamModel string) (string, []byte, error) {
	body, err := wire.ChatRequestToMessages(req.body, upstreamModel, req.Stream)
	return a.base + "/messages", body, err
}

func (a *anthropicWire) wrap(resp *http.Response, model string) {
	resp.ContentLength = -1
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		st := wire.NewMessagesChatStream(model)
		resp.Body = newSSETranslator(resp.Body, st.Event, nil)
		return
	}
	created := time.Now().Unix()
	resp.Body = &jsonTranslator{src: resp.Body, translate: func(b []byte) ([]byte, error) {
		return wire.MessagesAnswerToChat(b, created, model)
	}}
}
