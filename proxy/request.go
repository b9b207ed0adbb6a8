package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// chatRequest is a decoded client request: the fields the gateway reads and
// the raw body it forwards (with the model replaced by the upstream id).
type chatRequest struct {
	Model  string
	Stream bool
	body   []byte
	// [mStart, mEnd) is the byte range of the top-level "model" value.
	mStart, mEnd int
}

// errBadRequest is a client error with a message for the client.
type errBadRequest struct {
	status int
	code   string
	msg    string
}

func (e *errBadRequest) Error() string { return e.msg }

// readBody reads the request body up to limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &errBadRequest{http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body is %d bytes; the limit is %d", r.ContentLength, limit)}
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	var body []byte
	var err error
	if r.ContentLength > 0 {
		// Exactly its length: the body is kept for the whole request (a
		// bytes.Buffer would add at least 512 bytes of spare room).
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(rd, body)
	} else {
		var buf bytes.Buffer
		_, err = buf.ReadFrom(rd)
		body = buf.Bytes()
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &errBadRequest{http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body exceeds the limit of %d bytes", limit)}
		}
		return nil, &errBadRequest{http.StatusBadRequest, "invalid_request", "reading the request body failed: " + err.Error()}
	}
	return body, nil
}

// parseChatRequest validates a chat completion body: a JSON object with a
// string "model" and, optionally, a boolean "stream".
func parseChatRequest(body []byte) (chatRequest, error) {
	var v struct {
		Model  *string          `json:"model"`
		Stream *json.RawMessage `json:"stream"`
	}
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' {
		return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_request", "the body must be a JSON object"}
	}
	if err := json.Unmarshal(body, &v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_request", fmt.Sprintf("field %q must be a %s", te.Field, jsonKind(te.Type.String()))}
		}
		return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_json", "the body is not valid JSON: " + err.Error()}
	}
	if v.Model == nil || *v.Model == "" {
		return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_model", "field \"model\" is required"}
	}
	req := chatRequest{Model: *v.Model, body: body}
	if v.Stream != nil {
		switch s := string(bytes.TrimSpace(*v.Stream)); s {
		case "true":
			req.Stream = true
		case "false", "null":
		default:
			return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_request", "field \"stream\" must be true or false"}
		}
	}
	s, e, ok := topLevelValue(body, "model")
	if !ok {
		return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_json", "the body is not a valid JSON object"}
	}
	req.mStart, req.mEnd = s, e
	return req, nil
}

func jsonKind(goType string) string {
	switch goType {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	}
	return goType
}

// bodyFor returns the body with "model" set to the upstream model id; the
// original bytes when it already is.
func (r *chatRequest) bodyFor(upstreamModel string) []byte {
	if upstreamModel == r.Model {
		return r.body
	}
	q, _ := marshalString(upstreamModel)
	out := make([]byte, 0, len(r.body)-(r.mEnd-r.mStart)+len(q))
	out = append(out, r.body[:r.mStart]...)
	out = append(out, q...)
	return append(out, r.body[r.mEnd:]...)
}

func marshalString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// topLevelValue returns the byte range of the value of key in a JSON
// object (the last one when the key repeats, as encoding/json decodes it).
// The input must be valid JSON.
func topLevelValue(b []byte, key string) (start, end int, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	i++
	for {
		i = skipWS(b, i)
		if i >= len(b) {
			return start, end, ok
		}
		if b[i] == '}' {
			return start, end, ok
		}
		if b[i] == ',' {
			i++
			continue
		}
		if b[i] != '"' {
			return 0, 0, false
		}
		ks := i
		i = skipString(b, i)
		if i < 0 {
			return 0, 0, false
		}
		k := b[ks:i]
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		i = skipWS(b, i+1)
		vs := i
		i = skipValue(b, i)
		if i < 0 {
			return 0, 0, false
		}
		if keyEquals(k, key) {
			start, end, ok = vs, i, true
		}
	}
}

func keyEquals(raw []byte, key string) bool {
	if len(raw) == len(key)+2 && string(raw[1:len(raw)-1]) == key {
		return true
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == key
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				if i < 0 {
					return -1
				}
				i--
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}
