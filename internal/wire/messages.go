package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Anthropic Messages API (POST /v1/messages) ⇄ OpenAI chat completions.

// MsgTranslation is a translated Messages request.
type MsgTranslation struct {
	Chat    []byte   // the chat completion request body
	Model   string   // the model the client asked for
	Stream  bool     // the client asked for SSE
	Dropped []string // fields no chat request carries (top_k, thinking, cache_control)
	// InputEstimate is count_tokens's estimate of the request's input
	// tokens (EstimateTokens), what a stream's message_start says when
	// the upstream counts the prompt only at the end.
	InputEstimate int
}

// msgReq is a Messages request's top-level fields, each a slice of the
// body (nil when absent or null).
type msgReq struct {
	model, system, messages, stop, temperature, topP, tools, toolChoice, metadata []byte
	maxTokens                                                                     int
	hasMax, stream, topK, thinking                                                bool
	estBytes                                                                      int // EstimateTokens's byte count of system and tools
}

// msgBlk is a content block's fields, slices of the body.
type msgBlk struct {
	typ, text, source, id, name, input, toolUseID, content []byte
	isError                                                bool
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
//
// The body is validated once and walked once; the chat body is written
// directly, with strings, numbers and schemas copied as they are.
func MessagesToChat(body []byte) (*MsgTranslation, error) {
	r, err := readMsgReq(body)
	if err != nil {
		return nil, err
	}
	t := &MsgTranslation{Model: str(r.model), Stream: r.stream}
	b := make([]byte, 0, len(body)+len(body)/4+64)
	b = append(b, `{"model":`...)
	b = appendTok(b, r.model)
	est := r.estBytes
	if b, est, err = msgMessages(b, &r, t, est); err != nil {
		return nil, err
	}
	t.InputEstimate = estimateFromBytes(est)
	if b, err = msgSampling(b, &r); err != nil {
		return nil, err
	}
	if r.topK {
		t.Dropped = append(t.Dropped, "top_k")
	}
	if r.thinking {
		t.Dropped = append(t.Dropped, "thinking")
	}
	ntools := 0
	if r.tools != nil {
		if b, ntools, err = msgTools(b, r.tools); err != nil {
			return nil, err
		}
	}
	if r.toolChoice != nil {
		if b, err = msgToolChoice(b, r.toolChoice, ntools); err != nil {
			return nil, err
		}
	}
	if b, err = msgUserID(b, r.metadata, t); err != nil {
		return nil, err
	}
	b = append(b, `,"max_tokens":`...) // last: see UseMaxCompletionTokens
	b = strconv.AppendInt(b, int64(r.maxTokens), 10)
	t.Chat = append(b, '}')
	return t, nil
}

// readMsgReq reads a Messages request's top-level fields and checks the
// required ones.
func readMsgReq(body []byte) (msgReq, error) {
	var r msgReq
	if err := checkBody(body); err != nil {
		return r, err
	}
	for k, v := range members(body[skipWS(body, 0):]) {
		if err := r.member(k, v); err != nil {
			return r, err
		}
	}
	switch {
	case len(r.model) <= 2:
		return r, reqErr("model", "is required")
	case !r.hasMax:
		return r, reqErr("max_tokens", "is required")
	case r.maxTokens < 1:
		return r, reqErr("max_tokens", "must be at least 1")
	case len(r.messages) == 0 || firstByte(r.messages[1:]) == ']':
		return r, reqErr("messages", "at least one message is required")
	}
	return r, nil
}

// member reads one top-level member.
func (r *msgReq) member(k, v []byte) error {
	var err error
	switch string(k) {
	case "model":
		r.model, err = strTok(v, nil, "model")
	case "max_tokens":
		r.maxTokens, r.hasMax, err = intVal(v, nil, "max_tokens")
	case "system":
		r.system = v
		if isNull(v) {
			r.system = nil
		}
		r.estBytes += len(v)
	case "messages":
		r.messages, err = arrTok(v, nil, "messages")
	case "stream":
		r.stream, _, err = boolVal(v, nil, "stream")
	case "stop_sequences":
		r.stop, err = arrTok(v, nil, "stop_sequences")
	case "temperature":
		r.temperature, err = numTok(v, nil, "temperature")
	case "top_p":
		r.topP, err = numTok(v, nil, "top_p")
	case "top_k":
		_, r.topK, err = intVal(v, nil, "top_k")
	case "tools":
		r.tools, err = arrTok(v, nil, "tools")
		r.estBytes += len(v)
	case "tool_choice":
		r.toolChoice, err = objTok(v, nil, "tool_choice")
	case "metadata":
		r.metadata, err = objTok(v, nil, "metadata")
	case "thinking":
		r.thinking = !isNull(v)
	}
	return err
}

// msgMessages writes the chat messages: the system message, then each
// turn's. est gains each turn's share of the token estimate.
func msgMessages(b []byte, r *msgReq, t *MsgTranslation, est int) ([]byte, int, error) {
	var err error
	b = append(b, `,"messages":[`...)
	n := 0 // messages written
	if r.system != nil {
		if b, err = msgSystem(b, r.system, t); err != nil {
			return nil, 0, err
		}
		if b[len(b)-1] == '}' {
			n++
		}
	}
	for i, m := range elements(r.messages) {
		var content int
		if b, n, content, err = msgTurn(b, n, m, i, t); err != nil {
			return nil, 0, err
		}
		est += content + estimatePerMessage
	}
	return append(b, ']'), est, nil
}

// msgSampling writes temperature, top_p, stop and the stream options.
func msgSampling(b []byte, r *msgReq) ([]byte, error) {
	if r.temperature != nil {
		b = append(b, `,"temperature":`...)
		b = append(b, r.temperature...)
	}
	if r.topP != nil {
		b = append(b, `,"top_p":`...)
		b = append(b, r.topP...)
	}
	if r.stop != nil && firstByte(r.stop[1:]) != ']' {
		b = append(b, `,"stop":[`...)
		for j, v := range elements(r.stop) {
			if firstByte(v) != '"' {
				return nil, typeErr("stop_sequences["+strconv.Itoa(j)+"]", "a string", v)
			}
			if j > 0 {
				b = append(b, ',')
			}
			b = appendTok(b, v)
		}
		b = append(b, ']')
	}
	if r.stream {
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return b, nil
}

// msgUserID writes metadata.user_id as the chat user.
func msgUserID(b, metadata []byte, t *MsgTranslation) ([]byte, error) {
	if metadata == nil {
		return b, nil
	}
	for k, v := range members(metadata) {
		if string(k) != "user_id" {
			continue
		}
		tok, err := strTok(v, nil, "metadata.user_id")
		if err != nil {
			return nil, err
		}
		// OpenAI's user field takes at most 64 characters; a longer
		// id (Claude Code's session ids are) is dropped rather than
		// cut, which would merge distinct users.
		switch u := str(tok); {
		case len(u) > 64:
			t.Dropped = append(t.Dropped, "metadata.user_id")
		case u != "":
			b = append(b, `,"user":`...)
			b = appendTok(b, tok)
		}
	}
	return b, nil
}

// msgSystem writes system (a string or a list of text blocks) as a system
// message; an empty system writes nothing.
func msgSystem(b, raw []byte, t *MsgTranslation) ([]byte, error) {
	switch firstByte(raw) {
	case '"':
		if len(raw) == 2 {
			return b, nil
		}
		b = append(b, `{"role":"system","content":`...)
		b = appendTok(b, raw)
		return append(b, '}'), nil
	case '[':
	default:
		return nil, reqErr("system", "must be a string or a list of text blocks")
	}
	var text []byte
	cached := false
	for i, bl := range elements(raw) {
		if firstByte(bl) != '{' {
			return nil, reqErr("system", "must be a string or a list of text blocks")
		}
		var typ, tx []byte
		for k, v := range members(bl) {
			switch string(k) {
			case "type":
				typ = v
			case "text":
				tx = v
			case "cache_control":
				cached = cached || !isNull(v)
			}
		}
		if typ == nil || !tokIs(typ, "text") {
			return nil, reqErr("system["+strconv.Itoa(i)+"].type", "must be \"text\"")
		}
		if isNull(tx) {
			return nil, reqErr("system["+strconv.Itoa(i)+"].text", "is required in a text block")
		}
		if firstByte(tx) != '"' {
			return nil, typeErr("system["+strconv.Itoa(i)+"].text", "a string", tx)
		}
		if i > 0 && len(text) > 0 {
			text = append(text, "\n\n"...)
		}
		text = unquote(text, tx)
	}
	if cached {
		t.Dropped = append(t.Dropped, "system.cache_control")
	}
	if len(text) == 0 {
		return b, nil
	}
	b = append(b, `{"role":"system","content":`...)
	b = appendJSONBytes(b, text)
	return append(b, '}'), nil
}

// msgBlocks reads a turn's content into blks: a string is one text block.
func msgBlocks(blks []msgBlk, raw []byte, field fld) ([]msgBlk, error) {
	switch firstByte(raw) {
	case '"':
		return append(blks, msgBlk{typ: []byte(`"text"`), text: raw}), nil
	case '[':
	default:
		return nil, reqErr(field(), "must be a string or a list of content blocks")
	}
	for j, bl := range elements(raw) {
		bf := fld(func() string { return field() + "[" + strconv.Itoa(j) + "]" })
		if firstByte(bl) != '{' {
			return nil, reqErr(bf(), "must be a content block object")
		}
		var x msgBlk
		var err error
		for k, v := range members(bl) {
			switch string(k) {
			case "type":
				x.typ, err = strTok(v, bf, ".type")
			case "text":
				x.text, err = strTok(v, bf, ".text")
			case "source":
				x.source, err = objTok(v, bf, ".source")
			case "id":
				x.id, err = strTok(v, bf, ".id")
			case "name":
				x.name, err = strTok(v, bf, ".name")
			case "input":
				x.input = v
			case "tool_use_id":
				x.toolUseID, err = strTok(v, bf, ".tool_use_id")
			case "content":
				x.content = v
			case "is_error":
				x.isError, _, err = boolVal(v, bf, ".is_error")
			}
			if err != nil {
				return nil, err
			}
		}
		if x.text == nil && tokIs(x.typ, "text") {
			// Anthropic refuses a text block without its text; an empty
			// one passed on would be a different request.
			return nil, reqErr(bf()+".text", "is required in a text block")
		}
		blks = append(blks, x)
	}
	return blks, nil
}

// msgTurn writes one turn as chat messages; n counts the messages
// written, content is the size of the turn's content (the token
// estimate's share).
func msgTurn(b []byte, n int, m []byte, i int, t *MsgTranslation) (_ []byte, _ int, content int, _ error) {
	field := fld(func() string { return "messages[" + strconv.Itoa(i) + "]" })
	if firstByte(m) != '{' {
		return nil, n, 0, reqErr(field(), "must be an object")
	}
	var role, raw []byte
	var err error
	for k, v := range members(m) {
		switch string(k) {
		case "role":
			role, err = strTok(v, field, ".role")
		case "content":
			raw = v
		}
		if err != nil {
			return nil, n, 0, err
		}
	}
	var stack [8]msgBlk
	blocks, err := msgBlocks(stack[:0], raw, func() string { return field() + ".content" })
	if err != nil {
		return nil, n, 0, err
	}
	if bytes.Contains(raw, []byte(`"cache_control"`)) {
		t.Dropped = append(t.Dropped, field()+".cache_control")
	}
	switch {
	case tokIs(role, "user"):
		b, n, err = msgUserTurn(b, n, blocks, field)
	case tokIs(role, "assistant"):
		b, n, err = msgAssistantTurn(b, n, blocks, field)
	default:
		err = reqErr(field()+".role", "must be \"user\" or \"assistant\" (got %q)", str(role))
	}
	return b, n, len(raw), err
}

// nextMsg starts the next chat message of the array being written.
func nextMsg(b []byte, n int) ([]byte, int) {
	if n > 0 {
		b = append(b, ',')
	}
	return b, n + 1
}

// blockField names a turn's content block j.
func blockField(turn fld, j int) fld {
	return func() string { return turn() + ".content[" + strconv.Itoa(j) + "]" }
}

// msgUserTurn writes a user turn: its tool results first, as chat
// requires, then the other content as one user message.
func msgUserTurn(b []byte, n int, blocks []msgBlk, field fld) ([]byte, int, error) {
	var err error
	parts, text := 0, -1
	for j := range blocks {
		bl := &blocks[j]
		bf := blockField(field, j)
		switch {
		case tokIs(bl.typ, "text"):
			parts++
			text = j
		case tokIs(bl.typ, "image"):
			parts++
		case tokIs(bl.typ, "tool_result"):
			if len(bl.toolUseID) <= 2 {
				return nil, n, reqErr(bf()+".tool_use_id", "is required")
			}
			b, n = nextMsg(b, n)
			b = append(b, `{"role":"tool","content":`...)
			if b, err = toolResultText(b, bl, func() string { return bf() + ".content" }); err != nil {
				return nil, n, err
			}
			b = append(b, `,"tool_call_id":`...)
			b = appendTok(b, bl.toolUseID)
			b = append(b, '}')
		default:
			return nil, n, untranslatable(bf()+".type", "block type %q is not supported in a user turn (text, image and tool_result are)", str(bl.typ))
		}
	}
	if parts == 0 {
		return b, n, nil // tool results only
	}
	b, n = nextMsg(b, n)
	b = append(b, `{"role":"user","content":`...)
	if parts == 1 && text >= 0 {
		b = appendTok(b, blocks[text].text)
		return append(b, '}'), n, nil
	}
	if b, err = msgUserParts(b, blocks, field); err != nil {
		return nil, n, err
	}
	return append(b, '}'), n, nil
}

// msgUserParts writes a user turn's text and image blocks as content
// parts.
func msgUserParts(b []byte, blocks []msgBlk, field fld) ([]byte, error) {
	var err error
	b = append(b, '[')
	w := 0
	for j := range blocks {
		bl := &blocks[j]
		isText, isImage := tokIs(bl.typ, "text"), tokIs(bl.typ, "image")
		if !isText && !isImage {
			continue
		}
		if w > 0 {
			b = append(b, ',')
		}
		w++
		if isText {
			b = append(b, `{"type":"text","text":`...)
			b = appendTok(b, bl.text)
			b = append(b, '}')
		} else if b, err = imagePart(b, bl.source, func() string { return blockField(field, j)() + ".source" }); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// msgAssistantTurn writes an assistant turn as one message with its
// text and tool calls (nothing when it has neither).
func msgAssistantTurn(b []byte, n int, blocks []msgBlk, field fld) ([]byte, int, error) {
	texts, calls, last := 0, 0, -1
	for j := range blocks {
		bl := &blocks[j]
		bf := blockField(field, j)
		switch {
		case tokIs(bl.typ, "text"):
			if len(bl.text) > 2 {
				texts++
				last = j
			}
		case tokIs(bl.typ, "tool_use"):
			if len(bl.id) <= 2 || len(bl.name) <= 2 {
				return nil, n, reqErr(bf(), "a tool_use block needs an id and a name")
			}
			if !isNull(bl.input) && firstByte(bl.input) != '{' {
				return nil, n, reqErr(bf()+".input", "must be an object")
			}
			calls++
		case tokIs(bl.typ, "thinking"), tokIs(bl.typ, "redacted_thinking"):
			// Earlier reasoning: no chat request carries it back.
		default:
			return nil, n, untranslatable(bf()+".type", "block type %q is not supported in an assistant turn (text, tool_use and thinking are)", str(bl.typ))
		}
	}
	if texts == 0 && calls == 0 {
		return b, n, nil
	}
	b, n = nextMsg(b, n)
	b = append(b, `{"role":"assistant","content":`...)
	switch {
	case texts == 0:
		b = append(b, "null"...)
	case texts == 1:
		b = appendTok(b, blocks[last].text)
	default:
		var all []byte
		for j := range blocks {
			if tokIs(blocks[j].typ, "text") {
				all = unquote(all, blocks[j].text)
			}
		}
		b = appendJSONBytes(b, all)
	}
	if calls > 0 {
		b = msgToolCalls(b, blocks)
	}
	return append(b, '}'), n, nil
}

// msgToolCalls writes an assistant turn's tool_use blocks as tool_calls.
func msgToolCalls(b []byte, blocks []msgBlk) []byte {
	b = append(b, `,"tool_calls":[`...)
	w := 0
	for j := range blocks {
		bl := &blocks[j]
		if !tokIs(bl.typ, "tool_use") {
			continue
		}
		if w > 0 {
			b = append(b, ',')
		}
		w++
		b = append(b, `{"id":`...)
		b = appendTok(b, bl.id)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendTok(b, bl.name)
		b = append(b, `,"arguments":`...)
		if isNull(bl.input) {
			b = append(b, `"{}"`...)
		} else {
			b = appendJSONBytes(b, bytes.TrimSpace(bl.input))
		}
		b = append(b, "}}"...)
	}
	return append(b, ']')
}

// imagePart writes an image block's source as an image_url part.
func imagePart(b, src []byte, field fld) ([]byte, error) {
	if src == nil {
		return nil, reqErr(field(), "is required")
	}
	var typ, mt, data, url []byte
	var err error
	for k, v := range members(src) {
		switch string(k) {
		case "type":
			typ, err = strTok(v, field, ".type")
		case "media_type":
			mt, err = strTok(v, field, ".media_type")
		case "data":
			data, err = strTok(v, field, ".data")
		case "url":
			url, err = strTok(v, field, ".url")
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case tokIs(typ, "base64"):
		if len(mt) <= 2 || len(data) <= 2 {
			return nil, reqErr(field(), "a base64 source needs media_type and data")
		}
		b = append(b, `{"type":"image_url","image_url":{"url":"data:`...)
		b = appendTokText(b, mt)
		b = append(b, ";base64,"...)
		b = appendTokText(b, data)
		return append(b, `"}}`...), nil
	case tokIs(typ, "url"):
		u := str(url)
		if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
			return nil, reqErr(field()+".url", "must be an http(s) URL")
		}
		b = append(b, `{"type":"image_url","image_url":{"url":`...)
		b = appendTok(b, url)
		return append(b, "}}"...), nil
	}
	return nil, untranslatable(field()+".type", "must be base64 or url (got %q)", str(typ))
}

// toolResultText writes a tool_result's content (a string or text
// blocks) as a JSON string; an error result is marked.
func toolResultText(b []byte, bl *msgBlk, field fld) ([]byte, error) {
	raw := bl.content
	if !bl.isError && firstByte(raw) == '"' {
		return appendTok(b, raw), nil
	}
	var text []byte
	if bl.isError {
		text = append(text, "[tool error] "...)
	}
	if !isNull(raw) {
		var stack [4]msgBlk
		bs, err := msgBlocks(stack[:0], raw, field)
		if err != nil {
			return nil, err
		}
		for j := range bs {
			if !tokIs(bs[j].typ, "text") {
				return nil, untranslatable(field()+"["+strconv.Itoa(j)+"].type", "a tool result through the gateway's translation takes text only (got %q)", str(bs[j].typ))
			}
			text = unquote(text, bs[j].text)
		}
	}
	return appendJSONBytes(b, text), nil
}

// msgTools writes custom tools as chat function tools.
func msgTools(b, raw []byte) ([]byte, int, error) {
	ti := newIter(raw)
	n := 0
	for i := 0; ; i++ {
		_, tl, ok := ti.next()
		if !ok {
			break
		}
		f := fld(func() string { return "tools[" + strconv.Itoa(i) + "]" })
		if firstByte(tl) != '{' {
			return nil, 0, reqErr(f(), "must be an object")
		}
		var typ, name, desc, schema []byte
		var err error
		for k, v := range members(tl) {
			switch string(k) {
			case "type":
				typ, err = strTok(v, f, ".type")
			case "name":
				name, err = strTok(v, f, ".name")
			case "description":
				desc, err = strTok(v, f, ".description")
			case "input_schema":
				schema = v
			}
			if err != nil {
				return nil, 0, err
			}
		}
		if len(typ) > 2 && !tokIs(typ, "custom") {
			return nil, 0, untranslatable(f()+".type", "server tool %q cannot be served through the gateway's translation; only custom tools (name, input_schema) are", str(typ))
		}
		if len(name) <= 2 {
			return nil, 0, reqErr(f()+".name", "is required")
		}
		if !isNull(schema) && firstByte(schema) != '{' {
			return nil, 0, reqErr(f()+".input_schema", "must be a JSON schema object")
		}
		if n == 0 {
			b = append(b, `,"tools":[`...)
		} else {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"type":"function","function":{"name":`...)
		b = appendTok(b, name)
		if len(desc) > 2 {
			b = append(b, `,"description":`...)
			b = appendTok(b, desc)
		}
		b = append(b, `,"parameters":`...)
		if isNull(schema) {
			b = append(b, `{"type":"object","properties":{}}`...)
		} else {
			b = append(b, schema...)
		}
		b = append(b, "}}"...)
	}
	if n > 0 {
		b = append(b, ']')
	}
	return b, n, nil
}

// msgToolChoice writes tool_choice (and parallel_tool_calls) when there
// are tools to choose from.
func msgToolChoice(b, raw []byte, ntools int) ([]byte, error) {
	var typ, name []byte
	noParallel := false
	var err error
	for k, v := range members(raw) {
		switch string(k) {
		case "type":
			typ, err = strTok(v, nil, "tool_choice.type")
		case "name":
			name, err = strTok(v, nil, "tool_choice.name")
		case "disable_parallel_tool_use":
			noParallel, _, err = boolVal(v, nil, "tool_choice.disable_parallel_tool_use")
		}
		if err != nil {
			return nil, err
		}
	}
	var choice string
	switch {
	case tokIs(typ, "auto"):
		choice = `"auto"`
	case tokIs(typ, "any"):
		choice = `"required"`
	case tokIs(typ, "none"):
		choice = `"none"`
	case tokIs(typ, "tool"):
		if len(name) <= 2 {
			return nil, reqErr("tool_choice.name", "is required when type is \"tool\"")
		}
	default:
		return nil, reqErr("tool_choice.type", "must be auto, any, tool or none (got %q)", str(typ))
	}
	if ntools == 0 {
		return b, nil
	}
	b = append(b, `,"tool_choice":`...)
	if choice != "" {
		b = append(b, choice...)
	} else {
		b = append(b, `{"type":"function","function":{"name":`...)
		b = appendTok(b, name)
		b = append(b, "}}"...)
	}
	if noParallel {
		b = append(b, `,"parallel_tool_calls":false`...)
	}
	return b, nil
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

// MsgStop is a Messages stop_reason and stop_sequence for a chat
// finish_reason and the stop string the upstream says ended the answer
// (a choice's stop_reason, as vLLM sends it, and as the anthropic
// adapter passes on Anthropic's stop_sequence). Without that string a
// "stop" is end_turn: OpenAI's own API does not tell a stop sequence
// from a natural end, nor does Gemini.
func MsgStop(finish, stopSeq string) (reason, seq string) {
	if finish == "stop" && stopSeq != "" {
		return "stop_sequence", stopSeq
	}
	return StopReason(finish), ""
}

// appendStopSequence writes a message's stop_sequence member: the
// matched sequence, or null.
func appendStopSequence(b []byte, seq string) []byte {
	b = append(b, `,"stop_sequence":`...)
	if seq == "" {
		return append(b, "null"...)
	}
	return appendJSONString(b, seq)
}

type msgUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

// MessageID is a Messages id for a chat answer's id.
func MessageID(chatID string) string {
	if strings.HasPrefix(chatID, "msg_") {
		return chatID
	}
	return "msg_" + chatID
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
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools json.RawMessage `json:"tools"`
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
		n += len(m.Content) + estimatePerMessage
	}
	return estimateFromBytes(n), nil
}

// estimatePerMessage is the estimate's bytes for a message's framing
// (three tokens).
const estimatePerMessage = 12

// estimateFromBytes is the token estimate of n bytes: four a token,
// rounded up.
func estimateFromBytes(n int) int { return (n + 3) / 4 }

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
