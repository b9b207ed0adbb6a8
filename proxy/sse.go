package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
)

// SSE handling: reading events, the status an in-stream error states and
// what makes an empty answer legitimate. What an event means to the
// watchdogs is model.ParseStreamEvent; the watchdogs are model.Watchdog.

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

// 4 KiB holds any ordinary event; a longer line is assembled by next, so
// the buffer size bounds memory per open stream, not event size.
var sseReaders = sync.Pool{New: func() any { return &sseReader{r: bufio.NewReaderSize(nil, 4<<10)} }}

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
