package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// RespStream translates one chat.completion.chunk stream into the
// Responses event sequence: response.created and response.in_progress;
// for the message, response.output_item.added, response.content_part.added,
// response.output_text.delta, then response.output_text.done,
// response.content_part.done and response.output_item.done; for each
// function call, response.output_item.added,
// response.function_call_arguments.delta / .done and
// response.output_item.done; for reasoning deltas (reasoning_content or
// reasoning in the chat chunks, as the Anthropic and Gemini adapters and
// reasoning OpenAI-compatible servers send them), a reasoning item with
// response.reasoning_summary_part.added,
// response.reasoning_summary_text.delta / .done and
// response.reasoning_summary_part.done, as the JSON answer carries it
// (a summary); at the chat stream's [DONE], response.completed with the
// whole response. An error event (the gateway's after a break, or an
// upstream's) becomes an error event and response.failed.
type RespStream struct {
	Meta RespMeta

	seq     int
	started bool
	done    bool
	failed  bool
	items   []respStreamItem
	open    int // index in items of the open item, -1 none
	tool    int // the chat tool call index of the open function_call
	finish  string
	usage   ChatUsage
	hasUse  bool
	chunk   ChatChunk
	scratch []byte
}

type respStreamItem struct {
	call      bool
	reasoning bool
	id        string
	text      []byte // message text or call arguments
	tc        ChatToolCall
}

// Done reports whether the stream ended; Failed whether with an error.
func (s *RespStream) Done() bool   { return s.done }
func (s *RespStream) Failed() bool { return s.failed }

func (s *RespStream) ev(dst []byte, name string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, name...)
	dst = append(dst, `","sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(s.seq), 10)
	s.seq++
	return dst
}

func (s *RespStream) itemRef(dst []byte, i int) []byte {
	dst = append(dst, `,"item_id":`...)
	dst = appendJSONString(dst, s.items[i].id)
	dst = append(dst, `,"output_index":`...)
	return strconv.AppendInt(dst, int64(i), 10)
}

func (s *RespStream) start(dst []byte) []byte {
	s.started, s.open = true, -1
	dst = s.ev(dst, "response.created")
	dst = append(dst, `,"response":`...)
	at := len(dst)
	dst = appendResponseObject(dst, &s.Meta, nil, nil, "in_progress", "", "")
	end := len(dst)
	dst = append(dst, "}\n\n"...)
	dst = s.ev(dst, "response.in_progress")
	dst = append(dst, `,"response":`...)
	dst = append(dst, dst[at:end]...) // the same object: written once, copied
	return append(dst, "}\n\n"...)
}

func (s *RespStream) renderItem(dst []byte, i int, status string) []byte {
	it := &s.items[i]
	if it.call {
		tc := it.tc
		tc.Function.Arguments = string(it.text)
		if status == "in_progress" {
			tc.Function.Arguments = ""
		}
		return appendCallItem(dst, it.id, tc, status)
	}
	if it.reasoning {
		if status == "in_progress" {
			dst = append(dst, `{"type":"reasoning","id":`...)
			dst = appendJSONString(dst, it.id)
			return append(dst, `,"summary":[]}`...)
		}
		return appendReasoningItem(dst, it.id, string(it.text))
	}
	return appendMessageItem(dst, it.id, string(it.text), status)
}

func (s *RespStream) closeItem(dst []byte) []byte {
	if s.open < 0 {
		return dst
	}
	i := s.open
	s.open = -1
	it := &s.items[i]
	if it.call {
		if len(it.text) == 0 {
			it.text = append(it.text, "{}"...)
		}
		dst = s.ev(dst, "response.function_call_arguments.done")
		dst = s.itemRef(dst, i)
		dst = append(dst, `,"arguments":`...)
		dst = appendJSONString(dst, string(it.text))
		dst = append(dst, "}\n\n"...)
	} else if it.reasoning {
		dst = s.ev(dst, "response.reasoning_summary_text.done")
		dst = s.itemRef(dst, i)
		dst = append(dst, `,"summary_index":0,"text":`...)
		dst = appendJSONString(dst, string(it.text))
		dst = append(dst, "}\n\n"...)
		dst = s.ev(dst, "response.reasoning_summary_part.done")
		dst = s.itemRef(dst, i)
		dst = append(dst, `,"summary_index":0,"part":{"type":"summary_text","text":`...)
		dst = appendJSONString(dst, string(it.text))
		dst = append(dst, "}}\n\n"...)
	} else {
		dst = s.ev(dst, "response.output_text.done")
		dst = s.itemRef(dst, i)
		dst = append(dst, `,"content_index":0,"text":`...)
		dst = appendJSONString(dst, string(it.text))
		dst = append(dst, "}\n\n"...)
		dst = s.ev(dst, "response.content_part.done")
		dst = s.itemRef(dst, i)
		dst = append(dst, `,"content_index":0,"part":{"type":"output_text","text":`...)
		dst = appendJSONString(dst, string(it.text))
		dst = append(dst, `,"annotations":[]}}`+"\n\n"...)
	}
	dst = s.ev(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"item":`...)
	dst = s.renderItem(dst, i, "completed")
	return append(dst, "}\n\n"...)
}

func (s *RespStream) openItem(dst []byte, it respStreamItem) []byte {
	dst = s.closeItem(dst)
	i := len(s.items)
	prefix := "msg_"
	switch {
	case it.call:
		prefix = "fc_"
	case it.reasoning:
		prefix = "rs_"
	}
	it.id = itemID(prefix, s.Meta.ID, i)
	s.items = append(s.items, it)
	s.open = i
	dst = s.ev(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"item":`...)
	dst = s.renderItem(dst, i, "in_progress")
	dst = append(dst, "}\n\n"...)
	if it.reasoning {
		dst = s.ev(dst, "response.reasoning_summary_part.added")
		dst = s.itemRef(dst, i)
		dst = append(dst, `,"summary_index":0,"part":{"type":"summary_text","text":""}}`+"\n\n"...)
	} else if !it.call {
		dst = s.ev(dst, "response.content_part.added")
		dst = s.itemRef(dst, i)
		dst = append(dst, `,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`+"\n\n"...)
	}
	return dst
}

// openIs reports whether the open item is of the kind given (a message
// when both are false).
func (s *RespStream) openIs(call, reasoning bool) bool {
	return s.open >= 0 && s.items[s.open].call == call && s.items[s.open].reasoning == reasoning
}

// Event appends the Responses events for one chat SSE event's data.
func (s *RespStream) Event(dst, data []byte) []byte {
	if s.done {
		return dst
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return s.End(dst)
	}
	if _, text, ok := plainDelta(data, !s.started); ok {
		if !s.started {
			dst = s.start(dst)
		}
		return s.textEvent(dst, text)
	}
	c := &s.chunk
	if readChunk(data, c) != nil {
		return s.Error(dst, "upstream_error", "the upstream sent a malformed stream event")
	}
	if c.Error != nil {
		code := c.Error.CodeString()
		if code == "" {
			code = "upstream_error"
		}
		return s.Error(dst, code, c.Error.Message)
	}
	if !s.started {
		dst = s.start(dst)
	}
	if c.Usage != nil {
		s.usage, s.hasUse = *c.Usage, true
	}
	for i := range c.Choices {
		if c.Choices[i].Index == 0 {
			dst = s.choice(dst, &c.Choices[i])
		}
	}
	return dst
}

// textEvent appends a plain text delta (textDelta's raw bytes).
func (s *RespStream) textEvent(dst, text []byte) []byte {
	if len(text) == 0 {
		return dst
	}
	if !s.openIs(false, false) {
		dst = s.openItem(dst, respStreamItem{})
	}
	it := &s.items[s.open]
	it.text = append(it.text, text...) // plain text: its raw bytes are the text
	dst = s.ev(dst, "response.output_text.delta")
	dst = s.itemRef(dst, s.open)
	dst = append(dst, `,"content_index":0,"delta":`...)
	dst = appendRawString(dst, text)
	return append(dst, "}\n\n"...)
}

// choice appends the events of the answer's choice delta: reasoning,
// text, tool calls, and notes its finish.
func (s *RespStream) choice(dst []byte, ch *ChatChunkChoice) []byte {
	d := &ch.Delta
	r := d.ReasoningContent
	if r == nil {
		r = d.Reasoning
	}
	if r != nil && *r != "" {
		dst = s.itemDelta(dst, false, true, *r, "response.reasoning_summary_text.delta", `,"summary_index":0,"delta":`)
	}
	if d.Content != nil && *d.Content != "" {
		dst = s.itemDelta(dst, false, false, *d.Content, "response.output_text.delta", `,"content_index":0,"delta":`)
	}
	for i := range d.ToolCalls {
		tc := &d.ToolCalls[i]
		if s.open < 0 || !s.items[s.open].call || s.tool != tc.Index {
			s.tool = tc.Index
			dst = s.openItem(dst, respStreamItem{call: true, tc: ChatToolCall{ID: tc.ID, Type: "function", Function: ChatFunction{Name: tc.Function.Name}}})
		}
		if tc.Function.Arguments != "" {
			dst = s.itemDelta(dst, true, false, tc.Function.Arguments, "response.function_call_arguments.delta", `,"delta":`)
		}
	}
	if ch.FinishReason != nil && *ch.FinishReason != "" {
		s.finish = *ch.FinishReason
	}
	return dst
}

// itemDelta appends text to the open item of the kind given (opening a
// message or reasoning item when another is open; a call's item is
// opened by its first delta) and its delta event.
func (s *RespStream) itemDelta(dst []byte, call, reasoning bool, text, name, field string) []byte {
	if !call && !s.openIs(false, reasoning) {
		dst = s.openItem(dst, respStreamItem{reasoning: reasoning})
	}
	it := &s.items[s.open]
	it.text = append(it.text, text...)
	dst = s.ev(dst, name)
	dst = s.itemRef(dst, s.open)
	dst = append(dst, field...)
	dst = appendJSONString(dst, text)
	return append(dst, "}\n\n"...)
}

// Output is what the stream produced so far.
func (s *RespStream) Output() *RespOutput {
	o := &RespOutput{Finish: s.finish, Usage: s.usage, HasUsage: s.hasUse}
	for i := range s.items {
		it := &s.items[i]
		if it.call {
			tc := it.tc
			tc.Function.Arguments = string(it.text)
			o.Calls = append(o.Calls, tc)
		} else if it.reasoning {
			o.Reasoning += string(it.text)
		} else {
			o.Text += string(it.text)
		}
	}
	return o
}

func (s *RespStream) output(status string) []byte {
	out := s.scratch[:0]
	for i := range s.items {
		if i > 0 {
			out = append(out, ',')
		}
		out = s.renderItem(out, i, status)
	}
	s.scratch = out
	return out
}

// End closes the open item and appends response.completed (or
// response.incomplete when the answer was cut by max_output_tokens or a
// content filter).
func (s *RespStream) End(dst []byte) []byte {
	if s.done {
		return dst
	}
	if !s.started {
		dst = s.start(dst)
	}
	dst = s.closeItem(dst)
	s.done = true
	o := s.Output()
	obj := ResponseObject(&s.Meta, o, s.output("completed"), "", "", "")
	name := "response.completed"
	if o.Finish == "length" || o.Finish == "content_filter" {
		name = "response.incomplete"
	}
	dst = s.ev(dst, name)
	dst = append(dst, `,"response":`...)
	dst = append(dst, obj...)
	return append(dst, "}\n\n"...)
}

// Error appends an error event and response.failed, and ends the stream:
// what a client sees when the stream breaks after content.
func (s *RespStream) Error(dst []byte, code, msg string) []byte {
	if s.done {
		return dst
	}
	if !s.started {
		dst = s.start(dst)
	}
	s.done, s.failed = true, true
	dst = s.ev(dst, "error")
	dst = append(dst, `,"code":`...)
	dst = appendJSONString(dst, code)
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, msg)
	dst = append(dst, `,"param":null}`+"\n\n"...)
	obj := ResponseObject(&s.Meta, s.Output(), s.output("incomplete"), "failed", code, msg)
	dst = s.ev(dst, "response.failed")
	dst = append(dst, `,"response":`...)
	dst = append(dst, obj...)
	return append(dst, "}\n\n"...)
}

// Passed notes a native Responses event the gateway passed through as it
// came (a responsesAPI upstream): the stream has started, and an error
// event the gateway writes after a break continues the upstream's
// sequence numbers under its response id, instead of opening a second
// response.
func (s *RespStream) Passed(data []byte) {
	var ev struct {
		Seq      *int `json:"sequence_number"`
		Response *struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	s.started = true
	if ev.Seq != nil && *ev.Seq >= s.seq {
		s.seq = *ev.Seq + 1
	}
	if ev.Response != nil && ev.Response.ID != "" {
		s.Meta.ID = ev.Response.ID
	}
}
