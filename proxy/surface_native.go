package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/breakwater-gw/breakwater/internal/wire"
)

// A Messages request to an anthropic-type target goes native: the
// client's own body (its model replaced by the target's) is sent as it
// came, and the native answer comes back as it is, so nothing the pivot
// through chat would lose is lost — cache_control, thinking and its
// signatures, top_k, server tools, fields added to the API later. Other
// targets of the same request get the chat translation. The flow, the
// stream watchdogs and commit rules are the same either way (the model
// reads Messages streams natively).

const messagesPath = "/v1/messages"

// nativeReq is a Messages request's native state, shared by its attempts
// and the surfaceWriter: the client's body, and whether the attempt now
// being delivered went native.
type nativeReq struct {
	body   []byte
	parsed *chatRequest // body with its model's position, for bodyFor
	native bool
	// only: why the request cannot be translated to chat ("" when it
	// can): then only native targets serve it.
	only string
	// noNative: only translated targets serve it (a Responses request
	// continuing a response the gateway stored).
	noNative bool
}

// untranslatableMessages is the placeholder chat request of a Messages
// request only native targets can serve: it carries what the gateway
// routes by (model, stream), and no target is ever sent it.
func untranslatableMessages(body []byte, re *wire.RequestError) (*wire.MsgTranslation, error) {
	var m struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.Model == "" {
		return nil, re
	}
	chat, err := json.Marshal(map[string]any{"model": m.Model, "stream": m.Stream, "messages": []any{}})
	if err != nil {
		return nil, re
	}
	return &wire.MsgTranslation{Chat: chat, Model: m.Model, Stream: m.Stream}, nil
}

// nativeWire is a Messages request's per-provider adapters: the client's
// body to anthropic types, the provider's chat path otherwise.
func nativeWire(nr *nativeReq) func(*provRuntime) wireAdapter {
	return passThroughAdapters(nr, func(p *provRuntime, _ *nativeReq) bool { return p.cfg.Type == "anthropic" },
		"/messages", "anthropic", anthropicAuth)
}

// anthropicAuth sets an anthropic connection's credential headers.
var anthropicAuth = (&anthropicWire{}).setAuth

// passThroughAdapters is a surface request's per-provider adapters: the
// client's own body to a provider that speaks its format (native), the
// provider's chat path otherwise, each saying which way the attempt it
// delivers went.
func passThroughAdapters(nr *nativeReq, native func(*provRuntime, *nativeReq) bool, path, label string,
	auth func(http.Header, string)) func(*provRuntime) wireAdapter {
	if nr == nil {
		return nil
	}
	a := &surfaceAdapters{nr: nr, native: native, path: path, label: label, auth: auth}
	return a.get
}

// surfaceAdapters makes a surface request's adapter for a provider. An
// attempt asks for its provider's adapter several times (encode, request,
// answer): the last one made is kept, so each costs one look. native is
// asked each time: what it reads (nr.noNative) may change before the next
// attempt.
type surfaceAdapters struct {
	nr          *nativeReq
	native      func(*provRuntime, *nativeReq) bool
	path, label string
	auth        func(http.Header, string)

	last *provRuntime
	pass *passThroughWire
	chat *chatPathWire
}

func (a *surfaceAdapters) get(p *provRuntime) wireAdapter {
	if p != a.last {
		a.last, a.pass, a.chat = p, nil, nil
	}
	if a.native(p, a.nr) {
		if a.pass == nil {
			a.pass = &passThroughWire{base: strings.TrimRight(p.cfg.BaseURL, "/"), path: a.path, label: a.label, auth: a.auth, nr: a.nr}
		}
		return a.pass
	}
	if a.chat == nil {
		a.chat = &chatPathWire{inner: p.wire, base: strings.TrimRight(p.cfg.BaseURL, "/"), nr: a.nr,
			maxCompletion: p.cfg.Type == "openai"}
		if p.wire == nil && p.chatErr == nil {
			a.chat.tmpl = p.chatReq
		}
	}
	return a.chat
}

// passThroughWire sends the client's own body (model replaced) to a
// provider that speaks the client's format.
type passThroughWire struct {
	base, path string
	label      string // the provider type named when the body cannot be read
	auth       func(http.Header, string)
	nr         *nativeReq
}

func (w *passThroughWire) encode(_ *chatRequest, upstreamModel string) (string, []byte, error) {
	if w.nr.parsed == nil {
		cr, err := parseChatRequest(w.nr.body)
		if err != nil {
			return "", nil, &wireError{Type: w.label, Msg: err.Error()}
		}
		w.nr.parsed = &cr
	}
	return w.base + w.path, w.nr.parsed.bodyFor(upstreamModel), nil
}

func (w *passThroughWire) setAuth(h http.Header, apiKey string) { w.auth(h, apiKey) }
func (w *passThroughWire) modelsURL() string                    { return w.base + "/models" }
func (w *passThroughWire) wrap(*http.Response, string)          { w.nr.native = true }

// chatPathWire is a provider's ordinary chat attempt (its own adapter, or
// the OpenAI-compatible chat URL) within a Messages request.
//
// The output budget of a translated request goes to an openai-type
// provider as max_completion_tokens: OpenAI's API takes it for every
// model, and its reasoning models (o-series, gpt-5) refuse max_tokens.
// The other OpenAI-compatible types (local, glm, agentrouter, opencode:
// vLLM, llama.cpp, Ollama and hosted servers that predate the new name)
// get max_tokens, which every one of them reads.
type chatPathWire struct {
	inner         wireAdapter
	base          string
	nr            *nativeReq
	maxCompletion bool // send max_completion_tokens (openai type)
	// tmpl is the provider's chat URL parsed once (OpenAI-compatible
	// types): the upstream request copies it, as a chat request's does
	// (newPostRequest).
	tmpl *http.Request
}

func (c *chatPathWire) postTemplate() *http.Request { return c.tmpl }

func (c *chatPathWire) encode(req *chatRequest, upstreamModel string) (string, []byte, error) {
	if c.nr.only != "" {
		return "", nil, &wireError{Type: "(chat translation)", Msg: "only a native target can serve this request: " + c.nr.only}
	}
	if c.inner != nil {
		return c.inner.encode(req, upstreamModel)
	}
	body := req.bodyFor(upstreamModel)
	if c.maxCompletion {
		body = wire.UseMaxCompletionTokens(body)
	}
	return c.base + "/chat/completions", body, nil
}

func (c *chatPathWire) setAuth(h http.Header, apiKey string) {
	if c.inner != nil {
		c.inner.setAuth(h, apiKey)
	}
	// OpenAI-compatible types: the connection's Authorization, as for chat.
}

func (c *chatPathWire) modelsURL() string { return c.base + "/models" }

func (c *chatPathWire) wrap(resp *http.Response, model string) {
	c.nr.native = false
	if c.inner != nil {
		c.inner.wrap(resp, model)
	}
}

// rawEvent passes a native Messages event through (its event name from
// its type when the line had none); an OpenAI-shaped error event (the
// gateway's own after a break, or an upstream error rewritten for the
// client) becomes Anthropic's error event.
func (c *msgConv) rawEvent(dst, name, data []byte) ([]byte, bool) {
	if c.nr == nil || !c.nr.native {
		return dst, false
	}
	if e, ok := wire.ParseChatError(data); ok && !bytes.Contains(data, []byte(`"type":"error"`)) {
		return c.st.ChatError(dst, &e), true
	}
	return appendRawEvent(dst, name, data), true
}

// appendRawEvent writes a native event as it came: its event name (from
// the SSE event line, else its data's "type") and its data.
func appendRawEvent(dst, name, data []byte) []byte {
	if len(name) == 0 {
		var t struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(data, &t)
		name = []byte(t.Type)
	}
	return wire.AppendSSE(dst, name, data)
}
