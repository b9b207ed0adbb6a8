package store

import (
	"encoding/binary"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// LogRecord is one upstream attempt in the request log (docs/store.md#request-log). It
// never holds a prompt or a completion.
type LogRecord struct {
	Time       time.Time `json:"time"`
	RequestID  string    `json:"requestId,omitempty"`
	Provider   string    `json:"provider"`
	Connection string    `json:"connection"`
	Model      string    `json:"model,omitempty"`
	// Route is the model the client asked for (a combo id, an alias or
	// provider/model): an export replays the request to it, so a combo
	// request its first target served still falls back in the replay.
	Route       string `json:"route,omitempty"`
	Status      int    `json:"status"`
	LatencyMs   int64  `json:"latencyMs"`
	FirstByteMs int64  `json:"firstByteMs,omitempty"` // 0 = no byte came
	ErrorType   string `json:"errorType,omitempty"`   // transport / timeout / upstream status class
	Reason      string `json:"reason,omitempty"`      // the verdict reason (model.Reason name)
	EgressIP    string `json:"egressIp,omitempty"`
	// Headers keeps only the classification-relevant response headers
	// (retry-after*, x-ratelimit-*, provider reset headers); LogAttempt
	// drops the rest.
	Headers map[string]string `json:"headers,omitempty"`
	// ErrorBody is the first 2 KB of an error body, redacted.
	ErrorBody string `json:"errorBody,omitempty"`
}

// LogQuery selects request log records, newest first.
type LogQuery struct {
	Since, Until time.Time // zero = unbounded
	Provider     string
	Connection   string
	// RequestID keeps one request's attempts: the id as the request log
	// keeps it (a client's X-Request-Id, redacted when it is shaped like a
	// key, or the gateway's own).
	RequestID string
	Limit     int // default 1000, at most 100 000
}

const (
	maxErrorBody   = 2048
	maxHeaderValue = 256
	// logRingSize is how many records the memory store keeps.
	logRingSize = 10_000
)

// classificationHeaderPrefixes are the response headers worth keeping:
// they are what classification read (docs/store.md#request-log).
var classificationHeaderPrefixes = []string{
	"retry-after", "x-ratelimit-", "x-rate-limit-", "ratelimit", "anthropic-ratelimit-",
	"x-request-id", "request-id",
}

// sanitize prepares a record for storage: headers filtered and redacted,
// the error body cut to 2 KB and redacted. It is what makes the log safe to
// export, so both stores run it before keeping anything.
func sanitize(r LogRecord) LogRecord {
	if len(r.Headers) > 0 {
		h := make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			lk := strings.ToLower(k)
			if !slices.ContainsFunc(classificationHeaderPrefixes, func(p string) bool { return strings.HasPrefix(lk, p) }) {
				continue
			}
			h[storableText(lk)] = storableText(truncateUTF8(Redact(v), maxHeaderValue))
		}
		r.Headers = h
	}
	if r.ErrorBody != "" {
		// Redact a little more than we keep, so a key cut at the boundary is
		// still recognised whole.
		r.ErrorBody = storableText(truncateUTF8(Redact(truncateUTF8(r.ErrorBody, 2*maxErrorBody)), maxErrorBody))
	}
	r.RequestID, r.Provider, r.Connection = storableText(r.RequestID), storableText(r.Provider), storableText(r.Connection)
	r.Model, r.Route = storableText(r.Model), storableText(r.Route)
	r.ErrorType, r.Reason = storableText(r.ErrorType), storableText(r.Reason)
	r.EgressIP = storableText(r.EgressIP)
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	r.Time = r.Time.UTC()
	return r
}

// storableText returns s as Postgres text can hold it: valid UTF-8 with no
// NUL byte. A client's X-Request-Id or an upstream's error body may carry
// either; Postgres refuses the whole COPY batch for one such value, and the
// log writer would retry that batch for ever while every later record
// waited behind it. Both stores keep the same text.
func storableText(s string) string {
	// The common value (an id, a name, an error type) is short ASCII
	// without NUL, kept as it is after one pass over it, instead of the
	// UTF-8 check and the NUL search each with a call per field of every
	// record.
	if len(s) <= 64 && plainASCII(s) || utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// plainASCII reports whether every byte of s is in 0x01..0x7f. It reads
// eight bytes at a time: a byte of w is 0 or has its high bit set exactly
// when its bit 7 is set in (w - 0x01…01) | w (no byte borrows from the
// next when none is 0; the lowest 0 byte borrows and sets its bit 7).
func plainASCII(s string) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for len(s) >= 8 {
		w := binary.LittleEndian.Uint64([]byte(s[:8]))
		if ((w-lo)|w)&hi != 0 {
			return false
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == 0 || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

const redacted = "[REDACTED]"

var redactions = []struct {
	re   *regexp.Regexp
	repl string
}{
	// key=value and "key": "value" pairs whose name says secret
	{regexp.MustCompile(`(?i)("?(?:api[_-]?key|apikey|access[_-]?token|refresh[_-]?token|id[_-]?token|secret|password|passwd|authorization|x-api-key|x-goog-api-key|token|session[_-]?id|lease[_-]?owner)"?\s*[:=]\s*"?)([^"\s,;&}]+)`), "${1}" + redacted},
	// bearer / basic credentials
	{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}`), "${1} " + redacted},
	// well-known key shapes
	{regexp.MustCompile(`\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}`), redacted},
	{regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{20,}`), redacted},
	{regexp.MustCompile(`\b(?:ghp|gho|ghu|ghs|github_pat|xox[abpr]|vlo)_[A-Za-z0-9_-]{8,}`), redacted},
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`), redacted}, // JWT
	// any long opaque token
	{regexp.MustCompile(`[A-Za-z0-9_+/-]{32,}={0,2}`), redacted},
}

// Redact replaces anything in s that looks like a key, a token or a
// password with [REDACTED].
func Redact(s string) string {
	for _, r := range redactions {
		s = r.re.ReplaceAllString(s, r.repl)
	}
	return s
}

func (q LogQuery) matches(r LogRecord) bool {
	return (q.Since.IsZero() || !r.Time.Before(q.Since)) && (q.Until.IsZero() || r.Time.Before(q.Until)) &&
		(q.Provider == "" || r.Provider == q.Provider) && (q.Connection == "" || r.Connection == q.Connection) &&
		(q.RequestID == "" || r.RequestID == q.RequestID)
}

func clampLimit(n int) int {
	if n <= 0 {
		return 1000
	}
	return min(n, 100_000)
}

// OperatorAction is the ErrorType of a request log record that is no
// attempt but an operator's action through the management API (a breaker
// reset, cleared cooldowns or lockouts, a connection reset or test, a
// settings patch, a provider's new credentials). Reason names the action
// as a scenario's `actions:` does (reset-breaker, clear-cooldowns,
// reset-connection, clear-lockout, connection-test, set); Provider,
// Connection and Model name what it applied to ("" = all); ErrorBody holds
// its parameters as JSON (a settings patch, the connections a clear named).
// An incident export replays them as the scenario's actions.
const OperatorAction = "operator"
