package model

import (
	"strings"
	"time"
)

// Retry hints (docs/cooldowns.md, docs/classification.md#failure-catalogue/docs/cooldowns.md#hints): when an upstream says when to
// come back. Everything here parses untrusted text, so every function is
// total: no input panics, numbers saturate instead of overflowing, and every
// hint is clamped to [0, maxHintMs].

// maxHintMs caps every parsed retry hint (30 days).
const maxHintMs int64 = 30 * 24 * hour

// satLimit bounds intermediate millisecond values (epoch instants included)
// far below int64 overflow.
const satLimit int64 = 1 << 53

// parseRetryAfter parses a Retry-After value and returns the wait in
// milliseconds from now, capped at maxHintMs:
//   - delta seconds, "120"; a decimal "1.5" is accepted too (1500 ms), and
//     sub-millisecond remainders round up;
//   - a duration with units, "30s", "5m", "2h", "1m30s", "500ms", "1.5s";
//   - an HTTP-date in any of the three HTTP formats (RFC 1123, RFC 850,
//     ANSI C asctime), giving max(0, date-now); a date in the past parses
//     (ok) as 0.
//
// Anything else (negative numbers, exponents, "NaN", trailing garbage) is
// not ok.
func parseRetryAfter(v string, now Time) (ms int64, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigit(v[0]) || v[0] == '.' {
		d, n, ok := parseDuration(v, true)
		if !ok || n != len(v) {
			return 0, false
		}
		return min(d, maxHintMs), true
	}
	if t, ok := parseHTTPDate(v); ok {
		return untilMs(t, now), true
	}
	return 0, false
}

// retryHint extracts the upstream's retry hint from a failed response. The
// first source yielding a positive wait wins:
//  1. headers (HintHeader): retry-after-ms, retry-after, x-ratelimit-reset,
//     x-ratelimit-reset-requests, x-ratelimit-reset-tokens, then the
//     anthropic-ratelimit-{unified,requests,tokens,input-tokens,output-tokens}-reset
//     headers;
//  2. a typed google.rpc.RetryInfo retryDelay in the body (HintRetryInfo);
//  3. reset prose in the body (HintBody), e.g. "please retry in 20s",
//     "try again at 2025-01-01T00:00:00Z", "resets in 3 hours".
//
// Only the first MaxBodyPrefix bytes of body are read. Every hint is capped at
// maxHintMs; a hint in the past is no hint.
func retryHint(h Headers, body string, now Time) Hint {
	if hint := headerHint(h, now); hint.Ms > 0 {
		return hint
	}
	t := text{s: strings.ToLower(bodyPrefix(body))}
	return bodyHint(&t, now)
}

// bodyPrefix is the part of an error body classification reads.
func bodyPrefix(body string) string {
	if len(body) > MaxBodyPrefix {
		return body[:MaxBodyPrefix]
	}
	return body
}

type hintHeaderKind uint8

const (
	hhMillis     hintHeaderKind = iota // a wait in milliseconds
	hhRetryAfter                       // parseRetryAfter
	hhReset                            // parseResetValue
)

type hintHeader struct {
	canon, lower string
	kind         hintHeaderKind
}

// hintHeaders in precedence order. Names are given canonical (for
// http.Header, whose Get would otherwise allocate to canonicalise) and lower
// case (for HeaderMap, looked up directly).
var hintHeaders = [...]hintHeader{
	{"Retry-After-Ms", "retry-after-ms", hhMillis},
	{"Retry-After", "retry-after", hhRetryAfter},
	{"X-Ratelimit-Reset", "x-ratelimit-reset", hhReset},
	{"X-Ratelimit-Reset-Requests", "x-ratelimit-reset-requests", hhReset},
	{"X-Ratelimit-Reset-Tokens", "x-ratelimit-reset-tokens", hhReset},
	{"Anthropic-Ratelimit-Unified-Reset", "anthropic-ratelimit-unified-reset", hhReset},
	{"Anthropic-Ratelimit-Requests-Reset", "anthropic-ratelimit-requests-reset", hhReset},
	{"Anthropic-Ratelimit-Tokens-Reset", "anthropic-ratelimit-tokens-reset", hhReset},
	{"Anthropic-Ratelimit-Input-Tokens-Reset", "anthropic-ratelimit-input-tokens-reset", hhReset},
	{"Anthropic-Ratelimit-Output-Tokens-Reset", "anthropic-ratelimit-output-tokens-reset", hhReset},
}

// fixedHeader is getHeader for a fixed name: canon is canonical as
// net/textproto writes it, so a CanonicalGetter looks it up as it is.
func fixedHeader(h Headers, canon, lower string) string {
	if c, ok := h.(CanonicalGetter); ok {
		return c.GetCanonical(canon)
	}
	return getHeader(h, canon, lower)
}

// getHeader reads one header; canon must be the canonical form of lower.
func getHeader(h Headers, canon, lower string) string {
	switch m := h.(type) {
	case nil:
		return ""
	case HeaderMap:
		return m[lower]
	}
	return h.Get(canon)
}

func headerHint(h Headers, now Time) Hint {
	if h == nil {
		return Hint{}
	}
	for i := range hintHeaders {
		hh := &hintHeaders[i]
		v := fixedHeader(h, hh.canon, hh.lower)
		if v == "" {
			continue
		}
		var ms int64
		switch hh.kind {
		case hhMillis:
			ms = parseMillisValue(v)
		case hhRetryAfter:
			ms, _ = parseRetryAfter(v, now)
		case hhReset:
			ms, _ = parseResetValue(v, now)
		}
		if ms > 0 {
			return Hint{Ms: min(ms, maxHintMs), Source: HintHeader}
		}
	}
	return Hint{}
}

// parseMillisValue parses a retry-after-ms value: a non-negative decimal
// number of milliseconds (rounded up).
func parseMillisValue(v string) int64 {
	v = strings.TrimSpace(v)
	d, n := scanDecimal(v)
	if n == 0 || n != len(v) {
		return 0
	}
	return min(d.times(1), maxHintMs)
}

// parseResetValue parses a reset header (x-ratelimit-reset*,
// anthropic-ratelimit-*-reset) into a wait from now:
//   - a bare number above 1e10 is epoch milliseconds, one of at least 1e9 is
//     epoch seconds, a smaller one is a relative number of seconds (an epoch
//     that small would lie in 2001 or before, so nobody means it);
//   - a duration with units ("1s", "6m0s", "1m30s", "20ms") is relative;
//   - an RFC 3339 / ISO 8601 timestamp or an HTTP-date is absolute.
func parseResetValue(v string, now Time) (int64, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigit(v[0]) {
		if d, n := scanDecimal(v); n == len(v) {
			switch {
			case d.i > 1e10:
				return untilMs(d.times(1), now), true
			case d.i >= 1e9:
				return untilMs(d.times(1000), now), true
			}
			return min(d.times(1000), maxHintMs), true
		}
		if ts, n, ok := parseTimestamp(v); ok && n == len(v) {
			return untilMs(ts, now), true
		}
		if d, n, ok := parseDuration(v, false); ok && n == len(v) {
			return min(d, maxHintMs), true
		}
		return 0, false
	}
	if t, ok := parseHTTPDate(v); ok {
		return untilMs(t, now), true
	}
	return 0, false
}

// untilMs is the wait from now to the instant ts (epoch ms), clamped to
// [0, maxHintMs] without overflowing for any now.
func untilMs(ts int64, now Time) int64 {
	n := int64(now)
	switch {
	case n < -satLimit:
		return maxHintMs
	case n > satLimit:
		return 0
	}
	return min(max(ts-n, 0), maxHintMs)
}

// ---- body hints ----

func bodyHint(t *text, now Time) Hint {
	if ms := retryInfoHint(t); ms > 0 {
		return Hint{Ms: min(ms, maxHintMs), Source: HintRetryInfo}
	}
	if ms := proseHint(t, now); ms > 0 {
		return Hint{Ms: min(ms, maxHintMs), Source: HintBody}
	}
	return Hint{}
}

// retryInfoHint finds a google.rpc.RetryInfo detail in a lower-cased JSON
// body and returns its retryDelay in ms. It is a structural scan rather than
// a JSON decode so that a body cut at MaxBodyPrefix still yields its hint:
// the detail is the innermost {...} object whose "@type" names retryinfo and
// that has a "retrydelay" key ("30s", "1.5s", "86399s", Nms|Ns|Nm|Nh or bare
// seconds; a {"seconds": N, "nanos": M} object also works). Gemini puts it in
// error.details[] or a root details[]; both are found.
func retryInfoHint(t *text) int64 {
	if !t.may(&retryInfoWord) {
		return 0
	}
	lower := t.s
	from := 0
	for tries := 0; tries < 8; tries++ {
		i := strings.Index(lower[from:], "retryinfo")
		if i < 0 {
			return 0
		}
		i += from
		from = i + len("retryinfo")
		start := strings.LastIndexByte(lower[:i], '{')
		if start < 0 || !strings.Contains(lower[start:i], `"@type"`) {
			continue
		}
		end := len(lower)
		if j := strings.IndexByte(lower[i:], '}'); j >= 0 {
			end = i + j
		}
		obj := lower[start:end]
		k := strings.Index(obj, `"retrydelay"`)
		if k < 0 {
			continue
		}
		// A nested {"seconds": ...} value ends obj at its own '}', so look
		// at the rest of the body from the key on.
		if ms := retryDelayValue(lower[start+k+len(`"retrydelay"`):]); ms > 0 {
			return ms
		}
	}
	return 0
}

// retryDelayValue parses the value after a "retrydelay" key: `: "30s"`,
// `: 30` or `: {"seconds": "30", "nanos": 0}`.
func retryDelayValue(s string) int64 {
	s = trimLeftJSON(s)
	if s == "" || s[0] != ':' {
		return 0
	}
	s = trimLeftJSON(s[1:])
	if s == "" {
		return 0
	}
	switch {
	case s[0] == '"':
		end := strings.IndexByte(s[1:], '"')
		if end < 0 {
			return 0
		}
		v := strings.TrimSpace(s[1 : 1+end])
		if d, n, ok := parseDuration(v, true); ok && n == len(v) {
			return d
		}
	case isDigit(s[0]):
		if d, _, ok := parseDuration(s, true); ok {
			return d
		}
	case s[0] == '{':
		end := strings.IndexByte(s, '}')
		if end < 0 {
			end = len(s)
		}
		obj := s[:end]
		k := strings.Index(obj, `"seconds"`)
		if k < 0 {
			return 0
		}
		v := trimLeftJSON(obj[k+len(`"seconds"`):])
		if v == "" || v[0] != ':' {
			return 0
		}
		v = strings.TrimLeft(trimLeftJSON(v[1:]), `"`)
		d, n := scanDecimal(v)
		if n == 0 {
			return 0
		}
		ms := d.times(1000)
		if k := strings.Index(obj, `"nanos"`); k >= 0 {
			nv := trimLeftJSON(obj[k+len(`"nanos"`):])
			if nv != "" && nv[0] == ':' {
				nd, nn := scanDecimal(strings.TrimLeft(trimLeftJSON(nv[1:]), `"`))
				if nn > 0 && nd.i > 0 {
					ms = satAdd(ms, (min(nd.i, 999_999_999)+999_999)/1_000_000)
				}
			}
		}
		return ms
	}
	return 0
}

func trimLeftJSON(s string) string { return strings.TrimLeft(s, " \t\r\n") }

var retryInfoWord = mkPhrase("retryinfo")

// proseKind says how the text after an anchor is read.
type proseKind uint8

const (
	proseAt       proseKind = iota // an absolute ISO 8601 timestamp
	proseIn                        // a duration with units
	proseInOrBare                  // a duration, or a bare number of seconds
)

type proseAnchor struct {
	p    phrase
	kind proseKind
}

// proseAnchors in precedence order (docs/cooldowns.md#hints): absolute
// timestamps first, then reset countdowns, then retry-in phrases. Every
// occurrence of an anchor is tried before the next anchor.
var proseAnchors = [...]proseAnchor{
	{mkPhrase("try again at"), proseAt},
	{mkPhrase("wait until"), proseAt},
	{mkPhrase("resets at"), proseAt},
	{mkPhrase("reset at"), proseAt},
	{mkPhrase("available at"), proseAt},
	{mkPhrase("retry after"), proseAt},
	{mkPhrase("reset after"), proseIn}, // also "will reset after", "resets after" is below
	{mkPhrase("resets after"), proseIn},
	{mkPhrase("resets in"), proseIn},
	{mkPhrase("reset in"), proseIn},
	{mkPhrase("retry in"), proseInOrBare}, // also "please retry in"
	{mkPhrase("retry after"), proseInOrBare},
	{mkPhrase("try again in"), proseInOrBare},
}

// proseHint reads reset prose from a lower-cased body.
func proseHint(t *text, now Time) int64 {
	lower := t.s
	for ai := range proseAnchors {
		a := &proseAnchors[ai]
		if !t.may(&a.p) {
			continue
		}
		from := 0
		for tries := 0; tries < 4 && from < len(lower); tries++ {
			i := strings.Index(lower[from:], a.p.s)
			if i < 0 {
				break
			}
			rest := lower[from+i+len(a.p.s):]
			from += i + len(a.p.s)
			rest = strings.TrimLeft(rest, " \t:")
			var ms int64
			switch a.kind {
			case proseAt:
				if ts, _, ok := parseTimestamp(rest); ok {
					ms = untilMs(ts, now)
				}
			default:
				if d, _, ok := parseDuration(rest, a.kind == proseInOrBare); ok {
					ms = d
				}
			}
			if ms > 0 {
				return min(ms, maxHintMs)
			}
		}
	}
	return 0
}

// ---- number, duration and timestamp scanners ----

func isDigit(b byte) bool  { return b >= '0' && b <= '9' }
func isLetter(b byte) bool { return b|0x20 >= 'a' && b|0x20 <= 'z' }

// decimal is a scanned non-negative decimal number: i + f/fd, with at most 9
// fractional digits kept; tail records a non-zero digit beyond those.
type decimal struct {
	i, f, fd int64
	tail     bool
}

// scanDecimal scans digits[.digits] at the start of s. The integer part
// saturates at satLimit. n is the number of bytes consumed (0: no number).
func scanDecimal(s string) (d decimal, n int) {
	d.fd = 1
	for n < len(s) && isDigit(s[n]) {
		if d.i < satLimit {
			d.i = d.i*10 + int64(s[n]-'0')
		}
		n++
	}
	intDigits := n
	if n < len(s) && s[n] == '.' && n+1 < len(s) && isDigit(s[n+1]) {
		n++
		for n < len(s) && isDigit(s[n]) {
			if d.fd < 1e9 {
				d.f = d.f*10 + int64(s[n]-'0')
				d.fd *= 10
			} else if s[n] != '0' {
				d.tail = true
			}
			n++
		}
	} else if intDigits == 0 {
		return decimal{}, 0
	}
	return d, n
}

// times converts the number of units (unit ms each) to ms, rounding any
// sub-millisecond remainder up and saturating at satLimit.
func (d decimal) times(unit int64) int64 {
	if unit <= 0 {
		return 0
	}
	if d.i > satLimit/unit {
		return satLimit
	}
	ms := d.i * unit
	if d.f > 0 || d.tail {
		frac := d.f * unit // f < 1e9 and unit <= 1 day: no overflow
		q := frac / d.fd
		if frac%d.fd != 0 || d.tail {
			q++
		}
		ms += q
	}
	return min(ms, satLimit)
}

func satAdd(a, b int64) int64 {
	if a > satLimit-b {
		return satLimit
	}
	return a + b
}

// unitMs maps a lower-case duration unit word to milliseconds.
func unitMs(u string) int64 {
	switch u {
	case "ms", "msec", "msecs", "millisecond", "milliseconds":
		return 1
	case "s", "sec", "secs", "second", "seconds":
		return second
	case "m", "min", "mins", "minute", "minutes":
		return minute
	case "h", "hr", "hrs", "hour", "hours":
		return hour
	case "d", "day", "days":
		return 24 * hour
	}
	return 0
}

// parseDuration reads a duration at the start of s (after optional spaces):
// one or more "<number><unit>" terms, optionally separated by spaces, commas
// or "and" ("1h30m", "1m 30s", "2 hours and 5 minutes", "1.5s", "20ms").
// Units are case-sensitive lower-case words (callers pass lower-cased text
// or header values, which use lower-case units). With bare, a lone number
// without a unit is seconds. It reports the bytes consumed; ok is false
// when no term parsed.
func parseDuration(s string, bare bool) (ms int64, n int, ok bool) {
	i := skipSpaces(s, 0)
	terms := 0
	for {
		d, k := scanDecimal(s[i:])
		if k == 0 {
			break
		}
		j := i + k
		u0 := skipSpaces(s, j)
		u1 := u0
		for u1 < len(s) && isLetter(s[u1]) {
			u1++
		}
		if u1 == u0 {
			// A bare number is seconds, unless it is the start of a date,
			// a clock time or a fraction ("2025-01-01", "12:30", "1/2").
			if terms == 0 && bare && (j == len(s) || !strings.ContainsRune("-:/", rune(s[j]))) {
				return min(d.times(second), satLimit), j, true
			}
			break
		}
		unit := unitMs(s[u0:u1])
		if unit == 0 {
			break
		}
		ms = satAdd(ms, d.times(unit))
		terms++
		i = u1
		// Separators before a further term; only consumed if one follows.
		k2 := skipSpaces(s, i)
		if k2 < len(s) && s[k2] == ',' {
			k2 = skipSpaces(s, k2+1)
		}
		if strings.HasPrefix(s[k2:], "and ") {
			k2 = skipSpaces(s, k2+4)
		}
		if k2 >= len(s) || !isDigit(s[k2]) {
			break
		}
		i = k2
	}
	if terms == 0 {
		return 0, 0, false
	}
	return ms, i, true
}

func skipSpaces(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// parseTimestamp reads an ISO 8601 / RFC 3339 timestamp at the start of s:
// YYYY-MM-DD, optionally followed by [T or space]HH:MM[:SS[.frac]] and a zone
// (Z, ±HH:MM, ±HHMM, ±HH, UTC or GMT). A timestamp without a zone is UTC.
// Letters may be either case. It returns epoch milliseconds and the bytes
// consumed.
func parseTimestamp(s string) (ms int64, n int, ok bool) {
	y, ok1 := digitsAt(s, 0, 4)
	mo, ok2 := digitsAt(s, 5, 2)
	d, ok3 := digitsAt(s, 8, 2)
	if !ok1 || !ok2 || !ok3 || s[4] != '-' || s[7] != '-' || mo < 1 || mo > 12 || d < 1 || d > 31 {
		return 0, 0, false
	}
	c, n := parseClock(s, 10)
	offset, n := parseZone(s, n)
	t := time.Date(y, time.Month(mo), d, c.hh, c.mm, c.ss, c.nanos, time.UTC)
	return t.UnixMilli() - int64(offset)*1000, n, true
}

// digitsAt reads width decimal digits of s at at.
func digitsAt(s string, at, width int) (int, bool) {
	if at+width > len(s) {
		return 0, false
	}
	v := 0
	for k := at; k < at+width; k++ {
		if !isDigit(s[k]) {
			return 0, false
		}
		v = v*10 + int(s[k]-'0')
	}
	return v, true
}

// clock is a timestamp's time of day.
type clock struct{ hh, mm, ss, nanos int }

// parseClock reads the optional [T or space]HH:MM[:SS[.frac]] of a
// timestamp at s[n:]; it returns midnight and n when there is none.
func parseClock(s string, n int) (clock, int) {
	var c clock
	if n+6 > len(s) || (s[n] != 't' && s[n] != 'T' && s[n] != ' ') || !isDigit(s[n+1]) {
		return c, n
	}
	h, okh := digitsAt(s, n+1, 2)
	m, okm := digitsAt(s, n+4, 2)
	if !okh || !okm || s[n+3] != ':' || h >= 24 || m >= 60 {
		return c, n
	}
	c.hh, c.mm = h, m
	n += 6
	if n+3 > len(s) || s[n] != ':' {
		return c, n
	}
	sec, oks := digitsAt(s, n+1, 2)
	if !oks || sec > 60 {
		return c, n
	}
	c.ss = sec
	n += 3
	if n+1 < len(s) && (s[n] == '.' || s[n] == ',') && isDigit(s[n+1]) {
		n++
		scale := 100_000_000
		for n < len(s) && isDigit(s[n]) {
			c.nanos += int(s[n]-'0') * scale
			scale /= 10
			n++
		}
	}
	return c, n
}

// parseZone reads the optional zone of a timestamp at s[n:] (Z, ±HH:MM,
// ±HHMM, ±HH, UTC or GMT): seconds east of UTC and the new n.
func parseZone(s string, n int) (offset, next int) {
	switch {
	case n < len(s) && (s[n] == 'z' || s[n] == 'Z'):
		n++
	case n < len(s) && (s[n] == '+' || s[n] == '-') && n > 10:
		sign := 1
		if s[n] == '-' {
			sign = -1
		}
		if oh, okh := digitsAt(s, n+1, 2); okh && oh < 24 {
			om := 0
			k := n + 3
			if k < len(s) && s[k] == ':' {
				if v, okm := digitsAt(s, k+1, 2); okm {
					om, k = v, k+3
				}
			} else if v, okm := digitsAt(s, k, 2); okm {
				om, k = v, k+2
			}
			if om < 60 {
				offset = sign * (oh*3600 + om*60)
				n = k
			}
		}
	default:
		k := skipSpaces(s, n)
		if k+3 <= len(s) {
			switch strings.ToLower(s[k : k+3]) {
			case "utc", "gmt":
				n = k + 3
			}
		}
	}
	return offset, n
}

// httpDateLayouts are the three date formats HTTP/1.1 allows (RFC 9110 §5.6.7).
var httpDateLayouts = [...]string{
	"Mon, 02 Jan 2006 15:04:05 GMT",  // IMF-fixdate (RFC 1123)
	"Monday, 02-Jan-06 15:04:05 GMT", // RFC 850
	"Mon Jan _2 15:04:05 2006",       // ANSI C asctime
}

// parseHTTPDate parses an HTTP-date into epoch milliseconds.
func parseHTTPDate(v string) (int64, bool) {
	if len(v) < 24 || len(v) > 40 || !isLetter(v[0]) {
		return 0, false
	}
	for _, layout := range httpDateLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UnixMilli(), true
		}
	}
	return 0, false
}
