package wire

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The reference: the Responses request translation as encoding/json
// reads and writes it. FuzzResponsesMatchesReference pins the one-walk
// reader to it: wherever both translate a body, the chat requests are the
// same JSON value.

type refRespItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

type refRespPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL string          `json:"image_url"`
	Detail   string          `json:"detail"`
	FileID   json.RawMessage `json:"file_id"`
}

// RespTranslation is a translated Responses request.

// refResponsesToChat translates a Responses request: instructions → a
// system message; input (a string, or message, function_call and
// function_call_output items) → chat turns; function tools → chat tools;
// max_output_tokens → max_tokens; text.format json_schema / json_object
// → response_format; reasoning.effort → reasoning_effort. The caller
// prepends the turns of previous_response_id (WithHistory) and encodes.
func refResponsesToChat(body []byte) (*RespTranslation, error) {
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
	if t.Input, err = refRespInput(r.Input); err != nil {
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
func refEncode(t *RespTranslation, history []ChatMessage) ([]byte, error) {
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

func refRespInput(raw json.RawMessage) ([]ChatMessage, error) {
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
		var items []refRespItem
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, reqErr("input", "must be a string or a list of items: %v", err)
		}
		var out []ChatMessage
		for i := range items {
			var err error
			if out, err = refRespItemTurn(out, &items[i], "input["+strconv.Itoa(i)+"]"); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, reqErr("input", "must be a string or a list of items")
}

func refRespItemTurn(out []ChatMessage, it *refRespItem, f string) ([]ChatMessage, error) {
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
		content, err := refRespContent(it.Content, f+".content", role)
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
		text, err := refRespOutputText(it.Output, f+".output")
		if err != nil {
			return nil, err
		}
		return append(out, ChatMessage{Role: "tool", ToolCallID: it.CallID, Content: text}), nil
	case "reasoning":
		return out, nil // earlier reasoning: no chat request carries it back
	}
	return nil, untranslatable(f+".type", "item type %q cannot be served through the gateway's translation (message, function_call, function_call_output and reasoning can)", it.Type)
}

// refRespContent reads a message's content: a string or input_text /
// output_text / input_image parts.
func refRespContent(raw json.RawMessage, f, role string) (any, error) {
	if firstByte(raw) == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, reqErr(f, "must be a string or a list of content parts")
		}
		return s, nil
	}
	var parts []refRespPart
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

func refRespOutputText(raw json.RawMessage, f string) (string, error) {
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
	c, err := refRespContent(raw, f, "tool")
	if err != nil {
		return "", err
	}
	s, _ := c.(string)
	return s, nil
}

func FuzzResponsesMatchesReference(f *testing.F) {
	f.Add([]byte(respSample))
	f.Add([]byte(benchRespReq))
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"output_text","text":"b\u00e9"}]}],"temperature":0.25,"top_p":1,"user":"u","store":false,"parallel_tool_calls":true,"tool_choice":"auto","tools":[{"type":"function","name":"f","description":"d","strict":true}]}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}],"text":{"format":{"type":"json_object"}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if foldedKey(b) || foldedRespKey(b) {
			return // encoding/json matches keys case-insensitively; the API (and the reader) does not
		}
		tr, err := ResponsesToChat(b)
		ref, rerr := refResponsesToChat(b)
		if err != nil || rerr != nil {
			return
		}
		hist := []ChatMessage{{Role: "user", Content: "earlier"}}
		got, err := tr.Encode(hist)
		want, rerr := refEncode(ref, hist)
		if err != nil || rerr != nil {
			return
		}
		var g, w map[string]any
		if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil {
			t.Fatalf("not JSON:\n%s\n%s", got, want)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("body %s\ngot  %s\nwant %s", b, got, want)
		}
		if tr.Stream != ref.Stream || tr.Store != ref.Store || tr.Req.PreviousResponseID != ref.Req.PreviousResponseID ||
			tr.Req.Background != ref.Req.Background || len(tr.Input) != len(ref.Input) {
			t.Fatalf("translation %+v, reference %+v", tr, ref)
		}
	})
}

var respRefKeys = strings.Fields(`input instructions max_output_tokens parallel_tool_calls previous_response_id store
background user text format schema strict reasoning effort call_id arguments output image_url detail file_id parameters`)

func foldedRespKey(b []byte) bool {
	for _, m := range keyRE.FindAllSubmatch(b, -1) {
		k := string(m[1])
		for _, known := range respRefKeys {
			if k != known && strings.EqualFold(k, known) {
				return true
			}
		}
	}
	return false
}
