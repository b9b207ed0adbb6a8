package faults

import (
	"fmt"
	"strings"
)

// The fault upstream writes every answer as an OpenAI chat completion (a
// JSON chat.completion, or the chunks of a stream); the attempt's wire
// renders it in its own format (faults/wire.go).

// answer is what one attempt answers, in chat terms.
type answer struct {
	model  string
	id     string // the answer's id in the attempt's format
	callID string // the tool call's id in the attempt's format
	finish string // "stop", or "length" when the output budget cut the text
	json   bool   // the text is the JSON document {"text":"…"}
	tool   string // the tool the answer calls ("" for a text answer)
	args   string // the call's arguments, a JSON object
}

// newAnswer is a text answer of model with the wire's ids.
func newAnswer(wf wire, model string) answer {
	id, call := wf.ids()
	return answer{model: model, id: id, callID: call, finish: "stop"}
}

// usage is the answer's token counts: 8 prompt tokens, 4 a chunk.
func usage(chunks int) string {
	return fmt.Sprintf(`{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}`, chunks*4, 8+chunks*4)
}

// completion is the whole answer of chunks content chunks.
func (a *answer) completion(chunks int) string {
	if a.tool != "" {
		return fmt.Sprintf(`{"id":%q,"object":"chat.completion","created":0,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}]},"finish_reason":"tool_calls"}],"usage":%s}`,
			a.id, a.model, a.callID, a.tool, a.args, usage(1))
	}
	text := strings.Repeat(ChunkText, chunks)
	if a.json {
		text = `{"text":"` + text + `"}`
	}
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion","created":0,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":%q}],"usage":%s}`,
		a.id, a.model, text, a.finish, usage(chunks))
}

// chunkWith is a chat.completion.chunk of the answer: delta, finish (a
// JSON value) and, when not "", the usage.
func (a *answer) chunkWith(delta, finish, use string) string {
	if use != "" {
		use = `,"usage":` + use
	}
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","created":0,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}]%s}`,
		a.id, a.model, delta, finish, use)
}

// opening is the chunk that opens a stream: the role, and the prompt's
// tokens, which the formats that announce a message (Anthropic, Responses)
// count up front.
func (a *answer) opening() string {
	return a.chunkWith(`{"role":"assistant"}`, "null", `{"prompt_tokens":8,"completion_tokens":0,"total_tokens":8}`)
}

// chunk is content chunk text (the first carries the role, and opens the
// JSON document).
func (a *answer) chunk(text string, first bool) string {
	if !first {
		return a.chunkWith(fmt.Sprintf(`{"content":%q}`, text), "null", "")
	}
	if a.json {
		text = `{"text":"` + text
	}
	return a.chunkWith(fmt.Sprintf(`{"role":"assistant","content":%q}`, text), "null", "")
}

// closing is the chunks that end a stream of chunks content chunks: the
// JSON document's close, then the finish reason with the usage.
func (a *answer) closing(chunks int) []string {
	last := a.chunkWith("{}", `"`+a.finish+`"`, usage(chunks))
	if a.json {
		return []string{a.chunk(`"}`, false), last}
	}
	return []string{last}
}

// toolChunks is the whole stream of a tool call answer: the call's name,
// its arguments, the finish.
func (a *answer) toolChunks() []string {
	return []string{
		a.chunkWith(fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":%q,"arguments":""}}]}`, a.callID, a.tool), "null", ""),
		a.chunkWith(fmt.Sprintf(`{"tool_calls":[{"index":0,"function":{"arguments":%q}}]}`, a.args), "null", ""),
		a.chunkWith("{}", `"tool_calls"`, usage(1)),
	}
}
