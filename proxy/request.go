package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
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
// string "model", optionally a boolean "stream" and an array "messages".
//
// The keys are matched exactly, as the OpenAI API and every upstream read
// them, and as bodyFor splices "model": encoding/json's case-insensitive
// field matching would route {"model":"a","Model":"b"} to b while the
// upstream is sent a, and take "Stream": true for a stream the upstream
// never starts. For the same reason a repeated "model", "stream" or
// "messages" is refused: the gateway would route on one copy while an
// upstream that reads the first key acts on the other.
func parseChatRequest(body []byte) (chatRequest, error) {
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' {
		return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_request", "the body must be a JSON object"}
	}
	// One pass validates the body and finds the fields.
	var f [len(chatFields)]valueRange
	dup := -1
	valid := jsonvalid.Members(body, func(ks, ke, vs, ve int) {
		for j, key := range chatFields {
			if keyEquals(body[ks:ke], key) {
				if f[j].ok {
					dup = j
				}
				f[j] = valueRange{start: vs, end: ve, ok: true, src: body}
			}
		}
	})
	if !valid {
		var v struct{}
		err := json.Unmarshal(body, &v)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_json", "the body is not valid JSON: " + err.Error()}
	}
	if dup >= 0 {
		return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_request", fmt.Sprintf("field %q appears more than once", chatFields[dup])}
	}
	m, st, msgs := f[0], f[1], f[2]
	if !m.ok || m.is("null") || m.is(`""`) {
		return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_model", "field \"model\" is required"}
	}
	if body[m.start] != '"' {
		return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_request", "field \"model\" must be a string"}
	}
	req := chatRequest{body: body, mStart: m.start, mEnd: m.end}
	raw := body[m.start:m.end]
	if bytes.IndexByte(raw, '\\') < 0 {
		req.Model = string(raw[1 : len(raw)-1])
	} else {
		var name string // not &req.Model: that would move all of req to the heap
		if err := json.Unmarshal(raw, &name); err != nil {
			return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_request", "field \"model\" must be a string"}
		}
		req.Model = name
	}
	if st.ok {
		switch {
		case st.is("true"):
			req.Stream = true
		case st.is("false"), st.is("null"):
		default:
			return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_request", "field \"stream\" must be true or false"}
		}
	}
	if msgs.ok && body[msgs.start] != '[' {
		return chatRequest{}, &errBadRequest{http.StatusBadRequest, "invalid_request", "field \"messages\" must be an array"}
	}
	return req, nil
}

// chatFields are the top-level keys parseChatRequest reads, in the order
// of its valueRange array.
var chatFields = [...]string{"model", "stream", "messages"}

// valueRange is the byte range [start, end) of a JSON value in a body.
type valueRange struct {
	start, end int
	ok         bool
	src        []byte
}

func (v valueRange) is(lit string) bool { return v.ok && string(v.src[v.start:v.end]) == lit }

// bodyFor returns the body with "model" set to the upstream model id; the
// original bytes when it already is.
func (r *chatRequest) bodyFor(upstreamModel string) []byte {
	if upstreamModel == r.Model {
		return r.body
	}
	out := make([]byte, 0, len(r.body)-(r.mEnd-r.mStart)+len(upstreamModel)+2)
	out = append(out, r.body[:r.mStart]...)
	out = appendJSONString(out, upstreamModel)
	return append(out, r.body[r.mEnd:]...)
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
