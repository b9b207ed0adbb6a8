package model

import (
	"unicode/utf16"
	"unicode/utf8"
)

// scanChatChunk reads the common OpenAI chat-completions stream chunk
// without encoding/json. Decoding every SSE event with json.Unmarshal was
// the largest single cost of a streaming request in the gateway (about a
// fifth of its CPU at 50 concurrent streams); this scanner validates and
// walks the event once, without allocating.
//
// It answers only when it is sure to give what decodeStreamEvent gives:
// ok is false for anything else (other event shapes, a top-level "type",
// "delta", "content_block" or "error", a key with escapes, non-ASCII bytes
// or another letter case than the one the decoder's struct names, duplicate
// keys, a value of an unexpected type, deep nesting, invalid JSON), and the
// caller then decodes. FuzzScanChatChunk holds it to that.
func scanChatChunk(data []byte) (StreamEvent, bool) {
	s := scanner{b: data}
	var out StreamEvent
	ok := s.fields(chunkFields, func(i int) bool {
		// Only "choices" is read here; the other names are the decoder's.
		return i == 0 && s.choices(&out)
	})
	if !ok {
		return StreamEvent{}, false
	}
	s.ws()
	if s.i != len(s.b) {
		return StreamEvent{}, false
	}
	return out, true
}

// The keys decodeStreamEvent's struct names, per object: the scanner reads
// or refuses them, and skips every other key as the decoder ignores it.
var (
	chunkFields  = []string{"choices", "type", "delta", "content_block", "error"}
	choiceFields = []string{"delta", "text", "finish_reason"}
	deltaFields  = []string{"content", "text", "reasoning_content", "reasoning", "tool_calls", "function_call"}
)

// choices reads the "choices" value: null or an array of choice objects.
func (s *scanner) choices(out *StreamEvent) bool {
	if s.null() {
		return true
	}
	return s.array(func() bool {
		if s.null() {
			return true // decodes as an empty choice
		}
		return s.fields(choiceFields, func(i int) bool {
			switch i {
			case 0: // delta
				return s.delta(out)
			case 1: // text (legacy completions)
				n, ok := s.optString()
				out.UsefulBytes += n
				return ok
			default: // finish_reason
				if s.null() {
					return true
				}
				raw, ok := s.str()
				if !ok || hasEscapeOrHigh(raw) {
					return false
				}
				if len(raw) > 0 {
					out.FinishReason = finishReason(raw)
				}
				return true
			}
		})
	})
}

// delta reads a choice's "delta" object.
func (s *scanner) delta(out *StreamEvent) bool {
	if s.null() {
		return true
	}
	return s.fields(deltaFields, func(i int) bool {
		switch i {
		case 0, 1: // content, text: model text
			n, ok := s.optString()
			out.UsefulBytes += n
			return ok
		case 2, 3: // reasoning: any string, even empty, is a reasoning frame
			if s.null() {
				return true
			}
			_, ok := s.str()
			out.Reasoning = out.Reasoning || ok
			return ok
		default: // tool call frames: any value but null
			if s.null() {
				return true
			}
			out.ToolCall = true
			return s.skip(0)
		}
	})
}

// fields reads an object whose keys that matter are names: member(i) reads
// the value of names[i] (at most once), every other key's value is skipped.
// A key that repeats one of names, or spells one in another letter case,
// ends the scan: encoding/json's rules decide those.
func (s *scanner) fields(names []string, member func(i int) bool) bool {
	var seen uint
	return s.object(func(key []byte) bool {
		for i, n := range names {
			if string(key) == n {
				if seen&(1<<i) != 0 {
					return false
				}
				seen |= 1 << i
				return member(i)
			}
		}
		if foldsTo(key, names...) {
			return false
		}
		return s.skip(0)
	})
}

// finishReason returns the common finish reasons without allocating.
func finishReason(raw []byte) string {
	switch string(raw) {
	case "stop":
		return "stop"
	case "length":
		return "length"
	case "tool_calls":
		return "tool_calls"
	case "content_filter":
		return "content_filter"
	case "function_call":
		return "function_call"
	}
	return string(raw)
}

// foldsTo reports whether key equals one of names in another ASCII letter
// case: encoding/json would match it to that field, the scanner does not.
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if len(n) != len(key) {
			continue
		}
		eq := true
		for i := range key {
			a, b := key[i], n[i]
			if 'A' <= a && a <= 'Z' {
				a += 'a' - 'A'
			}
			if a != b {
				eq = false
				break
			}
		}
		if eq {
			return true
		}
	}
	return false
}

func hasEscapeOrHigh(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// scanner is a strict JSON reader over one buffer (RFC 8259, as
// encoding/json accepts it).
type scanner struct {
	b []byte
	i int
}

// maxScanDepth: deeper values go to the full decoder.
const maxScanDepth = 32

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// object reads an object, calling member with each key (positioned at the
// value); member must consume the value. Keys with escapes or bytes outside
// ASCII end the scan (they may decode to a field name).
func (s *scanner) object(member func(key []byte) bool) bool {
	return s.seq('{', '}', func() bool {
		if s.peek() != '"' {
			return false
		}
		key, ok := s.str()
		if !ok || hasEscapeOrHigh(key) || s.peek() != ':' {
			return false
		}
		s.i++
		s.ws()
		return member(key)
	})
}

// array reads an array, calling elem at each element, which must consume it.
func (s *scanner) array(elem func() bool) bool { return s.seq('[', ']', elem) }

// seq reads open, then items separated by commas, then close; item must
// consume one item.
func (s *scanner) seq(open, close byte, item func() bool) bool {
	if s.peek() != open {
		return false
	}
	s.i++
	if s.peek() == close {
		s.i++
		return true
	}
	for {
		s.ws()
		if !item() {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case close:
			s.i++
			return true
		default:
			return false
		}
	}
}

// skip reads any value.
func (s *scanner) skip(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	switch s.peek() {
	case '{':
		return s.object(func([]byte) bool { return s.skip(depth + 1) })
	case '[':
		return s.array(func() bool { return s.skip(depth + 1) })
	case '"':
		_, ok := s.str()
		return ok
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		return s.number()
	}
}

func (s *scanner) lit(w string) bool {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return false
	}
	s.i += len(w)
	return true
}

// null consumes a null literal when one is next.
func (s *scanner) null() bool { return s.peek() == 'n' && s.lit("null") }

func (s *scanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return false // a fraction needs a digit
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return false // an exponent needs a digit
		}
		i = j
	}
	s.i = i
	return true
}

// digits returns the index after the ASCII digits that start at i.
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// str reads a string and returns its raw bytes between the quotes.
func (s *scanner) str() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	s.i++
	start := s.i
	b := s.b
	for i := start; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return b[start:i], true
		case c < 0x20:
			return nil, false
		case c == '\\':
			i++
			if i >= len(b) {
				return nil, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if hex4(b[i+1:]) < 0 {
					return nil, false
				}
				i += 4
			default:
				return nil, false
			}
		}
	}
	return nil, false
}

// optString reads a string or null and returns the string's length once
// decoded (0 for null).
func (s *scanner) optString() (int, bool) {
	if s.null() {
		return 0, true
	}
	raw, ok := s.str()
	if !ok {
		return 0, false
	}
	return decodedLen(raw), true
}

// hex4 reads four hex digits (-1 if they are not).
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// decodedLen is the byte length encoding/json gives a validated raw string
// once decoded: escapes resolved, surrogate pairs joined, lone surrogates
// and invalid UTF-8 bytes replaced by U+FFFD.
func decodedLen(raw []byte) int {
	n := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			if raw[i+1] != 'u' {
				n++
				i += 2
				continue
			}
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if r2 := hex4(raw[i+2:]); r2 >= 0 {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							n += utf8.RuneLen(dec)
							i += 6
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			n += utf8.RuneLen(r)
		case c < utf8.RuneSelf:
			n++
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				n += utf8.RuneLen(utf8.RuneError)
			} else {
				n += size
			}
			i += size
		}
	}
	return n
}
