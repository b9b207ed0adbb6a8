// Package jsonstr writes JSON strings without encoding/json: the gateway's
// wire translations and the simulator's trace both write every string
// they emit through it, so the two escape text the same way.
package jsonstr

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// plain marks the bytes written as they are: printable ASCII but the
// quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Append appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 as U+FFFD, so it decodes to what
// encoding/json's encoding of s decodes to. Unlike encoding/json it writes
// every control character but \n, \r and \t as \u00XX, and <, >, &,
// U+2028 and U+2029 as they are.
func Append[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// A run of bytes that mean themselves (most of any text) is
		// stepped over with one table look each, and copied at once.
		for i < len(s) && plain[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		var buf [utf8.UTFMax]byte
		r, size := utf8.DecodeRune(buf[:copy(buf[:], s[i:])])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
