package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"strconv"
	"unicode/utf8"
)

// tracer writes the canonical trace: one JSON object per decision, keys in
// sorted order, virtual time only (offsets in ms from the scenario start).
// The SHA-256 it returns is the SHA-256 of exactly those lines, so
// `sha256sum` of a `-trace` file gives the hash sim prints; the lines are
// built and hashed whether or not they are written.
//
// Callers write the fields of a record in sorted key order; a test checks
// that every line's keys are sorted.
type tracer struct {
	h     hash.Hash
	w     io.Writer // nil: hash only
	buf   []byte    // whole lines not yet hashed (and written)
	first bool
	n     uint64 // records
	err   error
}

const traceFlush = 32 << 10

func newTracer(w io.Writer) *tracer {
	return &tracer{h: sha256.New(), w: w, buf: make([]byte, 0, traceFlush+1024)}
}

// rec starts a record. Its kind is written at its key's place by ev, its
// time by end ("ev" sorts before "t").
func (t *tracer) rec() {
	t.n++
	t.buf = append(t.buf, '{')
	t.first = true
}

func (t *tracer) str(key string, v string) {
	t.key(key)
	t.buf = appendJSONString(t.buf, v)
}

func (t *tracer) int(key string, v int64) {
	t.key(key)
	t.buf = strconv.AppendInt(t.buf, v, 10)
}

func (t *tracer) bool(key string, v bool) {
	t.key(key)
	t.buf = strconv.AppendBool(t.buf, v)
}

// bytes writes a string field from a byte slice (no allocation).
func (t *tracer) bytes(key string, v []byte) {
	t.key(key)
	t.buf = appendJSONString(t.buf, string(v))
}

// ev writes the record kind at its JSON key position.
func (t *tracer) ev(v string) { t.str("ev", v) }

// end writes the time (the "t" key). Callers write keys that sort after
// "t" (until, why) after it.
func (t *tracer) end(at int64) { t.int("t", at) }

// close finishes the record.
func (t *tracer) close() {
	t.buf = append(t.buf, '}', '\n')
	if len(t.buf) >= traceFlush {
		t.flush()
	}
}

func (t *tracer) flush() {
	t.h.Write(t.buf)
	if t.w != nil && t.err == nil {
		if _, err := t.w.Write(t.buf); err != nil {
			t.err = err
		}
	}
	t.buf = t.buf[:0]
}

func (t *tracer) key(k string) {
	if !t.first {
		t.buf = append(t.buf, ',')
	}
	t.first = false
	t.buf = append(t.buf, '"')
	t.buf = append(t.buf, k...)
	t.buf = append(t.buf, '"', ':')
}

// finish flushes everything and returns the hex SHA-256 of the lines.
func (t *tracer) finish() (string, error) {
	t.flush()
	return hex.EncodeToString(t.h.Sum(nil)), t.err
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string (RFC 8259): quotes,
// backslashes and control characters escaped, invalid UTF-8 replaced.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\t':
				b = append(b, '\\', 't')
			case '\r':
				b = append(b, '\\', 'r')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
