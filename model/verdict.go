package model

import "strings"

// OutcomeKind says what an upstream attempt ended with.
type OutcomeKind uint8

const (
	// OutcomeResponse: the upstream answered with an HTTP status (Status).
	// An error found inside a 200 SSE stream before the first byte reached the
	// client is reported as a response with the status it states.
	OutcomeResponse OutcomeKind = iota
	// OutcomeTransport: no status arrived; Transport says why.
	OutcomeTransport
	// OutcomeStall: the content-stall watchdog gave up on a stream.
	OutcomeStall
	// OutcomeThroughput: the throughput watchdog aborted a slow stream.
	OutcomeThroughput
	// OutcomeClientAbort: the client went away; neutral everywhere.
	OutcomeClientAbort
	// OutcomeLocalQueue: the gateway's own queue refused or timed out; never
	// counts against upstream health.
	OutcomeLocalQueue
	// OutcomeQuality: the gateway's output validation rejected the answer
	// (e.g. empty content); the synthetic 502 of docs/lockouts.md.
	OutcomeQuality
)

var outcomeKindNames = enumNames{"response", "transport", "stall", "throughput", "client_abort", "local_queue", "quality"}

func (k OutcomeKind) String() string               { return outcomeKindNames.name(uint8(k), "OutcomeKind") }
func (k OutcomeKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }
func (k *OutcomeKind) UnmarshalText(b []byte) error {
	return parseInto(outcomeKindNames, b, "outcome kind", (*uint8)(k))
}

// Transport is why an attempt produced no HTTP status.
type Transport uint8

const (
	TransportNone Transport = iota
	TransportRefused
	TransportReset
	TransportConnectTimeout
	TransportHeaderTimeout
	TransportAttemptTimeout
	TransportEarlyEOF
)

var transportNames = enumNames{"", "refused", "reset", "connect_timeout", "header_timeout", "attempt_timeout", "early_eof"}

func (t Transport) String() string               { return transportNames.name(uint8(t), "Transport") }
func (t Transport) MarshalText() ([]byte, error) { return []byte(t.String()), nil }
func (t *Transport) UnmarshalText(b []byte) error {
	return parseInto(transportNames, b, "transport error", (*uint8)(t))
}

// Headers gives read access to response headers. net/http's Header satisfies
// it; HeaderMap is the simulator's.
type Headers interface {
	Get(name string) string
}

// CanonicalGetter is a Headers that can look a name up as given when the
// name is already in canonical form (the shell's view of an http.Header):
// every answer's head is read for a few fixed names, most of them absent,
// and Get would canonicalise each name again on every answer.
type CanonicalGetter interface {
	GetCanonical(canon string) string
}

// HeaderMap is a Headers keyed by lower-case header name.
type HeaderMap map[string]string

// Get looks a header up case-insensitively.
func (h HeaderMap) Get(name string) string { return h[strings.ToLower(name)] }

// MaxBodyPrefix bounds how much of an error body classification reads.
const MaxBodyPrefix = 4096

// Outcome is one upstream attempt's result as the shell observed it.
type Outcome struct {
	Kind      OutcomeKind
	Status    int       // with OutcomeResponse
	Transport Transport // with OutcomeTransport
	Headers   Headers   // may be nil
	Body      string    // error body (only the first MaxBodyPrefix bytes are read)
}

// ClassifyContext is what classification knows about where the outcome came
// from.
type ClassifyContext struct {
	Provider      string // provider id (operator rules attach to it)
	ProviderType  string // openai, anthropic, gemini, local, glm, agentrouter, opencode
	Model         string // upstream model id
	Profile       Profile
	PerModelQuota bool // docs/classification.md#provider-types: quota is per model on this provider
	Now           Time // for HTTP-date and absolute reset hints
}

// BreakerEffect is what an outcome does to the provider breaker.
type BreakerEffect uint8

const (
	BreakerNeutral BreakerEffect = iota
	BreakerSuccess
	BreakerFailure
)

var breakerEffectNames = enumNames{"neutral", "success", "failure"}

func (e BreakerEffect) String() string               { return breakerEffectNames.name(uint8(e), "BreakerEffect") }
func (e BreakerEffect) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// ConnAction is what an outcome does to the connection that served it.
type ConnAction uint8

const (
	// ConnNone leaves the connection untouched.
	ConnNone ConnAction = iota
	// ConnClear: success; clear every error field and backoffLevel.
	ConnClear
	// ConnRecordOnly records the error but sets no cooldown.
	ConnRecordOnly
	// ConnBackoff: cooldown base·2^level with the hint as a floor.
	ConnBackoff
	// ConnHint: cooldown = hint when there is one, else base·2^level (429).
	ConnHint
	// ConnFixed: cooldown CooldownMs (or the hint when longer); level unchanged
	// unless Escalate.
	ConnFixed
	// ConnQuota: cooldown to the stated reset, else to the provider's daily
	// reset capped by connectionCooldown.maxCooldownMs.
	ConnQuota
	// ConnExpiredLadder: 401 ladder 5, 10, 20 min, then terminal expired.
	ConnExpiredLadder
	// ConnRejectedLadder: request-rejected ladder 5, 15 min, 3rd within 24 h banned.
	ConnRejectedLadder
	// ConnTerminal sets the terminal status Verdict.Terminal.
	ConnTerminal
)

var connActionNames = enumNames{"none", "clear", "record_only", "backoff", "hint", "fixed", "quota",
	"expired_ladder", "rejected_ladder", "terminal"}

func (a ConnAction) String() string               { return connActionNames.name(uint8(a), "ConnAction") }
func (a ConnAction) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Next says what the shell should do with the request after this outcome.
type Next uint8

const (
	NextDone       Next = iota // success: deliver
	NextConnection             // try the next connection (then the next target)
	NextTarget                 // this model is unusable here: skip to the next target
	NextStop                   // request-scoped: give the client the upstream error
	NextRetry                  // stream watchdog abort: another connection or target before commit, SSE error after
	// NextModel: the request does not fit this model (context length): never
	// this model again; the next target with another model, a larger known
	// context window first; else the client gets the upstream error.
	NextModel
)

var nextNames = enumNames{"done", "next_connection", "next_target", "stop", "retry", "next_model"}

func (n Next) String() string               { return nextNames.name(uint8(n), "Next") }
func (n Next) MarshalText() ([]byte, error) { return []byte(n.String()), nil }

// HintSource says where a retry hint came from.
type HintSource uint8

const (
	HintNone      HintSource = iota
	HintHeader               // Retry-After, retry-after-ms, x-ratelimit-reset*, provider reset headers
	HintRetryInfo            // Gemini google.rpc.RetryInfo.retryDelay (typed)
	HintBody                 // prose in the error body
	HintRule                 // an operator or built-in rule's cooldown
)

var hintSourceNames = enumNames{"", "header", "retry_info", "body", "rule"}

func (s HintSource) String() string               { return hintSourceNames.name(uint8(s), "HintSource") }
func (s HintSource) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Hint is an upstream statement of when to come back.
type Hint struct {
	Ms     int64      // wait from Now; 0 = no hint
	Source HintSource //
}

// stated reports whether the hint is an upstream-stated reset that may exceed
// the operator's cooldown caps (up to maxStatedResetMs): headers and typed
// retry info are; prose is not.
func (h Hint) stated() bool { return h.Ms > 0 && (h.Source == HintHeader || h.Source == HintRetryInfo) }

// LockoutAction asks for a model lockout.
type LockoutAction struct {
	Scope  Scope  // ScopeNone (no lockout), ScopeModelFamily, ScopeExactModel or ScopeModel
	Reason Reason //
	// Generic lockouts apply only when modelLockout.enabled and the status is
	// in modelLockout.errorCodes; specific ones (per-model quota, local 404,
	// a rule with scope model, a long typed retry hint) always apply.
	Generic    bool
	CooldownMs int64 // a rule's fixed cooldown; 0 = escalate from the settings
}

// Verdict is classification's answer: every effect of one outcome.
type Verdict struct {
	Reason  Reason
	Scope   Scope // the layer the failure belongs to
	Breaker BreakerEffect
	Kind    FailureKind // with BreakerFailure
	// Transport failures are also deduplicated per provider (docs/classification.md#verdicts).
	Transport bool
	Conn      ConnAction
	Terminal  ConnStatus // with ConnTerminal
	// CooldownMs is ConnFixed's cooldown.
	CooldownMs int64
	// Escalate: the failure raises backoffLevel.
	Escalate bool
	Hint     Hint
	Lockout  LockoutAction
	Next     Next
	// WindowCounts: the failure counts in the optional provider cooldown
	// window gate (docs/breaker.md#provider-cooldown).
	WindowCounts bool
	// ClientStatus is the status the client sees if this is the final answer
	// (after restatement); ClientRetryAfterMs a retry hint for the client only.
	ClientStatus       int
	ClientRetryAfterMs int64
	// Rule names the restatement or provider rule that decided, if any.
	Rule string
	// Message is a short, credential-free description for lastError.
	Message string
}

// Relayable reports whether an upstream's final status can reach a client
// as an error answer: only 4xx and 5xx can. A redirect (never followed: a
// request is not sent where an upstream points), a 1xx that ended the head
// or a status of 600 and up would, relayed, tell the client to follow
// nothing or to switch protocols; the shells answer 502 instead.
func Relayable(status int) bool { return status >= 400 && status <= 599 }
