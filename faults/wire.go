package faults

import (
	"net/http"

	bw "github.com/breakwater-gw/breakwater/internal/wire"
)

// wire is the wire format a Server answers a chat attempt in. The rules
// and the Response say what happens (status, latency, faults, chunk
// counts); the answer is written as a chat completion (faults/answer.go);
// the wire only says how its bytes look, through the gateway's own
// translations (internal/wire), so the fault upstream and the gateway
// agree on every format. The path of the request selects it:
//
//	POST …/v1/chat/completions                        OpenAI (default)
//	POST …/v1/messages                                Anthropic Messages
//	POST …/v1/models/{model}:generateContent          Gemini
//	POST …/v1/models/{model}:streamGenerateContent    Gemini (SSE)
//	POST …/v1/responses                               OpenAI Responses
//
// so a gateway provider of type anthropic or gemini pointed at
// http://ADDR/P/v1 is answered in its own format. A stream's translation
// holds state: one wire value per attempt.
type wire interface {
	// ids are the format's ids of an answer and of its tool call.
	ids() (answer, call string)
	// completion renders a chat.completion as the 2xx JSON answer.
	completion(chat string) string
	// start is written before a stream's first content event, from the
	// answer's opening chunk ("" = nothing).
	start(opening string) string
	// event renders one chat.completion.chunk (whole SSE events).
	event(chunk string) string
	// end finishes a stream after its last chunk; done adds the format's
	// terminator (the no-done fault leaves it out).
	end(done bool) string
	// malformed is a content event whose data is not valid JSON.
	malformed() string
	// errorBody is the default error body for a status.
	errorBody(status int) string
	// invalid is the body of a 400 that says msg.
	invalid(msg string) string
}

// openaiWire is the OpenAI chat-completions format: the answer as it is.
type openaiWire struct{}

func (openaiWire) ids() (string, string)         { return "chatcmpl-fault", "call_fault" }
func (openaiWire) completion(chat string) string { return chat }
func (openaiWire) start(string) string           { return "" }
func (openaiWire) event(chunk string) string     { return string(bw.AppendSSE(nil, "", []byte(chunk))) }
func (openaiWire) malformed() string {
	return "data: {\"id\":\"chatcmpl-fault\",\"choices\":[{\"delta\":{\"content\":\"lor\n\n"
}
func (openaiWire) end(done bool) string {
	if done {
		return "data: [DONE]\n\n"
	}
	return ""
}
func (openaiWire) errorBody(status int) string { return DefaultErrorBody(status) }
func (openaiWire) invalid(msg string) string {
	return string(bw.ChatError(msg, "invalid_request_error", "invalid_request"))
}

// errorBodyFor is the body of an error response: the rule's Body, else the
// wire's default for the status.
func errorBodyFor(w wire, r *Response) string {
	if r.Body != "" {
		return r.Body
	}
	return w.errorBody(r.StatusOrOK())
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
