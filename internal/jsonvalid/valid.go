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
// covers every real body; only pathological inputs pay for a heap fallback,
// and keeping it small keeps the per-call zeroing cost negligible.
const inlineWords = 8

// Byte class tables. Indexing a [256] table with a byte needs no bounds
// check, so these beat chains of comparisons in the inner loops.
var (
	// isSpace holds exactly the four bytes encoding/json skips; anything else
	// (BOM, NUL, \v, \f, NBSP) is a syntax error there.
	isSpace [256]bool
	// isHex marks the bytes accepted after \u, in either case.
	isHex [256]bool
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
}

// Valid reports whether data is a valid JSON encoding, returning exactly what
// encoding/json.Valid(data) returns.
func Valid(data []byte) bool {
	i := skipValue(data, skipSpace(data, 0), maxNestingDepth)
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
		if i = skipValue(data, vs, maxNestingDepth-1); i < 0 {
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
// JSON whitespace (len(data) if none).
func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace[data[i]] {
		i++
	}
	return i
}

// skipValue validates the one value that starts at data[i] and returns the
// index just past it, or -1. Containers may nest limit deep.
func skipValue(data []byte, i, limit int) int {
	// Bit d of the stack is 1 when the container opened at depth d (0-based)
	// is an object. The innermost container's closing byte is cached in cl
	// so the common ',' / closer decisions never touch memory.
	var inline [inlineWords]uint64
	stack := inline[:]
	depth := 0
	var cl byte // ']' or '}' when depth > 0
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
	str: // Inline rather than a call: a call would spill every live variable.
		i = plainEnd(data, i)
		if uint(i) >= uint(n) {
			return -1
		}
		if c = data[i]; c != '"' {
			if i = skipEscape(data, i); i < 0 {
				return -1
			}
			goto str
		}
		i++
		goto end
	}
	if c-'0' <= 9 {
		// Integers without a leading zero, the usual case, need no call.
		j := i + 1
		for j < n && data[j]-'0' <= 9 {
			j++
		}
		if c != '0' && (j >= n || data[j] != '.' && data[j]|0x20 != 'e') {
			i = j
			goto end
		}
		if i = skipNumber(data, i); i < 0 {
			return -1
		}
		goto end
	}
	if c == '-' {
		if i = skipNumber(data, i); i < 0 {
			return -1
		}
		goto end
	}
	if c|0x20 == '{' { // '[' or '{'
		if depth == limit {
			return -1
		}
		if depth == len(stack)*64 {
			// Sized for the maximum at once so this happens at most once
			// per call.
			grown := make([]uint64, (maxNestingDepth+63)/64)
			copy(grown, stack)
			stack = grown
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
keyStr:
	i = plainEnd(data, i)
	if uint(i) >= uint(n) {
		return -1
	}
	if c = data[i]; c != '"' {
		if i = skipEscape(data, i); i < 0 {
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

// skipEscape is called at a byte that stopped plainEnd other than '"': it
// returns the index just past the escape sequence starting there, or -1 if
// that byte is a raw control byte or starts a malformed escape.
func skipEscape(data []byte, i int) int {
	n := len(data)
	if data[i] != '\\' || i+1 >= n {
		return -1
	}
	switch data[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2
	case 'u':
		// Only the hex digits are checked: encoding/json accepts any code
		// unit here, lone surrogates included.
		if n-i < 6 || !isHex[data[i+2]] || !isHex[data[i+3]] ||
			!isHex[data[i+4]] || !isHex[data[i+5]] {
			return -1
		}
		return i + 6
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
		if i = skipEscape(data, i); i < 0 {
			return -1
		}
	}
}

// skipNumber scans the RFC 8259 number grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? starting at data[i] (which
// is '-' or a digit) and returns the index just past it, or -1. Whatever
// follows is judged by the caller, which is how "01" fails: the number is
// "0" and the stray "1" is not a valid continuation.
func skipNumber(data []byte, i int) int {
	n := len(data)
	if data[i] == '-' {
		i++
		if i >= n {
			return -1
		}
	}
	switch c := data[i]; {
	case c == '0':
		i++
	case c-'1' <= 8:
		i++
		for i < n && data[i]-'0' <= 9 {
			i++
		}
	default:
		return -1
	}
	if i < n && data[i] == '.' {
		i++
		if i >= n || data[i]-'0' > 9 {
			return -1
		}
		for i < n && data[i]-'0' <= 9 {
			i++
		}
	}
	if i < n && data[i]|0x20 == 'e' {
		i++
		if i < n && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= n || data[i]-'0' > 9 {
			return -1
		}
		for i < n && data[i]-'0' <= 9 {
			i++
		}
	}
	return i
}
