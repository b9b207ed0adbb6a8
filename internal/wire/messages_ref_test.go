package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The reference: the Messages request translation as encoding/json
// reads and writes it. FuzzMessagesMatchesReference pins the one-walk
// reader to it: wherever both translate a body, the chat requests are the
// same JSON value (the reader writes [] for no messages and keeps empty
// text parts, which the reference wrote as null and dropped).

// refMsgRequest is a Messages request as the gateway reads it. Fields it
// cannot express in a chat request are listed in Dropped by
// refMessagesToChat (the caller logs them at debug level).
type refMsgRequest struct {
	Model         string            `json:"model"`
	MaxTokens     *int              `json:"max_tokens"`
	System        json.RawMessage   `json:"system"`
	Messages      []refMsgMessage   `json:"messages"`
	Stream        *bool             `json:"stream"`
	StopSequences []string          `json:"stop_sequences"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int              `json:"top_k"`
	Tools         []refMsgTool      `json:"tools"`
	ToolChoice    *refMsgToolChoice `json:"tool_choice"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	Thinking json.RawMessage `json:"thinking"`
}

// refMsgMessage is one turn; Content is a string or a list of blocks.
type refMsgMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// refMsgBlock is a content block of a request.
type refMsgBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Source    *refMsgSource   `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// refMsgSource is an image block's source.
type refMsgSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

// refMsgTool is a tool declaration; only custom tools (no type, or "custom")
// translate to chat function tools.
type refMsgTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// refMsgToolChoice is tool_choice.
type refMsgToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// refMessagesToChat translates a Messages request body into a chat completion
// request: system → a system message; user turns' text and image blocks →
// content parts, their tool_result blocks → tool messages (before the
// turn's other content, as chat requires); assistant text and tool_use
// blocks → content and tool_calls (thinking blocks are dropped: no chat
// request carries them back); custom tools → function tools; tool_choice
// auto / any / tool / none → auto / required / the named function / none;
// stop_sequences → stop; metadata.user_id → user. A stream asks for the
// usage chunk, which message_delta reports.
func refMessagesToChat(body []byte) (*MsgTranslation, error) {
	if firstByte(body) != '{' {
		return nil, reqErr("", "the body must be a JSON object")
	}
	var r refMsgRequest
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
		sys, cached, err := refSystemText(r.System)
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
		if err := refMsgTurn(&out, &r.Messages[i], i, t); err != nil {
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

// refSystemText reads system: a string or a list of text blocks.
func refSystemText(raw json.RawMessage) (string, bool, error) {
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

// refMsgBlocks reads a turn's content: a string is one text block.
func refMsgBlocks(raw json.RawMessage, field string) ([]refMsgBlock, error) {
	switch firstByte(raw) {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, reqErr(field, "must be a string or a list of content blocks")
		}
		return []refMsgBlock{{Type: "text", Text: s}}, nil
	case '[':
		var bs []refMsgBlock
		if err := json.Unmarshal(raw, &bs); err != nil {
			return nil, reqErr(field, "must be a string or a list of content blocks: %v", err)
		}
		return bs, nil
	}
	return nil, reqErr(field, "must be a string or a list of content blocks")
}

func refMsgTurn(out *ChatRequest, m *refMsgMessage, i int, t *MsgTranslation) error {
	field := "messages[" + strconv.Itoa(i) + "]"
	blocks, err := refMsgBlocks(m.Content, field+".content")
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
				p, err := refImagePart(b.Source, bf+".source")
				if err != nil {
					return err
				}
				parts = append(parts, p)
			case "tool_result":
				if b.ToolUseID == "" {
					return reqErr(bf+".tool_use_id", "is required")
				}
				text, err := refToolResultText(b.Content, bf+".content")
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

func refImagePart(s *refMsgSource, field string) (ChatPart, error) {
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

// refToolResultText reads a tool_result's content: a string or text blocks.
func refToolResultText(raw json.RawMessage, field string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	bs, err := refMsgBlocks(raw, field)
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

func FuzzMessagesMatchesReference(f *testing.F) {
	f.Add([]byte(msgSample))
	f.Add([]byte(benchMsgReq))
	f.Add([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x\u00e9\ud83d\ude00<>&"}],"stop_sequences":["a","\n"],"temperature":1e-3}`))
	f.Add([]byte(`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"tool_use","id":"i","name":"n","input":{ "a" : [1, 2] }}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"i","is_error":true,"content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]},{"type":"image","source":{"type":"url","url":"https://x/y"}}]}],"tools":[{"name":"n"}],"tool_choice":{"type":"any"},"metadata":{"user_id":"u"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if foldedKey(b) {
			return // encoding/json matches keys case-insensitively; the API (and the reader) does not
		}
		tr, err := MessagesToChat(b)
		ref, rerr := refMessagesToChat(b)
		if err != nil || rerr != nil {
			return
		}
		var got, want map[string]any
		if json.Unmarshal(tr.Chat, &got) != nil || json.Unmarshal(ref.Chat, &want) != nil {
			t.Fatalf("not JSON:\n%s\n%s", tr.Chat, ref.Chat)
		}
		if want["messages"] == nil {
			want["messages"] = []any{}
		}
		dropEmptyText(got)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("body %s\ngot  %s\nwant %s", b, tr.Chat, ref.Chat)
		}
		slices.Sort(tr.Dropped)
		slices.Sort(ref.Dropped)
		if !slices.Equal(tr.Dropped, ref.Dropped) || tr.Stream != ref.Stream || tr.Model != ref.Model {
			t.Fatalf("translation %v %v %q, reference %v %v %q", tr.Dropped, tr.Stream, tr.Model, ref.Dropped, ref.Stream, ref.Model)
		}
	})
}

var refKeys = strings.Fields(`model max_tokens system messages stream stop_sequences temperature top_p top_k tools
tool_choice metadata thinking role content type text source id name input tool_use_id is_error media_type data url
user_id description input_schema disable_parallel_tool_use cache_control`)

var keyRE = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"\s*:`)

// foldedKey reports whether b has a key that only encoding/json's
// case-insensitive (or escaped) matching reads as a known field.
func foldedKey(b []byte) bool {
	for _, m := range keyRE.FindAllSubmatch(b, -1) {
		k := string(m[1])
		if strings.Contains(k, "\\") {
			return true
		}
		for _, known := range refKeys {
			if k != known && strings.EqualFold(k, known) {
				return true
			}
		}
	}
	return false
}

// dropEmptyText removes "text":"" from content parts, as the reference's
// omitempty did.
func dropEmptyText(m map[string]any) {
	msgs, _ := m["messages"].([]any)
	for _, x := range msgs {
		parts, _ := x.(map[string]any)["content"].([]any)
		for _, p := range parts {
			if pm, ok := p.(map[string]any); ok && pm["text"] == "" {
				delete(pm, "text")
			}
		}
	}
}
