package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
	"github.com/breakwater-gw/breakwater/model"
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

// readBody is readBodyWatched with its own hook on the request's context:
// no context interrupts a body read, so a request cut (the shutdown's
// drain ran out) ends its read through the deadline, and is answered.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) ([]byte, error) {
	rc := http.NewResponseController(w)
	stop := context.AfterFunc(r.Context(), func() { _ = rc.SetReadDeadline(time.Now()) })
	defer stop()
	return readBodyWatched(w, r, limit, timeout)
}

// readBodyWatched reads the request body up to limit bytes (413 past it)
// within timeout (408 past it; 0: no bound of its own; the server's
// ReadTimeout when that is no longer, serverBoundsBody), for a caller whose
// own hook cuts the read when the request's context ends (readBody, or a
// chat request's clientWrites). The buffer grows with the bytes that
// arrive, never from the declared Content-Length: a head that declares
// limit bytes and sends one costs what arrived, not limit.
//
// Once the body has been read to its end, net/http clears the deadline and
// watches the connection for the client going away, which cancels the
// request's context. After a failed read the deadline stays and the
// connection closes after the answer.
func readBodyWatched(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) ([]byte, error) {
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		return nil, &errBadRequest{http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body is %d bytes; the limit is %d", r.ContentLength, limit)}
	}
	if timeout > 0 && !serverBoundsBody(r, timeout) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout)) // ErrNotSupported off a real connection: no bound
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	first := min(limit+1, firstBodyBuffer)
	if r.ContentLength >= 0 && r.ContentLength < first {
		// A declared length the first buffer would hold: no larger
		// buffer than the body and the read that finds its end
		// (net/http never reads past a declared length).
		first = r.ContentLength + 1
	}
	body := make([]byte, 0, first)
	for {
		if len(body) == cap(body) {
			// Doubled, up to limit+1: MaxBytesReader reads one byte past
			// the limit to tell that it was passed.
			nb := make([]byte, len(body), min(2*int64(cap(body)), limit+1))
			copy(nb, body)
			body = nb
		}
		n, err := rd.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			w.Header().Set("Connection", "close")
			var mbe *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &mbe):
				return nil, &errBadRequest{http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body exceeds the limit of %d bytes", limit)}
			case errors.As(err, &ne) && ne.Timeout():
				msg := "the request body did not arrive in time"
				if timeout > 0 {
					msg = fmt.Sprintf("the request body did not arrive within %s", timeout)
				}
				return nil, &errBadRequest{http.StatusRequestTimeout, "request_timeout", msg}
			case errors.Is(err, io.ErrUnexpectedEOF):
				// The client closed the connection before its body ended.
				return nil, &errBadRequest{model.CodeClientClosed.HTTPStatus(), string(model.CodeClientClosed), "the client closed the connection before its request body ended"}
			}
			return nil, &errBadRequest{http.StatusBadRequest, "invalid_request", "reading the request body failed: " + err.Error()}
		}
	}
	return body, nil
}

// serverBoundsBody reports whether the server's ReadTimeout already ends
// the body's read within timeout: net/http sets the connection's read
// deadline to the request's first byte plus ReadTimeout once the head is
// in, and clears it once the body has been read to its end, so a
// deadline of the handler's own would cost a timer update per request
// and bound nothing more.
func serverBoundsBody(r *http.Request, timeout time.Duration) bool {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	return srv != nil && srv.ReadTimeout > 0 && srv.ReadTimeout <= timeout
}

// firstBodyBuffer is the body buffer's first size; a chat request body of
// a few hundred bytes fits without growing.
const firstBodyBuffer = 1 << 10

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
		raw := body[ks:ke]
		// Looked for once per member, not once per field: most keys are
		// none of chatFields and have no escape.
		escaped := bytes.IndexByte(raw, '\\') >= 0
		for j, key := range chatFields {
			if plainKeyEquals(raw, key) || escaped && escapedKeyEquals(raw, key) {
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

// plainKeyEquals reports whether the raw JSON key (quotes included) is
// key written without escapes; escapedKeyEquals covers the rest.
func plainKeyEquals(raw []byte, key string) bool {
	return len(raw) == len(key)+2 && string(raw[1:len(raw)-1]) == key
}

// escapedKeyEquals compares a key written with escapes, out of the inlined
// plain comparison's way.
func escapedKeyEquals(raw []byte, key string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == key
}

// clientWrites bounds a write to a client that has stopped reading. Writes
// to a client carry no deadline of their own (a stream runs as long as the
// upstream sends), so a client that keeps its connection open and reads
// nothing blocks the write for good, and with it the attempt's slot, long
// after the watchdogs or the attempt's bound cut the upstream. When the
// attempt's context ends, the client gets grace to take what is pending
// (a stream's error event); a write still blocked then fails, the attempt
// ends as the client's abort, and the slot is freed.
//
// One per request, armed per attempt (attempts run one after another).
// The attempt's own cuts (its clock, the stream watchdogs) call cut; the
// request's context ending (the client gone, the shutdown's cut) reaches
// it through the one context.AfterFunc the request registers, which also
// cuts a body read still in progress and cancels the running attempt
// (whose context then registers nowhere, clockCtx): one hook per request,
// not one per attempt and one per body read.
type clientWrites struct {
	mu      sync.Mutex
	ctx     context.Context // the request's
	w       http.ResponseWriter
	grace   time.Duration
	stop    func() bool             // the request's AfterFunc; nil before watch
	cancel  context.CancelCauseFunc // the running attempt's; nil between attempts
	reading bool                    // the body is being read
	armed   bool                    // an attempt is running
	fired   bool                    // its write deadline was set
	ended   bool                    // the request's context ended
	over    bool                    // the handler returned: the connection is not ours
}

// watch hooks the request's end, which cuts a body read (no context
// interrupts it: a request cut by the shutdown's drain ends its read
// through the deadline, and is answered) and a running attempt's writes.
func (c *clientWrites) watch(ctx context.Context, w http.ResponseWriter, grace time.Duration) {
	c.ctx, c.w, c.grace = ctx, w, grace
	c.stop = context.AfterFunc(ctx, c.requestEnded)
}

// watching reports whether the request's end reaches its attempts through
// requestEnded (set once, before the first attempt, on the request's
// goroutine).
func (c *clientWrites) watching() bool { return c.stop != nil }

func (c *clientWrites) requestEnded() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return
	}
	c.ended = true
	if c.reading {
		_ = http.NewResponseController(c.w).SetReadDeadline(time.Now())
	}
	c.endAttemptLocked()
}

// endAttemptLocked cancels the running attempt with the request's cause,
// as a context under the request's would be, and gives the client grace.
func (c *clientWrites) endAttemptLocked() {
	if c.cancel != nil {
		c.cancel(context.Cause(c.ctx))
	}
	c.cutLocked()
}

// setReading says whether the body is being read.
func (c *clientWrites) setReading(on bool) {
	c.mu.Lock()
	c.reading = on
	c.mu.Unlock()
}

// release ends the watch when the handler returns. A requestEnded already
// started holds the mutex until it is done; one that starts later finds
// the request over and leaves the connection alone.
func (c *clientWrites) release() {
	if c.stop != nil {
		c.stop()
	}
	c.mu.Lock()
	c.over = true
	c.mu.Unlock()
}

// begin arms the watch for one attempt (cancel ends its context); one
// begun after the request's context ended is cancelled and cut at once.
func (c *clientWrites) begin(cancel context.CancelCauseFunc) {
	c.mu.Lock()
	c.armed, c.fired, c.cancel = true, false, cancel
	if c.ended || (c.ctx != nil && c.ctx.Err() != nil) {
		c.endAttemptLocked()
	}
	c.mu.Unlock()
}

// cut gives the client grace to take what is pending: the attempt's
// context ended.
func (c *clientWrites) cut() {
	c.mu.Lock()
	c.cutLocked()
	c.mu.Unlock()
}

func (c *clientWrites) cutLocked() {
	if !c.armed || c.fired {
		return
	}
	c.fired = true
	_ = http.NewResponseController(c.w).SetWriteDeadline(time.Now().Add(c.grace))
}

// end runs once the attempt's writes are done, before its context is
// cancelled as every attempt's is. When the deadline was set and the
// client took what was written, it is cleared for the rest of the request
// (a retry may stream for longer than the grace); when the client did not
// (gone, or the flush fails), it stays. net/http clears it when the
// request is over, and does not reuse a connection a write failed on.
func (c *clientWrites) end(committed, gone bool) {
	c.mu.Lock()
	fired := c.fired
	c.armed, c.fired, c.cancel = false, false, nil
	c.mu.Unlock()
	if !fired {
		return
	}
	rc := http.NewResponseController(c.w)
	if gone || (committed && rc.Flush() != nil) {
		return
	}
	_ = rc.SetWriteDeadline(time.Time{})
}
