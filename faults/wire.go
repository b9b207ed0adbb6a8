package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// wire is the wire format a Server answers a chat attempt in. The rules
// and the Response say what happens (status, latency, faults, chunk
// counts); the wire only says how the bytes look. The path of the request
// selects it:
//
//	POST …/v1/chat/completions                        OpenAI (default)
//	POST …/v1/messages                                Anthropic Messages
//	POST …/v1/models/{model}:generateContent          Gemini
//	POST …/v1/models/{model}:streamGenerateContent    Gemini (SSE)
//
// so a gateway provider of type anthropic or gemini pointed at
// http://ADDR/P/v1 is answered in its own format.
type wire interface {
	// completion is a 2xx JSON answer of chunks content chunks.
	completion(model string, chunks int) string
	// streamStart is written before the first content event ("" = none).
	streamStart(model string) string
	// chunk is one content event (the whole SSE event, blank line included).
	chunk(model, text string, first bool) string
	// malformed is a content event whose data is not valid JSON.
	malformed() string
	// streamEnd finishes a stream of chunks content chunks; done adds the
	// format's terminator (the no-done fault leaves it out).
	streamEnd(model string, chunks int, done bool) string
	// errorBody is the default error body for a status.
	errorBody(status int) string
}

// openaiWire is the OpenAI chat-completions format.
type openaiWire struct{}

func (openaiWire) completion(model string, chunks int) string { return completionJSON(model, chunks) }
func (openaiWire) streamStart(string) string                  { return "" }
func (openaiWire) chunk(model, text string, first bool) string {
	return "data: " + chunkJSON(model, text, first) + "\n\n"
}
func (openaiWire) malformed() string {
	return "data: {\"id\":\"chatcmpl-fault\",\"choices\":[{\"delta\":{\"content\":\"lor\n\n"
}
func (openaiWire) streamEnd(model string, n int, done bool) string {
	s := fmt.Sprintf("data: {\"id\":\"chatcmpl-fault\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
		model, n*4, 8+n*4)
	if done {
		s += "data: [DONE]\n\n"
	}
	return s
}
func (openaiWire) errorBody(status int) string { return DefaultErrorBody(status) }

// errorBodyFor is the body of an error response: the rule's Body, else the
// wire's default for the status.
func errorBodyFor(w wire, r *Response) string {
	if r.Body != "" {
		return r.Body
	}
	return w.errorBody(r.StatusOrOK())
}

// sseEvent writes one named SSE event.
func sseEvent(name, data string) string {
	var b strings.Builder
	if name != "" {
		b.WriteString("event: ")
		b.WriteString(name)
		b.WriteByte('\n')
	}
	b.WriteString("data: ")
	b.WriteString(data)
	b.WriteString("\n\n")
	return b.String()
}

// messages answers an Anthropic Messages attempt (POST …/v1/messages).
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	var req chatRequest // model and stream have the same names in a Messages body
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.Model == "" {
		writeError(w, 400, `{"type":"error","error":{"type":"invalid_request_error","message":"invalid request: body must be a JSON Messages request with a model"}}`, nil)
		return
	}
	s.attempt(w, withShape(r, body), anthropicWire{}, req.Model, req.Stream, prefillOf(req.Messages))
}

// generate answers a Gemini attempt: POST …/v1/models/{model}:generateContent
// or …:streamGenerateContent (streamed as SSE whatever alt says).
func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if m, ok := strings.CutSuffix(action, ":batchEmbedContents"); ok {
		s.batchEmbed(w, r, m) // faults/embed.go
		return
	}
	i := strings.LastIndexByte(action, ':')
	var stream bool
	if i > 0 {
		switch action[i+1:] {
		case "generateContent":
		case "streamGenerateContent":
			stream = true
		default:
			i = -1
		}
	}
	var body struct {
		Contents json.RawMessage `json:"contents"`
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err == nil {
		err = json.Unmarshal(b, &body)
	}
	if i <= 0 || err != nil {
		writeError(w, 400, `{"error":{"code":400,"message":"invalid request: want POST models/{model}:generateContent with a JSON body","status":"INVALID_ARGUMENT"}}`, nil)
		return
	}
	s.attempt(w, withShape(r, b), geminiWire{}, action[:i], stream, prefill{})
}

// modelsWire is the format of a models request, told by its auth header.
func modelsWire(r *http.Request) wire {
	switch {
	case r.Header.Get("X-Goog-Api-Key") != "":
		return geminiWire{}
	case r.Header.Get("Anthropic-Version") != "":
		return anthropicWire{}
	}
	return openaiWire{}
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
