package faults

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	bw "github.com/breakwater-gw/breakwater/internal/wire"
)

// geminiWire is the Gemini generateContent format
// (POST …/v1/models/{model}:generateContent, and
// :streamGenerateContent?alt=sse for streams), rendered by the Gemini
// translation of internal/wire.
type geminiWire struct {
	st *bw.GemStream
}

func newGeminiWire(model string) geminiWire {
	return geminiWire{st: &bw.GemStream{Model: model, ID: "fault"}}
}

func (geminiWire) ids() (string, string) { return "chatcmpl-fault", "call_fault" }

func (w geminiWire) completion(chat string) string {
	b, err := bw.ChatToGemini([]byte(chat), w.st.Model, w.st.ID)
	if err != nil {
		return "{}"
	}
	return string(b)
}

func (geminiWire) start(string) string         { return "" }
func (w geminiWire) event(chunk string) string { return string(w.st.Event(nil, []byte(chunk))) }

// end: Gemini streams have no terminator (no-done changes nothing); the
// last event carries finishReason and usage.
func (w geminiWire) end(bool) string { return string(w.st.End(nil)) }

func (geminiWire) malformed() string {
	return "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"lor\n\n"
}

func (geminiWire) errorBody(status int) string { return geminiErrorBody(status) }
func (geminiWire) invalid(msg string) string {
	return string(bw.GeminiError(400, "INVALID_ARGUMENT", msg))
}

// generate answers a Gemini attempt: POST …/v1/models/{model}:generateContent
// or …:streamGenerateContent (streamed as SSE whatever alt says), and
// …:batchEmbedContents (faults/embed.go).
func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	model, method, ok := bw.ParseGeminiAction(r.PathValue("action"))
	if ok && method == "batchEmbedContents" {
		s.batchEmbed(w, r, model)
		return
	}
	var body struct {
		Contents json.RawMessage `json:"contents"`
	}
	b, err := readJSON(r, &body)
	if !ok || (method != "generateContent" && method != "streamGenerateContent") || err != nil {
		writeError(w, 400, geminiWire{}.invalid("invalid request: want POST models/{model}:generateContent with a JSON body"), nil)
		return
	}
	s.attempt(w, withShape(r, b), newGeminiWire(model), model, method == "streamGenerateContent", prefill{})
}

// geminiModels is a Gemini models list.
func geminiModels(models []string) string {
	var b strings.Builder
	b.WriteString(`{"models":[`)
	for i, m := range models {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":%q,"supportedGenerationMethods":["generateContent","streamGenerateContent"]}`, "models/"+m)
	}
	b.WriteString("]}")
	return b.String()
}
