package proxy

import (
	"bufio"
	"bytes"
	"io"
	"sync"
)

// SSE handling: reading raw events. What an event means (progress for the
// watchdogs, its finish reason, an in-stream error and the status it
// states) is model.ParseStreamEvent; the watchdogs are model.Watchdog.

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
