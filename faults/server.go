package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is a fake OpenAI-compatible upstream whose answers come from a
// rule list. It serves, for any provider id P:
//
//	POST /P/v1/chat/completions   (JSON, and SSE with "stream": true)
//	GET  /P/v1/models
//	POST /v1/chat/completions     (provider "")
//	GET  /v1/models
//
// and the same attempts in the native formats of the anthropic and gemini
// provider types (see wire.go), so a provider of any type is pointed at it
// the same way:
//
//	POST /P/v1/messages                                (Anthropic Messages)
//	POST /P/v1/models/{model}:generateContent          (Gemini)
//	POST /P/v1/models/{model}:streamGenerateContent    (Gemini, SSE)
//	POST /P/v1/responses                               (OpenAI Responses, JSON or SSE)
//	POST /P/v1/embeddings                              (OpenAI embeddings, faults/embed.go)
//	POST /P/v1/models/{model}:batchEmbedContents       (Gemini embeddings)
//	POST /P/v1/messages/count_tokens                   (Anthropic token count)
//
// so a gateway provider is pointed at it with baseURL http://ADDR/P/v1. The
// connection is the API key: `Authorization: Bearer <connection>` (or the
// `x-api-key` or `x-goog-api-key` header), so each gateway connection sends its own id as its
// key. The model comes from the request body.
//
// The control API changes behaviour at run time:
//
//	GET    /_faults    the rules, as JSON the PUT accepts
//	PUT    /_faults    replace the rules (YAML or JSON: a list, or {rules: [...]},
//	                   or a whole scenario file); restarts the rule clock and
//	                   the sequence counters unless ?keepClock=true
//	DELETE /_faults    no rules (every attempt gets 200 OK)
//	GET    /_stats     attempts answered, by provider/connection and outcome
//	DELETE /_stats     zero the counters
//	GET    /_catalog   the named behaviours
//
// Rule windows are offsets from the rule clock's start, multiplied by
// Options.Speed; latencies and stalls are divided by it.
type Server struct {
	opts Options
	mux  *http.ServeMux

	mu     sync.Mutex
	picker *Picker
	epoch  time.Time
	rng    *rand.Rand
	stats  Stats
}

// Options configure a Server.
type Options struct {
	// Speed divides every duration (latency, stalls, intervals) and
	// multiplies elapsed time for rule windows; 0 means 1.
	Speed float64
	// MaxHold bounds how long a `timeout` fault or an endless stall holds a
	// connection open (real time; default 2 minutes).
	MaxHold time.Duration
	// Seed seeds jitter and rule probabilities.
	Seed uint64
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Models answers GET /v1/models (default: the models the rules name, or
	// "fault-model").
	Models []string
	// Logger logs one line per attempt at debug level (default: discard).
	Logger *slog.Logger
	// Waiting, when set, is told +1 as the upstream starts waiting on
	// purpose (a latency, a chunk interval, a stall, a hold) and -1 as the
	// wait ends, with the request's context and the wait's length (0 as it
	// ends): a replay's clock lets time pass only then, as the simulator
	// does, and a replay's state read knows which waits end by its instant.
	// At +1 it returns the instant on Now's clock the wait is due at (the
	// zero time: none): a wait whose real timer runs out before Now has
	// reached that instant goes on until it has, so the wait ends on the
	// replay's clock, after every instant the simulator puts before it,
	// however late a loaded machine let the replay dispatch those.
	Waiting func(ctx context.Context, delta int, d time.Duration) (due time.Time)
}

// Stats counts answered attempts.
type Stats struct {
	Total int `json:"total"`
	// ByConnection maps "provider/connection" to outcome → count; the
	// outcome is the status ("200", "503") or the fault ("reset", "cut").
	ByConnection map[string]map[string]int `json:"byConnection"`
}

// NewServer returns a server answering from rules.
func NewServer(rules []Rule, opts Options) *Server {
	if opts.Speed <= 0 {
		opts.Speed = 1
	}
	if opts.MaxHold <= 0 {
		opts.MaxHold = 2 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, 0x6661756c7473))}
	s.SetRules(rules, false)
	s.stats = Stats{ByConnection: map[string]map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /{provider}/v1/chat/completions", s.chat)
	mux.HandleFunc("POST /v1/messages", s.messages)
	mux.HandleFunc("POST /{provider}/v1/messages", s.messages)
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("POST /{provider}/v1/responses", s.responses)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.countTokens)
	mux.HandleFunc("POST /{provider}/v1/messages/count_tokens", s.countTokens)
	mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	mux.HandleFunc("POST /{provider}/v1/embeddings", s.embeddings)
	mux.HandleFunc("POST /v1/models/{action}", s.generate)
	mux.HandleFunc("POST /{provider}/v1/models/{action}", s.generate)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /{provider}/v1/models", s.models)
	mux.HandleFunc("GET /_faults", s.getFaults)
	mux.HandleFunc("PUT /_faults", s.putFaults)
	mux.HandleFunc("DELETE /_faults", s.deleteFaults)
	mux.HandleFunc("GET /_stats", s.getStats)
	mux.HandleFunc("DELETE /_stats", s.deleteStats)
	mux.HandleFunc("GET /_catalog", s.getCatalog)
	s.mux = mux
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// SetRules replaces the rules. Unless keepClock, the rule clock restarts
// now and sequences start over.
func (s *Server) SetRules(rules []Rule, keepClock bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.picker = NewPicker(rules)
	if !keepClock || s.epoch.IsZero() {
		s.epoch = s.opts.Now()
	}
}

// Rules returns the current rules.
func (s *Server) Rules() []Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.picker.Rules()
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{Total: s.stats.Total, ByConnection: map[string]map[string]int{}}
	for k, m := range s.stats.ByConnection {
		c := map[string]int{}
		for o, n := range m {
			c[o] = n
		}
		out.ByConnection[k] = c
	}
	return out
}

func (s *Server) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) / s.opts.Speed)
}

// pick chooses the response of one attempt and counts it.
func (s *Server) pick(provider, conn, model string) Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := time.Duration(float64(s.opts.Now().Sub(s.epoch)) * s.opts.Speed)
	r, _ := s.picker.Pick(at, provider, conn, model, s.rng.Float64)
	out := r.Clone()
	if out.Jitter > 0 {
		out.Latency += time.Duration(s.rng.Int64N(int64(out.Jitter)))
	}
	key := provider + "/" + conn
	m := s.stats.ByConnection[key]
	if m == nil {
		m = map[string]int{}
		s.stats.ByConnection[key] = m
	}
	label := strconv.Itoa(out.StatusOrOK())
	if out.Fault != None {
		label = out.Fault.String()
	}
	m[label]++
	s.stats.Total++
	return out
}

// connectionOf reads the connection id from the API key.
func connectionOf(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		if k, ok := strings.CutPrefix(a, "Bearer "); ok {
			return strings.TrimSpace(k)
		}
		return strings.TrimSpace(a)
	}
	if k := r.Header.Get("X-Goog-Api-Key"); k != "" {
		return strings.TrimSpace(k)
	}
	return strings.TrimSpace(r.Header.Get("X-Api-Key"))
}

type chatRequest struct {
	Model    string        `json:"model"`
	Stream   bool          `json:"stream"`
	Messages []chatMessage `json:"messages"`
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	body, err := readJSON(r, &req)
	if err != nil {
		writeError(w, 400, openaiWire{}.invalid("invalid request: body must be a JSON chat completion request"), nil)
		return
	}
	s.attempt(w, withShape(r, body), openaiWire{}, req.Model, req.Stream, prefillOf(req.Messages))
}

// readJSON reads a request body of at most 4 MiB and, unless v is nil,
// decodes it into v.
func readJSON(r *http.Request, v any) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err == nil && v != nil {
		err = json.Unmarshal(body, v)
	}
	return body, err
}

// attempt picks and serves one chat attempt in a wire format; pre is the
// request's trailing assistant message, if any (faults/prefill.go).
func (s *Server) attempt(w http.ResponseWriter, r *http.Request, wf wire, model string, stream bool, pre prefill) {
	provider := r.PathValue("provider")
	conn := connectionOf(r)
	resp := s.pick(provider, conn, model)
	s.opts.Logger.Debug("fault upstream attempt", "provider", provider, "connection", conn, "model", model,
		"status", resp.StatusOrOK(), "fault", resp.Fault.String(), "use", resp.Use)
	if refused := applyPrefill(w, wf, &resp, &pre); refused {
		return
	}
	s.serve(w, r, wf, &resp, model, stream, pre)
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	provider := r.PathValue("provider")
	resp := s.pick(provider, connectionOf(r), "")
	ctx := r.Context()
	if !s.sleep(ctx, s.scale(resp.Latency)) {
		return
	}
	switch {
	case resp.Fault == Reset:
		resetConn(w)
		return
	case resp.Fault == Timeout:
		s.hold(ctx, 0)
		resetConn(w)
		return
	case !resp.OK():
		writeError(w, resp.StatusOrOK(), errorBodyFor(modelsWire(r), &resp), &resp)
		return
	}
	models := s.modelList(provider)
	if r.Header.Get("X-Goog-Api-Key") != "" {
		writeHeaders(w, &resp)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusOrOK())
		io.WriteString(w, geminiModels(models))
		return
	}
	var b strings.Builder
	b.WriteString(`{"object":"list","data":[`)
	for i, m := range models {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%q,"object":"model","created":0,"owned_by":%q}`, m, ownedBy(provider))
	}
	b.WriteString("]}")
	writeHeaders(w, &resp)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusOrOK())
	io.WriteString(w, b.String())
}

func ownedBy(p string) string {
	if p == "" {
		return "breakwater-faults"
	}
	return p
}

func (s *Server) modelList(provider string) []string {
	if len(s.opts.Models) > 0 {
		return s.opts.Models
	}
	seen := map[string]bool{}
	var out []string
	for _, r := range s.Rules() {
		if m := r.Match.Model; m != "" && !seen[m] && (r.Match.Provider == "" || r.Match.Provider == provider) {
			seen[m] = true
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		out = []string{"fault-model"}
	}
	return out
}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	var due time.Time
	if s.opts.Waiting != nil {
		due = s.opts.Waiting(ctx, 1, d)
		defer s.opts.Waiting(ctx, -1, 0)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
		if due.IsZero() {
			return true
		}
		// Waiting's clock has not reached the instant yet: the rest of
		// the wait is on that clock (a millisecond at least, so a clock
		// that stands is not polled in a tight loop).
		left := due.Sub(s.opts.Now())
		if left <= 0 {
			return true
		}
		t.Reset(max(left, time.Millisecond))
	}
}

// hold waits d (0 = until the client gives up), bounded by MaxHold.
func (s *Server) hold(ctx context.Context, d time.Duration) bool {
	if d <= 0 || d > s.opts.MaxHold {
		s.sleep(ctx, s.opts.MaxHold)
		return false
	}
	return s.sleep(ctx, d)
}

// resetConn closes the client connection abruptly (RST when possible).
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the handler, which resets the stream.
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

func writeHeaders(w http.ResponseWriter, resp *Response) {
	h := w.Header()
	for _, k := range resp.HeaderNames() {
		h.Set(k, resp.Headers[k])
	}
}

func writeError(w http.ResponseWriter, status int, body string, resp *Response) {
	if resp != nil {
		writeHeaders(w, resp)
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// serve writes one chat completion attempt's answer.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, wf wire, resp *Response, model string, stream bool, pre prefill) {
	ctx := r.Context()
	switch resp.Fault {
	case Reset:
		if s.sleep(ctx, s.scale(resp.Latency)) {
			resetConn(w)
		}
		return
	case Timeout:
		s.hold(ctx, 0)
		resetConn(w)
		return
	}
	a := newAnswer(wf, model)
	shapeAnswer(r, resp, &a) // faults/shape.go: max_tokens, tools, JSON format
	if a.tool != "" {
		s.serveTool(w, ctx, wf, resp, &a, stream)
		return
	}
	if stream && resp.OK() {
		// Streams: headers at once, the first content byte after latency.
		s.serveStream(w, ctx, wf, resp, &a, pre)
		return
	}
	if !s.sleep(ctx, s.scale(resp.Latency)) {
		return
	}
	if !resp.OK() {
		writeError(w, resp.StatusOrOK(), errorBodyFor(wf, resp), resp)
		return
	}
	s.serveJSON(w, ctx, wf, resp, &a)
}

func (s *Server) serveJSON(w http.ResponseWriter, ctx context.Context, wf wire, resp *Response, a *answer) {
	// The whole answer is generated before it is sent: chunk time and any
	// stall delay the headers.
	gen := time.Duration(resp.Chunks()-1) * resp.ChunkInterval()
	if resp.Fault == Stall {
		if !s.hold(ctx, s.scale(resp.Stream.StallFor)) {
			resetConn(w)
			return
		}
	}
	if !s.sleep(ctx, s.scale(gen)) {
		return
	}
	body := resp.Body
	if body == "" {
		body = wf.completion(a.completion(resp.Chunks()))
	}
	switch resp.Fault {
	case MalformedChunk:
		body = body[:len(body)/2]
	case Cut:
		writeHeaders(w, resp)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(resp.StatusOrOK())
		io.WriteString(w, body[:len(body)/2])
		http.NewResponseController(w).Flush()
		resetConn(w)
		return
	}
	writeHeaders(w, resp)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusOrOK())
	io.WriteString(w, body)
}

func (s *Server) serveStream(w http.ResponseWriter, ctx context.Context, wf wire, resp *Response, a *answer, pre prefill) {
	rc := http.NewResponseController(w)
	writeHeaders(w, resp)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(resp.StatusOrOK())
	rc.Flush()
	if !s.sleep(ctx, s.scale(resp.Latency)) {
		return
	}
	io.WriteString(w, wf.start(a.opening()))
	interval := s.scale(resp.ChunkInterval())
	texts := answerChunks(resp, len(pre.text)) // a prefill is continued, not repeated
	n := len(texts)
	for i := 0; i < n; i++ {
		if i > 0 && !s.sleep(ctx, interval) {
			return
		}
		if i == resp.Stream.StallAfter && !s.streamFault(w, ctx, rc, wf, resp) {
			return
		}
		io.WriteString(w, wf.event(a.chunk(texts[i], i == 0)))
		if err := rc.Flush(); err != nil {
			return
		}
	}
	for _, c := range a.closing(n) {
		io.WriteString(w, wf.event(c))
	}
	io.WriteString(w, wf.end(resp.Fault != NoDone))
	rc.Flush()
}

// streamFault applies a stream's fault at its stallAfter chunk; it
// reports whether the stream goes on.
func (s *Server) streamFault(w http.ResponseWriter, ctx context.Context, rc *http.ResponseController, wf wire, resp *Response) bool {
	switch resp.Fault {
	case Cut:
		rc.Flush()
		resetConn(w)
		return false
	case Stall:
		rc.Flush()
		if !s.hold(ctx, s.scale(resp.Stream.StallFor)) {
			resetConn(w)
			return false
		}
	case MalformedChunk:
		for range max(resp.Stream.Malformed, 1) {
			io.WriteString(w, wf.malformed()) // before the chunk: every content chunk still comes
		}
		rc.Flush()
	}
	return true
}

// ---- control API ----

func (s *Server) getFaults(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"rules": EncodeRules(s.Rules())})
}

func (s *Server) putFaults(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		controlError(w, 400, err)
		return
	}
	rules, err := ParseRules("PUT /_faults", body)
	if err != nil {
		controlError(w, 400, err)
		return
	}
	keep := r.URL.Query().Get("keepClock") == "true"
	s.SetRules(rules, keep)
	writeJSON(w, 200, map[string]any{"rules": len(rules), "clockRestarted": !keep})
}

func (s *Server) deleteFaults(w http.ResponseWriter, r *http.Request) {
	s.SetRules(nil, false)
	writeJSON(w, 200, map[string]any{"rules": 0})
}

func (s *Server) getStats(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Stats()) }

func (s *Server) deleteStats(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.stats = Stats{ByConnection: map[string]map[string]int{}}
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"total": 0})
}

func (s *Server) getCatalog(w http.ResponseWriter, r *http.Request) {
	type entry struct {
		Name     string       `json:"name"`
		Doc      string       `json:"doc"`
		Response ResponseJSON `json:"response"`
	}
	var out []entry
	for _, e := range Catalog() {
		out = append(out, entry{e.Name, e.Doc, encodeResponse(&e.Response)})
	}
	writeJSON(w, 200, out)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func controlError(w http.ResponseWriter, status int, err error) {
	msgs := []string{err.Error()}
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		msgs = msgs[:0]
		for _, e := range j.Unwrap() {
			msgs = append(msgs, e.Error())
		}
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": strings.Join(msgs, "; "), "type": "invalid_request_error", "code": "invalid_rules", "problems": msgs}})
}
