package wire

import (
	"bytes"
	"unicode/utf8"
)

// textDelta reads the common chunk — one choice whose delta is only a
// text content without escapes, no finish reason, no usage — without
// encoding/json, which costs most of a chunk's translation. It returns
// the text's raw bytes (valid inside a JSON string as they are) and
// false for any other chunk, which the full decoder reads.
func textDelta(data []byte) ([]byte, bool) {
	_, text, ok := plainDelta(data, false)
	return text, ok
}

// plainDelta is textDelta that also takes a stream's opening chunk when
// role is true: its delta {"role":"assistant"} or {"role":"assistant",
// "content":…} (with OpenAI's "refusal":null after it or not), and its
// id (the chunk's only "id", a string without escapes, as the chunk's
// first key), which a Messages stream's message_start carries. The role
// chunk is held until the first content and translated with it, so what
// it costs is on the way to the client's first content.
//
// One pass over the chunk looks at the string after each quote (a key,
// a value, or the bytes between two strings): the delta's key, once; an
// index, once, 0; a finish reason only when null; choices once; the id
// once; a refusal only when null; and nothing the decoder would read
// beyond that — usage, an error, tool calls, reasoning, a second delta
// or content, a key it matches in another letter case or spelled with
// escapes. A quote inside a string only makes the pass more cautious,
// never wrong: the full decoder reads what it declines.
func plainDelta(data []byte, role bool) (id, text []byte, ok bool) {
	s := deltaScan{data: data, role: role}
	for q := bytes.IndexByte(data, '"'); q >= 0; {
		n := bytes.IndexByte(data[q+1:], '"')
		if n < 0 {
			break // the last quote: no string follows
		}
		if q, ok = s.word(q, n); !ok {
			return nil, nil, false
		}
	}
	if !s.found || s.indexes != 1 {
		return nil, nil, false
	}
	return s.id, s.text, true
}

// deltaScan is plainDelta's pass over one chunk: what it has read so far.
type deltaScan struct {
	data  []byte
	role  bool // an opening chunk is taken too
	found bool // the delta was read
	ids   int
	// indexes and choices count their keys: one each is a plain chunk.
	indexes, choices int
	id, text         []byte
}

const (
	contentDelta = `delta":{"content":"`
	roleDelta    = `delta":{"role":"assistant"`
)

// word looks at the n bytes of string after the quote at q and returns
// the quote the pass goes on from, or false when the chunk is not plain.
func (s *deltaScan) word(q, n int) (next int, ok bool) {
	k := s.data[q+1:]
	w := k[:n]
	next = q + 1 + n // the quote that ends w
	switch string(w) {
	case "delta":
		return s.delta(q)
	case "index":
		s.indexes++
		return next, s.indexes == 1 && bytes.HasPrefix(k[n:], []byte(`":0`))
	case "finish_reason", "refusal":
		// A refusal with text: the full path is the careful one.
		return next, bytes.HasPrefix(k[n:], []byte(`":null`))
	case "choices":
		s.choices++
		return next, s.choices == 1 // the decoder keeps the last
	case "id":
		if !s.role {
			return next, true // a text chunk's id means nothing to its translation
		}
		return s.chunkID(q, next)
	}
	// Only a key can be one the decoder reads: a string followed by its
	// colon (or by space before it). A value, or the bytes between two
	// strings, is followed by something else.
	return next, next+1 >= len(s.data) || !keyEnd(s.data[next+1]) || !decodedKey(w)
}

// delta reads the delta whose key's opening quote is at q: a text
// content, or an opening chunk's role with or without one. It returns
// the quote the pass goes on from.
func (s *deltaScan) delta(q int) (next int, ok bool) {
	if s.found {
		return 0, false
	}
	k := s.data[q+1:]
	var start int
	switch {
	case bytes.HasPrefix(k, []byte(contentDelta)):
		start = q + 1 + len(contentDelta)
	case s.role && bytes.HasPrefix(k, []byte(roleDelta+`}`)):
		s.found = true // no content
		return q + len(roleDelta), true
	case s.role && bytes.HasPrefix(k, []byte(roleDelta+`,"content":"`)):
		start = q + 1 + len(roleDelta) + len(`,"content":"`)
	default:
		return 0, false
	}
	end := bytes.IndexByte(s.data[start:], '"')
	if end < 0 {
		return 0, false
	}
	text := s.data[start : start+end]
	// The delta must close right after the text (OpenAI's role chunk has
	// a null refusal there, which the decoder does not read either).
	rest := s.data[start+end+1:]
	if !plainText(text) || !(bytes.HasPrefix(rest, []byte("}")) || bytes.HasPrefix(rest, []byte(`,"refusal":null}`))) {
		return 0, false
	}
	s.found, s.text = true, text
	return start + end, true // the text holds no quote: go on after it
}

// chunkID reads an opening chunk's "id", whose quotes are at q and next:
// a value is passed over; the key must be the chunk's first (a later one
// may be a nested object's), seen once, with a string of plain text.
func (s *deltaScan) chunkID(q, next int) (int, bool) {
	data := s.data
	if next+1 >= len(data) || data[next+1] != ':' {
		if next+1 < len(data) && keyEnd(data[next+1]) {
			return 0, false // a key spaced from its colon
		}
		return next, true // a value
	}
	if q != 1 {
		return 0, false
	}
	v := data[next+2:]
	e := bytes.IndexByte(v[min(1, len(v)):], '"')
	if s.ids++; s.ids > 1 || len(v) == 0 || v[0] != '"' || e < 0 || !plainText(v[1:1+e]) {
		return 0, false
	}
	s.id = v[1 : 1+e]
	return next + 2 + e + 1, true // the id's closing quote
}

// decodedKey reports whether w, as a key, is one the full decoder would
// read into what textDelta vouches for (in any letter case, as
// encoding/json matches keys), other than where textDelta reads it.
func decodedKey(w []byte) bool {
	switch len(w) {
	case 2:
		return foldEq(w, "id")
	case 5:
		return foldEq(w, "usage") || foldEq(w, "error") || foldEq(w, "delta") || foldEq(w, "index")
	case 7:
		return foldEq(w, "content") || foldEq(w, "refusal") || foldEq(w, "choices")
	case 10:
		return foldEq(w, "tool_calls")
	case 13:
		return foldEq(w, "finish_reason")
	}
	if len(w) >= 9 && foldEq(w[:9], "reasoning") {
		return true
	}
	for _, c := range w {
		if c >= utf8.RuneSelf || c == '\\' {
			// Two letters fold to ASCII from elsewhere (U+017F to s,
			// U+212A to k), and an escaped key spells what the decoder
			// says: either may be one of the keys above.
			return true
		}
	}
	return false
}

// keyEnd reports whether c may follow a key's closing quote.
func keyEnd(c byte) bool {
	return c == ':' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// foldEq reports whether w is lower (lower case ASCII letters and '_')
// in any letter case.
func foldEq(w []byte, lower string) bool {
	if len(w) != len(lower) {
		return false
	}
	for i := range len(w) {
		if c := lower[i]; w[i] != c && (c == '_' || w[i]|0x20 != c) {
			return false
		}
	}
	return true
}

// appendRawString appends raw (JSON string content, already escaped) as a
// JSON string.
func appendRawString(dst, raw []byte) []byte {
	dst = append(dst, '"')
	dst = append(dst, raw...)
	return append(dst, '"')
}

// plainText reports whether raw JSON string content means itself: no
// escapes, no control bytes, valid UTF-8.
func plainText(b []byte) bool {
	ascii := true
	for _, c := range b {
		if c < 0x20 || c == '\\' {
			return false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return ascii || utf8.Valid(b)
}
