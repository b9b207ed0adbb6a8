package jsonvalid

// refValid is a second, independent implementation of Valid and Members
// (one state machine with the visits inline and a call per string), kept as
// a reference: unlike encoding/json.Valid it reports Members' visits, so the
// tests and FuzzReference can pin the exact key and value offsets.

import (
	"encoding/binary"
	"math/bits"
)

const (
	refMaxDepth    = 10000
	refInlineWords = 8
)

var refIsSpace, refIsHex, refStrStop [256]bool

func init() {
	for _, c := range []byte{' ', '\t', '\n', '\r'} {
		refIsSpace[c] = true
	}
	for c := 0; c < 256; c++ {
		refIsHex[c] = '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
		refStrStop[c] = c < 0x20 || c == '"' || c == '\\'
	}
}

func refValid(data []byte, visit func(keyStart, keyEnd, valueStart, valueEnd int)) bool {
	// Bit d of the stack is 1 when the container opened at depth d (0-based)
	// is an object. The innermost kind is cached in inObj so the common
	// ',' / closer decisions never touch memory.
	var inline [refInlineWords]uint64
	stack := inline[:]
	depth := 0
	inObj := false
	n := len(data)
	i := 0
	var c byte
	// The top-level member being read, for visit: its key and value starts.
	ks, ke, vs := -1, 0, 0

	// The parser is a handful of labelled states joined by goto rather than
	// recursive descent, so nesting costs one bit, not a stack frame, and
	// hostile depth cannot grow the goroutine stack.

value: // A value must start at the next non-space byte.
	for i < n && refIsSpace[data[i]] {
		i++
	}
	if i >= n {
		return false
	}
	c = data[i]
	switch c {
	case '"':
		i = refSkipString(data, i+1)
		if i < 0 {
			return false
		}
		goto end
	case '{', '[':
		if depth == refMaxDepth {
			return false
		}
		if depth == len(stack)*64 {
			// Sized for the maximum at once so this happens at most once
			// per call.
			grown := make([]uint64, (refMaxDepth+63)/64)
			copy(grown, stack)
			stack = grown
		}
		inObj = c == '{'
		if inObj {
			stack[depth>>6] |= 1 << (depth & 63)
		} else {
			stack[depth>>6] &^= 1 << (depth & 63)
		}
		depth++
		i++
		for i < n && refIsSpace[data[i]] {
			i++
		}
		if i >= n {
			return false
		}
		// An immediate closer is handled by end, which already knows how
		// to pop; its whitespace skip is a no-op here.
		if inObj {
			if data[i] == '}' {
				goto end
			}
			goto key
		}
		if data[i] == ']' {
			goto end
		}
		goto value
	case 't':
		if n-i >= 4 && string(data[i:i+4]) == "true" {
			i += 4
			goto end
		}
		return false
	case 'f':
		if n-i >= 5 && string(data[i:i+5]) == "false" {
			i += 5
			goto end
		}
		return false
	case 'n':
		if n-i >= 4 && string(data[i:i+4]) == "null" {
			i += 4
			goto end
		}
		return false
	default:
		if c == '-' || c-'0' <= 9 {
			i = refSkipNumber(data, i)
			if i < 0 {
				return false
			}
			goto end
		}
		return false
	}

key: // data[i] (i < n, not a space) must open an object key.
	if data[i] != '"' {
		return false
	}
	if depth == 1 && visit != nil {
		ks = i
	}
	i = refSkipString(data, i+1)
	if i < 0 {
		return false
	}
	if depth == 1 && ks >= 0 {
		ke = i
	}
	for i < n && refIsSpace[data[i]] {
		i++
	}
	if i >= n || data[i] != ':' {
		return false
	}
	i++
	for i < n && refIsSpace[data[i]] {
		i++
	}
	if depth == 1 && ks >= 0 {
		vs = i
	}
	goto value

end: // A value just finished at i.
	if depth == 1 && ks >= 0 {
		visit(ks, ke, vs, i)
		ks = -1
	}
	for i < n && refIsSpace[data[i]] {
		i++
	}
	if depth == 0 {
		// Exactly one top-level value: only whitespace may follow.
		return i == n
	}
	if i >= n {
		return false
	}
	c = data[i]
	i++
	if c == ',' {
		if inObj {
			for i < n && refIsSpace[data[i]] {
				i++
			}
			if i >= n {
				return false
			}
			goto key
		}
		goto value
	}
	if inObj && c == '}' || !inObj && c == ']' {
		depth--
		if depth > 0 {
			d := depth - 1
			inObj = stack[d>>6]>>(d&63)&1 == 1
		}
		goto end
	}
	return false
}

const (
	refLSB = 0x0101010101010101
	refMSB = 0x8080808080808080
)

// skipString scans string content starting just after the opening quote and
// returns the index just past the closing quote, or -1 if the string is
// malformed or unterminated.
func refSkipString(data []byte, i int) int {
	n := len(data)
	for {
		// Plain content dominates real bodies, so test eight bytes per
		// step for any of '"', '\\' or < 0x20. Each term below is the
		// classic "has zero/less-than byte" trick; borrows only create
		// false positives above a genuine hit, so the lowest flagged byte
		// is always the first real stop byte and we can jump straight to
		// it without re-testing it through the table.
		if n-i >= 8 {
			w := binary.LittleEndian.Uint64(data[i:])
			q := w ^ (refLSB * '"')
			b := w ^ (refLSB * '\\')
			m := ((q - refLSB) &^ q) | ((b - refLSB) &^ b) | ((w - refLSB*0x20) &^ w)
			m &= refMSB
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < n && !refStrStop[data[i]] {
				i++
			}
			if i >= n {
				return -1
			}
		}
		switch data[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= n {
				return -1
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				// Only the hex digits are checked: encoding/json accepts
				// any code unit here, lone surrogates included.
				if n-i < 6 || !refIsHex[data[i+2]] || !refIsHex[data[i+3]] ||
					!refIsHex[data[i+4]] || !refIsHex[data[i+5]] {
					return -1
				}
				i += 6
			default:
				return -1
			}
		default: // raw control byte
			return -1
		}
	}
}

// skipNumber scans the RFC 8259 number grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? starting at data[i] (which
// is '-' or a digit) and returns the index just past it, or -1. Whatever
// follows is judged by the caller, which is how "01" fails: the number is
// "0" and the stray "1" is not a valid continuation.
func refSkipNumber(data []byte, i int) int {
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
