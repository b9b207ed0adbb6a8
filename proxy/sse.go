package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/breakwater-gw/breakwater/model"
)

// SSE handling: reading events, telling content from reasoning from
// heartbeats (SPEC §6), and the throughput watchdog. Parsing the wire format
// is the shell's job; the watchdog's abort rule is a pure function here until
// the model grows it.

// frameKind says what one SSE event carries.
type frameKind uint8

const (
	frameOther     frameKind = iota // metadata: role-only or usage-only chunks, unknown JSON
	frameHeartbeat                  // comments and empty events: never progress
	frameContent                    // model output: text, tool calls
	frameReasoning                  // reasoning / thinking deltas (even empty): progress, not output
	frameDone                       // data: [DONE]
	frameError                      // data: {"error":...}
)

// frame is one classified SSE event.
type frame struct {
	kind   frameKind
	useful int    // UTF-8 bytes of text output (throughput watchdog)
	finish string // a choice's finish_reason, when one arrived
	// tool: a tool or function call is in flight (the throughput watchdog
	// suspends judgement).
	tool bool
}

type chunkDelta struct {
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
	Thinking         *string         `json:"thinking"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	FunctionCall     json.RawMessage `json:"function_call"`
}

type chunkJSON struct {
	Error   json.RawMessage `json:"error"`
	Type    string          `json:"type"`
	Choices []struct {
		Delta        chunkDelta `json:"delta"`
		Text         *string    `json:"text"`
		FinishReason *string    `json:"finish_reason"`
	} `json:"choices"`
}

// classifyData classifies the data of one SSE event.
func classifyData(data []byte) frame {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return frame{kind: frameHeartbeat}
	}
	if bytes.Equal(data, []byte("[DONE]")) {
		return frame{kind: frameDone}
	}
	var c chunkJSON
	if data[0] != '{' || json.Unmarshal(data, &c) != nil {
		return frame{kind: frameOther}
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		return frame{kind: frameError}
	}
	f := frame{kind: frameOther}
	t := strings.ToLower(c.Type)
	if t != "" && (strings.Contains(t, "reasoning") || strings.Contains(t, "thinking")) {
		f.kind = frameReasoning
	}
	for _, ch := range c.Choices {
		d := &ch.Delta
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			f.finish = *ch.FinishReason
		}
		switch {
		case d.Content != nil && *d.Content != "":
			f.kind = frameContent
			f.useful += len(*d.Content) // UTF-8 bytes
		case ch.Text != nil && *ch.Text != "":
			f.kind = frameContent
			f.useful += len(*ch.Text)
		case len(d.ToolCalls) > 0 && !bytes.Equal(d.ToolCalls, []byte("null")),
			len(d.FunctionCall) > 0 && !bytes.Equal(d.FunctionCall, []byte("null")):
			f.kind = frameContent
			f.tool = true
		case d.ReasoningContent != nil || d.Reasoning != nil || d.Thinking != nil:
			if f.kind != frameContent {
				f.kind = frameReasoning
			}
		}
	}
	return f
}

// streamErrorStatus reads the status an error event inside a 200 SSE stream
// states (SPEC "does better" 15): a numeric code or status, else a status
// implied by the error type, else 500.
func streamErrorStatus(data []byte) (int, string) {
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

// legitimateEmpty reports whether a finish reason makes a stream without
// text a valid answer (REFERENCE M14).
func legitimateEmpty(finish string) bool {
	switch finish {
	case "length", "tool_calls", "content_filter", "function_call":
		return true
	}
	return false
}

// sseReader reads raw SSE events (everything up to a blank line).
type sseReader struct {
	r *bufio.Reader
}

var sseReaders = sync.Pool{New: func() any { return &sseReader{r: bufio.NewReaderSize(nil, 16<<10)} }}

func newSSEReader(r io.Reader) *sseReader {
	s := sseReaders.Get().(*sseReader)
	s.r.Reset(r)
	return s
}

// release returns the reader to the pool; it must not be used afterwards.
func (s *sseReader) release() {
	s.r.Reset(nil)
	sseReaders.Put(s)
}

// next returns the raw bytes of the next event including its terminating
// blank line, and the concatenated data payload. A comment-only event has
// no data. At the end of the body it returns io.EOF (with any partial event
// dropped: an event is only complete at its blank line).
func (s *sseReader) next(raw, data []byte) ([]byte, []byte, error) {
	raw, data = raw[:0], data[:0]
	hasData := false
	for {
		line, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// a long line: keep reading it whole
			buf := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				line, err = s.r.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		if err != nil {
			return raw, data, err
		}
		raw = append(raw, line...)
		l := bytes.TrimRight(line, "\r\n")
		if len(l) == 0 {
			if len(raw) == len(line) { // stray blank line between events
				raw = raw[:0]
				continue
			}
			return raw, data, nil
		}
		if v, ok := bytes.CutPrefix(l, []byte("data:")); ok {
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
			hasData = true
		}
	}
}

// buffered reports whether more bytes are already read (no need to flush
// the client yet).
func (s *sseReader) buffered() int { return s.r.Buffered() }

// throughputWatchdog is the opt-in slow-stream detector (SPEC §6,
// REFERENCE M14), fed events and ticked by a timer. Times are ms.
type throughputWatchdog struct {
	cfg       model.ThroughputWatchdog
	started   int64
	protected bool
	samples   []tpSample
}

type tpSample struct {
	at    int64
	bytes int
}

func newThroughputWatchdog(cfg model.ThroughputWatchdog, now int64) *throughputWatchdog {
	return &throughputWatchdog{cfg: cfg, started: now}
}

// observe feeds one event at now.
func (w *throughputWatchdog) observe(now int64, f frame) {
	switch {
	case f.kind == frameReasoning || f.tool:
		w.protected = true
	case f.useful > 0:
		w.protected = false
		w.samples = append(w.samples, tpSample{now, f.useful})
	}
}

// abort reports whether the stream is below the minimum useful rate at now:
// only after warm-up plus one full window, never while a tool call or
// reasoning is in flight, and only when the window holds no bytes or at
// least minUsefulBytes.
func (w *throughputWatchdog) abort(now int64) bool {
	if !w.cfg.Enabled {
		return false
	}
	win := int64(w.cfg.WindowMs)
	i := 0
	for i < len(w.samples) && w.samples[i].at < now-win {
		i++
	}
	w.samples = w.samples[i:]
	total := 0
	for _, s := range w.samples {
		total += s.bytes
	}
	ready := now-w.started >= int64(w.cfg.WarmupMs)+win
	measurable := total == 0 || total >= w.cfg.MinUsefulBytes
	rate := float64(total) / max(1, float64(win)/1000)
	return ready && !w.protected && measurable && rate < float64(w.cfg.MinUsefulBytesPerSecond)
}
