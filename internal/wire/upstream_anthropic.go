package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/breakwater-gw/breakwater/model"
)

// The Anthropic Messages API as an upstream speaks it: the request the
// anthropic adapter sends (a chat request translated), and the answer and
// stream events it reads back as chat. The client side of the same format
// (a Messages request read, a chat answer written as Messages) is in
// messages.go and messages_stream.go.

// anthropicDefaultMaxTokens is max_tokens when the client gives none (the
// Messages API requires one).
const anthropicDefaultMaxTokens = 4096

type anRequest struct {
	Model         string        `json:"model"`
	MaxTokens     int           `json:"max_tokens"`
	System        string        `json:"system,omitempty"`
	Messages      []anMessage   `json:"messages"`
	Temperature   *float64      `json:"temperature,omitempty"`
	TopP          *float64      `json:"top_p,omitempty"`
	StopSequences []string      `json:"stop_sequences,omitempty"`
	Stream        bool          `json:"stream,omitempty"`
	Tools         []anTool      `json:"tools,omitempty"`
	ToolChoice    *anToolChoice `json:"tool_choice,omitempty"`
	Metadata      *anMetadata   `json:"metadata,omitempty"`
}

type anMetadata struct {
	UserID string `json:"user_id"`
}

type anMessage struct {
	Role    string    `json:"role"`
	Content []anBlock `json:"content"`
}

type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Source    *anSource       `json:"source,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   *string         `json:"content,omitempty"`
}

type anSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

type anTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// ChatRequestToMessages translates an OpenAI chat request (a body that
// passed the gateway's request checks) into a Messages request for
// upstreamModel:
// system and developer messages → system; user / assistant / tool
// messages → user and assistant turns (consecutive same-role turns merged,
// tool results as tool_result blocks in a user turn); tools and
// tool_choice; max_tokens (default 4096), temperature, top_p, stop →
// stop_sequences, user → metadata.user_id.
func ChatRequestToMessages(body []byte, upstreamModel string, stream bool) ([]byte, error) {
	const typ = "anthropic"
	r, err := decodeOA(typ, body)
	if err != nil {
		return nil, err
	}
	if err := refuseLogitBias(typ, body); err != nil {
		return nil, err
	}
	if r.N != nil && *r.N > 1 {
		return nil, anBad(`"n" greater than 1 is not supported`)
	}
	if r.ResponseFormat != nil && r.ResponseFormat.Type != "" && r.ResponseFormat.Type != "text" {
		return nil, anBad(`response_format %q is not supported`, r.ResponseFormat.Type)
	}
	out := anRequest{Model: upstreamModel, MaxTokens: r.maxTokens(anthropicDefaultMaxTokens), Temperature: r.Temperature,
		TopP: r.TopP, Stream: stream}
	if out.StopSequences, err = r.stops(typ); err != nil {
		return nil, err
	}
	if r.User != "" {
		out.Metadata = &anMetadata{UserID: r.User}
	}
	var system []string
	for i := range r.Messages {
		if system, err = out.addMessage(system, &r.Messages[i], i); err != nil {
			return nil, err
		}
	}
	out.System = strings.Join(system, "\n\n")
	if err := out.setTools(r); err != nil {
		return nil, err
	}
	if len(out.Messages) == 0 {
		return nil, anBad("the request has no user, assistant or tool message (the Messages API needs at least one)")
	}
	return json.Marshal(out)
}

// anBad is the anthropic adapter's refusal of a request it cannot express.
func anBad(format string, a ...any) error {
	return &UnsupportedError{"anthropic", fmt.Sprintf(format, a...)}
}

// add appends blocks to the last turn when it is role's (Anthropic
// alternates turns), else as a new turn.
func (out *anRequest) add(role string, blocks ...anBlock) {
	if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == role {
		out.Messages[n-1].Content = append(out.Messages[n-1].Content, blocks...)
		return
	}
	out.Messages = append(out.Messages, anMessage{Role: role, Content: blocks})
}

// addMessage translates chat message i: system text is collected into
// system, the rest becomes turns.
func (out *anRequest) addMessage(system []string, m *oaMessage, i int) ([]string, error) {
	const typ = "anthropic"
	ps, err := m.parts(typ, i)
	if err != nil {
		return nil, err
	}
	if m.Role == "assistant" || m.Role == "tool" {
		if err := textOnly(typ, i, m.Role, ps); err != nil {
			return nil, err
		}
	}
	switch m.Role {
	case "system", "developer":
		for j, p := range ps {
			if p.Type != "text" {
				return nil, anBad("messages[%d].content[%d]: a system message takes text only", i, j)
			}
		}
		if t := textOf(ps); t != "" {
			system = append(system, t)
		}
	case "user":
		err = out.addUser(ps)
	case "assistant":
		err = out.addAssistant(m, ps, i)
	case "tool":
		if m.ToolCallID == "" {
			return nil, anBad("messages[%d]: a tool message needs tool_call_id", i)
		}
		out.add("user", anBlock{Type: "tool_result", ToolUseID: m.ToolCallID, Content: strPtr(textOf(ps))})
	default:
		return nil, anBad("messages[%d]: role %q is not supported", i, m.Role)
	}
	return system, err
}

func (out *anRequest) addUser(ps []oaPart) error {
	var blocks []anBlock
	for _, p := range ps {
		b, err := anthropicPart(p)
		if err != nil {
			return err
		}
		if b.Type != "text" || b.Text != "" { // the API rejects empty text blocks
			blocks = append(blocks, b)
		}
	}
	if len(blocks) == 0 {
		blocks = []anBlock{{Type: "text", Text: " "}}
	}
	out.add("user", blocks...)
	return nil
}

func (out *anRequest) addAssistant(m *oaMessage, ps []oaPart, i int) error {
	if len(m.FunctionCall) > 0 && string(m.FunctionCall) != "null" {
		return anBad(`messages[%d]: the legacy "function_call" is not supported; use "tool_calls"`, i)
	}
	var blocks []anBlock
	if t := textOf(ps); t != "" {
		blocks = append(blocks, anBlock{Type: "text", Text: t})
	}
	for _, tc := range m.ToolCalls {
		args, err := argsObject("anthropic", tc.Function.Arguments)
		if err != nil {
			return err
		}
		if tc.ID == "" || tc.Function.Name == "" {
			return anBad("messages[%d]: a tool call needs an id and a function name", i)
		}
		blocks = append(blocks, anBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: args})
	}
	if len(blocks) > 0 { // an empty assistant turn says nothing
		out.add("assistant", blocks...)
	}
	return nil
}

// setTools translates tools, tool_choice and parallel_tool_calls.
func (out *anRequest) setTools(r *oaRequest) error {
	for _, t := range r.Tools {
		schema := t.Function.Parameters
		if len(bytes.TrimSpace(schema)) == 0 || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out.Tools = append(out.Tools, anTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: schema})
	}
	mode, name, ok := toolChoice(r.ToolChoice)
	if !ok {
		return anBad(`"tool_choice" must be "none", "auto", "required" or {"type":"function","function":{"name":…}}`)
	}
	switch mode {
	case "none":
		out.ToolChoice = &anToolChoice{Type: "none"}
	case "auto":
		out.ToolChoice = &anToolChoice{Type: "auto"}
	case "required":
		out.ToolChoice = &anToolChoice{Type: "any"}
	case "function":
		out.ToolChoice = &anToolChoice{Type: "tool", Name: name}
	}
	if r.ParallelToolCalls != nil && !*r.ParallelToolCalls && len(out.Tools) > 0 {
		if out.ToolChoice == nil {
			out.ToolChoice = &anToolChoice{Type: "auto"}
		}
		if out.ToolChoice.Type != "none" {
			out.ToolChoice.DisableParallelToolUse = true
		}
	}
	if len(out.Tools) == 0 && out.ToolChoice != nil && out.ToolChoice.Type != "none" {
		return anBad(`"tool_choice" needs "tools"`)
	}
	if len(out.Tools) == 0 {
		out.ToolChoice = nil
	}
	return nil
}

func anthropicPart(p oaPart) (anBlock, error) {
	if p.Type == "text" {
		return anBlock{Type: "text", Text: p.Text}, nil
	}
	u := p.ImageURL.URL
	if mt, data, ok := dataURL(u); ok {
		return anBlock{Type: "image", Source: &anSource{Type: "base64", MediaType: mt, Data: data}}, nil
	}
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		return anBlock{Type: "image", Source: &anSource{Type: "url", URL: u}}, nil
	}
	return anBlock{}, &UnsupportedError{"anthropic", "an image_url must be a base64 data: URL or an http(s) URL"}
}

// ---- responses ----

// prompt is the answer's whole input: Anthropic counts cached input
// apart from input_tokens.
func (u *msgUsage) prompt() int {
	return u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
}

type anContent struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
}

type anResponse struct {
	ID         string      `json:"id"`
	Type       string      `json:"type"`
	Model      string      `json:"model"`
	Content    []anContent `json:"content"`
	StopReason string      `json:"stop_reason"`
	StopSeq    *string     `json:"stop_sequence"`
	Usage      msgUsage    `json:"usage"`
}

// anthropicFinish maps a stop_reason to an OpenAI finish_reason.
func anthropicFinish(r string) string {
	switch r {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop" // end_turn, stop_sequence, pause_turn
}

// anthropicStopSeq is the stop sequence a stop_sequence stop names, for
// the chat choice's stop_reason ("" otherwise).
func anthropicStopSeq(reason string, seq *string) string {
	if reason != "stop_sequence" || seq == nil {
		return ""
	}
	return *seq
}

// MessagesAnswerToChat translates a Messages response into a
// chat.completion created at created; model is the model asked for, the
// answer's when the upstream names none.
func MessagesAnswerToChat(native []byte, created int64, model string) ([]byte, error) {
	var r anResponse
	if err := json.Unmarshal(native, &r); err != nil {
		return nil, err
	}
	if r.Type != "message" {
		return nil, fmt.Errorf("not a message (type %q)", r.Type)
	}
	msg := oaOutMessage{Role: "assistant"}
	var text, reasoning strings.Builder
	for _, c := range r.Content {
		switch c.Type {
		case "text":
			text.WriteString(c.Text)
		case "thinking":
			reasoning.WriteString(c.Thinking)
		case "tool_use":
			tc := oaOutToolCall{ID: c.ID, Type: "function"}
			tc.Function.Name = c.Name
			tc.Function.Arguments = "{}"
			if in := bytes.TrimSpace(c.Input); len(in) > 0 && string(in) != "null" {
				tc.Function.Arguments = string(in)
			}
			msg.ToolCalls = append(msg.ToolCalls, tc)
		}
	}
	if text.Len() > 0 || len(msg.ToolCalls) == 0 {
		msg.Content = strPtr(text.String())
	}
	msg.ReasoningContent = reasoning.String()
	p := r.Usage.prompt()
	r.ID, r.Model = answerIdentity(r.ID, r.Model, model)
	return json.Marshal(AdapterCompletion{ID: r.ID, Object: "chat.completion", Created: created, Model: r.Model,
		Choices: []oaChoice{{Index: 0, Message: msg, FinishReason: anthropicFinish(r.StopReason), StopReason: anthropicStopSeq(r.StopReason, r.StopSeq)}},
		Usage:   &oaUsage{PromptTokens: p, CompletionTokens: r.Usage.OutputTokens, TotalTokens: p + r.Usage.OutputTokens}})
}

// MessagesChatStream translates one Messages stream into
// chat.completion.chunk events (Event, one native event's data at a
// time), ending with data: [DONE] at message_stop.
type MessagesChatStream struct {
	cw       chunkWriter
	prompt   int
	tools    map[int]int // content block index → tool call index
	ntools   int
	argsSent map[int]bool // content block index → its tool call got argument bytes
	ev       anEvent
}

type anEvent struct {
	Type    string `json:"type"`
	Message *struct {
		ID    string   `json:"id"`
		Model string   `json:"model"`
		Usage msgUsage `json:"usage"`
	} `json:"message"`
	Index        int `json:"index"`
	ContentBlock *struct {
		Type string `json:"type"`
		Text string `json:"text"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta *struct {
		Type        string  `json:"type"`
		Text        string  `json:"text"`
		Thinking    string  `json:"thinking"`
		PartialJSON string  `json:"partial_json"`
		StopReason  string  `json:"stop_reason"`
		StopSeq     *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage *msgUsage       `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// NewMessagesChatStream starts a stream's translation; model is the model
// asked for, the answer's when the upstream names none.
func NewMessagesChatStream(model string) *MessagesChatStream {
	s := &MessagesChatStream{}
	s.cw.fallbackModel = model
	return s
}

// Event appends the chat events of one Messages stream event (by its
// data's "type").
func (s *MessagesChatStream) Event(dst, data []byte) []byte {
	ev := &s.ev
	*ev = anEvent{}
	if json.Unmarshal(data, ev) != nil || ev.Type == "" {
		return malformedEvent(dst, "anthropic")
	}
	switch ev.Type {
	case "message_start":
		if ev.Message == nil {
			return malformedEvent(dst, "anthropic")
		}
		s.cw.init(ev.Message.ID, ev.Message.Model)
		s.prompt = ev.Message.Usage.prompt()
		return s.cw.role(dst, 0) // the one choice: anthropic refuses n > 1
	case "content_block_start":
		return s.blockStart(dst)
	case "content_block_delta":
		return s.blockDelta(dst)
	case "content_block_stop":
		return s.blockStop(dst)
	case "message_delta":
		if d := ev.Delta; d != nil && d.StopReason != "" {
			var u *oaUsage
			if ev.Usage != nil {
				out := ev.Usage.OutputTokens
				u = &oaUsage{PromptTokens: s.prompt, CompletionTokens: out, TotalTokens: s.prompt + out}
			}
			reason := anthropicFinish(d.StopReason)
			return s.cw.chunk(dst, oaChunkChoice{FinishReason: &reason, StopReason: anthropicStopSeq(d.StopReason, d.StopSeq)}, u)
		}
	case "message_stop":
		return append(dst, doneBytes...)
	case "error":
		if !model.ParseStreamEvent(data).Error { // an error event without an error object
			return malformedEvent(dst, "anthropic")
		}
		return passError(dst, data)
	}
	// ping, signature and citation deltas, and types added later:
	// nothing for the client.
	return dst
}

// blockStart: a text block's initial text, or a tool call's start.
func (s *MessagesChatStream) blockStart(dst []byte) []byte {
	ev := &s.ev
	cb := ev.ContentBlock
	if cb == nil {
		return malformedEvent(dst, "anthropic")
	}
	switch cb.Type {
	case "text":
		if cb.Text != "" {
			return s.cw.text(dst, 0, cb.Text, false)
		}
	case "tool_use":
		if s.tools == nil {
			s.tools = map[int]int{}
		}
		k := s.ntools
		s.tools[ev.Index] = k
		s.ntools++
		tc := oaOutToolCall{Index: &k, ID: cb.ID, Type: "function"}
		tc.Function.Name = cb.Name
		return s.cw.chunk(dst, oaChunkChoice{Delta: oaDelta{ToolCalls: []oaOutToolCall{tc}}}, nil)
	}
	return dst
}

// blockDelta: text, thinking, or a tool call's arguments.
func (s *MessagesChatStream) blockDelta(dst []byte) []byte {
	ev := &s.ev
	d := ev.Delta
	if d == nil {
		return malformedEvent(dst, "anthropic")
	}
	switch d.Type {
	case "text_delta":
		return s.cw.text(dst, 0, d.Text, false)
	case "thinking_delta":
		return s.cw.text(dst, 0, d.Thinking, true)
	case "input_json_delta":
		if _, ok := s.tools[ev.Index]; !ok {
			return malformedEvent(dst, "anthropic")
		}
		if d.PartialJSON == "" {
			return dst // nothing to add (a tool without input sends one empty delta)
		}
		return s.args(dst, ev.Index, d.PartialJSON)
	}
	return dst
}

// blockStop: a tool call whose input streamed no bytes (a tool without
// parameters) gets "{}", as in the JSON translation: the client's
// concatenated arguments are always a JSON object, never "".
func (s *MessagesChatStream) blockStop(dst []byte) []byte {
	if _, ok := s.tools[s.ev.Index]; ok && !s.argsSent[s.ev.Index] {
		return s.args(dst, s.ev.Index, "{}")
	}
	return dst
}

// args appends argument bytes to the tool call of content block index.
func (s *MessagesChatStream) args(dst []byte, index int, args string) []byte {
	k := s.tools[index]
	if s.argsSent == nil {
		s.argsSent = map[int]bool{}
	}
	s.argsSent[index] = true
	tc := oaOutToolCall{Index: &k}
	tc.Function.Arguments = args
	return s.cw.chunk(dst, oaChunkChoice{Delta: oaDelta{ToolCalls: []oaOutToolCall{tc}}}, nil)
}
