package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// errNotLoopback refuses any connection that would leave the machine.
var errNotLoopback = errors.New("chaos: refusing a non-loopback address (chaos traffic stays on 127.0.0.1)")

// loopbackDialer dials loopback addresses only: the check runs on the
// resolved address, just before connect, so no name can smuggle traffic out.
func loopbackDialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return fmt.Errorf("%w: %s", errNotLoopback, address)
			}
			return nil
		}}
}

// newClient returns an HTTP client that only reaches loopback addresses.
func newClient(maxConns int) *http.Client {
	tr := &http.Transport{
		DialContext:         loopbackDialer(5 * time.Second).DialContext,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func closeIdle(c *http.Client) {
	if tr, ok := c.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// checkLoopbackURL refuses a URL whose host is not a loopback address.
func checkLoopbackURL(what, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("%s: want an http:// URL on loopback, got %q", what, raw)
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%s: %q is not a loopback address: chaos runs stay on 127.0.0.1", what, raw)
	}
	return u, nil
}

// Kind is the kind of a request's outcome.
type Kind uint8

const (
	// KindSuccess: a complete answer (a chat completion, or a stream that
	// ended with [DONE]).
	KindSuccess Kind = iota
	// KindTypedError: a non-2xx answer with an OpenAI-shaped error body.
	KindTypedError
	// KindStreamError: a stream that ended with an explicit error event.
	KindStreamError
	// KindViolation: anything else — a hang, a lost request, a truncated
	// success, an untyped error.
	KindViolation
	// KindAborted: the run was interrupted (Ctrl-C, SIGTERM) while the
	// request was in flight; it is not judged.
	KindAborted
)

var kindNames = []string{"success", "typed_error", "stream_error", "violation", "aborted"}

func (k Kind) String() string { return kindNames[k] }

// Per-request invariant names (a violation names the one it broke).
const (
	InvDeadline   = "requests-end-within-deadline"
	InvTyped      = "typed-outcome"
	InvTruncated  = "no-truncated-success"
	InvRetryAfter = "retry-after-when-known"
)

// Outcome is one client request's outcome.
type Outcome struct {
	Model    string
	Stream   bool
	Start    time.Time // when the request was due (open loop) or sent
	End      time.Time
	Status   int
	Kind     Kind
	Class    string // "200", "503:provider_circuit_open", "stream_error:stream_stall", ...
	Provider string // X-Breakwater-Provider
	Conn     string // X-Breakwater-Connection
	Attempts string // X-Breakwater-Attempts
	// Violation names the invariant broken (Kind == KindViolation, or a
	// success/typed error that still broke a header rule), Detail says how.
	Violation string
	Detail    string
}

// Latency is the request's duration from when it was due.
func (r *Outcome) Latency() time.Duration { return r.End.Sub(r.Start) }

// requester sends chat requests to a gateway and judges the answers.
type requester struct {
	client   *http.Client
	base     func() string // the gateway's base URL (changes on restart)
	key      string        // client key ("" = open gateway)
	deadline time.Duration
	// onFirst, when set, is called once per stream at its first content
	// event (the heap run's barrier).
	onFirst func()
}

func chatBody(model string, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{"model": model, "stream": stream, "max_tokens": 16,
		"messages": []map[string]string{{"role": "user", "content": "chaos"}}})
	return b
}

// do sends one request and classifies its outcome. due is when the
// request was due (latency counts from there).
func (q *requester) do(ctx context.Context, model string, stream bool, due time.Time) Outcome {
	res := q.send(ctx, model, stream, due)
	if res.Kind == KindViolation && ctx.Err() != nil {
		// The run stopped, not the gateway: what the request saw proves nothing.
		res.Kind, res.Violation, res.Class, res.Detail = KindAborted, "", "aborted", "the run was interrupted while the request was in flight"
	}
	return res
}

func (q *requester) send(ctx context.Context, model string, stream bool, due time.Time) Outcome {
	res := Outcome{Model: model, Stream: stream, Start: due}
	rctx, cancel := context.WithTimeout(ctx, q.deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, q.base()+"/v1/chat/completions", bytes.NewReader(chatBody(model, stream)))
	if err != nil {
		res.End = time.Now()
		res.Kind, res.Violation, res.Detail = KindViolation, InvTyped, err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	if q.key != "" {
		req.Header.Set("Authorization", "Bearer "+q.key)
	}
	resp, err := q.client.Do(req)
	if err != nil {
		res.End = time.Now()
		res.Class = "no_response"
		res.Kind = KindViolation
		if ctx.Err() == nil && rctx.Err() != nil {
			res.Violation, res.Detail = InvDeadline, fmt.Sprintf("no response headers within the client deadline %v", q.deadline)
		} else {
			res.Violation, res.Detail = InvTyped, "lost: "+err.Error()
		}
		return res
	}
	res.Status = resp.StatusCode
	res.Provider = resp.Header.Get("X-Breakwater-Provider")
	res.Conn = resp.Header.Get("X-Breakwater-Connection")
	res.Attempts = resp.Header.Get("X-Breakwater-Attempts")
	judgeResponse(resp, stream, &res, q.onFirst)
	resp.Body.Close()
	res.End = time.Now()
	if res.Kind == KindViolation && res.Violation != InvDeadline && ctx.Err() == nil && rctx.Err() != nil {
		res.Violation, res.Detail = InvDeadline, fmt.Sprintf("the answer did not end within the client deadline %v (%s)", q.deadline, res.Detail)
	}
	return res
}

// judgeResponse reads an answer to the end and classifies it. It is the
// per-request invariant check: a success must be complete, an error must be
// typed, a stream must end with [DONE] or an error event.
func judgeResponse(resp *http.Response, stream bool, res *Outcome, onFirst func()) {
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(ct, "text/event-stream") {
		judgeStream(resp.Body, res, onFirst)
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode == http.StatusOK {
		res.Class = "200"
		if stream {
			res.Kind, res.Violation, res.Detail = KindViolation, InvTruncated, fmt.Sprintf("a stream request got 200 with Content-Type %q, not an event stream", ct)
			return
		}
		if err != nil {
			res.Kind, res.Violation, res.Detail = KindViolation, InvTruncated, "200 body cut: "+err.Error()
			return
		}
		if msg := completeCompletion(body); msg != "" {
			res.Kind, res.Violation, res.Detail = KindViolation, InvTruncated, msg
			return
		}
		res.Kind = KindSuccess
		return
	}
	res.Class = strconv.Itoa(resp.StatusCode)
	if err != nil {
		res.Kind, res.Violation, res.Detail = KindViolation, InvTyped, fmt.Sprintf("%d body cut: %v", resp.StatusCode, err)
		return
	}
	code, msg := typedError(body)
	if msg != "" {
		res.Kind, res.Violation, res.Detail = KindViolation, InvTyped, fmt.Sprintf("%d without an OpenAI-shaped error body: %s (%s)", resp.StatusCode, msg, snippet(body))
		return
	}
	res.Kind = KindTypedError
	res.Class += ":" + code
	if needsRetryAfter(resp.StatusCode, code) && resp.Header.Get("Retry-After") == "" {
		res.Violation, res.Detail = InvRetryAfter, fmt.Sprintf("%d %s without Retry-After", resp.StatusCode, code)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		res.Kind, res.Violation, res.Detail = KindViolation, InvTruncated, fmt.Sprintf("%d with an error body", resp.StatusCode)
	}
}

// needsRetryAfter: the gateway's own typed unavailability answers always
// know when to come back (docs/errors.md: "503 + Retry-After", "429 +
// Retry-After").
func needsRetryAfter(status int, code string) bool {
	switch code {
	case "provider_circuit_open", "all_targets_cooling_down", "model_cooldown", "SEMAPHORE_TIMEOUT", "RATE_LIMIT_QUEUE_TIMEOUT":
		return status == 503 || status == 429
	}
	return false
}

// completeCompletion checks a 200 JSON body is a whole chat completion;
// it returns what is wrong, or "".
func completeCompletion(body []byte) string {
	var c struct {
		Choices []struct {
			Message *struct {
				Content *string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		return "200 body is not a JSON chat completion (" + err.Error() + "): " + snippet(body)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return "200 with an error body: " + snippet(body)
	}
	if len(c.Choices) == 0 || c.Choices[0].Message == nil || c.Choices[0].Message.Content == nil {
		return "200 without choices[0].message.content: " + snippet(body)
	}
	return ""
}

// typedError checks an OpenAI-shaped error body {"error":{"message",
// "type","code"}} and returns its code (or type); msg says what is wrong.
func typedError(body []byte) (code, msg string) {
	var e struct {
		Error *struct {
			Message *string         `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return "", "not JSON"
	}
	if e.Error == nil {
		return "", "no error object"
	}
	if e.Error.Message == nil || *e.Error.Message == "" {
		return "", "error.message missing"
	}
	c := strings.Trim(string(e.Error.Code), `"`)
	if c == "null" {
		c = ""
	}
	if c == "" {
		c = e.Error.Type
	}
	if c == "" {
		return "", "neither error.code nor error.type"
	}
	return c, ""
}

func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 160 {
		return string(b[:160]) + "…"
	}
	return string(b)
}

// judgeStream reads an SSE answer to its end. A success ends with
// data: [DONE] after at least one content event; a stream error ends with
// an error event; anything else is a truncated success.
func judgeStream(body io.Reader, res *Outcome, onFirst func()) {
	br := bufio.NewReaderSize(body, 4096)
	var data []byte
	events, content := 0, 0
	done, errEvent := false, ""
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A long line: keep the start, skip the rest.
			data = append(data, bytes.TrimPrefix(line, []byte("data:"))...)
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			line = nil
		}
		if len(line) > 0 {
			t := bytes.TrimRight(line, "\r\n")
			switch {
			case len(t) == 0:
				if len(data) > 0 {
					events++
					d := bytes.TrimSpace(data)
					switch {
					case bytes.Equal(d, []byte("[DONE]")):
						done = true
					case bytes.Contains(d, []byte(`"error"`)) && isErrorEvent(d):
						code, _ := typedError(d)
						if code == "" {
							code = "untyped"
						}
						errEvent = code
					case bytes.Contains(d, []byte(`"content"`)):
						content++
						if content == 1 && onFirst != nil {
							onFirst()
						}
					}
					data = data[:0]
				}
			case t[0] == ':':
			case bytes.HasPrefix(t, []byte("data:")):
				if len(data) > 0 {
					data = append(data, '\n')
				}
				data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(t, []byte("data:")), []byte(" "))...)
			}
		}
		if err != nil {
			if err != io.EOF {
				res.Kind, res.Violation = KindViolation, InvTruncated
				res.Class = "stream_cut"
				res.Detail = fmt.Sprintf("the stream broke after %d events without [DONE] or an error event: %v", events, err)
				return
			}
			break
		}
	}
	switch {
	case errEvent != "":
		res.Kind, res.Class = KindStreamError, "stream_error:"+errEvent
	case done && content > 0:
		res.Kind, res.Class = KindSuccess, "200 stream"
	case done:
		res.Kind, res.Violation, res.Class = KindViolation, InvTruncated, "stream_empty"
		res.Detail = fmt.Sprintf("a stream ended with [DONE] but no content (%d events)", events)
	default:
		res.Kind, res.Violation, res.Class = KindViolation, InvTruncated, "stream_no_done"
		res.Detail = fmt.Sprintf("the stream ended after %d events (%d with content) without [DONE] or an error event", events, content)
	}
}

func isErrorEvent(d []byte) bool {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal(d, &e) == nil && len(e.Error) > 0 && string(e.Error) != "null"
}
