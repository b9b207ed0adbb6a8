package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/prometheus/client_golang/prometheus"
)

// Stream resume, the shell's part (the rules are model/resume.go): keep
// the text a resumable stream delivered, hold back its error event while
// the flow looks for a target that can continue, build the prefilled
// request for the resume attempt, and splice the continuation into the
// client's stream — no second role, the first part's id, one usage adding
// both parts, one [DONE].

// ResumeComment starts the SSE comment a resumed stream carries before
// its continuation: ": breakwater-resumed provider=P connection=C
// attempts=N".
const ResumeComment = "breakwater-resumed"

// maxResumeText bounds the delivered text a stream keeps for a prefill;
// a longer answer is not resumed.
const maxResumeText = 1 << 20

// resumeShell is one request's resume state; nil when the flow cannot
// resume (model.Flow.CanResume), so other requests keep nothing.
type resumeShell struct {
	text    []byte // the content the client has, in order
	id      string // the stream's chunk id as the client saw it first
	usage   *tokenUsage
	pending *streamErr   // the error event held back while a resume may come
	trimmed int          // trailing whitespace left out of a native prefill
	resumed int          // resume attempts made
	req     *chatRequest // the current resume attempt's prefilled request
	reqKey  prefillKey
	err     error // why the last prefill could not be built
	// nr is the native state of a Messages or Responses request (nil
	// for chat): an answer passed through natively is not a chat stream,
	// so its text cannot be kept, and a native target cannot be sent a
	// prefill (it gets the client's own body).
	nr *nativeReq
}

type streamErr struct{ code, msg string }

type tokenUsage struct {
	Prompt     int64 `json:"prompt_tokens"`
	Completion int64 `json:"completion_tokens"`
	Total      int64 `json:"total_tokens"`
}

// chunkView is what the shell reads of a chat-completion chunk it keeps.
type chunkView struct {
	ID      string `json:"id"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content *string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *tokenUsage `json:"usage"`
}

// streamMetrics are the series of stream resume and malformed events.
type streamMetrics struct {
	resumes   *prometheus.CounterVec
	malformed *prometheus.CounterVec
}

func newStreamMetrics(reg *prometheus.Registry) *streamMetrics {
	m := &streamMetrics{
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_stream_resumes_total",
			Help: "Resume attempts of broken streams by the provider and connection tried and result (continued, refused, restarted, failed)."},
			[]string{"provider", "connection", "result"}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakwater_stream_malformed_events_total",
			Help: "Stream events whose data is not JSON, skipped, by provider and connection."}, []string{"provider", "connection"}),
	}
	reg.MustRegister(m.resumes, m.malformed)
	return m
}

// resumeStart is called with the flow started (under the engine lock): a
// streaming request whose flow could resume keeps what it delivers.
func (rs *reqState) resumeStart() {
	if rs.req.Stream && rs.flow.CanResume(rs.g.eng) {
		rs.rsm = &resumeShell{nr: rs.nr}
		return
	}
	// Nothing is kept, so nothing could be prefilled: the flow never
	// resumes this request (a runtime switch turned on mid-request
	// applies from the next one).
	rs.flow.ResumeBlocked = true
}

// streamEvent notes one well-formed event of the stream the client gets:
// the run of malformed events is over, and a resumable stream keeps its
// text. A tool call, several choices or a very long answer make the
// stream one that cannot be resumed.
func (rs *reqState) streamEvent(ev *model.StreamEvent, data []byte) {
	rs.malformed.Good()
	k := rs.rsm
	if k == nil || rs.flow.ResumeBlocked {
		return
	}
	if ev.ToolCall || ev.Reasoning {
		rs.flow.ResumeBlocked = true
		return
	}
	if k.nr != nil && k.nr.native {
		// A native Messages or Responses stream: its events are not chat
		// chunks, and a continuation would repeat the answer from its
		// start under a second message_start (or response.created).
		rs.flow.ResumeBlocked = true
		return
	}
	if ev.UsefulBytes == 0 && !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	var c chunkView
	if json.Unmarshal(data, &c) != nil {
		rs.flow.ResumeBlocked = true // not a chat-completion chunk: nothing to prefill from
		return
	}
	if k.id == "" {
		k.id = c.ID
	}
	if c.Usage != nil {
		k.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			rs.flow.ResumeBlocked = true
			return
		}
		if ch.Delta.Content != nil {
			k.text = append(k.text, *ch.Delta.Content...)
		}
	}
	if len(k.text) > maxResumeText {
		rs.flow.ResumeBlocked = true
	}
}

// skipMalformed counts a stream event whose data is not JSON; it reports
// whether the stream goes on (the model's bound on malformed events).
func (rs *reqState) skipMalformed(data []byte) bool {
	rs.g.met.stream.malformed.WithLabelValues(rs.provider, rs.conn).Inc()
	goOn := rs.malformed.Bad(rs.s)
	rs.g.log.Warn("malformed stream event skipped", "request_id", rs.logID, "provider", rs.provider,
		"connection", rs.conn, "skipped", rs.malformed.Total(), "ends_stream", !goOn, "bytes", len(data))
	return goOn
}

// holdStreamError keeps a committed stream's error event back when the
// flow may resume it (written by flushStreamError if it does not); false:
// write it now, as a stream that cannot be resumed does.
func (rs *reqState) holdStreamError(code, msg string) bool {
	if rs.rsm == nil || rs.flow.ResumeBlocked && !rs.flow.Resuming() {
		return false
	}
	rs.rsm.pending = &streamErr{code, msg}
	return true
}

// flushStreamError writes the held error event of a stream the flow ended.
func (rs *reqState) flushStreamError(st *model.Step) {
	if rs.rsm == nil || rs.rsm.pending == nil {
		return
	}
	p := rs.rsm.pending
	rs.rsm.pending = nil
	if rs.rsm.resumed > 0 {
		rs.g.log.Info("stream resume failed: no target could continue", "request_id", rs.logID,
			"resume_attempts", rs.rsm.resumed, "code", p.code)
	}
	writeSSEError(rs.w, p.code, p.msg)
	if f, ok := rs.w.(http.Flusher); ok {
		f.Flush()
	}
}

// reqFor is the request an attempt sends: for a resume attempt the
// client's conversation plus the delivered text as a final assistant
// message, in the continuation style of the attempt's provider (built once
// per attempt); else the client's. If the prefill cannot be built, the
// client's request comes back and prefillError refuses the attempt before
// it is sent. Out of line: the attempt's frame is under every held stream.
//
//go:noinline
func (rs *reqState) reqFor(a *model.Attempt) *chatRequest {
	k := rs.rsm
	if !a.Resume || k == nil {
		return &rs.req
	}
	if k.nr != nil && rs.nativeTarget(a) {
		k.req, k.err = nil, errNativePrefill
		return &rs.req
	}
	key := prefillKey{n: len(k.text), c: a.Continuation, p: a.Provider, conn: a.Connection, attempt: rs.flow.Attempts()}
	if k.req != nil && k.reqKey == key {
		return k.req
	}
	k.reqKey = key
	req, err := k.prefilled(rs.req.body, a)
	if k.req, k.err = req, err; err != nil {
		return &rs.req
	}
	k.resumed++
	rs.g.log.Info("resuming a broken stream", "request_id", rs.logID, "provider", a.Provider, "connection", a.Connection,
		"model", a.Model, "continuation", a.Continuation.String(), "delivered_bytes", len(k.text))
	return req
}

// prefillError is why a resume attempt's request cannot be built (nil when
// it can): the attempt is then refused before it is sent, neutral for the
// connection, and the flow passes it over.
func (rs *reqState) prefillError(a *model.Attempt) *model.Error {
	msg := ""
	switch {
	case rs.rsm == nil:
		msg = "no delivered text was kept"
	case rs.reqFor(a) == &rs.req:
		msg = fmt.Sprint(rs.rsm.err)
	default:
		return nil
	}
	return &model.Error{Code: model.CodeUnsupportedByProviderType, Provider: a.Provider, Model: a.Model,
		Message: "the request cannot be prefilled: " + msg}
}

var errNativePrefill = errors.New("the target is served natively (the client's own body), which carries no prefill")

// nativeTarget reports whether attempt a would go to its provider as a
// native pass-through of the client's body.
func (rs *reqState) nativeTarget(a *model.Attempt) bool {
	p := rs.g.provider(a.Provider)
	if p == nil {
		return false
	}
	_, native := rs.wireFor(p).(*passThroughWire)
	return native
}

// prefillKey names the resume attempt a prefilled request was built for.
type prefillKey struct {
	n, attempt int
	c          model.Continuation
	p, conn    string
}

// prefilled is the client's request body with the delivered text as a
// prefill in a's continuation style.
func (k *resumeShell) prefilled(body []byte, a *model.Attempt) (*chatRequest, error) {
	text := string(k.text)
	k.trimmed = 0
	if a.Continuation == model.ContinueNative {
		// Anthropic refuses a final assistant turn that ends in
		// whitespace; the continuation's leading whitespace is dropped
		// as far as it repeats what was cut here.
		t := strings.TrimRightFunc(text, unicode.IsSpace)
		k.trimmed, text = len(text)-len(t), t
	}
	pb, err := prefillBody(body, text, a.Continuation)
	if err != nil {
		return nil, err
	}
	req, err := parseChatRequest(pb)
	if err != nil {
		return nil, err
	}
	return &req, nil
}

// prefillBody appends the assistant prefill to a chat request body. A
// conversation that already ends with an assistant message of text (a
// client's own prefill) has the text appended to it.
func prefillBody(body []byte, text string, c model.Continuation) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, err
	}
	var msgs []json.RawMessage
	if m, ok := top["messages"]; ok {
		if err := json.Unmarshal(m, &msgs); err != nil {
			return nil, err
		}
	}
	msg := map[string]any{"role": "assistant", "content": text}
	if n := len(msgs); n > 0 {
		var last struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		var s string
		if json.Unmarshal(msgs[n-1], &last) == nil && last.Role == "assistant" && json.Unmarshal(last.Content, &s) == nil {
			msg["content"] = s + text
			msgs = msgs[:n-1]
		}
	}
	if c == model.ContinuePrefix {
		msg["prefix"] = true
	}
	mb, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	msgs = append(msgs, mb)
	if top["messages"], err = json.Marshal(msgs); err != nil {
		return nil, err
	}
	if c == model.ContinueFinalMessage {
		top["continue_final_message"] = json.RawMessage("true")
		top["add_generation_prompt"] = json.RawMessage("false")
	}
	return json.Marshal(top)
}

// resumeResult settles a resume attempt: the client's stream stays
// committed whatever it did, and the metrics count it.
//
//go:noinline
func (rs *reqState) resumeResult(a *model.Attempt, out *execResult) {
	out.committed, out.status = true, http.StatusOK
	result := model.ResumeResult(a, &out.outcome, out.delivered)
	rs.g.met.stream.resumes.WithLabelValues(a.Provider, a.Connection, result).Inc()
	rs.g.log.Info("stream resume attempt", "request_id", rs.logID, "provider", a.Provider, "connection", a.Connection,
		"result", result, "continued", a.Continued)
}

// pipeContinuation streams a resume attempt's continuation into the
// client's committed stream. Its first content is held until it can be
// judged (model.ContinuationRestarts): an upstream that restarted the
// answer instead of continuing it never reaches the client, and the flow
// tries the next target. After that, events pass as they come, rewritten
// (chunkRewrite).
func (rs *reqState) pipeContinuation(actx context.Context, run *attemptRun, resp *http.Response, a *model.Attempt) execResult {
	sw := run.watch.start(rs.g, rs.s, &run.clock)
	defer sw.stop()
	rd := newSSEReader(resp.Body)
	defer rd.release()
	c := &contPipe{rs: rs, w: rs.w, k: rs.rsm, a: a, resp: resp, rd: rd}
	c.flusher, _ = c.w.(http.Flusher)
	c.need = model.RestartCheckBytes(string(c.k.text))
	c.judged, c.strip = c.need == 0, c.k.trimmed
	var raw, buf, data []byte
	for {
		var err error
		raw, buf, data, err = rd.next(raw, buf)
		if err != nil {
			return c.end(actx, err)
		}
		ev := model.ParseStreamEvent(data)
		if ev.Malformed {
			if rs.skipMalformed(data) {
				continue
			}
			q := model.Outcome{Kind: model.OutcomeQuality}
			return c.fail(execResult{outcome: q}, string(model.CodeStreamEmpty), "the upstream sent malformed stream events")
		}
		rs.malformed.Good()
		sw.observe(ev)
		if ev.Error {
			o := model.Outcome{Kind: model.OutcomeResponse, Status: ev.ErrorStatus, Headers: upstreamHeader(resp.Header),
				Body: string(data[:min(len(data), model.MaxBodyPrefix)])}
			return c.fail(execResult{outcome: o}, string(model.CodeStreamUpstream), "the upstream sent an error event mid-stream")
		}
		if ev.Done {
			return c.done()
		}
		if ev.FinishReason != "" {
			c.finish = ev.FinishReason
		}
		if res, over := c.chunk(data); over {
			return res
		}
	}
}

// contPipe is one continuation attempt's state: the text the client has,
// what is held back until the continuation is judged not to restart.
type contPipe struct {
	rs      *reqState
	w       http.ResponseWriter
	flusher http.Flusher
	k       *resumeShell
	a       *model.Attempt
	resp    *http.Response
	rd      *sseReader

	need       int    // bytes of the continuation to read before judging it
	head, held []byte // its text so far and its events, until judged
	judged     bool
	finish     string
	strip      int // chunkRewrite's count of the overlap left to strip
}

func (c *contPipe) delivered() execResult {
	ok := model.Outcome{Kind: model.OutcomeResponse, Status: c.resp.StatusCode, Headers: upstreamHeader(c.resp.Header)}
	return execResult{outcome: ok, delivered: true, committed: true, status: http.StatusOK}
}

func (c *contPipe) gone() execResult {
	return execResult{outcome: model.Outcome{Kind: model.OutcomeClientAbort}, committed: true}
}

func (c *contPipe) fail(res execResult, code, msg string) execResult {
	if c.a.Continued { // a new break: its error event is the one the client may get
		c.k.pending = &streamErr{code, msg}
	}
	return res
}

// announce puts, before the continuation's first bytes, an SSE comment
// (which clients skip) naming who continues: the headers named who
// served at commit.
func (c *contPipe) announce(b []byte) []byte {
	if c.a.Continued {
		return b
	}
	c.a.Continued = true
	return append(fmt.Appendf(nil, ": %s provider=%s connection=%s attempts=%d\n\n", ResumeComment, c.a.Provider, c.a.Connection, c.rs.flow.Attempts()), b...)
}

// release writes what was held back; false when the client is gone.
func (c *contPipe) release() bool {
	c.judged = true
	if len(c.held) == 0 {
		return true
	}
	c.k.text = append(c.k.text, c.head...)
	c.held = c.announce(c.held)
	_, err := c.w.Write(c.held)
	c.held = c.held[:0]
	if err == nil && c.flusher != nil {
		c.flusher.Flush()
	}
	return err == nil
}

// end is the attempt's result when reading stopped with err.
func (c *contPipe) end(actx context.Context, err error) execResult {
	if err == io.EOF && c.finish != "" {
		if !c.release() {
			return c.gone()
		}
		if _, err := c.w.Write(doneEvent); err != nil {
			return c.gone()
		}
		return c.delivered()
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	res := c.rs.failure(actx, err, true)
	code, msg := streamFailureText(res)
	return c.fail(res, code, msg)
}

// done ends the continuation at [DONE].
func (c *contPipe) done() execResult {
	if c.finish == "" && len(c.head) == 0 && !c.a.Continued {
		// Ended at once, with no text and no finish: not a
		// continuation; the next target is tried.
		return execResult{outcome: model.Outcome{Kind: model.OutcomeQuality}}
	}
	if !c.release() {
		return c.gone()
	}
	if _, err := c.w.Write(doneEvent); err != nil {
		return c.gone()
	}
	drainAfterDone(c.resp.Body) // transport.go: keeps the connection for the next request
	return c.delivered()
}

// chunk passes on one content chunk: held back until the continuation
// is judged, written after. over: the attempt ended with res.
func (c *contPipe) chunk(data []byte) (res execResult, over bool) {
	out, content, keep := chunkRewrite(data, c.k, &c.strip)
	if !keep {
		return res, false
	}
	if !c.judged {
		c.head = append(c.head, content...)
		c.held = appendSSEData(c.held, out)
		if len(c.head) >= c.need || c.finish != "" {
			if model.ContinuationRestarts(string(c.k.text), string(c.head)) {
				return execResult{outcome: model.Outcome{Kind: model.OutcomeQuality}}, true
			}
			if !c.release() {
				return c.gone(), true
			}
		}
		return res, false
	}
	c.k.text = append(c.k.text, content...)
	if _, err := c.w.Write(appendSSEData(c.announce(nil), out)); err != nil {
		return c.gone(), true
	}
	if c.flusher != nil && c.rd.buffered() == 0 {
		c.flusher.Flush()
	}
	return res, false
}

func appendSSEData(dst, data []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

// chunkRewrite makes a continuation chunk part of the client's stream: the
// first part's id, no role (the client had its role chunk), whitespace a
// native prefill left out not repeated, and a usage that adds the first
// part's. It returns the chunk, its content, and false for a chunk left
// with nothing to say. A chunk it cannot read passes unchanged.
func chunkRewrite(data []byte, k *resumeShell, strip *int) ([]byte, []byte, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return data, nil, true
	}
	if k.id != "" {
		top["id"], _ = json.Marshal(k.id)
	}
	var content []byte
	var choices []map[string]json.RawMessage
	if c, ok := top["choices"]; ok && json.Unmarshal(c, &choices) == nil {
		empty := true
		for _, ch := range choices {
			var delta map[string]json.RawMessage
			if d, ok := ch["delta"]; ok && json.Unmarshal(d, &delta) == nil {
				delete(delta, "role")
				var s string
				if json.Unmarshal(delta["content"], &s) == nil {
					if *strip > 0 && s != "" {
						t := strings.TrimLeftFunc(s, unicode.IsSpace)
						cut := min(len(s)-len(t), *strip)
						s = s[cut:]
						*strip = 0
						delta["content"], _ = json.Marshal(s)
					}
					content = append(content, s...)
				}
				if len(delta) > 0 && !(len(delta) == 1 && string(delta["content"]) == `""`) {
					empty = false
				}
				ch["delta"], _ = json.Marshal(delta)
			}
			if fr, ok := ch["finish_reason"]; ok && string(fr) != "null" {
				empty = false
			}
		}
		top["choices"], _ = json.Marshal(choices)
		if empty && top["usage"] == nil {
			return nil, nil, false
		}
	}
	if u, ok := top["usage"]; ok && k.usage != nil && string(u) != "null" {
		var cu tokenUsage
		var extra map[string]json.RawMessage
		if json.Unmarshal(u, &cu) == nil && json.Unmarshal(u, &extra) == nil {
			extra["prompt_tokens"], _ = json.Marshal(cu.Prompt + k.usage.Prompt)
			extra["completion_tokens"], _ = json.Marshal(cu.Completion + k.usage.Completion)
			extra["total_tokens"], _ = json.Marshal(cu.Total + k.usage.Total)
			top["usage"], _ = json.Marshal(extra)
		}
	}
	out, err := json.Marshal(top)
	if err != nil {
		return data, content, true
	}
	return out, content, true
}

// logResume marks a resume attempt in the request log: its reason names
// the resume, after the verdict's own reason when there is one.
func logResume(a *model.Attempt, reason string) string {
	if !a.Resume {
		return reason
	}
	if reason == "" {
		return "stream_resume"
	}
	return "stream_resume:" + reason
}
