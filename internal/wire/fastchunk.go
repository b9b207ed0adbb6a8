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
	const key = `delta":{"content":"`
	const roleKey = `delta":{"role":"assistant"`
	found, ids := false, 0
	indexes, choices := 0, 0
	for q := bytes.IndexByte(data, '"'); q >= 0; {
		k := data[q+1:]
		n := bytes.IndexByte(k, '"')
		if n < 0 {
			break // the last quote: no string follows
		}
		w := k[:n]
		next := q + 1 + n // the quote that ends w
		switch string(w) {
		case "delta":
			if found {
				return nil, nil, false
			}
			var start int
			switch {
			case bytes.HasPrefix(k, []byte(key)):
				start = q + 1 + len(key)
			case role && bytes.HasPrefix(k, []byte(roleKey+`}`)):
				found, text = true, nil // no content
				next = q + len(roleKey)
			case role && bytes.HasPrefix(k, []byte(roleKey+`,"content":"`)):
				start = q + 1 + len(roleKey) + len(`,"content":"`)
			default:
				return nil, nil, false
			}
			if found {
				break
			}
			end := bytes.IndexByte(data[start:], '"')
			if end < 0 {
				return nil, nil, false
			}
			text = data[start : start+end]
			// The delta must close right after the text (OpenAI's role
			// chunk has a null refusal there, which the decoder does not
			// read either).
			rest := data[start+end+1:]
			if !plainText(text) || !(bytes.HasPrefix(rest, []byte("}")) || bytes.HasPrefix(rest, []byte(`,"refusal":null}`))) {
				return nil, nil, false
			}
			found = true
			next = start + end // the text holds no quote: go on after it
		case "index":
			if indexes++; indexes > 1 || !bytes.HasPrefix(k[n:], []byte(`":0`)) {
				return nil, nil, false
			}
		case "finish_reason":
			if !bytes.HasPrefix(k[n:], []byte(`":null`)) {
				return nil, nil, false
			}
		case "refusal":
			if !bytes.HasPrefix(k[n:], []byte(`":null`)) {
				return nil, nil, false // a refusal with text: the full path is the careful one
			}
		case "choices":
			if choices++; choices > 1 {
				return nil, nil, false // the decoder keeps the last
			}
		case "id":
			if !role {
				break // a text chunk's id means nothing to its translation
			}
			if next+1 >= len(data) || data[next+1] != ':' {
				if next+1 < len(data) && keyEnd(data[next+1]) {
					return nil, nil, false // a key spaced from its colon
				}
				break // a value
			}
			// The chunk's id: its first key (a later one may be a nested
			// object's), a string of plain text, once.
			if q != 1 {
				return nil, nil, false
			}
			v := data[next+2:]
			e := bytes.IndexByte(v[min(1, len(v)):], '"')
			if ids++; ids > 1 || len(v) == 0 || v[0] != '"' || e < 0 || !plainText(v[1:1+e]) {
				return nil, nil, false
			}
			id = v[1 : 1+e]
			next += 2 + e + 1 // the id's closing quote
		default:
			// Only a key can be one the decoder reads: a string followed
			// by its colon (or by space before it). A value, or the bytes
			// between two strings, is followed by something else.
			if next+1 < len(data) && keyEnd(data[next+1]) && decodedKey(w) {
				return nil, nil, false
			}
		}
		q = next
	}
	if !found || indexes != 1 {
		return nil, nil, false
	}
	return id, text, true
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
