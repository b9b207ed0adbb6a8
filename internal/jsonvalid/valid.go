// Package jsonvalid is a drop-in replacement for encoding/json.Valid on hot
// paths (every request and response body the gateway relays).
//
// encoding/json.Valid drives a byte-at-a-time state machine through an
// indirect function call per byte, which costs microseconds per body. Valid
// here is a direct loop that skips plain string bytes eight at a time and
// never allocates for ordinary nesting depths, while giving exactly the same
// answer as encoding/json.Valid for every input — including its leniencies:
// invalid UTF-8 and lone surrogate \u escapes inside strings are accepted,
// and nesting deeper than 10000 containers is rejected.
//
// FuzzValid in valid_test.go pins that equivalence differentially against
// encoding/json.Valid, and FuzzReference in offsets_test.go pins Members'
// visits against a byte-at-a-time reference; any change here must keep
// them passing.
package jsonvalid

import (
	"encoding/binary"
	"math/bits"
)

// maxNestingDepth mirrors encoding/json's limit (scanner.go): opening the
// 10001st nested container is a syntax error there, so it must be here too,
// or the two would disagree on deep-but-otherwise-valid documents.
const maxNestingDepth = 10000

// inlineWords sizes the on-stack bit stack (64 levels per word). 512 levels
// covers every real body; only pathological inputs pay for a heap stack and
// a second pass, and keeping it small keeps the per-call zeroing cost
// negligible.
const inlineWords = 8

// Byte class tables. Indexing a [256] table with a byte needs no bounds
// check, so these beat chains of comparisons in the inner loops.
var (
	// isSpace holds exactly the four bytes encoding/json skips; anything else
	// (BOM, NUL, \v, \f, NBSP) is a syntax error there.
	isSpace [256]bool
	// isHex marks the bytes accepted after \u, in either case.
	isHex [256]bool
	// escapeLen is the length of the escape sequence that the byte after a
	// backslash starts (0: not a valid escape).
	escapeLen [256]uint8
	// strStop marks the bytes that end a run of plain string content: the
	// closing quote, the escape introducer, and control bytes, which
	// encoding/json rejects raw. Bytes >= 0x80 are deliberately absent:
	// encoding/json does not validate UTF-8 here.
	strStop [256]bool
)

func init() {
	for _, c := range []byte{' ', '\t', '\n', '\r'} {
		isSpace[c] = true
	}
	for c := 0; c < 256; c++ {
		isHex[c] = '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
		strStop[c] = c < 0x20 || c == '"' || c == '\\'
	}
	for _, c := range []byte(`"\\/bfnrt`) {
		escapeLen[c] = 2
	}
	escapeLen['u'] = 6
}

// Valid reports whether data is a valid JSON encoding, returning exactly what
// encoding/json.Valid(data) returns.
func Valid(data []byte) bool {
	i := valueEnd(data, skipSpace(data, 0), maxNestingDepth)
	return i >= 0 && skipSpace(data, i) == len(data)
}

// Members is Valid that also calls visit for every member of a top-level
// object, in order, with the byte ranges of its key (quotes included, escapes
// as written) and of its value. It lets a caller validate a body and find
// its fields in one pass. Calls made before an error is found still happen,
// so a caller must use what it saw only when Members returns true.
func Members(data []byte, visit func(keyStart, keyEnd, valueStart, valueEnd int)) bool {
	n := len(data)
	i := skipSpace(data, 0)
	if i >= n || data[i] != '{' || visit == nil {
		return Valid(data)
	}
	// The top-level object is walked here so that skipValue, the hot loop
	// Valid shares, carries no per-member bookkeeping.
	if i = skipSpace(data, i+1); i < n && data[i] == '}' {
		return skipSpace(data, i+1) == n
	}
	for {
		if i >= n || data[i] != '"' {
			return false
		}
		ks := i
		if i = skipString(data, i+1); i < 0 {
			return false
		}
		ke := i
		if i = skipSpace(data, i); i >= n || data[i] != ':' {
			return false
		}
		vs := skipSpace(data, i+1)
		// The object itself is one level of nesting.
		if i = valueEnd(data, vs, maxNestingDepth-1); i < 0 {
			return false
		}
		visit(ks, ke, vs, i)
		if i = skipSpace(data, i); i >= n {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == n
		default:
			return false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace (len(data) if none). Past each whitespace byte it skips
// a run of spaces a word at a time: indented bodies have one after every
// newline.
func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace[data[i]] {
		if i++; i <= len(data)-8 {
			i += bits.TrailingZeros64(binary.LittleEndian.Uint64(data[i:])^(lsb*' ')) >> 3
		}
	}
	return i
}

// tooDeep is skipValue's answer when its stack is too small for the input.
const tooDeep = -2

// valueEnd returns the index just past the one value that starts at
// data[i], or -1 if there is none or it nests more than limit deep.
func valueEnd(data []byte, i, limit int) int {
	var inline [inlineWords]uint64
	end := skipValue(data, i, limit, inline[:])
	if end == tooDeep {
		// Only pathological inputs get here; starting over keeps every
		// call out of skipValue, whose variables then stay in registers.
		end = skipValue(data, i, limit, make([]uint64, (maxNestingDepth+63)/64))
	}
	return end
}

// skipValue validates the one value that starts at data[i] and returns the
// index just past it, -1, or tooDeep when containers nest more than
// len(stack)*64 deep. Containers may nest limit deep.
//
// It calls no function: a call would make the compiler keep every live
// variable in memory around it, on the paths that do not make it too.
func skipValue(data []byte, i, limit int, stack []uint64) int {
	// Bit d of the stack is 1 when the container opened at depth d (0-based)
	// is an object. The innermost container's closing byte is cached in cl
	// so the common ',' / closer decisions never touch memory.
	depth := 0
	var cl byte // ']' or '}' when depth > 0
	// With the capacity cut to the length, the word loads' slicing checks
	// compare with n and the capacity needs no register of its own.
	data = data[:len(data):len(data)]
	n := len(data)
	var c byte

	// The parser is a handful of labelled states joined by goto rather than
	// recursive descent, so nesting costs one bit, not a stack frame, and
	// hostile depth cannot grow the goroutine stack. Every state tests the
	// next byte first and only then for whitespace, which compact bodies
	// rarely have between tokens.

value: // A value must start at the next non-space byte.
	if uint(i) >= uint(n) {
		return -1
	}
	c = data[i]
	if c <= ' ' {
		if i = skipSpace(data, i); i >= n {
			return -1
		}
		c = data[i]
	}
	if c == '"' {
		i++
	str:
		i = plainEnd(data, i)
		if uint(i) >= uint(n) {
			return -1
		}
		if c = data[i]; c != '"' {
			if i = escapeEnd(data, i); i < 0 {
				return -1
			}
			goto str
		}
		i++
		goto end
	}
	if c-'0' <= 9 || c == '-' {
		// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? Whatever follows
		// is judged by end, which is how "01" fails: the number is "0"
		// and the stray "1" is not a valid continuation.
		if c == '-' {
			if i++; uint(i) >= uint(n) {
				return -1
			}
			c = data[i]
		}
		i++
		if c != '0' {
			if c-'1' > 8 {
				return -1
			}
			for i < n && data[i]-'0' <= 9 {
				i++
			}
		}
		if i < n && data[i] == '.' {
			if i++; i >= n || data[i]-'0' > 9 {
				return -1
			}
			for i < n && data[i]-'0' <= 9 {
				i++
			}
		}
		if i < n && data[i]|0x20 == 'e' {
			if i++; i < n && (data[i] == '+' || data[i] == '-') {
				i++
			}
			if i >= n || data[i]-'0' > 9 {
				return -1
			}
			for i < n && data[i]-'0' <= 9 {
				i++
			}
		}
		goto end
	}
	if c|0x20 == '{' { // '[' or '{'
		if depth == limit {
			return -1
		}
		if depth == len(stack)*64 {
			return tooDeep
		}
		cl = c + 2 // ']' or '}'
		if c == '{' {
			stack[depth>>6] |= 1 << (depth & 63)
		} else {
			stack[depth>>6] &^= 1 << (depth & 63)
		}
		depth++
		if i = skipSpace(data, i+1); i >= n {
			return -1
		}
		if data[i] == cl {
			// Empty: end pops, and its whitespace skip is a no-op here.
			goto end
		}
		if cl == '}' {
			goto key
		}
		goto value
	}
	switch c {
	case 't':
		if n-i >= 4 && string(data[i:i+4]) == "true" {
			i += 4
			goto end
		}
	case 'f':
		if n-i >= 5 && string(data[i:i+5]) == "false" {
			i += 5
			goto end
		}
	case 'n':
		if n-i >= 4 && string(data[i:i+4]) == "null" {
			i += 4
			goto end
		}
	}
	return -1

key: // data[i] (i < n, not a space) must open an object key.
	if data[i] != '"' {
		return -1
	}
	i++
	// The value's string loop again, not a shared function: a call per
	// string is what made the validator slow (the caller spills and
	// reloads its state around it).
keyStr:
	i = plainEnd(data, i)
	if uint(i) >= uint(n) {
		return -1
	}
	if c = data[i]; c != '"' {
		if i = escapeEnd(data, i); i < 0 {
			return -1
		}
		goto keyStr
	}
	i++
	if uint(i) >= uint(n) {
		return -1
	}
	if c = data[i]; c != ':' {
		if i = skipSpace(data, i); i >= n || data[i] != ':' {
			return -1
		}
	}
	i++
	goto value

end: // A value just finished at i.
	if depth == 0 {
		return i
	}
	if uint(i) >= uint(n) {
		return -1
	}
	c = data[i]
	if c <= ' ' {
		if i = skipSpace(data, i); i >= n {
			return -1
		}
		c = data[i]
	}
	i++
	if c == ',' {
		if cl == '}' {
			if uint(i) < uint(n) && data[i] == '"' {
				i++
				goto keyStr
			}
			if i = skipSpace(data, i); i >= n {
				return -1
			}
			goto key
		}
		goto value
	}
	if c != cl {
		return -1
	}
	depth--
	if depth > 0 {
		d := depth - 1
		cl = ']' | byte(stack[d>>6]>>(d&63)&1)<<5
	}
	goto end
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainEnd returns the index of the first byte at or after i that ends a run
// of plain string content ('"', '\\' or a control byte), or len(data).
//
// Plain content dominates real bodies, so it tests eight bytes per step
// with the classic "has a byte less than k" trick, (x - k*lsb) &^ x & msb.
// Flipping bit 1 of every byte maps '"' to 0x20 and keeps every control
// byte below 0x20 and every other byte at 0x21 or above, so one test finds
// both; a second finds '\\'. Borrows only create false positives above a
// genuine hit, so the lowest flagged byte is always the first real stop
// byte. Both tests share one &^ w: the xors leave every byte's top bit
// alone, and bytes >= 0x80 are never flagged, since encoding/json does not
// validate UTF-8 in strings.
func plainEnd(data []byte, i int) int {
	for ; i <= len(data)-8; i += 8 {
		w := binary.LittleEndian.Uint64(data[i:])
		// In Go, - and | bind alike: each term needs its parentheses.
		if m := (((w ^ lsb*0x02) - lsb*0x21) | ((w ^ lsb*'\\') - lsb)) &^ w & msb; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(data) && !strStop[data[i]] {
		i++
	}
	return i
}

// escapeEnd is called at a byte that stopped plainEnd other than '"': it
// returns the index just past the escape sequence starting there, or -1 if
// that byte is a raw control byte or starts a malformed escape. Small
// enough to be inlined, so that skipValue calls nothing.
func escapeEnd(data []byte, i int) int {
	if data[i] == '\\' && i+1 < len(data) {
		switch escapeLen[data[i+1]] {
		case 2:
			return i + 2
		case 6:
			// Only the hex digits are checked: encoding/json accepts any
			// code unit here, lone surrogates included.
			if i+6 <= len(data) && isHex[data[i+2]] && isHex[data[i+3]] && isHex[data[i+4]] && isHex[data[i+5]] {
				return i + 6
			}
		}
	}
	return -1
}

// skipString scans string content starting just after the opening quote and
// returns the index just past the closing quote, or -1 if the string is
// malformed or unterminated.
func skipString(data []byte, i int) int {
	for {
		i = plainEnd(data, i)
		if i >= len(data) {
			return -1
		}
		if data[i] == '"' {
			return i + 1
		}
		if i = escapeEnd(data, i); i < 0 {
			return -1
		}
	}
}
