package jsonscan

import (
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// Chunk is what a chat-completions stream chunk says about progress: the
// fields of model.StreamEvent the scanner reads.
type Chunk struct {
	// UsefulBytes counts the UTF-8 bytes of model text output.
	UsefulBytes int
	// Reasoning: a reasoning delta, even empty.
	Reasoning bool
	// ToolCall: a tool or function call delta.
	ToolCall bool
	// FinishReason is the last non-empty finish_reason ("" = none).
	FinishReason string
	// MentionsUsage: the chunk's bytes hold "usage" with its quotes, as
	// a usage object's key does. False says for sure that they do not, so
	// a reader of token counts has nothing to look for there.
	MentionsUsage bool
}

// ChatChunk reads the common OpenAI chat-completions stream chunk without
// encoding/json. Decoding every SSE event with json.Unmarshal is the
// largest single cost of a streaming request in the gateway; this scanner
// validates and walks the event once, without allocating.
//
// It answers only when it is sure to give what model's full decoder of
// stream events gives: ok is false for anything else (other event shapes,
// a top-level "type", "delta", "content_block" or "error", a key with
// escapes, non-ASCII bytes or another letter case than the one the
// decoder's struct names, duplicate keys, a value of an unexpected type,
// deep nesting, invalid JSON), and the caller then decodes. model's
// FuzzScanChatChunk holds it to that.
//
// It reads every event of every stream, so it is written for speed: direct
// loops over the three object shapes it reads (chunk, choice, delta), the
// keys providers send matched whole (before the general key reader), string
// bodies and long integers read eight bytes at a time, the values of the
// other keys skipped without recursion, and positions passed and returned
// rather than kept in a struct. Every fast path answers as the general one
// would.
func ChatChunk(data []byte) (Chunk, bool) {
	var out Chunk
	i := scanChunk(data, skipWS(data, 0), &out)
	if i < 0 || skipWS(data, i) != len(data) {
		return Chunk{}, false
	}
	return out, true
}

// Prefix is what the chunks of one stream repeat: the members before
// "choices" (id, object, created, model, system_fingerprint), the same
// bytes in every chunk of an OpenAI stream. ChatChunkAfter keeps them
// from a chunk it answered and reads a next chunk that begins with the
// same bytes from its "choices" value on. The scanner's reading of those
// members depends on their bytes alone and changes nothing but where it
// is, and in a chunk it answered they hold neither "choices" nor a key
// it refuses; so the answer is ChatChunk's.
type Prefix struct {
	b     []byte
	usage bool // b holds "usage" with its quotes
}

// maxPrefix bounds what a Prefix keeps (an ordinary chunk's is about 150
// bytes): a longer run of members is read every time.
const maxPrefix = 512

// Reset forgets the prefix (a new stream), keeping the buffer.
func (p *Prefix) Reset() { p.b = p.b[:0] }

// ChatChunkAfter is ChatChunk for the chunks of one stream, p its Prefix.
func ChatChunkAfter(data []byte, p *Prefix) (Chunk, bool) {
	var out Chunk
	var i int
	if n := len(p.b); n > 0 && len(data) > n && string(data[:n]) == string(p.b) {
		out.MentionsUsage = p.usage
		if i = scanChoices(data, skipWS(data, n), &out); i >= 0 {
			var more bool
			if i, more = scanNext(data, i, '}'); more {
				i = scanMembers(data, i, &out, true, nil)
			}
		}
	} else {
		at := -1
		i = scanChunkAt(data, skipWS(data, 0), &out, &at)
		if i >= 0 && at > 0 && at <= maxPrefix && skipWS(data, i) == len(data) {
			p.b = append(p.b[:0], data[:at]...)
			// Once per stream; no string crosses the prefix's end.
			p.usage = holdsUsage(p.b)
		}
	}
	if i < 0 || skipWS(data, i) != len(data) {
		return Chunk{}, false
	}
	return out, true
}

// The keys the full decoder's struct names, per object: the scanner reads
// or refuses them, and skips every other key as the decoder ignores it.
var (
	chunkFields  = []string{"choices", "type", "delta", "content_block", "error"}
	choiceFields = []string{"delta", "text", "finish_reason"}
	deltaFields  = []string{"content", "text", "reasoning_content", "reasoning", "tool_calls", "function_call"}
)

// The members read, numbered as their names in chunkFields, choiceFields
// and deltaFields from 1 (0 is any other key, whose value is skipped).
const (
	chunkChoices = 1 // 2 to 5 name other event shapes
	chunkUsage   = 6 // "usage", skipped by skipUsage

	choiceDelta  = 1
	choiceText   = 2
	choiceFinish = 3

	deltaContent          = 1
	deltaText             = 2
	deltaReasoningContent = 3
	deltaReasoning        = 4
	deltaToolCalls        = 5
	deltaFunctionCall     = 6
)

// The readers below take the buffer and the index of their value (white
// space skipped) and return the index just past the value, or -1 when the
// scanner does not answer.

// scanChunk reads the top-level object: only "choices" is read here, the
// other names are the decoder's.
func scanChunk(b []byte, i int, out *Chunk) int { return scanChunkAt(b, i, out, nil) }

// scanChunkAt is scanChunk; at, when not nil, is set to the index of the
// "choices" value when it is read.
func scanChunkAt(b []byte, i int, out *Chunk, at *int) int {
	i, done := enter(b, i, '{', false)
	if done {
		return i
	}
	return scanMembers(b, i, out, false, at)
}

// scanMembers reads the top-level object's members from i, the start of
// one; seen: "choices" was read already.
func scanMembers(b []byte, i int, out *Chunk, seen bool, at *int) int {
	for {
		// The keys providers send, each matched whole with its quotes
		// and colon; member reads any other key (and would answer the
		// same for these).
		i = skipWS(b, i)
		m, v := 0, -1
		if i+1 < len(b) {
			switch b[i+1] {
			case 'c':
				if v = keyAt(b, i, `"choices`, `":`, ``); v >= 0 {
					m = chunkChoices
				} else {
					v = keyAt(b, i, `"created`, `":`, ``)
				}
			case 'i':
				v = keyAt(b, i, `"id":`, ``, ``)
			case 'm':
				v = keyAt(b, i, `"model":`, ``, ``)
			case 'o':
				if v = keyAt(b, i, `"object"`, `:`, ``); v < 0 {
					v = keyAt(b, i, `"obfusca`, `tion":`, ``)
				}
			case 's':
				if v = keyAt(b, i, `"system_`, `fingerpr`, `int":`); v < 0 {
					v = keyAt(b, i, `"service`, `_tier":`, ``)
				}
			case 'u':
				if v = keyAt(b, i, `"usage":`, ``, ``); v >= 0 {
					m, out.MentionsUsage = chunkUsage, true
				}
			}
		}
		if v >= 0 {
			v = skipWS(b, v)
		} else {
			m, v = member(b, i, chunkFields, out)
		}
		switch {
		case v < 0:
			return -1
		case m == 0:
			i = skipValue(b, v, out)
		case m == chunkChoices && !seen:
			seen = true
			if at != nil {
				*at = v
			}
			i = scanChoices(b, v, out)
		case m == chunkUsage:
			i = skipUsage(b, v, out)
		default: // "choices" again, or a name of another event shape
			return -1
		}
		var more bool
		if i, more = scanNext(b, i, '}'); !more {
			return i
		}
	}
}

// enter reads the container that open starts at i, or null when nullable:
// done, with the index past null or an empty container (-1 for anything
// else), or not done, with the index of the first member or element.
func enter(b []byte, i int, open byte, nullable bool) (next int, done bool) {
	switch {
	case i >= len(b):
		return -1, true
	case nullable && b[i] == 'n':
		return scanLit(b, i, "null"), true
	case b[i] != open:
		return -1, true
	}
	close := byte('}')
	if open == '[' {
		close = ']'
	}
	if i = skipWS(b, i+1); i < len(b) && b[i] == close {
		return i + 1, true
	}
	return i, false
}

// scanChoices reads the "choices" value: null or an array of choice
// objects (a null choice decodes as an empty one).
func scanChoices(b []byte, i int, out *Chunk) int {
	i, done := enter(b, i, '[', true)
	if done {
		return i
	}
	for {
		if i = skipWS(b, i); i < len(b) && b[i] == 'n' {
			i = scanLit(b, i, "null")
		} else {
			i = scanChoice(b, i, out)
		}
		var more bool
		if i, more = scanNext(b, i, ']'); !more {
			return i
		}
	}
}

// scanChoice reads one choice object.
func scanChoice(b []byte, i int, out *Chunk) int {
	i, done := enter(b, i, '{', false)
	if done {
		return i
	}
	var seen uint
	for {
		i = skipWS(b, i)
		m, v := 0, -1
		if i+1 < len(b) {
			switch b[i+1] {
			case 'd':
				if v = keyAt(b, i, `"delta":`, ``, ``); v >= 0 {
					m = choiceDelta
				}
			case 'f':
				if v = keyAt(b, i, `"finish_`, `reason":`, ``); v >= 0 {
					m = choiceFinish
				}
			case 'i':
				v = keyAt(b, i, `"index":`, ``, ``)
			case 'l':
				v = keyAt(b, i, `"logprob`, `s":`, ``)
			}
		}
		if v >= 0 {
			v = skipWS(b, v)
		} else {
			m, v = member(b, i, choiceFields, out)
		}
		if v < 0 {
			return -1
		}
		if m != 0 && !firstRead(&seen, m) {
			return -1
		}
		switch m {
		case 0:
			i = skipValue(b, v, out)
		case choiceDelta:
			i = scanDelta(b, v, out)
		case choiceText: // legacy completions
			var n int
			n, i = scanText(b, v, out)
			out.UsefulBytes += n
		case choiceFinish:
			i = scanFinish(b, v, out)
		}
		var more bool
		if i, more = scanNext(b, i, '}'); !more {
			return i
		}
	}
}

// scanDelta reads a choice's "delta" value: null or an object.
func scanDelta(b []byte, i int, out *Chunk) int {
	i, done := enter(b, i, '{', true)
	if done {
		return i
	}
	var seen uint
	for {
		i = skipWS(b, i)
		m, v := 0, -1
		if i+1 < len(b) {
			switch b[i+1] {
			case 'c':
				if v = keyAt(b, i, `"content`, `":`, ``); v >= 0 {
					m = deltaContent
				}
			case 'r':
				if v = keyAt(b, i, `"role":`, ``, ``); v < 0 {
					v = keyAt(b, i, `"refusal`, `":`, ``)
				}
			}
		}
		if v >= 0 {
			v = skipWS(b, v)
		} else {
			m, v = member(b, i, deltaFields, out)
		}
		if v < 0 {
			return -1
		}
		if m != 0 && !firstRead(&seen, m) {
			return -1
		}
		switch m {
		case 0:
			i = skipValue(b, v, out)
		case deltaContent, deltaText: // model text
			var n int
			n, i = scanText(b, v, out)
			out.UsefulBytes += n
		case deltaReasoningContent, deltaReasoning:
			// any string, even empty, is a reasoning frame
			i = scanReasoning(b, v, out)
		case deltaToolCalls, deltaFunctionCall:
			// tool call frames: any value but null
			if i = scanLit(b, v, "null"); i < 0 {
				out.ToolCall = true
				i = skipValue(b, v, out)
			}
		}
		var more bool
		if i, more = scanNext(b, i, '}'); !more {
			return i
		}
	}
}

// scanText reads a string or null: its length once decoded (0 for null).
func scanText(b []byte, i int, out *Chunk) (n, end int) {
	if i >= len(b) {
		return 0, -1
	}
	switch b[i] {
	case 'n':
		return 0, scanLit(b, i, "null")
	case '"':
	default:
		return 0, -1
	}
	e := plainEnd(b, i+1)
	if e < len(b) && b[e] == '"' {
		noteUsage(b, e, out)
		return e - (i + 1), e + 1
	}
	// An escape, a byte outside ASCII or an invalid byte.
	if end = skipValue(b, i, out); end < 0 {
		return 0, -1
	}
	return decodedLen(b[i+1 : end-1]), end
}

// scanReasoning reads "reasoning_content" or "reasoning": null or any
// string.
func scanReasoning(b []byte, i int, out *Chunk) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case 'n':
		return scanLit(b, i, "null")
	case '"':
		if i = skipValue(b, i, out); i >= 0 {
			out.Reasoning = true
		}
		return i
	}
	return -1
}

// scanFinish reads "finish_reason": null or a string without escapes or
// bytes outside ASCII.
func scanFinish(b []byte, i int, out *Chunk) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case 'n':
		return scanLit(b, i, "null")
	case '"':
		e := plainEnd(b, i+1)
		if e >= len(b) || b[e] != '"' {
			return -1
		}
		if raw := b[i+1 : e]; len(raw) > 0 {
			out.FinishReason = finishReason(raw)
		}
		noteUsage(b, e, out)
		return e + 1
	}
	return -1
}

// keyAt returns the index past the key k0+k1+k2 (with its quotes and
// colon) when it is at i, else -1. The key comes in pieces of at most eight
// bytes, which the compiler compares as one word each (a longer one takes
// a call).
func keyAt(b []byte, i int, k0, k1, k2 string) int {
	n := len(k0) + len(k1) + len(k2)
	if i < 0 || i > len(b)-n {
		return -1
	}
	if string(b[i:i+len(k0)]) != k0 || string(b[i+len(k0):i+len(k0)+len(k1)]) != k1 || string(b[i+len(k0)+len(k1):i+n]) != k2 {
		return -1
	}
	return i + n
}

// member reads the key at i and its colon: the number of the name in names
// it is (from 1; 0 for another key) and the index of its value; a key
// "usage" sets out.MentionsUsage. A key
// that spells one of names in another letter case ends the scan (-1), as
// does one with escapes, control or non-ASCII bytes (it may decode to one
// of names): encoding/json's rules decide those.
func member(b []byte, i int, names []string, out *Chunk) (m, v int) {
	k, v := scanKey(b, i)
	if v < 0 {
		return 0, -1
	}
	if string(k) == "usage" {
		out.MentionsUsage = true
	}
	for j, n := range names {
		if string(k) == n {
			return j + 1, v
		}
	}
	if foldsTo(k, names...) {
		return 0, -1
	}
	return 0, v
}

// scanKey reads an object key at i and the colon after it, and returns
// the key and the index of the value (-1 if not an object key). Keys with
// escapes, control or non-ASCII bytes end the scan (they may decode to a
// field name).
func scanKey(b []byte, i int) (k []byte, value int) {
	if i >= len(b) || b[i] != '"' {
		return nil, -1
	}
	e := plainEnd(b, i+1)
	if e >= len(b) || b[e] != '"' {
		return nil, -1
	}
	k = b[i+1 : e]
	if i = skipWS(b, e+1); i >= len(b) || b[i] != ':' {
		return nil, -1
	}
	return k, skipWS(b, i+1)
}

// noteUsage sets out.MentionsUsage when quotedUsage ends at e, the closing
// quote of a string the scanner read. In valid JSON every quote is part of
// a string, so quotedUsage can only end at a closing quote: of the string
// "usage" or of one whose body ends with an escaped quote and usage. The
// scanner reads every string of a chunk it answers, so the flag is exact.
func noteUsage(b []byte, e int, out *Chunk) {
	if e >= 6 && b[e-1] == 'e' && string(b[e-6:e+1]) == `"usage"` {
		out.MentionsUsage = true
	}
}

// holdsUsage reports whether b holds "usage" with its quotes, as noteUsage
// would find it at one of b's quotes.
func holdsUsage(b []byte) bool {
	var out Chunk
	for e := range b {
		if b[e] == '"' {
			noteUsage(b, e, &out)
		}
	}
	return out.MentionsUsage
}

// firstRead marks member m of an object read; false when it was read
// before: encoding/json keeps a repeated name's last value, the scanner
// leaves that to the decoder.
func firstRead(seen *uint, m int) bool {
	if *seen&(1<<m) != 0 {
		return false
	}
	*seen |= 1 << m
	return true
}

// scanNext reads what follows a member or an element at i: white space,
// then a comma (more is true) or close (more is false); end is past it, or
// -1 when neither follows. (The next member or element may start with
// white space.)
func scanNext(b []byte, i int, close byte) (end int, more bool) {
	if i < 0 {
		return -1, false
	}
	if i = skipWS(b, i); i < len(b) && (b[i] == ',' || b[i] == close) {
		return i + 1, b[i] == ','
	}
	return -1, false
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

// maxScanDepth: deeper values go to the full decoder. The depth counts
// from the value of a skipped or tool-call key (0), one more per array or
// object it is in.
const maxScanDepth = 32

// wsMask has a bit for each JSON white-space byte.
const wsMask uint64 = 1<<' ' | 1<<'\t' | 1<<'\n' | 1<<'\r'

// skipWS returns the index of the first byte from i on that is not JSON
// white space.
func skipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && wsMask>>b[i]&1 != 0 {
		i++
	}
	return i
}

// scanLit returns the index past the literal w at i, or -1 if w is not at
// i.
func scanLit(b []byte, i int, w string) int {
	if len(b)-i >= len(w) && string(b[i:i+len(w)]) == w {
		return i + len(w)
	}
	return -1
}

// skipValue reads any value at i: strings, numbers without a sign and null
// (the values most often skipped) here, the others by skipOther.
func skipValue(b []byte, i int, out *Chunk) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
	case '0' <= c && c <= '9':
		// A number without a sign (scanNumber without the calls), the
		// digits after a leading 1 to 9 eight at a time while they last.
		if i++; c != '0' {
			for ; i <= len(b)-8; i += 8 {
				if m := nonDigits(load64(b[i:])); m != 0 {
					i += bits.TrailingZeros64(m) >> 3
					break
				}
			}
			i = digits(b, i)
		}
		if i < len(b) && (b[i] == '.' || b[i]|0x20 == 'e') {
			return scanFraction(b, i)
		}
		return i
	case c == 'n':
		return scanLit(b, i, "null")
	default:
		return skipOther(b, i, out)
	}
	for i++; ; {
		for i <= len(b)-8 {
			if m := nonText(load64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			noteUsage(b, i, out)
			return i + 1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if hex4(b[i+2:]) < 0 {
					return -1
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		default: // the last bytes, one at a time
			i++
		}
	}
}

// skipOther reads a value at i that skipValue does not: an object, an
// array, true, false, a negative number, or an invalid one.
func skipOther(b []byte, i int, out *Chunk) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '{', '[':
		return skipNested(b, i, 0, out)
	case 't':
		return scanLit(b, i, "true")
	case 'f':
		return scanLit(b, i, "false")
	}
	return scanNumber(b, i)
}

// skipUsage reads the "usage" value at i as skipValue does, with the
// token counts providers send matched whole. Its keys are not looked at
// for MentionsUsage: the key "usage" before them set it.
func skipUsage(b []byte, i int, out *Chunk) int {
	if i >= len(b) || b[i] != '{' {
		return skipValue(b, i, out)
	}
	i, done := enter(b, i, '{', false)
	if done {
		return i
	}
	for {
		i = skipWS(b, i)
		v := -1
		if i+1 < len(b) {
			switch b[i+1] {
			case 'p':
				v = keyAt(b, i, `"prompt_`, `tokens":`, ``)
			case 'c':
				v = keyAt(b, i, `"complet`, `ion_toke`, `ns":`)
			case 't':
				v = keyAt(b, i, `"total_t`, `okens":`, ``)
			}
		}
		if v >= 0 {
			v = skipWS(b, v)
		} else if _, v = scanKey(b, i); v < 0 {
			return -1
		}
		// The members of "usage" are one deep.
		if v < len(b) && (b[v] == '{' || b[v] == '[') {
			i = skipNested(b, v, 1, out)
		} else {
			i = skipValue(b, v, out)
		}
		var more bool
		if i, more = scanNext(b, i, '}'); !more {
			return i
		}
	}
}

// skipNested reads the object or array at i, itself depth deep, with a
// stack of one bit per open container (set for an object).
func skipNested(b []byte, i, depth int, out *Chunk) int {
	var objects uint64
	top, member := depth, false
	for {
		if member {
			// An object member at i: its key (as scanKey reads it, inline
			// here: nested values are mostly keys), its colon, then its
			// value.
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			e := i + 1
			for e <= len(b)-8 {
				if m := nonPlain(load64(b[e:])); m != 0 {
					e += bits.TrailingZeros64(m) >> 3
					break
				}
				e += 8
			}
			for e < len(b) && b[e] >= 0x20 && b[e] != '"' && b[e] != '\\' && b[e] < utf8.RuneSelf {
				e++ // the last bytes (after a stop, b[e] ends it)
			}
			if e >= len(b) || b[e] != '"' {
				return -1
			}
			noteUsage(b, e, out)
			if i = skipWS(b, e+1); i >= len(b) || b[i] != ':' {
				return -1
			}
			i = skipWS(b, i+1)
		}
		if depth > maxScanDepth || i >= len(b) {
			return -1
		}
		switch b[i] {
		case '{':
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			objects |= 1 << depth
			depth++
			member = true
			continue
		case '[':
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == ']' {
				i++
				break
			}
			objects &^= 1 << depth
			depth++
			member = false
			continue
		default:
			i = skipValue(b, i, out)
		}
		if i, depth, member = closeNested(b, i, depth, top, objects); i < 0 || depth == top {
			return i
		}
	}
}

// closeNested: a value ended at i, depth deep. It closes the containers the
// value ends and returns the index of the next member or element, its depth
// and whether it is an object member; depth is top when the outermost
// container closed (i is past it), i is -1 when the JSON is invalid.
func closeNested(b []byte, i, depth, top int, objects uint64) (next, d int, member bool) {
	for {
		if i < 0 {
			return -1, depth, false
		}
		if depth == top {
			return i, depth, false
		}
		member = objects>>(depth-1)&1 != 0
		if i = skipWS(b, i); i >= len(b) {
			return -1, depth, false
		}
		if c := b[i]; c == ',' {
			return skipWS(b, i+1), depth, member
		} else if member && c == '}' || !member && c == ']' {
			i++
			depth--
			continue
		}
		return -1, depth, false
	}
}

// scanNumber reads a number at i.
func scanNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && (b[i] == '.' || b[i]|0x20 == 'e') {
		return scanFraction(b, i)
	}
	return i
}

// scanFraction reads the fraction and the exponent of a number from i.
func scanFraction(b []byte, i int) int {
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1 // a fraction needs a digit
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
			return -1 // an exponent needs a digit
		}
		i = j
	}
	return i
}

// Eight bytes at a time: each byte of a word (little-endian: the byte at
// the lowest index lowest) is tested at once, the top bit of its result
// set when the byte ends the run. A borrow or a carry only leaves a byte
// that ends it, so the lowest set bit always marks the first such byte
// (the bits above it may be wrong).
const (
	ones = 0x0101010101010101
	tops = 0x8080808080808080
)

// load64 reads the first eight bytes of b (the compiler makes it one
// load).
func load64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// nonPlain marks the bytes of w that are a quote, a backslash, a control
// byte or outside ASCII.
func nonPlain(w uint64) uint64 {
	// below 0x20 or from 0xa0 | quote or from 0x81 | backslash or from 0x81 | from 0x80
	return ((w - 0x20*ones) | ((w ^ '"'*ones) - ones) | ((w ^ '\\'*ones) - ones) | w) & tops
}

// nonText marks the bytes of w that are a quote, a backslash or a control
// byte: nonPlain without the bytes outside ASCII, which never borrow.
func nonText(w uint64) uint64 {
	return ((w - 0x20*ones) | ((w ^ '"'*ones) - ones) | ((w ^ '\\'*ones) - ones)) &^ w & tops
}

// nonDigits marks the bytes of w that are not ASCII digits.
func nonDigits(w uint64) uint64 {
	// below '0' | above '9' | from 0x80
	return ((w - '0'*ones) | (w + (0x7f-'9')*ones) | w) & tops
}

// digits returns the index after the ASCII digits that start at i.
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// plainEnd returns the index of the first byte from i on that is a quote,
// a backslash, a control byte or outside ASCII (len(b) if none): the end of
// a string body without escapes that decodes to itself.
func plainEnd(b []byte, i int) int {
	for i <= len(b)-8 {
		if m := nonPlain(load64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	for i < len(b) && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' && b[i] < utf8.RuneSelf {
		i++
	}
	return i
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
