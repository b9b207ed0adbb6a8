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
	const key = `"delta":{"content":"`
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return nil, false
	}
	start := i + len(key)
	end := bytes.IndexByte(data[start:], '"')
	if end < 0 {
		return nil, false
	}
	text := data[start : start+end]
	rest := data[start+end+1:]
	// The delta must close right after the text, and nothing else in the
	// chunk may need reading: a finish reason, usage, tool calls,
	// reasoning, an error, or a second choice.
	if len(rest) == 0 || rest[0] != '}' || !plainText(text) {
		return nil, false
	}
	for _, k := range fastRejects {
		if bytes.Contains(data, k) {
			return nil, false
		}
	}
	if bytes.Count(data, []byte(`"index":`)) != 1 || !bytes.Contains(data, []byte(`"index":0`)) {
		return nil, false
	}
	if j := bytes.Index(data, []byte(`"finish_reason":`)); j >= 0 && !bytes.HasPrefix(data[j+len(`"finish_reason":`):], []byte("null")) {
		return nil, false
	}
	return text, true
}

var fastRejects = [][]byte{[]byte(`"usage"`), []byte(`"tool_calls"`), []byte(`"reasoning`), []byte(`"error"`), []byte(`"refusal"`)}

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
