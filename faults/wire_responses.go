package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	bw "github.com/breakwater-gw/breakwater/internal/wire"
)

// responsesWire is the OpenAI Responses format (POST …/v1/responses),
// rendered from the chat answer by the gateway's own translation
// (internal/wire), so the fault upstream and the gateway agree on it. A
// stream's translation state is per attempt: one responsesWire per
// request.
type responsesWire struct {
	st *bw.RespStream
}

func newResponsesWire(model string) *responsesWire {
	return &responsesWire{st: &bw.RespStream{Meta: bw.RespMeta{ID: "resp_fault", Model: model}}}
}

func (w *responsesWire) completion(model string, chunks int) string {
	return w.completionFrom(completionJSON(model, chunks))
}

func (w *responsesWire) streamStart(model string) string {
	return string(w.st.Event(nil, []byte(`{"id":"chatcmpl-fault","choices":[{"index":0,"delta":{"role":"assistant"}}]}`)))
}

func (w *responsesWire) chunk(model, text string, first bool) string {
	return string(w.st.Event(nil, []byte(chunkJSON(model, text, first))))
}

func (w *responsesWire) malformed() string {
	return "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"lor\n\n"
}

func (w *responsesWire) streamEnd(model string, n int, done bool) string {
	end := fmt.Sprintf(`{"id":"chatcmpl-fault","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}`, n*4, 8+n*4)
	out := w.st.Event(nil, []byte(end))
	if done { // the no-done fault leaves out response.completed
		out = w.st.End(out)
	}
	return string(out)
}

func (w *responsesWire) errorBody(status int) string { return DefaultErrorBody(status) }

// responses answers POST …/v1/responses like a chat attempt.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	var t *bw.RespTranslation
	if err == nil {
		t, err = bw.ResponsesToChat(body)
	}
	var re *bw.RequestError
	if errors.As(err, &re) && re.Untranslatable {
		// A real Responses upstream serves what chat cannot carry (built-in
		// tools, file inputs): read what the answer needs.
		var m bw.RespRequest
		if json.Unmarshal(body, &m) == nil && m.Model != "" {
			t, err = &bw.RespTranslation{Req: &m, Stream: m.Stream}, nil
		}
	}
	if err != nil {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "invalid request: " + err.Error(), "type": "invalid_request_error", "code": "invalid_request"}})
		writeError(w, 400, string(b), nil)
		return
	}
	s.attempt(w, withShape(r, body), newResponsesWire(t.Req.Model), t.Req.Model, t.Stream, prefill{})
}

// countTokens answers POST …/v1/messages/count_tokens: a quarter of the
// messages' bytes, so a test can tell it from the gateway's estimate
// (which also counts the system prompt and tools).
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string          `json:"model"`
		Messages json.RawMessage `json:"messages"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.Model == "" || len(req.Messages) == 0 {
		writeError(w, 400, `{"type":"error","error":{"type":"invalid_request_error","message":"invalid request: want {model, messages}"}}`, nil)
		return
	}
	resp := s.pick(r.PathValue("provider"), connectionOf(r), req.Model)
	if s.embedAnswer(w, r, anthropicWire{}, &resp) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"input_tokens":%d}`, len(strings.TrimSpace(string(req.Messages)))/4)
}

// completionFrom renders a chat completion as a Responses object.
func (w *responsesWire) completionFrom(chat string) string {
	o, err := bw.ChatToRespOutput([]byte(chat))
	if err != nil {
		return "{}"
	}
	return string(bw.ResponseObject(&w.st.Meta, o, bw.OutputItems(nil, w.st.Meta.ID, o, "completed"), "", "", ""))
}

// streamFrom renders a tool-call stream as Responses events.
func (w *responsesWire) streamFrom(model, tool, args string) string {
	out := w.st.Event(nil, []byte(fmt.Sprintf(`{"id":"chatcmpl-fault","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_fault","function":{"name":%q,"arguments":%q}}]}}]}`, tool, args)))
	out = w.st.Event(out, []byte(`{"id":"chatcmpl-fault","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":8,"completion_tokens":4,"total_tokens":12}}`))
	return string(w.st.End(out))
}
