package faults

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// A prefill is a request whose last message is an assistant message: the
// client (or a gateway resuming a broken stream) asks the upstream to
// continue that text. The fault server continues it like an upstream that
// supports prefill: the answer is the same text it would have sent, minus
// the part the prefill already holds. Two faults change that:
// prefill-refusal answers 400 (an upstream that takes no trailing
// assistant message), prefill-restart ignores the prefill and starts over.

// maxMalformed bounds stream.malformed (the events one answer sends).
const maxMalformed = 10_000

// chatMessage is one message of a chat or Messages request.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// prefill is a request's trailing assistant message.
type prefill struct {
	ok   bool
	text string
}

// prefillOf reads the trailing assistant message: its content as a string,
// or the text of its content blocks.
func prefillOf(msgs []chatMessage) prefill {
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != "assistant" {
		return prefill{}
	}
	c := msgs[len(msgs)-1].Content
	var s string
	if json.Unmarshal(c, &s) == nil {
		return prefill{ok: true, text: s}
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(c, &blocks) == nil {
		var b strings.Builder
		for _, bl := range blocks {
			b.WriteString(bl.Text)
		}
		return prefill{ok: true, text: b.String()}
	}
	return prefill{ok: true}
}

// prefillRefusal is the 400 message of an upstream that takes no prefill.
const prefillRefusal = "the last message must have role user: assistant prefill is not supported"

// PrefillRefusalBody is the 400 of an OpenAI upstream that takes no
// prefill.
var PrefillRefusalBody = openaiWire{}.invalid(prefillRefusal)

// applyPrefill applies the prefill faults to one attempt: a refusal is
// answered here (refused true); a restart forgets the prefill. Either way
// the response goes on as an ordinary answer.
func applyPrefill(w http.ResponseWriter, wf wire, resp *Response, pre *prefill) (refused bool) {
	switch resp.Fault {
	case PrefillRefusal:
		resp.Fault = None
		if pre.ok {
			writeError(w, http.StatusBadRequest, wf.invalid(prefillRefusal), resp)
			return true
		}
	case PrefillRestart:
		resp.Fault = None
		*pre = prefill{}
	}
	return false
}

// ChunkTextAt is the text of content chunk i: ChunkText, or for a
// numbered stream a text of the same length naming the chunk.
func ChunkTextAt(r *Response, i int) string {
	if !r.Stream.Numbered {
		return ChunkText
	}
	return fmt.Sprintf("lorem ipsum %03d ", i%1000)
}

// AnswerText is the whole text of a response's answer.
func AnswerText(r *Response) string {
	var b strings.Builder
	for i := range r.Chunks() {
		b.WriteString(ChunkTextAt(r, i))
	}
	return b.String()
}

// answerChunks is the content chunks of a streamed answer that continues
// skip bytes of prefill: the answer's chunks when skip is 0, else the rest
// of its text after skip bytes, in chunks of ChunkBytes.
func answerChunks(r *Response, skip int) []string {
	n := r.Chunks()
	out := make([]string, 0, n)
	if skip <= 0 {
		for i := range n {
			out = append(out, ChunkTextAt(r, i))
		}
		return out
	}
	rest := AnswerText(r)
	rest = rest[min(skip, len(rest)):]
	for len(rest) > 0 {
		k := min(ChunkBytes, len(rest))
		out = append(out, rest[:k])
		rest = rest[k:]
	}
	return out
}

// ContinuationChunks is how many content chunks the continuation of a
// prefill of delivered content chunks has (the simulator's view of
// answerChunks).
func ContinuationChunks(r *Response, delivered int) int {
	if r.Fault == PrefillRestart {
		return r.Chunks()
	}
	return max(r.Chunks()-delivered, 0)
}
