package proxy

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/internal/wire"
)

// geminiWire speaks the Gemini generateContent API. baseURL includes the
// version segment, as for the openai type:
// https://generativelanguage.googleapis.com/v1beta →
// POST {baseURL}/models/{model}:generateContent,
// POST {baseURL}/models/{model}:streamGenerateContent?alt=sse,
// GET {baseURL}/models.
// The format itself (the request, the answer, the stream events) is
// internal/wire's (upstream_gemini.go), shared with the fault upstream.
type geminiWire struct{ base string }

func (g *geminiWire) modelsURL() string { return g.base + "/models" }

func (g *geminiWire) setAuth(h http.Header, apiKey string) {
	if apiKey != "" {
		h.Set("X-Goog-Api-Key", apiKey)
	}
}

// geminiURL is the generateContent URL of a model ("models/x" or "x").
func (g *geminiWire) url(model string, stream bool) string {
	m := url.PathEscape(strings.TrimPrefix(model, "models/"))
	if stream {
		return g.base + "/models/" + m + ":streamGenerateContent?alt=sse"
	}
	return g.base + "/models/" + m + ":generateContent"
}

func (g *geminiWire) encode(req *chatRequest, upstreamModel string) (string, []byte, error) {
	body, err := wire.ChatRequestToGemini(req.body)
	return g.url(upstreamModel, req.Stream), body, err
}

func (g *geminiWire) wrap(resp *http.Response, model string) {
	resp.ContentLength = -1
	created := time.Now().Unix()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		st := wire.NewGeminiChatStream(created, model)
		resp.Body = newSSETranslator(resp.Body, st.Event, st.End)
		return
	}
	resp.Body = &jsonTranslator{src: resp.Body, translate: func(b []byte) ([]byte, error) {
		return wire.GeminiAnswerToChat(b, created, model)
	}}
}
