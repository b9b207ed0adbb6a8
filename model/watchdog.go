package model

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/breakwater-gw/breakwater/internal/jsonscan"
	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
)

// StreamEvent is what one SSE event means to the stream watchdogs (docs/streams.md).
type StreamEvent struct {
	// UsefulBytes counts UTF-8 bytes of model text output.
	UsefulBytes int
	// Reasoning frames (thinking deltas, even empty; reasoning items) restart
	// the stall budget but are not model output.
	Reasoning bool
	// ToolCall frames suspend the throughput judgement while in flight and
	// count as progress for the stall watchdog.
	ToolCall bool
	// Done is the [DONE] sentinel or a terminal event.
	Done bool
	// FinishReason is a chat-completions choice's finish_reason ("" = none).
	FinishReason string
	// Error: the event is an error object inside a 200 stream; ErrorStatus
	// is the status it states (StreamErrorStatus).
	Error       bool
	ErrorStatus int
	// Malformed: the data is not JSON (garbled or cut by the upstream),
	// the output-validation case (OutcomeQuality, the synthetic 502): such
	// an event is never passed on as a chunk.
	Malformed bool
	// MentionsUsage: the data holds "usage" with its quotes, as the key of
	// a usage object does. Only such an event can carry token counts;
	// false says for sure that it does not.
	MentionsUsage bool
}

// quotedUsage is what StreamEvent.MentionsUsage looks for.
var quotedUsage = []byte(`"usage"`)

// ParseStreamEvent reads the data payload of one SSE event of the OpenAI
// chat-completions, Responses or Anthropic Messages streams. Anything it
// does not understand (usage-only events, metadata, malformed JSON) is no
// progress: heartbeats never reset a watchdog.
func ParseStreamEvent(data []byte) StreamEvent { return ParseStreamEventAfter(data, nil) }

// ParseStreamEventAfter is ParseStreamEvent for the events of one stream:
// p, when not nil, is the stream's jsonscan.Prefix, which reads the
// members every chunk of the stream repeats once (the same answer, for
// less work per event).
func ParseStreamEventAfter(data []byte, p *jsonscan.Prefix) StreamEvent {
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return StreamEvent{Done: true}
	}
	if len(data) == 0 {
		return StreamEvent{}
	}
	if data[0] != '{' {
		return StreamEvent{Malformed: !jsonvalid.Valid(data), MentionsUsage: bytes.Contains(data, quotedUsage)}
	}
	if p != nil {
		if c, ok := jsonscan.ChatChunkAfter(data, p); ok {
			return chunkEvent(c)
		}
	} else if out, ok := scanChatChunk(data); ok {
		return out
	}
	return decodeStreamEvent(data)
}

// scanChatChunk is the allocation-free reading of the common
// chat-completions chunk (internal/jsonscan), as a StreamEvent; ok is false
// when only decodeStreamEvent can answer.
func scanChatChunk(data []byte) (StreamEvent, bool) {
	c, ok := jsonscan.ChatChunk(data)
	if !ok {
		return StreamEvent{}, false
	}
	return chunkEvent(c), true
}

func chunkEvent(c jsonscan.Chunk) StreamEvent {
	return StreamEvent{UsefulBytes: c.UsefulBytes, Reasoning: c.Reasoning, ToolCall: c.ToolCall, FinishReason: c.FinishReason,
		MentionsUsage: c.MentionsUsage}
}

// decodeStreamEvent is ParseStreamEvent's full decoder: every event shape,
// with encoding/json's rules. scanChatChunk answers the common
// chat-completions chunk the same way without it.
func decodeStreamEvent(data []byte) StreamEvent {
	var ev wireStreamEvent
	mentions := bytes.Contains(data, quotedUsage)
	if json.Unmarshal(data, &ev) != nil {
		// A valid document of unexpected types reads as nothing; only
		// bytes that are not JSON are malformed.
		return StreamEvent{Malformed: !jsonvalid.Valid(data), MentionsUsage: mentions}
	}
	out := StreamEvent{MentionsUsage: mentions}
	if len(ev.Error) > 0 && string(ev.Error) != "null" {
		out.Error = true
		out.ErrorStatus, _ = StreamErrorStatus(data)
	}
	out.readType(strings.ToLower(ev.Type), data)
	cb := strings.ToLower(ev.ContentBlock.Type)
	if strings.Contains(cb, "thinking") || strings.Contains(cb, "reasoning") {
		out.Reasoning = true
	} else if strings.Contains(cb, "tool_use") {
		out.ToolCall = true
	}
	for i := range ev.Choices {
		out.readChoice(&ev.Choices[i])
	}
	if len(ev.Delta) > 0 {
		out.readDelta(ev.Delta)
	}
	return out
}

// wireStreamEvent is the union of the stream event shapes
// decodeStreamEvent reads: chat-completions chunks, Responses events and
// Messages events.
type wireStreamEvent struct {
	Type         string             `json:"type"`
	Choices      []wireStreamChoice `json:"choices"`
	Delta        json.RawMessage    `json:"delta"`
	ContentBlock struct {
		Type string `json:"type"`
	} `json:"content_block"`
	Error json.RawMessage `json:"error"`
}

// wireStreamChoice is one choice of a chat-completions chunk.
type wireStreamChoice struct {
	Delta struct {
		Content          *string         `json:"content"`
		Text             *string         `json:"text"`
		ReasoningContent *string         `json:"reasoning_content"`
		Reasoning        *string         `json:"reasoning"`
		ToolCalls        json.RawMessage `json:"tool_calls"`
		FunctionCall     json.RawMessage `json:"function_call"`
	} `json:"delta"`
	Text         *string `json:"text"`
	FinishReason *string `json:"finish_reason"`
}

// readType reads what a Responses or Messages event's lower-cased type t
// says: reasoning, a tool call, or the turn's end.
func (out *StreamEvent) readType(t string, data []byte) {
	switch {
	case strings.Contains(t, "reasoning") || strings.Contains(t, "thinking"):
		out.Reasoning = true
	case strings.Contains(t, "tool") || strings.Contains(t, "function_call"):
		out.ToolCall = true
	case t == "response.completed" || t == "message_stop":
		out.Done = true
		if t == "response.completed" && bytes.Contains(data, []byte(`"type":"function_call"`)) {
			out.FinishReason = "tool_calls" // a turn that ends with a call has no text to show
		}
	case t == "response.incomplete":
		out.Done, out.FinishReason = true, "length"
	}
}

// readChoice adds one chat-completions choice: its text, reasoning, tool
// calls and finish reason.
func (out *StreamEvent) readChoice(c *wireStreamChoice) {
	d := &c.Delta
	if d.Content != nil {
		out.UsefulBytes += len(*d.Content)
	}
	if d.Text != nil {
		out.UsefulBytes += len(*d.Text)
	}
	if c.Text != nil {
		out.UsefulBytes += len(*c.Text)
	}
	if d.ReasoningContent != nil || d.Reasoning != nil {
		out.Reasoning = true
	}
	if len(d.ToolCalls) > 0 && string(d.ToolCalls) != "null" || len(d.FunctionCall) > 0 && string(d.FunctionCall) != "null" {
		out.ToolCall = true
	}
	if c.FinishReason != nil && *c.FinishReason != "" {
		out.FinishReason = *c.FinishReason
	}
}

// readDelta adds a top-level delta: a Responses text delta (a string) or
// a Messages content or message delta (an object).
func (out *StreamEvent) readDelta(raw json.RawMessage) {
	var s string
	if json.Unmarshal(raw, &s) == nil { // Responses: "delta": "text"
		if !out.Reasoning && !out.ToolCall {
			out.UsefulBytes += len(s)
		}
		return
	}
	var d struct {
		Type       string  `json:"type"`
		Text       *string `json:"text"`
		Thinking   *string `json:"thinking"`
		StopReason string  `json:"stop_reason"`
	}
	if json.Unmarshal(raw, &d) != nil {
		return
	}
	if d.StopReason != "" { // Messages message_delta: the turn's end, as a finish_reason
		out.FinishReason = messagesFinish(d.StopReason)
	}
	dt := strings.ToLower(d.Type)
	switch {
	case d.Thinking != nil || strings.Contains(dt, "thinking"):
		out.Reasoning = true
	case strings.Contains(dt, "json") || strings.Contains(dt, "tool"):
		out.ToolCall = true
	case d.Text != nil:
		out.UsefulBytes += len(*d.Text)
	}
}

// messagesFinish is an Anthropic Messages stop_reason as the
// chat-completions finish_reason it means, so a native Messages stream
// that ends with a tool call (or at its budget) is a legitimate end
// without text, as the same chat stream is.
func messagesFinish(stop string) string {
	switch stop {
	case "tool_use":
		return "tool_calls"
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "refusal":
		return "content_filter"
	}
	return "stop"
}

// Watchdog holds both stream watchdogs of one upstream attempt. It is fed
// every event (Observe) and ticked by the shell's timer (Check), so a silent
// stream is caught by time, not only when a chunk arrives (
// docs/streams.md#watchdogs-run-on-timers).
type Watchdog struct {
	start        Time
	lastProgress Time
	progressed   bool
	output       bool
	protected    bool
	firstMs      int64
	idleMs       int64
	tp           ThroughputWatchdog
	samples      []sample
}

type sample struct {
	at    Time
	bytes int
}

// NewWatchdog starts the watchdogs of an attempt whose stream opened at start.
func NewWatchdog(s *Settings, start Time) Watchdog {
	return Watchdog{start: start, firstMs: int64(s.UpstreamTimeouts.FirstContentMs),
		idleMs: int64(s.UpstreamTimeouts.StreamIdleMs), tp: s.StreamRecovery.ThroughputWatchdog}
}

// Observe feeds one event received at now.
func (w *Watchdog) Observe(now Time, ev StreamEvent) {
	if ev.UsefulBytes > 0 || ev.Reasoning || ev.ToolCall {
		w.lastProgress, w.progressed = now, true
	}
	if ev.UsefulBytes > 0 {
		w.output = true
		w.protected = false
		if w.tp.Enabled {
			w.samples = append(w.samples, sample{now, ev.UsefulBytes})
		}
	} else if ev.Reasoning || ev.ToolCall {
		w.protected = true
	}
}

// ProducedOutput reports whether any model text arrived: a turn that ends
// with reasoning only is still empty.
func (w *Watchdog) ProducedOutput() bool { return w.output }

// Deadline is the next instant Check could abort, for the shell's timer.
func (w *Watchdog) Deadline() Time {
	d := w.stallDeadline()
	if w.tp.Enabled {
		d = min(d, w.start.Add(int64(w.tp.WarmupMs)+int64(w.tp.WindowMs)))
	}
	return d
}

func (w *Watchdog) stallDeadline() Time {
	if !w.progressed {
		return w.start.Add(w.firstMs)
	}
	return w.lastProgress.Add(w.idleMs)
}

// Check says whether the attempt must be aborted at now: OutcomeStall when
// no progress came within the stall budget (firstContentMs before the first
// progress, streamIdleMs after), OutcomeThroughput when the opt-in
// throughput watchdog finds useful output below its rate.
func (w *Watchdog) Check(now Time) (OutcomeKind, bool) {
	if now >= w.stallDeadline() {
		return OutcomeStall, true
	}
	if !w.tp.Enabled {
		return 0, false
	}
	window := int64(w.tp.WindowMs)
	kept := w.samples[:0]
	total := 0
	for _, s := range w.samples {
		if now.Sub(s.at) <= window {
			kept = append(kept, s)
			total += s.bytes
		}
	}
	w.samples = kept
	ready := now.Sub(w.start) >= int64(w.tp.WarmupMs)+window
	measurable := total == 0 || total >= w.tp.MinUsefulBytes
	rate := int64(total) * 1000 / max(1000, window)
	if ready && !w.protected && measurable && rate < int64(w.tp.MinUsefulBytesPerSecond) {
		return OutcomeThroughput, true
	}
	return 0, false
}

// StreamErrorStatus reads the status an error event inside a 200 SSE
// stream states (docs/classification.md#restatement): a numeric code or status, else a
// status implied by the error type, else 500; and its message.
func StreamErrorStatus(data []byte) (int, string) {
	var e struct {
		Error struct {
			Code    json.RawMessage `json:"code"`
			Status  json.RawMessage `json:"status"`
			Type    string          `json:"type"`
			Message string          `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(bytes.TrimSpace(data), &e)
	for _, raw := range []json.RawMessage{e.Error.Code, e.Error.Status} {
		s := strings.Trim(string(raw), `"`)
		if n, err := strconv.Atoi(s); err == nil && n >= 400 && n <= 599 {
			return n, e.Error.Message
		}
	}
	t := strings.ToLower(e.Error.Type + " " + string(e.Error.Code))
	switch {
	case strings.Contains(t, "rate_limit") || strings.Contains(t, "quota"):
		return 429, e.Error.Message
	case strings.Contains(t, "overloaded"):
		return 529, e.Error.Message
	case strings.Contains(t, "authentication"):
		return 401, e.Error.Message
	case strings.Contains(t, "permission"):
		return 403, e.Error.Message
	case strings.Contains(t, "invalid_request"):
		return 400, e.Error.Message
	}
	return 500, e.Error.Message
}

// LegitimateEmpty reports whether a finish reason makes a stream without
// text a valid answer (docs/streams.md); any other empty stream is the
// output-validation failure (OutcomeQuality).
func LegitimateEmpty(finish string) bool {
	switch finish {
	case "length", "tool_calls", "content_filter", "function_call":
		return true
	}
	return false
}
