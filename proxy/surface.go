package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/gorilla/mux"

	"github.com/breakwater-gw/breakwater/internal/wire"
)

// Client surfaces besides chat completions (docs/surfaces.md). Each one
// translates the client's request into a chat completion request
// (internal/wire) and runs it through handleChat, so every surface gets
// the same model.Flow — classification, cooldowns, lockouts, breaker,
// waits, budgets, affinity, leases, admission — and the same provider
// adapters. What handleChat writes (chat JSON, chat SSE, OpenAI-shaped
// errors) passes through a surfaceWriter that translates it back into the
// client's own format: JSON answers and errors when the handler is done,
// stream events one by one as they are written (never buffered past the
// event being translated).

// surfaceRoutes adds the non-chat client surfaces to the router.
func (g *Gateway) surfaceRoutes(r *mux.Router) {
	r.HandleFunc("/v1/messages", g.handleMessages).Methods(http.MethodPost)
	r.HandleFunc("/v1/messages/count_tokens", g.handleCountTokens).Methods(http.MethodPost)
	r.HandleFunc(embeddingsPath, g.handleEmbeddings).Methods(http.MethodPost)
	r.HandleFunc("/v1/responses", g.handleResponses).Methods(http.MethodPost)
	r.HandleFunc("/v1/responses/{id}", g.handleGetResponse).Methods(http.MethodGet)
}

// surfaceConv is one client format's side of a surfaceWriter.
type surfaceConv interface {
	// answer translates a whole non-stream answer (a chat completion on
	// 2xx, an OpenAI-shaped error otherwise) into the client's status and
	// body.
	answer(status int, body []byte) (int, []byte)
	// event appends the client's events for one chat SSE event's data.
	event(dst, data []byte) []byte
	// contentType of a translated non-stream answer.
	contentType() string
}

// surfaceWriter translates what handleChat writes into a client format.
// Headers (X-Request-Id, X-Breakwater-*, Retry-After) go through as set.
type surfaceWriter struct {
	w      http.ResponseWriter
	conv   surfaceConv
	status int
	sse    bool
	body   []byte // JSON mode: the whole answer
	line   []byte // SSE mode: a partial line
	name   []byte // SSE mode: the current event's name
	data   []byte // SSE mode: the current event's data
	out    []byte
	err    error
}

func (s *surfaceWriter) Header() http.Header { return s.w.Header() }

func (s *surfaceWriter) WriteHeader(code int) {
	if s.status != 0 {
		return
	}
	s.status = code
	if strings.HasPrefix(headerValue(s.w.Header(), "Content-Type"), "text/event-stream") {
		s.sse = true
		s.w.WriteHeader(code)
	}
}

func (s *surfaceWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	if !s.sse {
		s.body = append(s.body, p...)
		return len(p), nil
	}
	if s.err != nil {
		return 0, s.err
	}
	s.feed(p)
	if len(s.out) > 0 {
		_, s.err = s.w.Write(s.out)
		s.out = s.out[:0]
	}
	return len(p), s.err
}

var resumeCommentPrefix = []byte(": " + ResumeComment + " ")

// feed reads SSE lines: data lines make up an event, an empty line ends
// it; event names, ids and comments of the chat stream mean nothing to
// the client's format.
func (s *surfaceWriter) feed(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.line = append(s.line, p...)
			return
		}
		line := p[:i]
		if len(s.line) > 0 {
			s.line = append(s.line, line...)
			line = s.line
		}
		p = p[i+1:]
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			if len(s.data) > 0 {
				s.dispatch()
			}
			s.name = s.name[:0]
		} else if n, ok := bytes.CutPrefix(line, []byte("event:")); ok {
			s.name = append(s.name[:0], bytes.TrimSpace(n)...)
		} else if bytes.HasPrefix(line, resumeCommentPrefix) {
			// Who continued a resumed stream: a comment every SSE client
			// skips, kept for the replay (and a curious operator).
			s.out = append(append(s.out, line...), '\n', '\n')
		} else if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(s.data) > 0 {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, bytes.TrimPrefix(d, []byte{' '})...)
		}
		s.line = s.line[:0]
	}
}

// dispatch translates one whole event: raw when the format's conv passes
// it through (a native answer), else from its chat data.
func (s *surfaceWriter) dispatch() {
	if rc, ok := s.conv.(rawConv); ok {
		if out, done := rc.rawEvent(s.out, s.name, s.data); done {
			s.out, s.data = out, s.data[:0]
			return
		}
	}
	s.out = s.conv.event(s.out, s.data)
	s.data = s.data[:0]
}

// rawConv is a surfaceConv that may pass a native answer's events through.
type rawConv interface {
	rawEvent(dst, name, data []byte) ([]byte, bool)
}

func (s *surfaceWriter) Flush() {
	if f, ok := s.w.(http.Flusher); ok && s.sse {
		f.Flush()
	}
}

// finish writes a non-stream answer, translated.
func (s *surfaceWriter) finish() {
	if s.sse || s.status == 0 {
		return
	}
	status, body := s.conv.answer(s.status, s.body)
	h := s.w.Header()
	h.Set("Content-Type", s.conv.contentType())
	h.Set("Content-Length", strconv.Itoa(len(body)))
	s.w.WriteHeader(status)
	s.w.Write(body)
}

// surfaceReq is a surface request as far as the surface took it: the
// request id and the client key (also on what the surface answers
// itself: handleChat sets the same id, the client's X-Request-Id when it
// sent one), the client's body, and what the chat pipeline takes over
// from it (serveChat): the translated chat body and the native
// pass-through state, so that nothing is made, checked or read twice.
type surfaceReq struct {
	id, logID string
	key       *clientKey
	body      []byte     // the client's body
	chat      []byte     // the chat request the pipeline parses
	nr        *nativeReq // Messages and Responses: the native pass-through (surface_native.go)
}

// surfaceBody is the start every surface shares: the request id, the
// client's key from Authorization or x-api-key, and the body. ok is false
// when the answer was written (refuse writes it in the client's format).
func (g *Gateway) surfaceBody(w http.ResponseWriter, r *http.Request, refuse func(status int, msg string)) (*surfaceReq, bool) {
	sr := &surfaceReq{}
	sr.id, sr.logID = newRequestID(r)
	h := w.Header()
	h.Set("X-Request-Id", sr.id)
	key, ok := g.authClient(r)
	if !ok {
		h.Set("X-Breakwater-Attempts", "0")
		refuse(http.StatusUnauthorized, "missing or invalid API key (x-api-key: <key> or Authorization: Bearer <key>)")
		return nil, false
	}
	sr.key = key
	body, err := readBody(w, r, g.maxBodyBytes(), g.bodyReadTimeout)
	if err != nil {
		h.Set("X-Breakwater-Attempts", "0")
		status := http.StatusBadRequest
		if be, ok := err.(*errBadRequest); ok {
			status = be.status
		}
		refuse(status, err.Error())
		return nil, false
	}
	sr.body = body
	return sr, true
}

// clientToken is the client key a request carries: Authorization:
// Bearer, else x-api-key (Anthropic's header), on every client endpoint —
// chat completions included, which Anthropic clients pointed at an
// OpenAI endpoint call with the header their SDK sends.
func clientToken(r *http.Request) (string, bool) {
	if tok, ok := bearer(r); ok || headerValue(r.Header, "Authorization") != "" {
		return tok, ok
	}
	k := strings.TrimSpace(headerValue(r.Header, "X-Api-Key"))
	return k, k != ""
}

// runAsChat runs a translated request (sr.chat) through the chat
// pipeline and writes its answer through conv.
func (g *Gateway) runAsChat(w http.ResponseWriter, r *http.Request, sr *surfaceReq, conv surfaceConv) {
	sw := surfaceWriters.Get().(*surfaceWriter)
	sw.w, sw.conv = w, conv
	g.serveChat(sw, r, sr)
	sw.finish()
	sw.release()
}

// surfaceWriters keeps surfaceWriters with their SSE buffers: a stream's
// first write translates a few events at once (message_start, ping, the
// first block's start and delta), and buffers grown from nothing for it
// cost an allocation per doubling on the way to the first content.
var surfaceWriters = sync.Pool{New: func() any {
	return &surfaceWriter{out: make([]byte, 0, 4096), data: make([]byte, 0, 1024)}
}}

// maxPooledSSE bounds the buffers a pooled surfaceWriter keeps: one that
// grew for a large event goes.
const maxPooledSSE = 64 << 10

// release returns s to surfaceWriters, done with its request (nothing
// writes through it after serveChat returns).
func (s *surfaceWriter) release() {
	if cap(s.out) > maxPooledSSE || cap(s.data) > maxPooledSSE || cap(s.line) > maxPooledSSE {
		return
	}
	*s = surfaceWriter{out: s.out[:0], data: s.data[:0], line: s.line[:0], name: s.name[:0]}
	surfaceWriters.Put(s)
}

// logDropped notes, at debug level, request fields the translation could
// not carry to a chat request.
func (g *Gateway) logDropped(r *http.Request, surface string, dropped []string, body []byte, unknown func([]byte) []string) {
	if !g.log.Enabled(r.Context(), slog.LevelDebug) {
		return
	}
	dropped = append(dropped, unknown(body)...)
	if len(dropped) > 0 {
		g.log.Debug("request fields dropped by the translation", "surface", surface, "fields", strings.Join(dropped, ","))
	}
}

// ---- Anthropic Messages ----

type msgConv struct {
	model string
	st    wire.MsgStream
	nr    *nativeReq // native pass-through (surface_native.go)
}

func (c *msgConv) contentType() string { return "application/json" }

func (c *msgConv) answer(status int, body []byte) (int, []byte) {
	if status >= 200 && status < 300 {
		if c.nr != nil && c.nr.native {
			return status, body // the anthropic target's own answer
		}
		if out, err := wire.ChatToMessages(body, c.model); err == nil {
			return status, out
		}
		return http.StatusBadGateway, wire.MsgError("api_error", "the upstream answer could not be translated into a message")
	}
	return wire.ChatErrorToMessages(status, body)
}

func (c *msgConv) event(dst, data []byte) []byte { return c.st.Event(dst, data) }

// msgRefuse writes an Anthropic error of the gateway itself.
func msgRefuse(w http.ResponseWriter) func(int, string) {
	return func(status int, msg string) {
		typ, st := wire.MsgErrorType(status)
		b := wire.MsgError(typ, msg)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(st)
		w.Write(b)
	}
}

// handleMessages serves POST /v1/messages (Anthropic Messages API).
func (g *Gateway) handleMessages(w http.ResponseWriter, r *http.Request) {
	refuse := msgRefuse(w)
	sr, ok := g.surfaceBody(w, r, refuse)
	if !ok {
		return
	}
	body := sr.body
	t, err := wire.MessagesToChat(body)
	var re *wire.RequestError
	if errors.As(err, &re) && re.Untranslatable {
		// Valid, but chat cannot carry it: anthropic-type targets serve it
		// natively, the others are passed over (surface_native.go).
		t, err = untranslatableMessages(body, re)
	}
	if err != nil {
		w.Header().Set("X-Breakwater-Attempts", "0")
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	g.logDropped(r, "messages", t.Dropped, body, wire.UnknownMessagesFields)
	sr.nr = &nativeReq{body: body} // anthropic-type targets get the body as it came
	if re != nil && re.Untranslatable {
		sr.nr.only = re.Error()
	}
	sr.chat = t.Chat
	conv := &msgConv{model: t.Model, nr: sr.nr}
	conv.st.Model, conv.st.InputEstimate = t.Model, t.InputEstimate
	g.runAsChat(w, r, sr, conv)
}

// handleCountTokens serves POST /v1/messages/count_tokens: an
// anthropic-type target's own count (surface_count.go), else the
// gateway's estimate (wire.EstimateTokens), told apart by
// X-Breakwater-Token-Count (upstream or estimate).
func (g *Gateway) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	refuse := msgRefuse(w)
	sr, ok := g.surfaceBody(w, r, refuse)
	if !ok {
		return
	}
	body, key := sr.body, sr.key
	h := w.Header()
	h.Set("X-Breakwater-Attempts", "0")
	n, err := wire.EstimateTokens(body)
	if err != nil {
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	var m struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &m)
	if b, prov, ok := g.countUpstream(r.Context(), r, key, body, m.Model); ok {
		h.Set("X-Breakwater-Attempts", "1")
		h.Set("X-Breakwater-Provider", prov)
		h.Set("X-Breakwater-Token-Count", "upstream")
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		w.Write(b)
		return
	}
	h.Set("X-Breakwater-Token-Count", "estimate")
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": n})
}
