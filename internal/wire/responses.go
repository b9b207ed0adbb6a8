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

	toolsJSON []byte // Tools as the response object echoes them, written once
}

// RespTool is a tool declaration; only function tools translate.
type RespTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// RespTranslation is a translated Responses request.
type RespTranslation struct {
	Req     *RespRequest
	Chat    ChatRequest   // the chat request, history not yet prepended
	Input   []ChatMessage // this request's own input turns (kept for the next previous_response_id)
	Stream  bool
	Store   bool
	Dropped []string

	size int // the request body's size, to size the chat body
}

// includeUsage is the stream_options every translated stream sends
// (shared: never written).
var includeUsage = &StreamOptions{IncludeUsage: true}

// ResponsesToChat translates a Responses request: instructions → a
// system message; input (a string, or message, function_call and
// function_call_output items) → chat turns; function tools → chat tools;
// max_output_tokens → max_tokens; text.format json_schema / json_object
// → response_format; reasoning.effort → reasoning_effort. The caller
// prepends the turns of previous_response_id (WithHistory) and encodes.
//
// The body is validated once and walked once (no reflection); schemas
// and other pass-through values stay slices of the body.
func ResponsesToChat(body []byte) (*RespTranslation, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	t := &RespTranslation{Req: &RespRequest{}, size: len(body)}
	r := t.Req
	var f respSlices
	for k, v := range members(body[skipWS(body, 0):]) {
		if err := f.member(r, k, v); err != nil {
			return nil, err
		}
	}
	if r.Model == "" {
		return nil, reqErr("model", "is required")
	}
	if r.MaxOutputTokens != nil && *r.MaxOutputTokens < 1 {
		return nil, reqErr("max_output_tokens", "must be at least 1")
	}
	if err := t.translate(&f); err != nil {
		return nil, err
	}
	return t, nil
}

// respSlices are the request's members read as slices of the body.
type respSlices struct {
	input, tools, format []byte
}

// member reads one top-level member into r (or f).
func (f *respSlices) member(r *RespRequest, k, v []byte) error {
	var err error
	var tok []byte
	switch string(k) {
	case "model":
		tok, err = strTok(v, nil, "model")
		r.Model = str(tok)
	case "input":
		f.input = v
		r.Input = v
	case "instructions":
		if tok, err = strTok(v, nil, "instructions"); tok != nil {
			in := str(tok)
			r.Instructions = &in
		}
	case "max_output_tokens":
		r.MaxOutputTokens, err = optInt(v, "max_output_tokens")
	case "temperature":
		r.Temperature, err = optFloat(v, "temperature")
	case "top_p":
		r.TopP, err = optFloat(v, "top_p")
	case "tools":
		f.tools, err = arrTok(v, nil, "tools")
	case "tool_choice":
		r.ToolChoice = v
	case "parallel_tool_calls":
		r.ParallelToolCalls, err = optBool(v, "parallel_tool_calls")
	case "previous_response_id":
		tok, err = strTok(v, nil, "previous_response_id")
		r.PreviousResponseID = str(tok)
	case "store":
		r.Store, err = optBool(v, "store")
	case "stream":
		r.Stream, _, err = boolVal(v, nil, "stream")
	case "background":
		r.Background, _, err = boolVal(v, nil, "background")
	case "user":
		tok, err = strTok(v, nil, "user")
		r.User = str(tok)
	case "metadata":
		r.Metadata = v
	case "text":
		f.format, err = textFormat(v)
	case "reasoning":
		err = readReasoning(r, v)
	}
	return err
}

func optInt(v []byte, field string) (*int, error) {
	n, present, err := intVal(v, nil, field)
	if !present || err != nil {
		return nil, err
	}
	return &n, nil
}

func optFloat(v []byte, field string) (*float64, error) {
	tok, err := numTok(v, nil, field)
	if tok == nil || err != nil {
		return nil, err
	}
	f, _ := strconv.ParseFloat(string(tok), 64)
	return &f, nil
}

func optBool(v []byte, field string) (*bool, error) {
	b, present, err := boolVal(v, nil, field)
	if !present || err != nil {
		return nil, err
	}
	return &b, nil
}

// textFormat is text.format (nil when absent).
func textFormat(v []byte) ([]byte, error) {
	tok, err := objTok(v, nil, "text")
	if tok == nil || err != nil {
		return nil, err
	}
	var format []byte
	for k, v := range members(tok) {
		if string(k) == "format" {
			format, err = objTok(v, nil, "text.format")
		}
	}
	return format, err
}

// readReasoning reads reasoning.effort.
func readReasoning(r *RespRequest, v []byte) error {
	tok, err := objTok(v, nil, "reasoning")
	if tok == nil || err != nil {
		return err
	}
	r.Reasoning = &struct {
		Effort string `json:"effort"`
	}{}
	for k, v := range members(tok) {
		if string(k) == "effort" {
			e, err := strTok(v, nil, "reasoning.effort")
			if err != nil {
				return err
			}
			r.Reasoning.Effort = str(e)
		}
	}
	return nil
}

// translate fills the chat request from what was read.
func (t *RespTranslation) translate(f *respSlices) error {
	r := t.Req
	var err error
	t.Stream, t.Store = r.Stream, r.Store == nil || *r.Store
	c := &t.Chat
	*c = ChatRequest{Model: r.Model, MaxTokens: r.MaxOutputTokens, Temperature: r.Temperature, TopP: r.TopP,
		Stream: r.Stream, ParallelToolCalls: r.ParallelToolCalls, User: r.User}
	if r.Stream {
		c.StreamOptions = includeUsage
	}
	if r.Reasoning != nil {
		c.ReasoningEffort = r.Reasoning.Effort
	}
	if f.format != nil {
		if c.ResponseFormat, err = respFormat(r, f.format); err != nil {
			return err
		}
	}
	if t.Input, err = respInput(f.input); err != nil {
		return err
	}
	if f.tools != nil {
		if err := respTools(r, c, f.tools); err != nil {
			return err
		}
	}
	if !isNull(r.ToolChoice) {
		if err := respToolChoice(c, r.ToolChoice); err != nil {
			return err
		}
	}
	if !isNull(r.Metadata) {
		t.Dropped = append(t.Dropped, "metadata")
	}
	return nil
}

// respToolChoice writes tool_choice: auto, none, required or a named
// function (nothing when there are no tools).
func respToolChoice(c *ChatRequest, tc []byte) error {
	var typ, name []byte
	if firstByte(tc) == '{' {
		for k, v := range members(tc) {
			switch string(k) {
			case "type":
				typ = v
			case "name":
				name = v
			}
		}
	}
	switch {
	case tokIs(tc, "auto") || tokIs(tc, "none") || tokIs(tc, "required"):
		c.ToolChoice = string(tc[1 : len(tc)-1])
	case tokIs(typ, "function") && firstByte(name) == '"' && len(name) > 2:
		c.ToolChoice = namedChoice(str(name))
	default:
		return reqErr("tool_choice", `must be "auto", "none", "required" or {"type":"function","name":…}`)
	}
	if len(c.Tools) == 0 {
		c.ToolChoice = nil
	}
	return nil
}

// respFormat reads text.format into a chat response_format.
func respFormat(r *RespRequest, raw []byte) (json.RawMessage, error) {
	var typ, name, schema, strict []byte
	var err error
	for k, v := range members(raw) {
		switch string(k) {
		case "type":
			typ, err = strTok(v, nil, "text.format.type")
		case "name":
			name, err = strTok(v, nil, "text.format.name")
		case "schema":
			schema = v
		case "strict":
			if _, _, err = boolVal(v, nil, "text.format.strict"); !isNull(v) {
				strict = v
			}
		}
		if err != nil {
			return nil, err
		}
	}
	f := &struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	}{Type: str(typ), Name: str(name), Schema: schema}
	if strict != nil {
		st := strict[0] == 't'
		f.Strict = &st
	}
	r.Text = &struct {
		Format *struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"format"`
	}{Format: f}
	switch f.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return json.RawMessage(`{"type":"json_object"}`), nil
	case "json_schema":
		if f.Name == "" || isNull(schema) {
			return nil, reqErr("text.format", "a json_schema format needs a name and a schema")
		}
		b := append([]byte(nil), `{"json_schema":{"name":`...)
		b = appendTok(b, name)
		b = append(b, `,"schema":`...)
		b = append(b, schema...)
		b = append(b, `,"strict":`...)
		if strict != nil {
			b = append(b, strict...)
		} else {
			b = append(b, "null"...)
		}
		return append(b, `},"type":"json_schema"}`...), nil
	}
	return nil, reqErr("text.format.type", "must be text, json_object or json_schema (got %q)", f.Type)
}

// respTools reads the tools: function tools only.
func respTools(r *RespRequest, c *ChatRequest, raw []byte) error {
	for i, tl := range elements(raw) {
		f := fld(func() string { return "tools[" + strconv.Itoa(i) + "]" })
		if firstByte(tl) != '{' {
			return reqErr(f(), "must be an object")
		}
		var x RespTool
		var tok []byte
		var err error
		for k, v := range members(tl) {
			switch string(k) {
			case "type":
				tok, err = strTok(v, f, ".type")
				x.Type = str(tok)
			case "name":
				tok, err = strTok(v, f, ".name")
				x.Name = str(tok)
			case "description":
				tok, err = strTok(v, f, ".description")
				x.Description = str(tok)
			case "parameters":
				if !isNull(v) {
					x.Parameters = v
				}
			case "strict":
				var st, present bool
				if st, present, err = boolVal(v, f, ".strict"); present {
					x.Strict = &st
				}
			}
			if err != nil {
				return err
			}
		}
		if x.Type != "function" {
			return untranslatable(f()+".type", "tool type %q cannot be served through the gateway's translation; only function tools are", x.Type)
		}
		if x.Name == "" {
			return reqErr(f()+".name", "is required")
		}
		r.Tools = append(r.Tools, x)
		c.Tools = append(c.Tools, ChatTool{Type: "function", Function: ChatToolSpec{Name: x.Name, Description: x.Description, Parameters: x.Parameters, Strict: x.Strict}})
	}
	return nil
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
	n := t.size + t.size/4 + 256
	for i := range history {
		if s, ok := history[i].Content.(string); ok {
			n += len(s)
		}
		n += 64
	}
	return AppendChatRequest(make([]byte, 0, n), &t.Chat)
}

func respInput(raw json.RawMessage) ([]ChatMessage, error) {
	switch firstByte(raw) {
	case 0, 'n':
		if isNull(raw) {
			return nil, nil
		}
	case '"':
		return []ChatMessage{{Role: "user", Content: str(raw)}}, nil
	case '[':
		var out []ChatMessage
		for i, v := range elements(raw) {
			var err error
			if out, err = respItemTurn(out, v, i); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, reqErr("input", "must be a string or a list of items")
}

func respItemTurn(out []ChatMessage, item []byte, i int) ([]ChatMessage, error) {
	f := fld(func() string { return "input[" + strconv.Itoa(i) + "]" })
	if firstByte(item) != '{' {
		return nil, reqErr("input", "must be a string or a list of items: input[%d] is not an object", i)
	}
	var it respItem
	for k, v := range members(item) {
		if err := it.member(k, v, f); err != nil {
			return nil, err
		}
	}
	ts := str(it.typ)
	if ts == "" && len(it.role) > 2 {
		ts = "message"
	}
	switch ts {
	case "message":
		return it.message(out, f)
	case "function_call":
		if len(it.callID) <= 2 || len(it.name) <= 2 {
			return nil, reqErr(f(), "a function_call item needs call_id and name")
		}
		tc := ChatToolCall{ID: str(it.callID), Type: "function", Function: ChatFunction{Name: str(it.name), Arguments: str(it.args)}}
		if n := len(out); n > 0 && out[n-1].Role == "assistant" {
			out[n-1].ToolCalls = append(out[n-1].ToolCalls, tc)
			return out, nil
		}
		return append(out, ChatMessage{Role: "assistant", ToolCalls: []ChatToolCall{tc}}), nil
	case "function_call_output":
		if len(it.callID) <= 2 {
			return nil, reqErr(f()+".call_id", "is required")
		}
		text, err := respOutputText(it.output, f)
		if err != nil {
			return nil, err
		}
		return append(out, ChatMessage{Role: "tool", ToolCallID: str(it.callID), Content: text}), nil
	case "reasoning":
		return out, nil // earlier reasoning: no chat request carries it back
	}
	return nil, untranslatable(f()+".type", "item type %q cannot be served through the gateway's translation (message, function_call, function_call_output and reasoning can)", ts)
}

// respItem is an input item's fields, slices of the body.
type respItem struct {
	typ, role, content, callID, name, args, output []byte
}

func (it *respItem) member(k, v []byte, f fld) error {
	var err error
	switch string(k) {
	case "type":
		it.typ, err = strTok(v, f, ".type")
	case "role":
		it.role, err = strTok(v, f, ".role")
	case "content":
		it.content = v
	case "call_id":
		it.callID, err = strTok(v, f, ".call_id")
	case "name":
		it.name, err = strTok(v, f, ".name")
	case "arguments":
		it.args, err = strTok(v, f, ".arguments")
	case "output":
		it.output = v
	}
	return err
}

// message is a message item's chat turn (developer is system).
func (it *respItem) message(out []ChatMessage, f fld) ([]ChatMessage, error) {
	rs := str(it.role)
	switch rs {
	case "user", "assistant", "system":
	case "developer":
		rs = "system"
	default:
		return nil, reqErr(f()+".role", "must be user, assistant, system or developer (got %q)", rs)
	}
	c, err := respContent(it.content, f, ".content", rs)
	if err != nil {
		return nil, err
	}
	return append(out, ChatMessage{Role: rs, Content: c}), nil
}

// respContent reads a message's content: a string or input_text /
// output_text / input_image parts.
func respContent(raw []byte, p fld, sfx, role string) (any, error) {
	switch firstByte(raw) {
	case '"':
		return str(raw), nil
	case '[':
	default:
		return nil, reqErr(p.at(sfx), "must be a string or a list of content parts")
	}
	var out []ChatPart
	var text []byte
	onlyText := true
	for j, part := range elements(raw) {
		pp := fld(func() string { return p.at(sfx) + "[" + strconv.Itoa(j) + "]" })
		if firstByte(part) != '{' {
			return nil, reqErr(p.at(sfx), "must be a string or a list of content parts")
		}
		var typ, tx, img, detail []byte
		for k, v := range members(part) {
			var err error
			switch string(k) {
			case "type":
				typ, err = strTok(v, pp, ".type")
			case "text":
				tx, err = strTok(v, pp, ".text")
			case "image_url":
				img, err = strTok(v, pp, ".image_url")
			case "detail":
				detail, err = strTok(v, pp, ".detail")
			}
			if err != nil {
				return nil, err
			}
		}
		switch ts := str(typ); ts {
		case "input_text", "output_text", "text":
			s := str(tx)
			out = append(out, ChatPart{Type: "text", Text: s})
			text = append(text, s...)
		case "input_image":
			if role != "user" {
				return nil, reqErr(pp(), "images are taken in user messages only")
			}
			if len(img) <= 2 {
				return nil, untranslatable(pp.at(".image_url"), "is required (file ids cannot be translated)")
			}
			out = append(out, ChatPart{Type: "image_url", ImageURL: &ChatImageURL{URL: str(img), Detail: str(detail)}})
			onlyText = false
		default:
			return nil, untranslatable(pp.at(".type"), "content part type %q cannot be translated", ts)
		}
	}
	if onlyText {
		if len(out) == 1 {
			return out[0].Text, nil
		}
		return string(text), nil
	}
	return out, nil
}

func respOutputText(raw []byte, p fld) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	if firstByte(raw) == '"' {
		return str(raw), nil
	}
	c, err := respContent(raw, p, ".output", "tool")
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
	n := len(output) + len(errMsg) + 640
	if m.Instructions != nil {
		n += len(*m.Instructions)
	}
	if m.Req != nil {
		n += len(m.Req.ToolChoice)
		for i := range m.Req.Tools {
			n += len(m.Req.Tools[i].Parameters) + len(m.Req.Tools[i].Description) + 96
		}
	}
	return appendResponseObject(make([]byte, 0, n), m, o, output, status, errCode, errMsg)
}

// appendResponseObject appends ResponseObject's object to b.
func appendResponseObject(b []byte, m *RespMeta, o *RespOutput, output []byte, status string, errCode, errMsg string) []byte {
	b = append(b, `{"id":`...)
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
	b = appendRespError(b, errCode, errMsg)
	b = appendRespEcho(b, m)
	b = appendRespUsage(b, o)
	return append(b, '}')
}

// appendRespError writes the object's error (null without one).
func appendRespError(b []byte, code, msg string) []byte {
	b = append(b, `,"error":`...)
	if code == "" {
		return append(b, "null"...)
	}
	b = append(b, `{"code":`...)
	b = appendJSONString(b, code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, msg)
	return append(b, '}')
}

// appendRespEcho writes what the object repeats of the request:
// instructions, previous_response_id, parallel_tool_calls, tool_choice,
// tools and metadata.
func appendRespEcho(b []byte, m *RespMeta) []byte {
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
		// Written once per request: a stream's response.created and
		// response.completed and the stored object all carry them.
		if r.toolsJSON == nil {
			r.toolsJSON, _ = json.Marshal(r.Tools)
		}
		b = append(b, r.toolsJSON...)
	} else {
		b = append(b, "[]"...)
	}
	return append(b, `,"metadata":{}`...)
}

// appendRespUsage writes the object's usage (null when the upstream
// gave none).
func appendRespUsage(b []byte, o *RespOutput) []byte {
	if o == nil || !o.HasUsage {
		return append(b, `,"usage":null`...)
	}
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
	return append(b, '}')
}

// OutputItems appends an answer's output items: reasoning, the message,
// then one function_call per call.
func OutputItems(b []byte, id string, o *RespOutput, status string) []byte {
	if b == nil {
		size := len(o.Text) + len(o.Reasoning) + 256
		for i := range o.Calls {
			size += len(o.Calls[i].Function.Arguments) + len(o.Calls[i].Function.Name) + len(o.Calls[i].ID) + 160
		}
		b = make([]byte, 0, size)
	}
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
