package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"strconv"

	"github.com/breakwater-gw/breakwater/internal/jsonstr"
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
	t.buf = jsonstr.Append(t.buf, v)
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
	t.buf = jsonstr.Append(t.buf, string(v))
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
