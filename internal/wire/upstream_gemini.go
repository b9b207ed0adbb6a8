package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Gemini's generateContent format, as a Gemini upstream answers it,
// translated from a chat answer: one candidate whose content parts are
// the reasoning ({"text":…,"thought":true}), the text and the function
// calls; finishReason and usageMetadata; the model as modelVersion.

// ParseGeminiAction splits the last segment of a Gemini model path,
// models/{model}:{method}, into the model and the method; ok is false
// when either is missing.
func ParseGeminiAction(action string) (model, method string, ok bool) {
	i := strings.LastIndexByte(action, ':')
	if i <= 0 || i == len(action)-1 {
		return "", "", false
	}
	return action[:i], action[i+1:], true
}

// GeminiFinish maps a chat finish_reason to a Gemini finishReason (a
// function call ends with STOP, as Gemini's do).
func GeminiFinish(finish string) string {
	switch finish {
	case "length":
		return "MAX_TOKENS"
	case "content_filter":
		return "SAFETY"
	}
	return "STOP"
}

// GeminiError is a Google API error body (google.rpc.Status).
func GeminiError(code int, status, msg string) []byte {
	b := strconv.AppendInt([]byte(`{"error":{"code":`), int64(code), 10)
	b = appendJSONString(append(b, `,"message":`...), msg)
	b = appendJSONString(append(b, `,"status":`...), status)
	return append(b, "}}"...)
}

// ChatToGemini translates a chat.completion into a generateContent
// answer; model is the model the client asked for, id the responseId.
func ChatToGemini(chat []byte, model, id string) ([]byte, error) {
	var c completion
	if err := readCompletion(chat, &c); err != nil {
		return nil, err
	}
	g := gemAnswer{model: model, id: id}
	if len(c.reasoning) > 2 {
		g.parts = appendPart(g.parts, str(c.reasoning), true)
	}
	if len(c.content) > 2 {
		g.parts = appendPart(g.parts, str(c.content), false)
	}
	for i := range c.calls {
		g.parts = appendCallPart(g.parts, str(c.calls[i].name), str(c.calls[i].args))
	}
	g.finish = GeminiFinish(str(c.finish))
	if c.hasUsage {
		g.usage = &c.usage
	}
	return g.append(nil, true), nil
}

// gemAnswer is one generateContent answer or stream event.
type gemAnswer struct {
	model, id string
	parts     []byte // the content parts, comma-separated
	finish    string // "" in a stream's content events
	usage     *ChatUsage
}

// append appends the answer; whole answers (and a stream's last event)
// carry at least an empty text part, as Gemini's do.
func (g *gemAnswer) append(dst []byte, whole bool) []byte {
	parts := g.parts
	if len(parts) == 0 && whole {
		parts = []byte(`{"text":""}`)
	}
	dst = append(dst, `{"candidates":[{"content":{"role":"model","parts":[`...)
	dst = append(dst, parts...)
	dst = append(dst, "]}"...)
	if g.finish != "" {
		dst = appendJSONString(append(dst, `,"finishReason":`...), g.finish)
	}
	dst = append(dst, `,"index":0}]`...)
	if u := g.usage; u != nil {
		total := u.TotalTokens
		if total == 0 {
			total = u.PromptTokens + u.CompletionTokens
		}
		dst = strconv.AppendInt(append(dst, `,"usageMetadata":{"promptTokenCount":`...), int64(u.PromptTokens), 10)
		dst = strconv.AppendInt(append(dst, `,"candidatesTokenCount":`...), int64(u.CompletionTokens), 10)
		dst = strconv.AppendInt(append(dst, `,"totalTokenCount":`...), int64(total), 10)
		dst = append(dst, '}')
	}
	dst = appendJSONString(append(dst, `,"modelVersion":`...), g.model)
	dst = appendJSONString(append(dst, `,"responseId":`...), g.id)
	return append(dst, '}')
}

// appendPart appends a text part (a thought when thought).
func appendPart(parts []byte, text string, thought bool) []byte {
	if len(parts) > 0 {
		parts = append(parts, ',')
	}
	parts = appendJSONString(append(parts, `{"text":`...), text)
	if thought {
		parts = append(parts, `,"thought":true`...)
	}
	return append(parts, '}')
}

// appendCallPart appends a functionCall part; arguments that are not a
// JSON object become {}.
func appendCallPart(parts []byte, name, args string) []byte {
	if len(parts) > 0 {
		parts = append(parts, ',')
	}
	parts = appendJSONString(append(parts, `{"functionCall":{"name":`...), name)
	parts = append(parts, `,"args":`...)
	obj := bytes.TrimSpace([]byte(args))
	if len(obj) == 0 || obj[0] != '{' || !json.Valid(obj) {
		obj = []byte(`{}`)
	}
	return append(append(parts, obj...), "}}"...)
}

// GemStream translates one chat.completion.chunk stream into Gemini's
// streamGenerateContent?alt=sse events: an event for each chunk with
// text or reasoning; function calls, whose arguments chat streams in
// pieces and Gemini sends whole, wait for the last event, which carries
// them with finishReason and usage. That event goes out once both the
// finish reason and the usage are known (OpenAI streams may send the
// usage in a chunk of its own after the finish), or at [DONE] or End.
// Gemini streams have no terminator.
type GemStream struct {
	Model string // the model the client asked for
	ID    string // the responseId

	calls  []ChatToolCall
	usage  *ChatUsage
	finish string
	done   bool
	chunk  ChatChunk
}

// Event appends the Gemini events for one chat SSE event's data.
func (s *GemStream) Event(dst, data []byte) []byte {
	data = bytes.TrimSpace(data)
	if s.done {
		return dst
	}
	if string(data) == "[DONE]" {
		return s.End(dst)
	}
	g := gemAnswer{model: s.Model, id: s.ID}
	if text, ok := textDelta(data); ok {
		if len(text) == 0 {
			return dst
		}
		g.parts = append(appendRawString(append(g.parts, `{"text":`...), text), '}')
		return AppendSSE(dst, "", g.append(nil, false))
	}
	c := &s.chunk
	*c = ChatChunk{}
	if json.Unmarshal(data, c) != nil {
		return AppendSSE(dst, "", GeminiError(502, "INTERNAL", "the upstream sent a malformed stream event"))
	}
	if c.Error != nil {
		return AppendSSE(dst, "", GeminiError(500, "INTERNAL", c.Error.Message))
	}
	if c.Usage != nil {
		s.usage = c.Usage
	}
	for i := range c.Choices {
		if ch := &c.Choices[i]; ch.Index == 0 {
			s.choice(&g, ch.Delta.ReasoningContent, ch.Delta.Reasoning, ch.Delta.Content)
			s.addCalls(c, i)
			if f := ch.FinishReason; f != nil && *f != "" {
				s.finish = GeminiFinish(*f)
			}
		}
	}
	if s.finish != "" && s.usage != nil {
		return s.last(dst, g.parts)
	}
	if len(g.parts) == 0 {
		return dst
	}
	return AppendSSE(dst, "", g.append(nil, false))
}

// last appends the stream's last event: parts, the calls, finishReason
// and usage.
func (s *GemStream) last(dst, parts []byte) []byte {
	s.done = true
	g := gemAnswer{model: s.Model, id: s.ID, parts: parts, finish: s.finish, usage: s.usage}
	for _, tc := range s.calls {
		g.parts = appendCallPart(g.parts, tc.Function.Name, tc.Function.Arguments)
	}
	return AppendSSE(dst, "", g.append(nil, true))
}

// choice adds a delta's reasoning and text parts.
func (s *GemStream) choice(g *gemAnswer, reasoning, reasoningAlt, content *string) {
	if reasoning == nil {
		reasoning = reasoningAlt
	}
	if reasoning != nil && *reasoning != "" {
		g.parts = appendPart(g.parts, *reasoning, true)
	}
	if content != nil && *content != "" {
		g.parts = appendPart(g.parts, *content, false)
	}
}

// addCalls gathers the tool call deltas of choice i: a new index starts
// a call, later deltas add to its arguments.
func (s *GemStream) addCalls(c *ChatChunk, i int) {
	for _, tc := range c.Choices[i].Delta.ToolCalls {
		if tc.Index >= len(s.calls) {
			if tc.Index > len(s.calls)+64 {
				continue // an index no stream reaches: never grow for it
			}
			s.calls = append(s.calls, make([]ChatToolCall, tc.Index+1-len(s.calls))...)
		}
		call := &s.calls[tc.Index]
		if tc.Function.Name != "" {
			call.Function.Name = tc.Function.Name
		}
		call.Function.Arguments += tc.Function.Arguments
	}
}

// End appends the last event when the stream finished without usage (or
// without a finish reason: STOP); a Gemini stream has no terminator of
// its own.
func (s *GemStream) End(dst []byte) []byte {
	if s.done {
		return dst
	}
	if s.finish == "" {
		s.finish = "STOP"
	}
	return s.last(dst, nil)
}
