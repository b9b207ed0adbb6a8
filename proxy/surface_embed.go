package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/breakwater-gw/breakwater/internal/wire"
)

// POST /v1/embeddings (OpenAI embeddings). Like chat, the request runs
// through handleChat — the same flow, breaker, cooldowns, lockouts and
// fallbacks — with an embeddings wire adapter per attempt instead of the
// provider's chat adapter: OpenAI-compatible types get the client's body
// at {baseURL}/embeddings, gemini gets batchEmbedContents, and anthropic
// (no embeddings API) passes the target over
// (unsupported_by_provider_type when no target can serve).

const embeddingsPath = "/v1/embeddings"

// surfaceWire is a request's wire override: nil for chat completions,
// the embeddings adapters for an embeddings request, the Messages native
// pass-through for a Messages request (surface_native.go).
func surfaceWire(r *http.Request) func(*provRuntime) wireAdapter {
	if r.URL == nil {
		return nil
	}
	switch r.URL.Path {
	case embeddingsPath:
	case messagesPath:
		return nativeWire(r)
	case responsesPath:
		return respNativeWire(r)
	default:
		return nil
	}
	var cache map[*provRuntime]wireAdapter
	return func(p *provRuntime) wireAdapter {
		if w, ok := cache[p]; ok {
			return w
		}
		if cache == nil {
			cache = map[*provRuntime]wireAdapter{}
		}
		w := &embedWire{typ: p.cfg.Type, base: strings.TrimRight(p.cfg.BaseURL, "/")}
		cache[p] = w
		return w
	}
}

// wireFor is the adapter an attempt at p uses: the request's surface
// override, else the provider's own (nil for OpenAI-compatible chat).
func (rs *reqState) wireFor(p *provRuntime) wireAdapter {
	if rs.wireOver != nil {
		return rs.wireOver(p)
	}
	return p.wire
}

// embedWire is one provider type's embeddings call.
type embedWire struct {
	typ, base string
	b64       bool // the client asked for base64 (gemini answers floats)
}

func (e *embedWire) encode(req *chatRequest, upstreamModel string) (string, []byte, error) {
	switch e.typ {
	case "gemini":
		r, err := wire.ParseEmbeddings(req.body)
		if err != nil {
			return "", nil, &wireError{e.typ, err.Error()}
		}
		e.b64 = r.EncodingFormat == "base64"
		body, err := wire.EmbeddingsToGemini(r, upstreamModel)
		if err != nil {
			return "", nil, &wireError{e.typ, err.Error()}
		}
		m := url.PathEscape(strings.TrimPrefix(upstreamModel, "models/"))
		return e.base + "/models/" + m + ":batchEmbedContents", body, nil
	case "anthropic":
		return "", nil, &wireError{e.typ, "the provider type has no embeddings API"}
	}
	return e.base + "/embeddings", req.bodyFor(upstreamModel), nil
}

func (e *embedWire) setAuth(h http.Header, apiKey string) {
	if e.typ == "gemini" && apiKey != "" {
		h.Set("X-Goog-Api-Key", apiKey)
	}
	// OpenAI-compatible types: the connection's Authorization, as for chat.
}

func (e *embedWire) modelsURL() string { return e.base + "/models" }

func (e *embedWire) wrap(resp *http.Response, model string) {
	if e.typ != "gemini" {
		return
	}
	resp.ContentLength = -1
	b64 := e.b64
	resp.Body = &jsonTranslator{src: resp.Body, translate: func(b []byte) ([]byte, error) { return wire.GeminiToEmbeddings(b, model, b64) }}
}

// handleEmbeddings serves POST /v1/embeddings.
func (g *Gateway) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	refuse := openAIRefuse(w)
	body, ok := g.surfaceBody(w, r, refuse)
	if !ok {
		return
	}
	if _, err := wire.ParseEmbeddings(body); err != nil {
		w.Header().Set("X-Breakwater-Attempts", "0")
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	g.handleChat(w, r) // the client speaks the OpenAI shapes the pipeline writes
}
