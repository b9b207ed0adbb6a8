package sim

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
	"strconv"
	"unicode/utf8"
)

// tracer writes the canonical trace: one JSON object per decision, keys in
// sorted order, virtual time only (offsets in ms from the scenario start),
// and a SHA-256 over a compact canonical encoding of the same records. The
// hash does not depend on whether JSON is written.
//
// Callers write the fields of a record in sorted key order; a test checks
// that every line's keys are sorted.
type tracer struct {
	h     hash.Hash
	bin   []byte // compact encoding, flushed into h
	js    *bufio.Writer
	line  []byte
	first bool
	n     uint64 // records
	err   error
}

const binFlush = 32 << 10

func newTracer(w io.Writer) *tracer {
	t := &tracer{h: sha256.New(), bin: make([]byte, 0, binFlush+512)}
	if w != nil {
		t.js = bufio.NewWriterSize(w, 64<<10)
		t.line = make([]byte, 0, 512)
	}
	return t
}

// Field keys of the compact encoding: one byte each, in a fixed table.
// Adding a key appends to the table (never renumbers), so old traces keep
// their hashes.
const (
	kAction byte = iota + 1
	kAtt
	kAttempts
	kCand
	kCode
	kConn
	kCursor
	kEv
	kExcl
	kFails
	kKey
	kLevel
	kLine
	kModel
	kMs
	kNext
	kOK
	kOutcome
	kProbe
	kProv
	kReason
	kReq
	kResult
	kRetry
	kRule
	kServed
	kState
	kStatus
	kT
	kUntil
	kWhy
	kErr
	kCommitted
	kCombo
	kDetail
	kSlow
)

// rec starts a record: its time and kind come first in the compact form,
// but in key order in JSON ("ev" sorts before "t", so JSON writes "ev" at
// its place and "t" last).
func (t *tracer) rec(ev string) {
	t.n++
	t.bin = append(t.bin, 0xfe)
	t.bin = appendStr(t.bin, ev)
	if t.js != nil {
		t.line = append(t.line[:0], '{')
		t.first = true
	}
}

// The field writers below take the JSON key and its compact id.

func (t *tracer) str(key string, id byte, v string) {
	t.bin = append(t.bin, id)
	t.bin = appendStr(t.bin, v)
	if t.js != nil {
		t.key(key)
		t.line = appendJSONString(t.line, v)
	}
}

func (t *tracer) int(key string, id byte, v int64) {
	t.bin = append(t.bin, id)
	t.bin = binary.AppendVarint(t.bin, v)
	if t.js != nil {
		t.key(key)
		t.line = strconv.AppendInt(t.line, v, 10)
	}
}

func (t *tracer) bool(key string, id byte, v bool) {
	t.bin = append(t.bin, id)
	if v {
		t.bin = append(t.bin, 1)
	} else {
		t.bin = append(t.bin, 0)
	}
	if t.js != nil {
		t.key(key)
		t.line = strconv.AppendBool(t.line, v)
	}
}

// ev writes the record kind at its JSON key position.
func (t *tracer) ev(v string) {
	if t.js != nil {
		t.key("ev")
		t.line = appendJSONString(t.line, v)
	}
}

// end writes the time (the "t" key) and closes the record. Callers write
// keys that sort after "t" (until, why) with endAfter instead.
func (t *tracer) end(at int64) {
	t.bin = append(t.bin, kT)
	t.bin = binary.AppendVarint(t.bin, at)
	if t.js != nil {
		t.key("t")
		t.line = strconv.AppendInt(t.line, at, 10)
	}
}

// close finishes the record.
func (t *tracer) close() {
	if t.js != nil {
		t.line = append(t.line, '}', '\n')
		if _, err := t.js.Write(t.line); err != nil && t.err == nil {
			t.err = err
		}
	}
	if len(t.bin) >= binFlush {
		t.h.Write(t.bin)
		t.bin = t.bin[:0]
	}
}

func (t *tracer) key(k string) {
	if !t.first {
		t.line = append(t.line, ',')
	}
	t.first = false
	t.line = append(t.line, '"')
	t.line = append(t.line, k...)
	t.line = append(t.line, '"', ':')
}

// finish flushes everything and returns the hex SHA-256.
func (t *tracer) finish() (string, error) {
	t.h.Write(t.bin)
	t.bin = t.bin[:0]
	if t.js != nil {
		if err := t.js.Flush(); err != nil && t.err == nil {
			t.err = err
		}
	}
	return hex.EncodeToString(t.h.Sum(nil)), t.err
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
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

// bytes writes a string field from a byte slice (no allocation).
func (t *tracer) bytes(key string, id byte, v []byte) {
	t.bin = append(t.bin, id)
	t.bin = binary.AppendUvarint(t.bin, uint64(len(v)))
	t.bin = append(t.bin, v...)
	if t.js != nil {
		t.key(key)
		t.line = appendJSONString(t.line, string(v))
	}
}
