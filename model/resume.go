package model

import (
	"fmt"
	"slices"
	"strings"
)

// Stream resume: a stream that breaks after content reached the client is
// continued on a target that can continue a prefilled assistant turn. The
// shell sends the same conversation plus the delivered text as a final
// assistant message and streams only the continuation into the client's
// stream. Every decision is here, so the proxy and the simulator resume
// alike: whether a break may be resumed, which targets can continue, in what
// order, and within which budget.

// Continuation is how a provider continues a prefilled assistant turn.
type Continuation uint8

const (
	// ContinueNone: the provider cannot continue a prefilled turn (OpenAI
	// itself answers a trailing assistant message with a new turn).
	ContinueNone Continuation = iota
	// ContinueNative: the wire format continues a trailing assistant turn
	// (Anthropic Messages).
	ContinueNative
	// ContinueAssistant: an OpenAI-compatible server that continues a
	// trailing assistant message as sent.
	ContinueAssistant
	// ContinueFinalMessage: vLLM's `continue_final_message: true` (with
	// `add_generation_prompt: false`).
	ContinueFinalMessage
	// ContinuePrefix: the assistant message carries `"prefix": true`
	// (DeepSeek, Mistral).
	ContinuePrefix
)

var continuationNames = enumNames{"none", "native", "assistant", "continue-final-message", "prefix"}

func (c Continuation) String() string               { return continuationNames.name(uint8(c), "Continuation") }
func (c Continuation) MarshalText() ([]byte, error) { return []byte(c.String()), nil }
func (c *Continuation) UnmarshalText(b []byte) error {
	v, err := ParseContinuation(string(b))
	if err == nil {
		*c = v
	}
	return err
}

// ParseContinuation parses a provider's `continuation` ("" parses as none;
// ContinuationOf gives "" its meaning, the type's default).
func ParseContinuation(s string) (Continuation, error) {
	if s == "" {
		return ContinueNone, nil
	}
	for i, n := range continuationNames {
		if n == s {
			return Continuation(i), nil
		}
	}
	return ContinueNone, fmt.Errorf("unknown continuation %q (want one of %s)", s, strings.Join(continuationNames, ", "))
}

// ContinuationOf is a provider's continuation capability: the config's
// `continuation` when set, else its type's default (anthropic continues
// natively; OpenAI-compatible servers differ, so they declare it).
func ContinuationOf(typ, override string) Continuation {
	if override != "" {
		c, _ := ParseContinuation(override)
		return c
	}
	if typ == "anthropic" {
		return ContinueNative
	}
	return ContinueNone
}

// resumeFlow is a flow's resume state.
type resumeFlow struct {
	active  bool
	resumes int     // breaks resumed so far
	from    ConnRef // the connection whose stream broke last
	fromA   Attempt // its attempt (target, model, engine indices)
	tried   []ConnRef
	breakE  *Error // the error event if no continuation comes
}

// resumable reports whether a committed stream that ended with outcome o
// may be resumed: the upstream broke it (cut, stall, throughput, its own
// time limit), not the client, the gateway's bounds, an error event the
// client already got, or an empty answer.
func resumable(o Outcome) bool {
	switch o.Kind {
	case OutcomeTransport, OutcomeStall, OutcomeThroughput:
		return true
	}
	return false
}

// CanResume reports whether the flow could resume a broken stream at all:
// resume is on, the shell has not blocked it (ResumeBlocked: a tool call
// in progress, a request format it cannot prefill) and some target of the
// route can continue. The shell keeps the delivered text only then.
func (f *Flow) CanResume(e *Engine) bool {
	if !e.settings.StreamResume.Enabled || f.ResumeBlocked || e.settings.StreamResume.MaxResumes == 0 {
		return false
	}
	r := &f.Route
	if !r.IsCombo() {
		return r.provider >= 0 && int(r.provider) < len(e.provs) && e.continuationOf(int(r.provider)) != ContinueNone
	}
	if r.combo < 0 || int(r.combo) >= len(e.combos) {
		return false
	}
	for _, p := range e.combos[r.combo].tp {
		if p >= 0 && int(p) < len(e.provs) && e.continuationOf(int(p)) != ContinueNone {
			return true
		}
	}
	return false
}

// resumes is how many breaks of the stream the flow set out to resume.
func (f *Flow) resumes() int { return f.rs.resumes }

// Resuming reports whether the flow is looking for a target to continue a
// broken stream (the client's stream stays open meanwhile).
func (f *Flow) Resuming() bool { return f.rs.active }

func (e *Engine) continuationOf(p int) Continuation {
	ps := &e.provs[p]
	override := ""
	if ps.cfg != nil {
		override = ps.cfg.Continuation
	}
	return ContinuationOf(ps.typ, override)
}

// resumeRecord handles a committed attempt that did not finish (called by
// record): a break that may be resumed starts or continues the resume, a
// resume attempt that failed before its continuation reached the client
// passes its target over. ok false: the stream ends with its error event.
// Out of line: record's frame is under every held stream of the gateway.
//
//go:noinline
func (f *Flow) resumeRecord(e *Engine, a *Attempt, o Outcome) bool {
	ref := ConnRef{a.Provider, a.Connection}
	if a.Resume && !a.Continued {
		// Nothing of this attempt reached the client: a refused prefill
		// (400), a failure before the continuation's first content, or a
		// continuation that did not fit (it restarted the answer) — the next
		// target that can continue is tried; the break's error stays the
		// one the client gets if none can.
		if f.rs.active {
			f.rs.tried = append(f.rs.tried, ref)
			return true
		}
		return false
	}
	if !resumable(o) || !f.CanResume(e) || f.rs.resumes >= e.settings.StreamResume.MaxResumes {
		return false
	}
	code, msg := StreamErrorCode(o)
	f.rs.active = true
	f.rs.resumes++
	f.rs.from, f.rs.fromA = ref, *a
	f.rs.tried = append(f.rs.tried[:0], ref)
	f.rs.breakE = &Error{Code: code, Message: msg}
	return true
}

// resumeNext chooses the attempt that continues the broken stream: the
// route's candidates in selection order whose provider can continue,
// other connections first, then the connection that broke (it knows the
// conversation: a cut is as often the network as the upstream, so its fresh
// cooldown from this break does not keep it out; its breaker does). The
// request's attempt budget and deadline bound it all.
func (f *Flow) resumeNext(now Time, e *Engine, sel *Selection) Step {
	if now >= f.deadline || f.attempts >= e.settings.RequestBudget.MaxAttempts+f.grace {
		return f.resumeFail()
	}
	req := Request{Route: f.Route, Allowed: f.Allowed, Skip: f.rs.tried, Session: f.Session, Held: f.Held, HeldUntil: f.HeldUntil}
	e.SelectAll(now, &req, sel)
	for _, c := range sel.Candidates {
		ref := ConnRef{c.Provider, c.Connection}
		if slices.Contains(f.rs.tried, ref) || slices.Contains(f.unfit, c.Target) {
			continue
		}
		cont := e.continuationOf(int(c.p))
		if cont == ContinueNone {
			continue
		}
		a, err := e.Begin(now, c)
		if err != nil {
			f.rs.tried = append(f.rs.tried, ref)
			continue
		}
		return f.resumeStep(a, cont)
	}
	// Then the connection that broke, if it can continue and was not tried
	// for this break yet (tried holds it from the break: compare the count).
	fa := &f.rs.fromA
	if int(fa.p) < len(e.provs) && f.rs.from.Provider != "" && !f.fromRetried() && !slices.Contains(f.unfit, fa.Target) {
		if cont := e.continuationOf(int(fa.p)); cont != ContinueNone && connAllowed(f.Allowed, f.rs.from) {
			c := Candidate{Provider: fa.Provider, Connection: fa.Connection, Model: fa.Model, Target: fa.Target, p: fa.p, c: fa.c, session: f.Session}
			if e.resumeFits(now, c) {
				if a, err := e.Begin(now, c); err == nil {
					f.rs.tried = append(f.rs.tried, f.rs.from) // a second copy: it has had its turn
					return f.resumeStep(a, cont)
				}
			}
		}
	}
	return f.resumeFail()
}

// fromRetried: the broken connection already had its resume attempt (it is
// in tried twice: once from the break, once from its own attempt).
func (f *Flow) fromRetried() bool {
	n := 0
	for _, r := range f.rs.tried {
		if r == f.rs.from {
			n++
		}
	}
	return n > 1
}

func connAllowed(allowed []ConnRef, ref ConnRef) bool {
	return len(allowed) == 0 || slices.Contains(allowed, ref)
}

// resumeFits: the connection that broke may continue unless something
// other than the break's own cooldown keeps it out — a terminal state, a
// model lockout, a spend wall; its breaker is asked by Begin.
func (e *Engine) resumeFits(now Time, c Candidate) bool {
	p := &e.provs[c.p]
	cs := &p.conns[c.c]
	if cs.st.Status.Terminal() || cs.retiredAs.Terminal() {
		return false
	}
	return cs.locks.blocking(now, p.family(c.Model), c.Model) == nil
}

func (f *Flow) resumeStep(a Attempt, cont Continuation) Step {
	f.attempts++
	a.Resume, a.Continuation = true, cont
	return Step{Kind: StepAttempt, Attempt: a}
}

// resumeFail ends the stream: its error event is the break's.
func (f *Flow) resumeFail() Step {
	f.rs.active = false
	err := f.rs.breakE
	if err == nil {
		err = &Error{Code: CodeStreamInterrupted, Message: "the upstream stream ended early"}
	}
	return *f.finish(Step{Kind: StepAnswer, Status: 200, Result: ResultStreamError, Err: err})
}

// resumeDone: a resume attempt finished the stream.
func (f *Flow) resumeDone() { f.rs.active = false }

// ContinuationRestarts reports whether a continuation whose first content
// is head restarts the answer instead of continuing delivered (an upstream
// that ignored the prefill): head begins with the delivered text's
// opening. Detection is possible only when that opening occurs once in the
// delivered text — a repetitive answer may legitimately continue with its
// own opening — and needs RestartCheckBytes(delivered) bytes of head.
func ContinuationRestarts(delivered, head string) bool {
	k := RestartCheckBytes(delivered)
	return k > 0 && len(head) >= k && head[:k] == delivered[:k]
}

// RestartCheckBytes is how many bytes of a continuation's content
// ContinuationRestarts needs to judge it; 0 when it cannot (the delivered
// text is too short or repeats its opening).
func RestartCheckBytes(delivered string) int {
	const minOpening, maxOpening = 8, 32
	k := min(len(delivered), maxOpening)
	if k < minOpening {
		return 0
	}
	if strings.Contains(delivered[1:], delivered[:k]) {
		return 0
	}
	return k
}

// MalformedEvents applies the stream's bound on events whose data is not
// JSON: each is skipped; the stream ends (false) only when more than
// MaxConsecutive come in a row or more than MaxTotal in all.
type MalformedEvents struct {
	consecutive, total int
}

// Bad counts one malformed event; it reports whether the stream may go on.
func (m *MalformedEvents) Bad(s *Settings) bool {
	m.consecutive++
	m.total++
	b := &s.StreamRecovery.MalformedEvents
	return m.consecutive <= b.MaxConsecutive && m.total <= b.MaxTotal
}

// Good notes a well-formed event: the run of bad ones is over.
func (m *MalformedEvents) Good() { m.consecutive = 0 }

// Total is how many malformed events were skipped.
func (m *MalformedEvents) Total() int { return m.total }

// normStreamResume clamps the resume and malformed-event settings.
func normStreamResume(mb *MalformedEventBound, sr *StreamResumeSettings) {
	mb.MaxConsecutive = clampSettingInt(mb.MaxConsecutive, 0, 1000)
	mb.MaxTotal = clampSettingInt(mb.MaxTotal, 0, 100_000)
	sr.MaxResumes = clampSettingInt(sr.MaxResumes, 0, 10)
}

// MalformedEventBound is the bound on malformed stream events.
type MalformedEventBound struct {
	MaxConsecutive int `json:"maxConsecutive"`
	MaxTotal       int `json:"maxTotal"`
}

// StreamResumeSettings turn stream resume on or off (a runtime setting)
// and bound how many breaks of one stream are resumed; every resume attempt
// also counts against requestBudget (maxAttempts, deadlineMs).
type StreamResumeSettings struct {
	Enabled    bool `json:"enabled"`
	MaxResumes int  `json:"maxResumes"`
}

// ResumeResult names how a resume attempt ended, for metrics and logs:
// "continued" (its continuation reached the client), "refused" (the
// upstream answered the prefill with a 4xx), "restarted" (the answer
// started over instead of continuing) or "failed".
func ResumeResult(a *Attempt, o *Outcome, delivered bool) string {
	switch {
	case delivered:
		return "continued"
	case !a.Continued && o.Kind == OutcomeResponse && o.Status >= 400 && o.Status < 500:
		return "refused"
	case !a.Continued && o.Kind == OutcomeQuality:
		return "restarted"
	}
	return "failed"
}
