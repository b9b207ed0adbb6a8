package wire

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// MsgStream translates one chat.completion.chunk stream into Anthropic's
// event sequence: message_start and a ping before the first block;
// content_block_start / content_block_delta (text_delta, thinking_delta,
// input_json_delta) / content_block_stop for each text, thinking and
// tool_use block; at the chat stream's [DONE], message_delta (stop_reason
// and usage) and message_stop. An error event ({"error":…}, the gateway's
// own after a break, or an upstream's) becomes an Anthropic error event.
// Each chat event is translated as it comes: nothing is held back.
//
// Usage: message_start carries input_tokens when the chat stream's first
// chunk has usage (an upstream that counts the prompt up front); OpenAI
// chat streams send usage only in their last chunk (stream_options
// include_usage), so there message_start carries InputEstimate, the
// count_tokens estimate of the request — holding it back until the count
// is known would buffer the whole answer. message_delta always carries
// the whole count (input_tokens, output_tokens, cache_read_input_tokens),
// and Anthropic's SDKs take input_tokens from message_delta when it is
// there (the Go SDK's Message.Accumulate overwrites it), so an
// accumulated message has the real numbers.
type MsgStream struct {
	Model         string // the model the client asked for
	InputEstimate int    // message_start's input_tokens until the upstream counts

	started bool
	done    bool
	open    byte // the open block: 0 none, 't' text, 'r' thinking, 'u' tool_use
	next    int  // the next block's index
	tool    int  // the chat tool call index of the open tool_use block
	stop    string
	stopSeq string // the stop sequence that ended the answer, when the upstream said
	usage   msgUsage
	counted bool // usage came
	chunk   ChatChunk
}

// Done reports whether the stream ended (message_stop or an error event).
func (s *MsgStream) Done() bool { return s.done }

func sseEvent(dst []byte, name string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	return append(dst, "\ndata: "...)
}

func (s *MsgStream) start(dst []byte, id string) []byte {
	s.started = true
	dst = sseEvent(dst, "message_start")
	dst = append(dst, `{"type":"message_start","message":{"id":`...)
	if strings.HasPrefix(id, "msg_") {
		dst = appendJSONString(dst, id)
	} else { // MessageID(id), without making the string
		at := len(dst)
		dst = appendJSONString(dst, id)
		dst = slices.Insert(dst, at+1, 'm', 's', 'g', '_')
	}
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = appendJSONString(dst, s.Model)
	dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(s.inputTokens()), 10)
	dst = append(dst, `,"output_tokens":0`...)
	if s.usage.CacheReadInputTokens > 0 {
		dst = append(dst, `,"cache_read_input_tokens":`...)
		dst = strconv.AppendInt(dst, int64(s.usage.CacheReadInputTokens), 10)
	}
	dst = append(dst, "}}}\n\n"...)
	return append(dst, "event: ping\ndata: {\"type\":\"ping\"}\n\n"...)
}

// inputTokens is the upstream's count once it came, the estimate before
// (and when it never does).
func (s *MsgStream) inputTokens() int {
	if !s.counted {
		return s.InputEstimate
	}
	return s.usage.InputTokens
}

func (s *MsgStream) closeBlock(dst []byte) []byte {
	if s.open == 0 {
		return dst
	}
	s.open = 0
	dst = sseEvent(dst, "content_block_stop")
	dst = append(dst, `{"type":"content_block_stop","index":`...)
	dst = strconv.AppendInt(dst, int64(s.next-1), 10)
	return append(dst, "}\n\n"...)
}

// openBlock starts a text or thinking block unless one of that kind is
// open.
func (s *MsgStream) openBlock(dst []byte, kind byte) []byte {
	if s.open == kind {
		return dst
	}
	dst = s.closeBlock(dst)
	s.open = kind
	dst = sseEvent(dst, "content_block_start")
	dst = append(dst, `{"type":"content_block_start","index":`...)
	dst = strconv.AppendInt(dst, int64(s.next), 10)
	s.next++
	if kind == 't' {
		return append(dst, `,"content_block":{"type":"text","text":""}}`+"\n\n"...)
	}
	return append(dst, `,"content_block":{"type":"thinking","thinking":"","signature":""}}`+"\n\n"...)
}

func (s *MsgStream) delta(dst []byte, kind, text string) []byte {
	dst = sseEvent(dst, "content_block_delta")
	dst = append(dst, `{"type":"content_block_delta","index":`...)
	dst = strconv.AppendInt(dst, int64(s.next-1), 10)
	dst = append(dst, `,"delta":{"type":"`...)
	dst = append(dst, kind...)
	switch kind {
	case "text_delta":
		dst = append(dst, `","text":`...)
	case "thinking_delta":
		dst = append(dst, `","thinking":`...)
	default:
		dst = append(dst, `","partial_json":`...)
	}
	dst = appendJSONString(dst, text)
	return append(dst, "}}\n\n"...)
}

// Event appends the Anthropic events for one chat SSE event's data.
func (s *MsgStream) Event(dst, data []byte) []byte {
	if s.done {
		return dst
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return s.End(dst)
	}
	if id, text, ok := plainDelta(data, !s.started); ok {
		if !s.started {
			dst = s.start(dst, string(id))
		}
		return s.textEvent(dst, text)
	}
	c := &s.chunk
	if readChunk(data, c) != nil {
		return s.Error(dst, 502, "api_error", "the upstream sent a malformed stream event")
	}
	if c.Error != nil {
		return s.ChatError(dst, c.Error)
	}
	// Usage first: an upstream that counts the prompt up front (in the
	// stream's first chunk) has it in message_start.
	if c.Usage != nil {
		s.count(c.Usage)
	}
	if !s.started {
		dst = s.start(dst, c.ID)
	}
	for i := range c.Choices {
		if c.Choices[i].Index == 0 { // a Messages answer has one choice
			dst = s.choice(dst, &c.Choices[i])
		}
	}
	return dst
}

// textEvent appends a plain text delta (textDelta's raw bytes).
func (s *MsgStream) textEvent(dst, text []byte) []byte {
	if len(text) == 0 {
		return dst
	}
	dst = s.openBlock(dst, 't')
	dst = sseEvent(dst, "content_block_delta")
	dst = append(dst, `{"type":"content_block_delta","index":`...)
	dst = strconv.AppendInt(dst, int64(s.next-1), 10)
	dst = append(dst, `,"delta":{"type":"text_delta","text":`...)
	dst = appendRawString(dst, text)
	return append(dst, "}}\n\n"...)
}

// ChatError appends an OpenAI-shaped error event (the chat stream's, or
// the gateway's after a break) as Anthropic's error event, the code
// leading the message, and ends the stream.
func (s *MsgStream) ChatError(dst []byte, e *ChatAPIError) []byte {
	msg := e.Message
	if code := e.CodeString(); code != "" {
		msg = code + ": " + msg
	}
	typ := e.Type
	if typ == "" || typ == "server_error" {
		typ = "api_error"
	}
	return s.Error(dst, 0, typ, msg)
}

// count keeps the upstream's usage: cached prompt tokens apart, as
// Anthropic counts them.
func (s *MsgStream) count(u *ChatUsage) {
	s.counted = true
	s.usage.InputTokens, s.usage.OutputTokens = u.PromptTokens, u.CompletionTokens
	if d := u.PromptTokensDetails; d != nil && d.CachedTokens <= u.PromptTokens {
		s.usage.InputTokens -= d.CachedTokens
		s.usage.CacheReadInputTokens = d.CachedTokens
	}
}

// choice appends the events of the answer's choice delta: thinking, text,
// tool calls, and notes its finish.
func (s *MsgStream) choice(dst []byte, ch *ChatChunkChoice) []byte {
	d := &ch.Delta
	r := d.ReasoningContent
	if r == nil {
		r = d.Reasoning
	}
	if r != nil && *r != "" {
		dst = s.openBlock(dst, 'r')
		dst = s.delta(dst, "thinking_delta", *r)
	}
	if d.Content != nil && *d.Content != "" {
		dst = s.openBlock(dst, 't')
		dst = s.delta(dst, "text_delta", *d.Content)
	}
	for i := range d.ToolCalls {
		dst = s.toolCall(dst, &d.ToolCalls[i])
	}
	if ch.FinishReason != nil && *ch.FinishReason != "" {
		var seq string
		if firstByte(ch.StopReason) == '"' {
			_ = json.Unmarshal(ch.StopReason, &seq)
		}
		s.stop, s.stopSeq = MsgStop(*ch.FinishReason, seq)
	}
	return dst
}

// toolCall appends a tool call delta: a new call opens its tool_use block;
// later deltas of the same call (some upstreams repeat its id in each)
// only add arguments.
func (s *MsgStream) toolCall(dst []byte, tc *ChatChunkCall) []byte {
	if s.open != 'u' || s.tool != tc.Index {
		dst = s.closeBlock(dst)
		s.open, s.tool = 'u', tc.Index
		dst = sseEvent(dst, "content_block_start")
		dst = append(dst, `{"type":"content_block_start","index":`...)
		dst = strconv.AppendInt(dst, int64(s.next), 10)
		s.next++
		dst = append(dst, `,"content_block":{"type":"tool_use","id":`...)
		dst = appendJSONString(dst, tc.ID)
		dst = append(dst, `,"name":`...)
		dst = appendJSONString(dst, tc.Function.Name)
		dst = append(dst, `,"input":{}}}`+"\n\n"...)
	}
	if tc.Function.Arguments != "" {
		dst = s.delta(dst, "input_json_delta", tc.Function.Arguments)
	}
	return dst
}

// End closes the open block and ends the message (message_delta with the
// stop reason and usage, then message_stop).
func (s *MsgStream) End(dst []byte) []byte {
	if s.done {
		return dst
	}
	if !s.started {
		dst = s.start(dst, "")
	}
	dst = s.closeBlock(dst)
	s.done = true
	stop := s.stop
	if stop == "" {
		stop = "end_turn"
	}
	dst = sseEvent(dst, "message_delta")
	dst = append(dst, `{"type":"message_delta","delta":{"stop_reason":`...)
	dst = appendJSONString(dst, stop)
	dst = appendStopSequence(dst, s.stopSeq)
	dst = append(dst, `},"usage":{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(s.inputTokens()), 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(s.usage.OutputTokens), 10)
	dst = append(dst, `,"cache_read_input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(s.usage.CacheReadInputTokens), 10)
	dst = append(dst, "}}\n\n"...)
	return append(dst, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
}

// Error appends an Anthropic error event and ends the stream: what a
// client sees when the stream breaks after content.
func (s *MsgStream) Error(dst []byte, _ int, typ, msg string) []byte {
	s.done = true
	dst = sseEvent(dst, "error")
	dst = append(dst, MsgError(typ, msg)...)
	return append(dst, "\n\n"...)
}
