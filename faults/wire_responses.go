package faults

import (
	"encoding/json"
	"errors"
	"net/http"

	bw "github.com/breakwater-gw/breakwater/internal/wire"
)

// responsesWire is the OpenAI Responses format (POST …/v1/responses),
// rendered by the gateway's Responses translation; its ids and error
// bodies are OpenAI's.
type responsesWire struct {
	openaiWire
	st *bw.RespStream
}

func newResponsesWire(model string) responsesWire {
	return responsesWire{st: &bw.RespStream{Meta: bw.RespMeta{ID: "resp_fault", Model: model}}}
}

func (w responsesWire) completion(chat string) string {
	o, err := bw.ChatToRespOutput([]byte(chat))
	if err != nil {
		return "{}"
	}
	return string(bw.ResponseObject(&w.st.Meta, o, bw.OutputItems(nil, w.st.Meta.ID, o, "completed"), "", "", ""))
}

func (w responsesWire) start(opening string) string { return w.event(opening) }
func (w responsesWire) event(chunk string) string   { return string(w.st.Event(nil, []byte(chunk))) }

func (responsesWire) malformed() string {
	return "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"lor\n\n"
}

// end closes the open item and says response.completed; the no-done
// fault leaves out both.
func (w responsesWire) end(done bool) string {
	if !done {
		return ""
	}
	return string(w.st.End(nil))
}

// responses answers POST …/v1/responses like a chat attempt.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	var t *bw.RespTranslation
	body, err := readJSON(r, nil)
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
		writeError(w, 400, responsesWire{}.invalid("invalid request: "+err.Error()), nil)
		return
	}
	s.attempt(w, withShape(r, body), newResponsesWire(t.Req.Model), t.Req.Model, t.Stream, prefill{})
}
