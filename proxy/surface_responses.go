package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/breakwater-gw/breakwater/internal/wire"
)

// POST /v1/responses (OpenAI Responses API), GET /v1/responses/{id}.
//
// The request is translated to chat (internal/wire) and runs through
// handleChat like every surface. A response the client lets the gateway
// store (store: true, the default) is kept for the retention
// (server.responsesRetentionMs, default 1 h) with its conversation, so a
// later request continues it with previous_response_id, and GET
// /v1/responses/{id} returns it; only the client key that created it can
// read or continue it. With the Postgres store, stored responses are
// shared by every replica (surface_pgstore.go). background: true runs the
// request synchronously
// and says so (X-Breakwater-Warning): the answer is the finished response.

const (
	defaultResponsesRetention = time.Hour
	maxStoredResponses        = 4096
	// maxStoredResponseBytes bounds what the stored responses hold in all
	// (conversations included): the oldest go first.
	maxStoredResponseBytes = 256 << 20
)

// surfaceState is what the surfaces keep between requests. Its zero value
// is ready.
type surfaceState struct {
	mu    sync.Mutex
	resps map[string]*respRecord
	order []string // ids in insertion order (eviction)
	bytes int      // the records' sizes
}

type respRecord struct {
	key     string // the client key id that created it ("" when keys are off)
	turns   []wire.ChatMessage
	object  []byte
	expires time.Time
	size    int // about what it holds (its chat body and object)
}

func (s *surfaceState) putResponse(id string, rec *respRecord, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resps == nil {
		s.resps = map[string]*respRecord{}
	}
	// Drop expired records from the front, then the oldest over the bounds.
	for len(s.order) > 0 {
		old := s.order[0]
		r := s.resps[old]
		if !now.After(r.expires) && len(s.order) < maxStoredResponses && s.bytes+rec.size <= maxStoredResponseBytes {
			break
		}
		s.bytes -= r.size
		delete(s.resps, old)
		s.order = s.order[1:]
	}
	if rec.size > maxStoredResponseBytes {
		return
	}
	s.resps[id] = rec
	s.order = append(s.order, id)
	s.bytes += rec.size
}

func (s *surfaceState) getResponse(id, key string, now time.Time) (*respRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.resps[id]
	if !ok || now.After(r.expires) || r.key != key {
		return nil, false
	}
	return r, true
}

func (g *Gateway) responsesRetention() time.Duration {
	if d := g.conf().Server.ResponsesRetentionMs.Duration(); d > 0 {
		return d
	}
	return defaultResponsesRetention
}

func newResponseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "resp_" + hex.EncodeToString(b[:])
}

// respConv writes the chat answer as a Responses object or event stream.
type respConv struct {
	meta wire.RespMeta
	st   wire.RespStream
	out  *wire.RespOutput // the answer (JSON), for the store
	obj  []byte
	nr   *nativeReq // native pass-through (surface_respnative.go)
}

func (c *respConv) contentType() string { return "application/json" }

func (c *respConv) answer(status int, body []byte) (int, []byte) {
	if status < 200 || status > 299 {
		return status, wire.ChatErrorToResponses(status, body)
	}
	if c.nr != nil && c.nr.native {
		return status, body // the upstream's own Responses object
	}
	o, err := wire.ChatToRespOutput(body)
	if err != nil {
		return http.StatusBadGateway, []byte(`{"error":{"message":"the upstream answer could not be translated into a response","type":"server_error","code":"upstream_error","param":null}}`)
	}
	c.out = o
	c.obj = wire.ResponseObject(&c.meta, o, wire.OutputItems(nil, c.meta.ID, o, "completed"), "", "", "")
	return status, c.obj
}

func (c *respConv) event(dst, data []byte) []byte { return c.st.Event(dst, data) }

func (g *Gateway) handleResponses(w http.ResponseWriter, r *http.Request) {
	refuse := openAIRefuse(w)
	sr, ok := g.surfaceBody(w, r, refuse)
	if !ok {
		return
	}
	body, key := sr.body, keyID(sr.key)
	nr := &nativeReq{body: body} // responsesAPI targets get the body as it came
	sr.nr = nr
	t, err := wire.ResponsesToChat(body)
	var chat []byte
	var re *wire.RequestError
	if errors.As(err, &re) && re.Untranslatable && g.anyResponsesAPI() {
		// Valid, but chat cannot carry it: native targets only.
		t, chat, err = untranslatableResponses(body, re)
		nr.only = re.Error()
	}
	var history []wire.ChatMessage
	if err == nil && t.Req.PreviousResponseID != "" {
		if history, ok = g.previousTurns(w, r, t, nr, key, refuse); !ok {
			return
		}
	}
	if err == nil && chat == nil {
		chat, err = t.Encode(history)
	}
	if err != nil {
		w.Header().Set("X-Breakwater-Attempts", "0")
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	g.logDropped(r, "responses", t.Dropped, body, wire.UnknownResponsesFields)
	conv := &respConv{meta: wire.RespMeta{ID: newResponseID(), Model: t.Req.Model, Created: g.now().Unix(),
		PreviousResponseID: t.Req.PreviousResponseID, Background: t.Req.Background, Instructions: t.Req.Instructions, Req: t.Req}}
	conv.st.Meta = conv.meta
	conv.nr = nr
	if t.Req.Background {
		w.Header().Set("X-Breakwater-Warning", "background mode runs synchronously: this answer is the finished response")
	}
	sr.chat = chat
	g.runAsChat(w, r, sr, conv)
	if !nr.native { // a native answer is the upstream's to store, under its own id
		g.keepResponse(conv, t, history, key, len(chat))
	}
}

// previousTurns is the stored conversation previous_response_id names,
// and which targets may serve the request (nr); ok is false when the
// answer was written (a 400 or a 404).
func (g *Gateway) previousTurns(w http.ResponseWriter, r *http.Request, t *wire.RespTranslation, nr *nativeReq, key string,
	refuse func(int, string)) ([]wire.ChatMessage, bool) {
	prev, found := g.loadResponse(r.Context(), t.Req.PreviousResponseID, key)
	switch {
	case found && nr.only == "":
		nr.noNative = true // the upstream does not know the gateway's ids
		return prev.turns, true
	case found:
		w.Header().Set("X-Breakwater-Attempts", "0")
		refuse(http.StatusBadRequest, "this request needs a native Responses upstream ("+nr.only+
			"), but previous_response_id names a response the gateway stored, which such an upstream does not know")
		return nil, false
	case g.anyResponsesAPI():
		// Not the gateway's: a native upstream's own stored response.
		if nr.only == "" {
			nr.only = "previous_response_id " + t.Req.PreviousResponseID + " is not one the gateway stored"
		}
		return nil, true
	}
	w.Header().Set("X-Breakwater-Attempts", "0")
	writeJSON(w, http.StatusNotFound, errorBody{Error: apiError{Type: "invalid_request_error", Code: "previous_response_not_found",
		Message: "previous response " + t.Req.PreviousResponseID + " was not found (unknown, stored by another key, not stored, or past its retention)"}})
	return nil, false
}

// keepResponse stores a translated answer (JSON or a stream that ended
// well) with its conversation, when the client let the gateway store it.
func (g *Gateway) keepResponse(conv *respConv, t *wire.RespTranslation, history []wire.ChatMessage, key string, chatLen int) {
	out, obj := conv.out, conv.obj
	if conv.st.Done() && !conv.st.Failed() {
		out = conv.st.Output()
		obj = wire.ResponseObject(&conv.meta, out, wire.OutputItems(nil, conv.meta.ID, out, "completed"), "", "", "")
	}
	if out == nil || !t.Store {
		return
	}
	turns := make([]wire.ChatMessage, 0, len(history)+len(t.Input)+1)
	turns = append(append(append(turns, history...), t.Input...), out.Turn())
	g.storeResponse(conv.meta.ID, &respRecord{key: key, turns: turns, object: obj, expires: g.now().Add(g.responsesRetention()),
		size: chatLen + 2*len(obj)})
}

// handleGetResponse serves GET /v1/responses/{id}: a stored response, to
// the client key that created it.
func (g *Gateway) handleGetResponse(w http.ResponseWriter, r *http.Request) {
	id, _ := newRequestID(r)
	w.Header().Set("X-Request-Id", id)
	w.Header().Set("X-Breakwater-Attempts", "0")
	k, ok := g.authClient(r)
	if !ok {
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "missing or invalid API key (Authorization: Bearer <key>)")
		return
	}
	rec, found := g.loadResponse(r.Context(), mux.Vars(r)["id"], keyID(k))
	if !found {
		writeError(w, http.StatusNotFound, "response_not_found", "no stored response with this id for this key (not stored, or past its retention)")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(rec.object)
}

func keyID(k *clientKey) string {
	if k == nil {
		return ""
	}
	return k.id
}
