// Package wire translates the client-facing API formats the gateway serves
// besides OpenAI chat completions (Anthropic Messages, OpenAI Responses,
// embeddings) to and from OpenAI chat completions, the gateway's pivot
// format.
//
// The gateway runs every client request as a chat request: a surface
// translates the client's body into a chat completion request, the
// request goes through the same resilience flow and the same upstream
// adapters (which speak each provider type's native format), and the
// surface translates the chat answer back — JSON, each stream event as it
// comes (nothing is buffered), and errors — into the client's own format.
//
// The native provider formats are here too, from the upstream's side: the
// gateway's anthropic and gemini adapters send a chat request in the
// provider's own format and read its answer back as chat
// (upstream_anthropic.go, upstream_gemini.go, adapter.go), and the fault
// upstream renders its answers in those formats (upstream.go,
// upstream_gemini.go, and the surfaces' Messages translation): one
// definition of each format for both.
//
// Every decoder here takes untrusted bytes: a body it cannot read is a
// *RequestError naming the field, never a panic.
package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// RequestError is a client body a surface cannot read or translate: a
// 400 in the client's own error format. Field names the offending field
// (a JSON path such as messages[2].content[0].source).
type RequestError struct {
	Field string
	Msg   string
	// Untranslatable: a valid request the translation to chat cannot
	// carry (a server tool, a document block): a target of the client's
	// own format serves it natively; the others are passed over.
	Untranslatable bool
}

func (e *RequestError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

func reqErr(field, format string, a ...any) *RequestError {
	return &RequestError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// untranslatable is a RequestError for a valid request chat cannot carry.
func untranslatable(field, format string, a ...any) *RequestError {
	return &RequestError{Field: field, Msg: fmt.Sprintf(format, a...), Untranslatable: true}
}

// appendJSONString appends s as a JSON string: invalid UTF-8 as U+FFFD,
// as encoding/json writes it (HTML characters are left as they are: no
// client renders these bodies as HTML).
func appendJSONString(dst []byte, s string) []byte { return appendJSONBytes(dst, s) }

// isNull reports whether raw is absent or the JSON null.
func isNull(raw json.RawMessage) bool {
	for len(raw) > 0 && (raw[0] == ' ' || raw[0] == '\n' || raw[0] == '\t' || raw[0] == '\r') {
		raw = raw[1:]
	}
	return len(raw) == 0 || string(raw) == "null"
}

// firstByte is raw's first non-space byte (0 when none).
func firstByte(raw json.RawMessage) byte {
	for _, c := range raw {
		if c != ' ' && c != '\n' && c != '\t' && c != '\r' {
			return c
		}
	}
	return 0
}

// ---- the pivot: OpenAI chat completions ----

// ChatRequest is the chat completion request a surface builds.
type ChatRequest struct {
	Model             string          `json:"model"`
	Messages          []ChatMessage   `json:"messages"`
	MaxTokens         *int            `json:"max_tokens,omitempty"`
	Temperature       *float64        `json:"temperature,omitempty"`
	TopP              *float64        `json:"top_p,omitempty"`
	Stop              []string        `json:"stop,omitempty"`
	Stream            bool            `json:"stream,omitempty"`
	StreamOptions     *StreamOptions  `json:"stream_options,omitempty"`
	Tools             []ChatTool      `json:"tools,omitempty"`
	ToolChoice        any             `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls,omitempty"`
	User              string          `json:"user,omitempty"`
	ResponseFormat    json.RawMessage `json:"response_format,omitempty"`
	ReasoningEffort   string          `json:"reasoning_effort,omitempty"`
}

// StreamOptions asks for the usage chunk at the end of a stream.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one chat message. Content is a string, a list of
// ChatPart, or nil (an assistant turn with tool calls only).
type ChatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []ChatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// ChatPart is a content part (text or image_url).
type ChatPart struct {
	Type     string        `json:"type"`
	Text     string        `json:"text,omitempty"`
	ImageURL *ChatImageURL `json:"image_url,omitempty"`
}

// ChatImageURL is an image part's URL (http(s) or a base64 data: URL).
type ChatImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

// ChatToolCall is an assistant's function call.
type ChatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function ChatFunction `json:"function"`
}

// ChatFunction is a call's name and its arguments (a JSON object as text).
type ChatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatTool is a function tool.
type ChatTool struct {
	Type     string       `json:"type"`
	Function ChatToolSpec `json:"function"`
}

// ChatToolSpec is a function tool's declaration.
type ChatToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ChatNamedChoice is tool_choice naming one function.
type ChatNamedChoice struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

func namedChoice(name string) ChatNamedChoice {
	c := ChatNamedChoice{Type: "function"}
	c.Function.Name = name
	return c
}

// ChatUsage is a chat answer's token counts.
type ChatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// ChatChunk is one chat.completion.chunk as the stream translators read
// it; Error is set on an error event ({"error":{…}}).
type ChatChunk struct {
	ID      string            `json:"id"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *ChatUsage        `json:"usage"`
	Error   *ChatAPIError     `json:"error"`
}

// ChatChunkChoice is one choice of a chat.completion.chunk.
type ChatChunkChoice struct {
	Index        int            `json:"index"`
	Delta        ChatChunkDelta `json:"delta"`
	FinishReason *string        `json:"finish_reason"`
	// StopReason: the stop string that ended the answer, from servers
	// that say (vLLM, the anthropic adapter); a number is a stop token
	// and is not read.
	StopReason json.RawMessage `json:"stop_reason"`
}

// ChatChunkDelta is a choice's delta.
type ChatChunkDelta struct {
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
	ToolCalls        []ChatChunkCall `json:"tool_calls"`
}

// ChatChunkCall is a tool call delta.
type ChatChunkCall struct {
	Index    int          `json:"index"`
	ID       string       `json:"id"`
	Function ChatFunction `json:"function"`
}

// ChatAPIError is the error object of an OpenAI-shaped error body or
// stream error event.
type ChatAPIError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

// ParseChatError reads an OpenAI-shaped error body ({"error":{…}}); ok is
// false when b is not one.
func ParseChatError(b []byte) (e ChatAPIError, ok bool) {
	var top struct {
		Error *ChatAPIError `json:"error"`
	}
	if json.Unmarshal(b, &top) != nil || top.Error == nil {
		return e, false
	}
	return *top.Error, true
}

// CodeString is an error code as text (codes may be strings or numbers).
func (e ChatAPIError) CodeString() string {
	switch c := e.Code.(type) {
	case string:
		return c
	case float64:
		return fmt.Sprint(int64(c))
	}
	return ""
}

// AppendChatRequest appends c encoded as encoding/json would encode it
// (the same fields and omissions; max_tokens last, for
// UseMaxCompletionTokens), without reflection for the common shapes: string or []ChatPart content, a string or named
// tool_choice. Other values take encoding/json.
func AppendChatRequest(b []byte, c *ChatRequest) ([]byte, error) {
	b = append(b, `{"model":`...)
	b = appendJSONBytes(b, c.Model)
	b = append(b, `,"messages":`...)
	var err error
	if b, err = appendChatMessages(b, c.Messages); err != nil {
		return nil, err
	}
	if b, err = appendChatSampling(b, c); err != nil {
		return nil, err
	}
	if c.Stream {
		b = append(b, `,"stream":true`...)
	}
	if c.StreamOptions != nil {
		b = append(b, `,"stream_options":{"include_usage":`...)
		b = strconv.AppendBool(b, c.StreamOptions.IncludeUsage)
		b = append(b, '}')
	}
	b = appendChatTools(b, c.Tools)
	if b, err = appendToolChoice(b, c.ToolChoice); err != nil {
		return nil, err
	}
	if c.ParallelToolCalls != nil {
		b = append(b, `,"parallel_tool_calls":`...)
		b = strconv.AppendBool(b, *c.ParallelToolCalls)
	}
	if c.User != "" {
		b = append(b, `,"user":`...)
		b = appendJSONBytes(b, c.User)
	}
	if len(c.ResponseFormat) > 0 {
		b = append(b, `,"response_format":`...)
		b = append(b, c.ResponseFormat...)
	}
	if c.ReasoningEffort != "" {
		b = append(b, `,"reasoning_effort":`...)
		b = appendJSONBytes(b, c.ReasoningEffort)
	}
	if c.MaxTokens != nil {
		b = append(b, `,"max_tokens":`...) // last: see UseMaxCompletionTokens
		b = strconv.AppendInt(b, int64(*c.MaxTokens), 10)
	}
	return append(b, '}'), nil
}

// appendChatMessages writes the messages array (null for none).
func appendChatMessages(b []byte, msgs []ChatMessage) ([]byte, error) {
	if msgs == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendChatMessage(b, &msgs[i]); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// appendChatSampling writes temperature, top_p and stop.
func appendChatSampling(b []byte, c *ChatRequest) ([]byte, error) {
	var err error
	if c.Temperature != nil {
		b = append(b, `,"temperature":`...)
		if b, err = appendFloat(b, *c.Temperature); err != nil {
			return nil, err
		}
	}
	if c.TopP != nil {
		b = append(b, `,"top_p":`...)
		if b, err = appendFloat(b, *c.TopP); err != nil {
			return nil, err
		}
	}
	if len(c.Stop) > 0 {
		b = append(b, `,"stop":[`...)
		for i, s := range c.Stop {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONBytes(b, s)
		}
		b = append(b, ']')
	}
	return b, nil
}

// appendChatTools writes the function tools (nothing for none).
func appendChatTools(b []byte, tools []ChatTool) []byte {
	if len(tools) == 0 {
		return b
	}
	b = append(b, `,"tools":[`...)
	for i := range tools {
		if i > 0 {
			b = append(b, ',')
		}
		f := &tools[i].Function
		b = append(b, `{"type":`...)
		b = appendJSONBytes(b, tools[i].Type)
		b = append(b, `,"function":{"name":`...)
		b = appendJSONBytes(b, f.Name)
		if f.Description != "" {
			b = append(b, `,"description":`...)
			b = appendJSONBytes(b, f.Description)
		}
		if len(f.Parameters) > 0 {
			b = append(b, `,"parameters":`...)
			b = append(b, f.Parameters...)
		}
		if f.Strict != nil {
			b = append(b, `,"strict":`...)
			b = strconv.AppendBool(b, *f.Strict)
		}
		b = append(b, "}}"...)
	}
	return append(b, ']')
}

// appendToolChoice writes tool_choice: a mode, a named function, or
// (any other value) as encoding/json writes it.
func appendToolChoice(b []byte, choice any) ([]byte, error) {
	switch tc := choice.(type) {
	case nil:
	case string:
		b = append(b, `,"tool_choice":`...)
		b = appendJSONBytes(b, tc)
	case ChatNamedChoice:
		b = append(b, `,"tool_choice":{"type":`...)
		b = appendJSONBytes(b, tc.Type)
		b = append(b, `,"function":{"name":`...)
		b = appendJSONBytes(b, tc.Function.Name)
		b = append(b, "}}"...)
	default:
		j, err := json.Marshal(tc)
		if err != nil {
			return nil, reqErr("tool_choice", "cannot be encoded: %v", err)
		}
		b = append(b, `,"tool_choice":`...)
		b = append(b, j...)
	}
	return b, nil
}

// UseMaxCompletionTokens renames a translated chat body's output budget
// from max_tokens to max_completion_tokens, the name OpenAI's API takes
// for every model (its reasoning models refuse max_tokens). The surfaces
// write max_tokens as the body's last member, so this costs a look at
// the body's end, not a parse; a body in another shape is returned as
// it is.
func UseMaxCompletionTokens(body []byte) []byte {
	const key = `,"max_tokens":`
	n := len(body)
	if n < len(key)+2 || body[n-1] != '}' {
		return body
	}
	i := n - 2
	for i >= 0 && body[i] >= '0' && body[i] <= '9' {
		i--
	}
	if i == n-2 || i+1 < len(key) || string(body[i+1-len(key):i+1]) != key {
		return body
	}
	at := i + 1 - len(key)
	out := make([]byte, 0, n+11)
	out = append(out, body[:at]...)
	out = append(out, `,"max_completion_tokens":`...)
	return append(out, body[i+1:]...)
}

func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, reqErr("", "a number is out of range")
	}
	j, _ := json.Marshal(f) // encoding/json's float format
	return append(b, j...), nil
}

func appendChatMessage(b []byte, m *ChatMessage) ([]byte, error) {
	b = append(b, `{"role":`...)
	b = appendJSONBytes(b, m.Role)
	b = append(b, `,"content":`...)
	switch c := m.Content.(type) {
	case nil:
		b = append(b, "null"...)
	case string:
		b = appendJSONBytes(b, c)
	case []ChatPart:
		if c == nil {
			b = append(b, "null"...)
			break
		}
		b = append(b, '[')
		for i := range c {
			if i > 0 {
				b = append(b, ',')
			}
			p := &c[i]
			b = append(b, `{"type":`...)
			b = appendJSONBytes(b, p.Type)
			if p.Text != "" {
				b = append(b, `,"text":`...)
				b = appendJSONBytes(b, p.Text)
			}
			if p.ImageURL != nil {
				b = append(b, `,"image_url":{"url":`...)
				b = appendJSONBytes(b, p.ImageURL.URL)
				if p.ImageURL.Detail != "" {
					b = append(b, `,"detail":`...)
					b = appendJSONBytes(b, p.ImageURL.Detail)
				}
				b = append(b, '}')
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	default:
		j, err := json.Marshal(c)
		if err != nil {
			return nil, reqErr("messages", "a message cannot be encoded: %v", err)
		}
		b = append(b, j...)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			tc := &m.ToolCalls[i]
			b = append(b, `{"id":`...)
			b = appendJSONBytes(b, tc.ID)
			b = append(b, `,"type":`...)
			b = appendJSONBytes(b, tc.Type)
			b = append(b, `,"function":{"name":`...)
			b = appendJSONBytes(b, tc.Function.Name)
			b = append(b, `,"arguments":`...)
			b = appendJSONBytes(b, tc.Function.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendJSONBytes(b, m.ToolCallID)
	}
	return append(b, '}'), nil
}
