package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Anthropic Messages API (POST /v1/messages) ⇄ OpenAI chat completions.

// MsgRequest is a Messages request as the gateway reads it. Fields it
// cannot express in a chat request are listed in Dropped by
// MessagesToChat (the caller logs them at debug level).
type MsgRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []MsgMessage    `json:"messages"`
	Stream        *bool           `json:"stream"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Tools         []MsgTool       `json:"tools"`
	ToolChoice    *MsgToolChoice  `json:"tool_choice"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	Thinking json.RawMessage `json:"thinking"`
}

// MsgMessage is one turn; Content is a string or a list of blocks.
type MsgMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// MsgBlock is a content block of a request.
type MsgBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Source    *MsgSource      `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// MsgSource is an image block's source.
type MsgSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

// MsgTool is a tool declaration; only custom tools (no type, or "custom")
// translate to chat function tools.
type MsgTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// MsgToolChoice is tool_choice.
type MsgToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// MsgTranslation is a translated Messages request.
type MsgTranslation struct {
	Chat    []byte   // the chat completion request body
	Model   string   // the model the client asked for
	Stream  bool     // the client asked for SSE
	Dropped []string // fields no chat request carries (top_k, thinking, cache_control)
}

// MessagesToChat translates a Messages request body into a chat completion
// request: system → a system message; user turns' text and image blocks →
// content parts, their tool_result blocks → tool messages (before the
// turn's other content, as chat requires); assistant text and tool_use
// blocks → content and tool_calls (thinking blocks are dropped: no chat
// request carries them back); custom tools → function tools; tool_choice
// auto / any / tool / none → auto / required / the named function / none;
// stop_sequences → stop; metadata.user_id → user. A stream asks for the
// usage chunk, which message_delta reports.
func MessagesToChat(body []byte) (*MsgTranslation, error) {
	if firstByte(body) != '{' {
		return nil, reqErr("", "the body must be a JSON object")
	}
	var r MsgRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, decodeErr(err)
	}
	if r.Model == "" {
		return nil, reqErr("model", "is required")
	}
	if r.MaxTokens == nil {
		return nil, reqErr("max_tokens", "is required")
	}
	if *r.MaxTokens < 1 {
		return nil, reqErr("max_tokens", "must be at least 1")
	}
	if len(r.Messages) == 0 {
		return nil, reqErr("messages", "at least one message is required")
	}
	t := &MsgTranslation{Model: r.Model, Stream: r.Stream != nil && *r.Stream}
	out := ChatRequest{Model: r.Model, MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: r.TopP,
		Stop: r.StopSequences, Stream: t.Stream}
	if t.Stream {
		out.StreamOptions = &StreamOptions{IncludeUsage: true}
	}
	if r.TopK != nil {
		t.Dropped = append(t.Dropped, "top_k")
	}
	if !isNull(r.Thinking) {
		t.Dropped = append(t.Dropped, "thinking")
	}
	if r.Metadata != nil {
		// OpenAI's user field takes at most 64 characters; a longer id
		// (Claude Code's session ids are) is dropped rather than cut,
		// which would merge distinct users.
		if len(r.Metadata.UserID) <= 64 {
			out.User = r.Metadata.UserID
		} else {
			t.Dropped = append(t.Dropped, "metadata.user_id")
		}
	}
	if !isNull(r.System) {
		sys, cached, err := systemText(r.System)
		if err != nil {
			return nil, err
		}
		if cached {
			t.Dropped = append(t.Dropped, "system.cache_control")
		}
		if sys != "" {
			out.Messages = append(out.Messages, ChatMessage{Role: "system", Content: sys})
		}
	}
	for i := range r.Messages {
		if err := msgTurn(&out, &r.Messages[i], i, t); err != nil {
			return nil, err
		}
	}
	for i, tl := range r.Tools {
		f := "tools[" + strconv.Itoa(i) + "]"
		if tl.Type != "" && tl.Type != "custom" {
			return nil, untranslatable(f+".type", "server tool %q cannot be served through the gateway's translation; only custom tools (name, input_schema) are", tl.Type)
		}
		if tl.Name == "" {
			return nil, reqErr(f+".name", "is required")
		}
		schema := tl.InputSchema
		if isNull(schema) {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		} else if firstByte(schema) != '{' {
			return nil, reqErr(f+".input_schema", "must be a JSON schema object")
		}
		out.Tools = append(out.Tools, ChatTool{Type: "function", Function: ChatToolSpec{Name: tl.Name, Description: tl.Description, Parameters: schema}})
	}
	if tc := r.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			out.ToolChoice = "auto"
		case "any":
			out.ToolChoice = "required"
		case "none":
			out.ToolChoice = "none"
		case "tool":
			if tc.Name == "" {
				return nil, reqErr("tool_choice.name", "is required when type is \"tool\"")
			}
			out.ToolChoice = namedChoice(tc.Name)
		default:
			return nil, reqErr("tool_choice.type", "must be auto, any, tool or none (got %q)", tc.Type)
		}
		if tc.DisableParallelToolUse && len(out.Tools) > 0 {
			f := false
			out.ParallelToolCalls = &f
		}
		if len(out.Tools) == 0 {
			out.ToolChoice = nil
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, reqErr("", "the request cannot be encoded: %v", err)
	}
	t.Chat = b
	return t, nil
}

// decodeErr names the field of a JSON type error.
func decodeErr(err error) *RequestError {
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		return reqErr(te.Field, "must be %s (got %s)", jsonKind(te.Type.Kind().String()), te.Value)
	}
	return reqErr("", "the body is not valid JSON: %v", err)
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	case "bool":
		return "a boolean"
	case "ptr":
		return "a value of another type"
	}
	return "a number"
}

// systemText reads system: a string or a list of text blocks.
func systemText(raw json.RawMessage) (string, bool, error) {
	if firstByte(raw) == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false, reqErr("system", "must be a string or a list of text blocks")
		}
		return s, false, nil
	}
	var blocks []struct {
		Type         string          `json:"type"`
		Text         string          `json:"text"`
		CacheControl json.RawMessage `json:"cache_control"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", false, reqErr("system", "must be a string or a list of text blocks")
	}
	var b strings.Builder
	cached := false
	for i, bl := range blocks {
		if bl.Type != "text" {
			return "", false, reqErr("system["+strconv.Itoa(i)+"].type", "must be \"text\"")
		}
		if i > 0 && b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(bl.Text)
		cached = cached || !isNull(bl.CacheControl)
	}
	return b.String(), cached, nil
}

// msgBlocks reads a turn's content: a string is one text block.
func msgBlocks(raw json.RawMessage, field string) ([]MsgBlock, error) {
	switch firstByte(raw) {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, reqErr(field, "must be a string or a list of content blocks")
		}
		return []MsgBlock{{Type: "text", Text: s}}, nil
	case '[':
		var bs []MsgBlock
		if err := json.Unmarshal(raw, &bs); err != nil {
			return nil, reqErr(field, "must be a string or a list of content blocks: %v", err)
		}
		return bs, nil
	}
	return nil, reqErr(field, "must be a string or a list of content blocks")
}

func msgTurn(out *ChatRequest, m *MsgMessage, i int, t *MsgTranslation) error {
	field := "messages[" + strconv.Itoa(i) + "]"
	blocks, err := msgBlocks(m.Content, field+".content")
	if err != nil {
		return err
	}
	if bytes.Contains(m.Content, []byte(`"cache_control"`)) {
		t.Dropped = append(t.Dropped, field+".cache_control")
	}
	switch m.Role {
	case "user":
		var parts []ChatPart
		for j, b := range blocks {
			bf := field + ".content[" + strconv.Itoa(j) + "]"
			switch b.Type {
			case "text":
				parts = append(parts, ChatPart{Type: "text", Text: b.Text})
			case "image":
				p, err := imagePart(b.Source, bf+".source")
				if err != nil {
					return err
				}
				parts = append(parts, p)
			case "tool_result":
				if b.ToolUseID == "" {
					return reqErr(bf+".tool_use_id", "is required")
				}
				text, err := toolResultText(b.Content, bf+".content")
				if err != nil {
					return err
				}
				if b.IsError {
					text = "[tool error] " + text
				}
				out.Messages = append(out.Messages, ChatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: text})
			default:
				return untranslatable(bf+".type", "block type %q is not supported in a user turn (text, image and tool_result are)", b.Type)
			}
		}
		if len(parts) == 0 {
			return nil // tool results only
		}
		if len(parts) == 1 && parts[0].Type == "text" {
			out.Messages = append(out.Messages, ChatMessage{Role: "user", Content: parts[0].Text})
		} else {
			out.Messages = append(out.Messages, ChatMessage{Role: "user", Content: parts})
		}
	case "assistant":
		msg := ChatMessage{Role: "assistant"}
		var text strings.Builder
		for j, b := range blocks {
			bf := field + ".content[" + strconv.Itoa(j) + "]"
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
			case "tool_use":
				if b.ID == "" || b.Name == "" {
					return reqErr(bf, "a tool_use block needs an id and a name")
				}
				args := "{}"
				if !isNull(b.Input) {
					if firstByte(b.Input) != '{' {
						return reqErr(bf+".input", "must be an object")
					}
					args = string(bytes.TrimSpace(b.Input))
				}
				msg.ToolCalls = append(msg.ToolCalls, ChatToolCall{ID: b.ID, Type: "function", Function: ChatFunction{Name: b.Name, Arguments: args}})
			case "thinking", "redacted_thinking":
				// Earlier reasoning: no chat request carries it back.
			default:
				return untranslatable(bf+".type", "block type %q is not supported in an assistant turn (text, tool_use and thinking are)", b.Type)
			}
		}
		if text.Len() > 0 {
			msg.Content = text.String()
		}
		if msg.Content == nil && len(msg.ToolCalls) == 0 {
			return nil
		}
		out.Messages = append(out.Messages, msg)
	default:
		return reqErr(field+".role", "must be \"user\" or \"assistant\" (got %q)", m.Role)
	}
	return nil
}

func imagePart(s *MsgSource, field string) (ChatPart, error) {
	if s == nil {
		return ChatPart{}, reqErr(field, "is required")
	}
	switch s.Type {
	case "base64":
		if s.MediaType == "" || s.Data == "" {
			return ChatPart{}, reqErr(field, "a base64 source needs media_type and data")
		}
		return ChatPart{Type: "image_url", ImageURL: &ChatImageURL{URL: "data:" + s.MediaType + ";base64," + s.Data}}, nil
	case "url":
		if !strings.HasPrefix(s.URL, "https://") && !strings.HasPrefix(s.URL, "http://") {
			return ChatPart{}, reqErr(field+".url", "must be an http(s) URL")
		}
		return ChatPart{Type: "image_url", ImageURL: &ChatImageURL{URL: s.URL}}, nil
	}
	return ChatPart{}, untranslatable(field+".type", "must be base64 or url (got %q)", s.Type)
}

// toolResultText reads a tool_result's content: a string or text blocks.
func toolResultText(raw json.RawMessage, field string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	bs, err := msgBlocks(raw, field)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for j, bl := range bs {
		if bl.Type != "text" {
			return "", untranslatable(field+"["+strconv.Itoa(j)+"].type", "a tool result through the gateway's translation takes text only (got %q)", bl.Type)
		}
		b.WriteString(bl.Text)
	}
	return b.String(), nil
}

// ---- answers ----

// StopReason maps a chat finish_reason to a Messages stop_reason.
func StopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

type msgOutBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

type msgUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

type msgResponse struct {
	ID           string        `json:"id"`
	Type         string        `json:"type"`
	Role         string        `json:"role"`
	Model        string        `json:"model"`
	Content      []msgOutBlock `json:"content"`
	StopReason   string        `json:"stop_reason"`
	StopSequence *string       `json:"stop_sequence"`
	Usage        msgUsage      `json:"usage"`
}

// MessageID is a Messages id for a chat answer's id.
func MessageID(chatID string) string {
	if strings.HasPrefix(chatID, "msg_") {
		return chatID
	}
	return "msg_" + chatID
}

// ChatToMessages translates a chat.completion into a Messages answer.
// model is the model the client asked for (the answer names it, as
// Anthropic's does).
func ChatToMessages(chat []byte, model string) ([]byte, error) {
	var c ChatCompletion
	if err := json.Unmarshal(chat, &c); err != nil {
		return nil, err
	}
	if len(c.Choices) == 0 {
		return nil, reqErr("choices", "the answer has no choice")
	}
	ch := &c.Choices[0]
	out := msgResponse{ID: MessageID(c.ID), Type: "message", Role: "assistant", Model: model,
		StopReason: StopReason(ch.FinishReason), Content: []msgOutBlock{}}
	if r := ch.Message.ReasoningContent; r != "" {
		out.Content = append(out.Content, msgOutBlock{Type: "thinking", Thinking: &r, Signature: new(string)})
	}
	if t := ch.Message.Content; t != nil && *t != "" {
		out.Content = append(out.Content, msgOutBlock{Type: "text", Text: t})
	} else if rf := ch.Message.Refusal; rf != nil && *rf != "" {
		out.Content = append(out.Content, msgOutBlock{Type: "text", Text: rf})
	}
	for _, tc := range ch.Message.ToolCalls {
		in := json.RawMessage(bytes.TrimSpace([]byte(tc.Function.Arguments)))
		if len(in) == 0 || in[0] != '{' || !json.Valid(in) {
			in = json.RawMessage(`{}`)
		}
		out.Content = append(out.Content, msgOutBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: in})
	}
	if u := c.Usage; u != nil {
		out.Usage = msgUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
		if d := u.PromptTokensDetails; d != nil && d.CachedTokens <= u.PromptTokens {
			out.Usage.InputTokens -= d.CachedTokens
			out.Usage.CacheReadInputTokens = d.CachedTokens
		}
	}
	return json.Marshal(out)
}

// MsgErrorType is the Anthropic error type and status for a gateway or
// upstream error of status: refusals for load (503) go out as Anthropic's
// 529 overloaded_error, which its clients retry.
func MsgErrorType(status int) (string, int) {
	switch {
	case status == 400 || status == 405 || status == 422:
		return "invalid_request_error", 400
	case status == 401:
		return "authentication_error", status
	case status == 402:
		return "billing_error", status
	case status == 403:
		return "permission_error", status
	case status == 404:
		return "not_found_error", status
	case status == 413:
		return "request_too_large", status
	case status == 429:
		return "rate_limit_error", status
	case status == 503 || status == 529:
		return "overloaded_error", 529
	case status == 504:
		return "timeout_error", status
	case status >= 400 && status < 500:
		return "invalid_request_error", status
	}
	return "api_error", status
}

// MsgError is an Anthropic error body.
func MsgError(typ, msg string) []byte {
	b := append([]byte(`{"type":"error","error":{"type":`), appendJSONString(nil, typ)...)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, msg)
	return append(b, "}}"...)
}

// ChatErrorToMessages rewrites an error body of the chat pipeline (the
// gateway's typed errors and upstream errors, OpenAI-shaped) as an
// Anthropic error with its status. The gateway's code leads the message
// (provider_circuit_open: …), so nothing the chat answer said is lost.
func ChatErrorToMessages(status int, body []byte) (int, []byte) {
	typ, st := MsgErrorType(status)
	e, ok := ParseChatError(body)
	if !ok {
		var native struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(body, &native) == nil && native.Type == "error" {
			return st, body
		}
		return st, MsgError(typ, "upstream answered "+strconv.Itoa(status))
	}
	msg := e.Message
	if c := e.CodeString(); c != "" && c != typ {
		msg = c + ": " + msg
	}
	return st, MsgError(typ, msg)
}

// ---- count_tokens ----

// EstimateTokens is the count_tokens estimate when no anthropic-type
// upstream counts: about four bytes of text (prompt, system, tool
// declarations) per token, rounded up, plus a few per message. It is an
// estimate, meant for budgeting a context window, not for billing.
func EstimateTokens(body []byte) (int, error) {
	if firstByte(body) != '{' {
		return 0, reqErr("", "the body must be a JSON object")
	}
	var r struct {
		Model    string          `json:"model"`
		System   json.RawMessage `json:"system"`
		Messages []MsgMessage    `json:"messages"`
		Tools    json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, decodeErr(err)
	}
	if r.Model == "" {
		return 0, reqErr("model", "is required")
	}
	if len(r.Messages) == 0 {
		return 0, reqErr("messages", "at least one message is required")
	}
	n := len(r.System) + len(r.Tools)
	for _, m := range r.Messages {
		n += len(m.Content) + 12
	}
	return (n + 3) / 4, nil
}
