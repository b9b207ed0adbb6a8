package faults

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	bw "github.com/breakwater-gw/breakwater/internal/wire"
)

// anthropicWire is the Anthropic Messages API format (POST …/v1/messages),
// rendered by the gateway's Messages translation.
type anthropicWire struct {
	st *bw.MsgStream
}

func newAnthropicWire(model string) anthropicWire {
	return anthropicWire{st: &bw.MsgStream{Model: model}}
}

// messageStop is the event that ends a Messages stream.
const messageStop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

func (anthropicWire) ids() (string, string) { return "msg_fault", "toolu_fault" }

func (w anthropicWire) completion(chat string) string {
	b, err := bw.ChatToMessages([]byte(chat), w.st.Model)
	if err != nil {
		return "{}"
	}
	return string(b)
}

func (w anthropicWire) start(opening string) string { return w.event(opening) }
func (w anthropicWire) event(chunk string) string   { return string(w.st.Event(nil, []byte(chunk))) }

func (anthropicWire) malformed() string {
	return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"lor\n\n"
}

// end closes the block and says message_delta; done adds message_stop.
func (w anthropicWire) end(done bool) string {
	out := string(w.st.End(nil))
	if !done {
		out = strings.TrimSuffix(out, messageStop)
	}
	return out
}

func (anthropicWire) errorBody(status int) string { return anthropicErrorBody(status) }
func (anthropicWire) invalid(msg string) string {
	return string(bw.MsgError("invalid_request_error", msg))
}

// messages answers an Anthropic Messages attempt (POST …/v1/messages).
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	var req chatRequest // model and stream have the same names in a Messages body
	body, err := readJSON(r, &req)
	if err != nil || req.Model == "" {
		writeError(w, 400, anthropicWire{}.invalid("invalid request: body must be a JSON Messages request with a model"), nil)
		return
	}
	s.attempt(w, withShape(r, body), newAnthropicWire(req.Model), req.Model, req.Stream, prefillOf(req.Messages))
}

// countTokens answers POST …/v1/messages/count_tokens: a quarter of the
// messages' bytes, so a test can tell it from the gateway's estimate
// (which also counts the system prompt and tools).
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string          `json:"model"`
		Messages json.RawMessage `json:"messages"`
	}
	_, err := readJSON(r, &req)
	if err != nil || req.Model == "" || len(req.Messages) == 0 {
		writeError(w, 400, anthropicWire{}.invalid("invalid request: want {model, messages}"), nil)
		return
	}
	resp := s.pick(r.PathValue("provider"), connectionOf(r), req.Model)
	if s.embedAnswer(w, r, anthropicWire{}, &resp) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"input_tokens":%d}`, len(strings.TrimSpace(string(req.Messages)))/4)
}
