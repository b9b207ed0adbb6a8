package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/breakwater-gw/breakwater/internal/jsonscan"
)

// SSE handling: reading raw events. What an event means (progress for the
// watchdogs, its finish reason, an in-stream error and the status it
// states) is model.ParseStreamEvent; the watchdogs are model.Watchdog.

// sseReader reads raw SSE events (everything up to a blank line).
//
// Its 4 KiB read buffer comes from a pool and is held only while there are
// unread bytes in it: between events, while the upstream is silent, the
// buffer is back in the pool and the reader waits on a small read of its
// own (head). A held stream keeps about 100 bytes here instead of 4 KiB
// (docs/gateway.md, "Measuring"). The small read is served from the
// upstream connection's own buffer, so it costs no system call.
type sseReader struct {
	src  io.Reader
	r    *bufio.Reader // from readerPool; nil while waiting
	pre  []byte        // bytes of the small read not yet in r
	err  error         // the small read's error, after pre
	head [64]byte
	// The event buffers of the stream read last (raw bytes, data, what
	// was held before commit), kept with the pooled reader up to
	// keptBuffer each: the next stream starts with them instead of
	// growing its own.
	raw, data, held []byte
	// prefix is the stream's chunk prefix (model.ParseStreamEventAfter),
	// its buffer kept with the pooled reader like the event buffers.
	prefix jsonscan.Prefix
}

// keptBuffer bounds an event buffer kept with a pooled reader.
const keptBuffer = 4 << 10

// maxStreamEvent bounds one stream event (its raw bytes), and what a
// stream holds before it commits: an ordinary chunk is a few hundred bytes,
// a large tool call or inline image a few MiB.
const maxStreamEvent = 16 << 20

// errEventTooLarge is a stream event past maxStreamEvent.
var errEventTooLarge = errors.New("the upstream sent a stream event over the size limit")

// 4 KiB holds any ordinary event; a longer line is assembled by next, so
// the buffer size bounds memory per stream, not event size.
var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	sseReaders = sync.Pool{New: func() any { return new(sseReader) }}
)

func newSSEReader(r io.Reader) *sseReader {
	s := sseReaders.Get().(*sseReader)
	s.src = r
	return s
}

// release returns the reader to the pool; it must not be used afterwards.
// (A reader that is never released loses nothing: its buffer goes back to
// the pool whenever it waits, at the end of the body too.)
func (s *sseReader) release() {
	s.drop()
	raw, data, held, prefix := s.raw, s.data, s.held, s.prefix
	prefix.Reset()
	*s = sseReader{raw: raw, data: data, held: held, prefix: prefix}
	sseReaders.Put(s)
}

// buffers hands the kept event buffers to a stream (empty, possibly nil).
func (s *sseReader) buffers() (raw, data, held []byte) {
	raw, data, held = s.raw[:0], s.data[:0], s.held[:0]
	s.raw, s.data, s.held = nil, nil, nil
	return raw, data, held
}

// keep takes a finished stream's event buffers back, each up to
// keptBuffer; nothing may use them afterwards.
func (s *sseReader) keep(raw, data, held []byte) {
	s.raw, s.data, s.held = kept(raw), kept(data), kept(held)
}

func kept(b []byte) []byte {
	if cap(b) > keptBuffer {
		return nil
	}
	return b[:0]
}

// drop puts the read buffer back in the pool.
func (s *sseReader) drop() {
	if s.r != nil {
		s.r.Reset(nil)
		readerPool.Put(s.r)
		s.r = nil
	}
}

// sseFeed is what the read buffer reads from: the small read's bytes, then
// the source.
type sseFeed sseReader

func (f *sseFeed) Read(p []byte) (int, error) {
	if len(f.pre) > 0 {
		n := copy(p, f.pre)
		f.pre = f.pre[n:]
		return n, nil
	}
	if f.err != nil {
		return 0, f.err
	}
	return f.src.Read(p)
}

// readSlice is the buffer's ReadSlice('\n'); with nothing buffered it first
// waits for the source without the buffer.
func (s *sseReader) readSlice() ([]byte, error) {
	if s.r == nil || s.r.Buffered() == 0 {
		s.drop()
		if len(s.pre) == 0 && s.err == nil {
			n, err := s.src.Read(s.head[:])
			s.pre, s.err = s.head[:n], err
		}
		if len(s.pre) == 0 && s.err != nil {
			return nil, s.err
		}
		s.r = readerPool.Get().(*bufio.Reader)
		s.r.Reset((*sseFeed)(s))
	}
	return s.r.ReadSlice('\n')
}

// next returns the raw bytes of the next event including its terminating
// blank line, and the concatenated data payload. A comment-only event has
// no data. At the end of the body it returns io.EOF (with any partial event
// dropped: an event is only complete at its blank line).
//
// raw and buf are the caller's buffers, returned grown; data is valid as
// long as raw and buf are not passed to next again. An event with one data
// line (every chunk of an OpenAI stream) gets its data as a slice of raw,
// capped so that appending to it copies; only an event with several data
// lines is assembled in buf. Nothing writes to raw or data in place.
//
// An event longer than maxStreamEvent (one endless line, or endless lines
// without the blank one) ends the read with errEventTooLarge: what an
// upstream streams never grows the gateway's memory without bound.
func (s *sseReader) next(raw, buf []byte) (_, _, data []byte, _ error) {
	raw, buf = raw[:0], buf[:0]
	// The one data line so far: raw[ds:de]; lines counts data lines.
	ds, de, lines := 0, 0, 0
	for {
		line, err := s.readSlice()
		if err == bufio.ErrBufferFull {
			// a long line: keep reading it whole, up to the bound
			long := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				if len(raw)+len(long) > maxStreamEvent {
					return raw[:0], buf[:0], buf[:0], errEventTooLarge
				}
				line, err = s.readSlice()
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			return raw, buf, eventData(raw, buf, ds, de, lines), err
		}
		if len(raw)+len(line) > maxStreamEvent {
			return raw[:0], buf[:0], buf[:0], errEventTooLarge
		}
		start := len(raw)
		raw = append(raw, line...)
		l := line
		for len(l) > 0 && (l[len(l)-1] == '\n' || l[len(l)-1] == '\r') {
			l = l[:len(l)-1]
		}
		if len(l) == 0 {
			if len(raw) == len(line) { // stray blank line between events
				raw = raw[:0]
				continue
			}
			return raw, buf, eventData(raw, buf, ds, de, lines), nil
		}
		if v, ok := bytes.CutPrefix(l, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			switch lines++; lines {
			case 1:
				ds = start + len(l) - len(v) // v ends l, which starts the line
				de = ds + len(v)
			case 2:
				buf = append(buf, raw[ds:de]...)
				fallthrough
			default:
				buf = append(buf, '\n')
				buf = append(buf, v...)
			}
		}
	}
}

// eventData is next's data: raw[ds:de] for one data line, capped so that
// appending to it copies; buf for none or several.
func eventData(raw, buf []byte, ds, de, lines int) []byte {
	if lines == 1 {
		return raw[ds:de:de]
	}
	return buf
}

// buffered reports whether more bytes are already read (no need to flush
// the client yet).
func (s *sseReader) buffered() int {
	n := len(s.pre)
	if s.r != nil {
		n += s.r.Buffered()
	}
	return n
}
