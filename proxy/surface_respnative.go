package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/breakwater-gw/breakwater/internal/wire"
)

// A Responses request to a provider marked responsesAPI goes native: the
// client's body (model replaced) to {baseURL}/responses and the
// upstream's answer back as it came, so everything the chat translation
// cannot carry — built-in and custom tools, file inputs, encrypted
// reasoning, the upstream's own stored responses — works there. Other
// targets get the chat translation. The gateway stores only the answers
// it translated; a previous_response_id it does not know belongs to a
// native upstream, so such a request goes to native targets only, and one
// it stored to translated targets only (the upstream does not know it).

const responsesPath = "/v1/responses"

// respNativeWire is a Responses request's per-provider adapters: the
// client's body to responsesAPI providers (unless the request has to be
// translated), the provider's chat path otherwise.
func respNativeWire(nr *nativeReq) func(*provRuntime) wireAdapter {
	return passThroughAdapters(nr, func(p *provRuntime, nr *nativeReq) bool { return p.cfg.ResponsesAPI && !nr.noNative },
		"/responses", "openai (responsesAPI)",
		func(http.Header, string) {}) // the connection's Authorization, as for chat
}

// rawEvent passes a native Responses event through; an OpenAI-shaped
// error event (the gateway's own after a break) becomes the Responses
// error event and response.failed.
func (c *respConv) rawEvent(dst, name, data []byte) ([]byte, bool) {
	if c.nr == nil || !c.nr.native {
		return dst, false
	}
	if e, ok := wire.ParseChatError(data); ok && !bytes.Contains(data, []byte(`"type":"error"`)) {
		code := e.CodeString()
		if code == "" {
			code = "upstream_error"
		}
		return c.st.Error(dst, code, e.Message), true
	}
	c.st.Passed(data)
	return appendRawEvent(dst, name, data), true
}

// untranslatableResponses is the placeholder chat request of a Responses
// request only native targets can serve (never sent to any target).
func untranslatableResponses(body []byte, re *wire.RequestError) (*wire.RespTranslation, []byte, error) {
	var m struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.Model == "" {
		return nil, nil, re
	}
	chat, err := json.Marshal(map[string]any{"model": m.Model, "stream": m.Stream, "messages": []any{}})
	if err != nil {
		return nil, nil, re
	}
	return &wire.RespTranslation{Req: &wire.RespRequest{Model: m.Model, Stream: m.Stream}, Stream: m.Stream}, chat, nil
}

// anyResponsesAPI reports whether some provider serves Responses natively.
func (g *Gateway) anyResponsesAPI() bool {
	for _, p := range g.conf().Providers {
		if p.ResponsesAPI {
			return true
		}
	}
	return false
}
