package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// OpenAI Responses API (POST /v1/responses) ⇄ OpenAI chat completions.

// RespRequest is a Responses request as the gateway reads it.
type RespRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Tools              []RespTool      `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	PreviousResponseID string          `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	Stream             bool            `json:"stream"`
	Background         bool            `json:"background"`
	User               string          `json:"user"`
	Metadata           json.RawMessage `json:"metadata"`
	Text               *struct {
		Format *struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"format"`
	} `json:"text"`
	Reasoning *struct {
		Effort string `json:"effort"`
	} `json:"reasoning"`
}

// RespTool is a tool declaration; only function tools translate.
type RespTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

type respItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

type respPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL string          `json:"image_url"`
	Detail   string          `json:"detail"`
	FileID   json.RawMessage `json:"file_id"`
}

// RespTranslation is a translated Responses request.
type RespTranslation struct {
	Req     *RespRequest
	Chat    ChatRequest   // the chat request, history not yet prepended
	Input   []ChatMessage // this request's own input turns (kept for the next previous_response_id)
	Stream  bool
	Store   bool
	Dropped []string
}

// ResponsesToChat translates a Responses request: instructions → a
// system message; input (a string, or message, function_call and
// function_call_output items) → chat turns; function tools → chat tools;
// max_output_tokens → max_tokens; text.format json_schema / json_object
// → response_format; reasoning.effort → reasoning_effort. The caller
// prepends the turns of previous_response_id (WithHistory) and encodes.
func ResponsesToChat(body []byte) (*RespTranslation, error) {
	if firstByte(body) != '{' {
		return nil, reqErr("", "the body must be a JSON object")
	}
	var r RespRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, decodeErr(err)
	}
	if r.Model == "" {
		return nil, reqErr("model", "is required")
	}
	if r.MaxOutputTokens != nil && *r.MaxOutputTokens < 1 {
		return nil, reqErr("max_output_tokens", "must be at least 1")
	}
	t := &RespTranslation{Req: &r, Stream: r.Stream, Store: r.Store == nil || *r.Store}
	c := &t.Chat
	*c = ChatRequest{Model: r.Model, MaxTokens: r.MaxOutputTokens, Temperature: r.Temperature, TopP: r.TopP,
		Stream: r.Stream, ParallelToolCalls: r.ParallelToolCalls, User: r.User}
	if r.Stream {
		c.StreamOptions = &StreamOptions{IncludeUsage: true}
	}
	if r.Reasoning != nil {
		c.ReasoningEffort = r.Reasoning.Effort
	}
	if r.Text != nil && r.Text.Format != nil {
		f := r.Text.Format
		switch f.Type {
		case "", "text":
		case "json_object":
			c.ResponseFormat = json.RawMessage(`{"type":"json_object"}`)
		case "json_schema":
			if f.Name == "" || isNull(f.Schema) {
				return nil, reqErr("text.format", "a json_schema format needs a name and a schema")
			}
			js, _ := json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": f.Name, "schema": f.Schema, "strict": f.Strict}})
			c.ResponseFormat = js
		default:
			return nil, reqErr("text.format.type", "must be text, json_object or json_schema (got %q)", f.Type)
		}
	}
	var err error
	if t.Input, err = respInput(r.Input); err != nil {
		return nil, err
	}
	for i, tl := range r.Tools {
		f := "tools[" + strconv.Itoa(i) + "]"
		if tl.Type != "function" {
			return nil, untranslatable(f+".type", "tool type %q cannot be served through the gateway's translation; only function tools are", tl.Type)
		}
		if tl.Name == "" {
			return nil, reqErr(f+".name", "is required")
		}
		c.Tools = append(c.Tools, ChatTool{Type: "function", Function: ChatToolSpec{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters, Strict: tl.Strict}})
	}
	if !isNull(r.ToolChoice) {
		var s string
		var named struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		switch {
		case json.Unmarshal(r.ToolChoice, &s) == nil && (s == "auto" || s == "none" || s == "required"):
			c.ToolChoice = s
		case json.Unmarshal(r.ToolChoice, &named) == nil && named.Type == "function" && named.Name != "":
			c.ToolChoice = namedChoice(named.Name)
		default:
			return nil, reqErr("tool_choice", `must be "auto", "none", "required" or {"type":"function","name":…}`)
		}
		if len(c.Tools) == 0 {
			c.ToolChoice = nil
		}
	}
	if !isNull(r.Metadata) {
		t.Dropped = append(t.Dropped, "metadata")
	}
	return t, nil
}

// Encode is the chat request body with history (the turns of
// previous_response_id, oldest first) before instructions and input.
// Instructions are not inherited from the previous response, as the
// Responses API specifies.
func (t *RespTranslation) Encode(history []ChatMessage) ([]byte, error) {
	msgs := make([]ChatMessage, 0, len(history)+len(t.Input)+1)
	if in := t.Req.Instructions; in != nil && *in != "" {
		msgs = append(msgs, ChatMessage{Role: "system", Content: *in})
	}
	msgs = append(msgs, history...)
	msgs = append(msgs, t.Input...)
	if len(msgs) == 0 {
		return nil, reqErr("input", "is required")
	}
	t.Chat.Messages = msgs
	return json.Marshal(&t.Chat)
}

func respInput(raw json.RawMessage) ([]ChatMessage, error) {
	switch firstByte(raw) {
	case 0, 'n':
		if isNull(raw) {
			return nil, nil
		}
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, reqErr("input", "must be a string or a list of items")
		}
		return []ChatMessage{{Role: "user", Content: s}}, nil
	case '[':
		var items []respItem
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, reqErr("input", "must be a string or a list of items: %v", err)
		}
		var out []ChatMessage
		for i := range items {
			var err error
			if out, err = respItemTurn(out, &items[i], "input["+strconv.Itoa(i)+"]"); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, reqErr("input", "must be a string or a list of items")
}

func respItemTurn(out []ChatMessage, it *respItem, f string) ([]ChatMessage, error) {
	typ := it.Type
	if typ == "" && it.Role != "" {
		typ = "message"
	}
	switch typ {
	case "message":
		role := it.Role
		switch role {
		case "user", "assistant", "system":
		case "developer":
			role = "system"
		default:
			return nil, reqErr(f+".role", "must be user, assistant, system or developer (got %q)", it.Role)
		}
		content, err := respContent(it.Content, f+".content", role)
		if err != nil {
			return nil, err
		}
		return append(out, ChatMessage{Role: role, Content: content}), nil
	case "function_call":
		if it.CallID == "" || it.Name == "" {
			return nil, reqErr(f, "a function_call item needs call_id and name")
		}
		tc := ChatToolCall{ID: it.CallID, Type: "function", Function: ChatFunction{Name: it.Name, Arguments: it.Arguments}}
		if n := len(out); n > 0 && out[n-1].Role == "assistant" {
			out[n-1].ToolCalls = append(out[n-1].ToolCalls, tc)
			return out, nil
		}
		return append(out, ChatMessage{Role: "assistant", ToolCalls: []ChatToolCall{tc}}), nil
	case "function_call_output":
		if it.CallID == "" {
			return nil, reqErr(f+".call_id", "is required")
		}
		text, err := respOutputText(it.Output, f+".output")
		if err != nil {
			return nil, err
		}
		return append(out, ChatMessage{Role: "tool", ToolCallID: it.CallID, Content: text}), nil
	case "reasoning":
		return out, nil // earlier reasoning: no chat request carries it back
	}
	return nil, untranslatable(f+".type", "item type %q cannot be served through the gateway's translation (message, function_call, function_call_output and reasoning can)", it.Type)
}

// respContent reads a message's content: a string or input_text /
// output_text / input_image parts.
func respContent(raw json.RawMessage, f, role string) (any, error) {
	if firstByte(raw) == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, reqErr(f, "must be a string or a list of content parts")
		}
		return s, nil
	}
	var parts []respPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, reqErr(f, "must be a string or a list of content parts")
	}
	var out []ChatPart
	var text strings.Builder
	onlyText := true
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			out = append(out, ChatPart{Type: "text", Text: p.Text})
			text.WriteString(p.Text)
		case "input_image":
			if role != "user" {
				return nil, reqErr(f+"["+strconv.Itoa(j)+"]", "images are taken in user messages only")
			}
			if p.ImageURL == "" {
				return nil, untranslatable(f+"["+strconv.Itoa(j)+"].image_url", "is required (file ids cannot be translated)")
			}
			out = append(out, ChatPart{Type: "image_url", ImageURL: &ChatImageURL{URL: p.ImageURL, Detail: p.Detail}})
			onlyText = false
		default:
			return nil, untranslatable(f+"["+strconv.Itoa(j)+"].type", "content part type %q cannot be translated", p.Type)
		}
	}
	if onlyText {
		return text.String(), nil
	}
	return out, nil
}

func respOutputText(raw json.RawMessage, f string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	if firstByte(raw) == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", reqErr(f, "must be a string or a list of text parts")
		}
		return s, nil
	}
	c, err := respContent(raw, f, "tool")
	if err != nil {
		return "", err
	}
	s, _ := c.(string)
	return s, nil
}

// ---- answers ----

// RespOutput is what an answer produced: the Responses output items and
// the assistant turn a later previous_response_id continues from.
type RespOutput struct {
	Text       string
	Reasoning  string
	Calls      []ChatToolCall
	Finish     string
	Usage      ChatUsage
	HasUsage   bool
	UpstreamID string
}

// Turn is the assistant turn of an output, as chat history.
func (o *RespOutput) Turn() ChatMessage {
	m := ChatMessage{Role: "assistant", ToolCalls: o.Calls}
	if o.Text != "" || len(o.Calls) == 0 {
		m.Content = o.Text
	}
	return m
}

// RespMeta is what a Responses object echoes of its request.
type RespMeta struct {
	ID                 string
	Model              string
	Created            int64
	PreviousResponseID string
	Background         bool
	Instructions       *string
	Req                *RespRequest
}

// itemIDs are the ids of an answer's output items, derived from its id
// so the stream's and the stored object's agree.
func itemID(prefix, respID string, i int) string {
	return prefix + strings.TrimPrefix(respID, "resp_") + "_" + strconv.Itoa(i)
}

// ResponseObject encodes a Responses object with the output items
// rendered in output (the inside of the array; OutputItems renders an
// answer's). status is completed, incomplete, in_progress or failed ("":
// from o's finish reason).
func ResponseObject(m *RespMeta, o *RespOutput, output []byte, status string, errCode, errMsg string) []byte {
	b := append([]byte(nil), `{"id":`...)
	b = appendJSONString(b, m.ID)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, m.Created, 10)
	b = append(b, `,"status":`...)
	if status == "" {
		status = "completed"
		if o != nil && (o.Finish == "length" || o.Finish == "content_filter") {
			status = "incomplete"
		}
	}
	b = appendJSONString(b, status)
	b = append(b, `,"background":`...)
	b = strconv.AppendBool(b, m.Background)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, m.Model)
	b = append(b, `,"output":[`...)
	b = append(b, output...)
	b = append(b, `],"incomplete_details":`...)
	switch {
	case status == "incomplete" && o.Finish == "length":
		b = append(b, `{"reason":"max_output_tokens"}`...)
	case status == "incomplete":
		b = append(b, `{"reason":"content_filter"}`...)
	default:
		b = append(b, "null"...)
	}
	b = append(b, `,"error":`...)
	if errCode != "" {
		b = append(b, `{"code":`...)
		b = appendJSONString(b, errCode)
		b = append(b, `,"message":`...)
		b = appendJSONString(b, errMsg)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":`...)
	if m.Instructions != nil {
		b = appendJSONString(b, *m.Instructions)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"previous_response_id":`...)
	if m.PreviousResponseID != "" {
		b = appendJSONString(b, m.PreviousResponseID)
	} else {
		b = append(b, "null"...)
	}
	r := m.Req
	b = append(b, `,"parallel_tool_calls":`...)
	b = strconv.AppendBool(b, r == nil || r.ParallelToolCalls == nil || *r.ParallelToolCalls)
	b = append(b, `,"tool_choice":`...)
	if r != nil && !isNull(r.ToolChoice) {
		b = append(b, bytes.TrimSpace(r.ToolChoice)...)
	} else {
		b = append(b, `"auto"`...)
	}
	b = append(b, `,"tools":`...)
	if r != nil && len(r.Tools) > 0 {
		tb, _ := json.Marshal(r.Tools)
		b = append(b, tb...)
	} else {
		b = append(b, "[]"...)
	}
	b = append(b, `,"metadata":{}`...)
	if o != nil && o.HasUsage {
		u := &o.Usage
		cached, reasoning := 0, 0
		if u.PromptTokensDetails != nil {
			cached = u.PromptTokensDetails.CachedTokens
		}
		if u.CompletionTokensDetails != nil {
			reasoning = u.CompletionTokensDetails.ReasoningTokens
		}
		b = append(b, `,"usage":{"input_tokens":`...)
		b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
		b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(cached), 10)
		b = append(b, `},"output_tokens":`...)
		b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
		b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
		b = strconv.AppendInt(b, int64(reasoning), 10)
		b = append(b, `},"total_tokens":`...)
		b = strconv.AppendInt(b, int64(u.PromptTokens+u.CompletionTokens), 10)
		b = append(b, '}')
	} else {
		b = append(b, `,"usage":null`...)
	}
	return append(b, '}')
}

// OutputItems appends an answer's output items: reasoning, the message,
// then one function_call per call.
func OutputItems(b []byte, id string, o *RespOutput, status string) []byte {
	n := 0
	if o.Reasoning != "" {
		b = appendReasoningItem(b, itemID("rs_", id, n), o.Reasoning)
		n++
	}
	if o.Text != "" || len(o.Calls) == 0 {
		if n > 0 {
			b = append(b, ',')
		}
		b = appendMessageItem(b, itemID("msg_", id, n), o.Text, status)
		n++
	}
	for _, c := range o.Calls {
		if n > 0 {
			b = append(b, ',')
		}
		b = appendCallItem(b, itemID("fc_", id, n), c, status)
		n++
	}
	return b
}

func appendReasoningItem(b []byte, id, text string) []byte {
	b = append(b, `{"type":"reasoning","id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"summary":[{"type":"summary_text","text":`...)
	b = appendJSONString(b, text)
	return append(b, `}]}`...)
}

func appendMessageItem(b []byte, id, text, status string) []byte {
	b = append(b, `{"type":"message","id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, status)
	b = append(b, `,"role":"assistant","content":[`...)
	if status == "completed" {
		b = append(b, `{"type":"output_text","text":`...)
		b = appendJSONString(b, text)
		b = append(b, `,"annotations":[]}`...)
	}
	return append(b, `]}`...)
}

func appendCallItem(b []byte, id string, c ChatToolCall, status string) []byte {
	b = append(b, `{"type":"function_call","id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"call_id":`...)
	b = appendJSONString(b, c.ID)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, c.Function.Name)
	b = append(b, `,"arguments":`...)
	b = appendJSONString(b, c.Function.Arguments)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, status)
	return append(b, '}')
}

// ChatToRespOutput reads a chat.completion's output.
func ChatToRespOutput(chat []byte) (*RespOutput, error) {
	var c ChatCompletion
	if err := json.Unmarshal(chat, &c); err != nil {
		return nil, err
	}
	if len(c.Choices) == 0 {
		return nil, reqErr("choices", "the answer has no choice")
	}
	ch := &c.Choices[0]
	o := &RespOutput{Finish: ch.FinishReason, Reasoning: ch.Message.ReasoningContent, UpstreamID: c.ID}
	if ch.Message.Content != nil {
		o.Text = *ch.Message.Content
	}
	for _, tc := range ch.Message.ToolCalls {
		args := tc.Function.Arguments
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		o.Calls = append(o.Calls, ChatToolCall{ID: tc.ID, Type: "function", Function: ChatFunction{Name: tc.Function.Name, Arguments: args}})
	}
	if c.Usage != nil {
		o.Usage, o.HasUsage = *c.Usage, true
	}
	return o, nil
}

// ChatErrorToResponses rewrites an OpenAI-shaped chat error for the
// Responses surface: the same shape ({"error":{message,type,code}}), so
// the body passes as it is; anything else becomes one.
func ChatErrorToResponses(status int, body []byte) []byte {
	if _, ok := ParseChatError(body); ok {
		return body
	}
	b := append([]byte(nil), `{"error":{"message":`...)
	b = appendJSONString(b, "upstream answered "+strconv.Itoa(status))
	return append(b, `,"type":"server_error","code":"upstream_error","param":null}}`...)
}
