package wire

import (
	"bytes"
	"encoding/json"
	"iter"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/breakwater-gw/breakwater/internal/jsonstr"
	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
)

// A small reader over a body that jsonvalid.Valid has accepted: the
// translations find their fields by walking the bytes once and keep every
// value as a slice of the body (strings as their quoted tokens), so a
// request costs one validation pass and one walk, with no reflection and
// no intermediate maps. Values a translation passes through unchanged
// (schemas, tool inputs, numbers, plain strings) are copied as they are.
//
// Every function here assumes validated input: the walk never checks the
// grammar, only stays inside the slice.

// checkBody validates body as one JSON object; the error names what is
// wrong the way encoding/json would.
func checkBody(body []byte) error {
	if firstByte(body) != '{' {
		return reqErr("", "the body must be a JSON object")
	}
	if !jsonvalid.Valid(body) {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return reqErr("", "the body is not valid JSON: %v", err)
		}
		return reqErr("", "the body is not valid JSON")
	}
	return nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// skipStr returns the index just past the string whose content starts at i.
func skipStr(b []byte, i int) int {
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		k := q - 1
		for k >= i && b[k] == '\\' {
			k--
		}
		if (q-1-k)%2 == 0 { // an even run of backslashes: the quote ends the string
			return q + 1
		}
		i = q + 1
	}
	return len(b)
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return skipStr(b, i+1)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipStr(b, i+1)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\n', '\t', '\r':
			return i
		}
		i++
	}
	return i
}

// cursor walks the members of an object or the elements of an array.
type cursor struct {
	b []byte
	i int
}

func newIter(v []byte) cursor { return cursor{b: v, i: 1} }

// members ranges over an object's members: key (its content, escapes as
// written) and value.
func members(obj []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func(k, v []byte) bool) {
		it := newIter(obj)
		for k, v, ok := it.next(); ok; k, v, ok = it.next() {
			if !yield(k, v) {
				return
			}
		}
	}
}

// elements ranges over an array's elements with their index.
func elements(arr []byte) iter.Seq2[int, []byte] {
	return func(yield func(i int, v []byte) bool) {
		it := newIter(arr)
		for i := 0; ; i++ {
			_, v, ok := it.next()
			if !ok || !yield(i, v) {
				return
			}
		}
	}
}

// next returns the next member's key (its content, escapes as written;
// nil in an array) and value.
func (it *cursor) next() (key, val []byte, ok bool) {
	b := it.b
	i := skipWS(b, it.i)
	if i < len(b) && b[i] == ',' {
		i = skipWS(b, i+1)
	}
	if i >= len(b) || b[i] == '}' || b[i] == ']' {
		it.i = len(b)
		return nil, nil, false
	}
	if b[0] == '{' {
		ke := skipStr(b, i+1)
		if ke-1 < i+1 {
			it.i = len(b)
			return nil, nil, false
		}
		key = b[i+1 : ke-1]
		i = skipWS(b, ke)
		i = skipWS(b, i+1) // past ':'
	}
	ve := skipValue(b, i)
	it.i = ve
	return key, b[i:ve], true
}

// kindName names a value's JSON type for an error message.
func kindName(v []byte) string {
	switch firstByte(v) {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func typeErr(field, want string, v []byte) *RequestError {
	return reqErr(field, "must be %s (got %s)", want, kindName(v))
}

// fld names a field lazily: paths such as messages[3].content[1] are
// only built for an error.
type fld func() string

// at is the field's path with sfx appended (sfx alone for a nil fld).
func (p fld) at(sfx string) string {
	if p == nil {
		return sfx
	}
	return p() + sfx
}

// strTok checks that v is a string (or null: nil) and returns its token.
func strTok(v []byte, p fld, sfx string) ([]byte, error) {
	switch firstByte(v) {
	case '"':
		return v, nil
	case 'n':
		return nil, nil
	}
	return nil, typeErr(p.at(sfx), "a string", v)
}

// objTok checks that v is an object (or null: nil).
func objTok(v []byte, p fld, sfx string) ([]byte, error) {
	switch firstByte(v) {
	case '{':
		return v, nil
	case 'n':
		return nil, nil
	}
	return nil, typeErr(p.at(sfx), "an object", v)
}

// arrTok checks that v is an array (or null: nil).
func arrTok(v []byte, p fld, sfx string) ([]byte, error) {
	switch firstByte(v) {
	case '[':
		return v, nil
	case 'n':
		return nil, nil
	}
	return nil, typeErr(p.at(sfx), "an array", v)
}

// numTok checks that v is a number (or null: nil).
func numTok(v []byte, p fld, sfx string) ([]byte, error) {
	c := firstByte(v)
	switch {
	case c == '-' || c >= '0' && c <= '9':
		return v, nil
	case c == 'n':
		return nil, nil
	}
	return nil, typeErr(p.at(sfx), "a number", v)
}

// intVal reads an integer (present is false for null).
func intVal(v []byte, p fld, sfx string) (n int, present bool, err error) {
	tok, err := numTok(v, p, sfx)
	if err != nil || tok == nil {
		return 0, false, err
	}
	n, perr := strconv.Atoi(string(tok))
	if perr != nil {
		return 0, false, reqErr(p.at(sfx), "must be an integer")
	}
	return n, true, nil
}

// boolVal reads a boolean (present is false for null).
func boolVal(v []byte, p fld, sfx string) (val, present bool, err error) {
	switch firstByte(v) {
	case 't':
		return true, true, nil
	case 'f':
		return false, true, nil
	case 'n':
		return false, false, nil
	}
	return false, false, typeErr(p.at(sfx), "a boolean", v)
}

// plainTok reports whether a string token means its bytes as written:
// no escapes and valid UTF-8.
func plainTok(tok []byte) bool {
	c := tok[1 : len(tok)-1]
	if bytes.IndexByte(c, '\\') >= 0 {
		return false
	}
	for _, x := range c {
		if x >= utf8.RuneSelf {
			return utf8.Valid(c)
		}
	}
	return true
}

// tokIs reports whether the string token tok (quotes included) is s.
func tokIs(tok []byte, s string) bool {
	return len(tok) == len(s)+2 && string(tok[1:len(tok)-1]) == s
}

// unquote appends the text of the string token tok to dst, decoding
// escapes; invalid UTF-8 and lone surrogates become U+FFFD, as
// encoding/json decodes them.
func unquote(dst, tok []byte) []byte {
	if len(tok) < 2 {
		return dst
	}
	s := tok[1 : len(tok)-1]
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			if c < utf8.RuneSelf {
				dst = append(dst, c)
				i++
				continue
			}
			r, size := utf8.DecodeRune(s[i:])
			dst = utf8.AppendRune(dst, r)
			i += size
			continue
		}
		if i+1 >= len(s) {
			break
		}
		switch s[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(s[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if r2 := utf16.DecodeRune(r, hex4(s[i+2:])); r2 != utf8.RuneError {
						dst = utf8.AppendRune(dst, r2)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // " \ /
			dst = append(dst, s[i+1])
		}
		i += 2
	}
	return dst
}

func hex4(b []byte) rune {
	if len(b) < 4 {
		return utf8.RuneError
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// str is the text of a string token ("" for nil).
func str(tok []byte) string {
	if len(tok) < 2 {
		return ""
	}
	if plainTok(tok) {
		return string(tok[1 : len(tok)-1])
	}
	return string(unquote(nil, tok))
}

// appendTok appends a string token as a JSON string: as written when it
// is plain, re-encoded otherwise.
func appendTok(dst, tok []byte) []byte {
	if len(tok) < 2 {
		return append(dst, `""`...)
	}
	if utf8.Valid(tok) { // escapes are valid as written
		return append(dst, tok...)
	}
	return appendJSONBytes(dst, unquote(nil, tok))
}

// appendTokText appends the content of a string token inside a JSON
// string being written (no quotes).
func appendTokText(dst, tok []byte) []byte {
	if len(tok) < 2 {
		return dst
	}
	if utf8.Valid(tok) {
		return append(dst, tok[1:len(tok)-1]...)
	}
	b := appendJSONBytes(nil, unquote(nil, tok))
	return append(dst, b[1:len(b)-1]...)
}

// appendJSONBytes appends s as a JSON string (internal/jsonstr).
func appendJSONBytes[T string | []byte](dst []byte, s T) []byte { return jsonstr.Append(dst, s) }
