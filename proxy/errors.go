package proxy

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/apierr"
	"github.com/breakwater-gw/breakwater/store"
)

// apiError is the OpenAI-shaped error body {"error":{...}} (docs/api.md).
type apiError = apierr.Error

type problem = apierr.Problem

type excludedView struct {
	Provider          string `json:"provider"`
	Connection        string `json:"connection,omitempty"`
	Model             string `json:"model"`
	Reason            string `json:"reason"`
	LockReason        string `json:"lockReason,omitempty"`
	RemainingMs       int64  `json:"remainingMs,omitempty"`
	RetryAfterSeconds int64  `json:"retryAfterSeconds,omitempty"`
}

type diagnostics struct {
	Excluded       []excludedView `json:"excluded"`
	TerminalReason string         `json:"terminalReason"`
}

type errorBody struct {
	Error       apiError     `json:"error"`
	Diagnostics *diagnostics `json:"diagnostics,omitempty"`
}

// openAIRefuse answers a request the gateway refuses before any attempt
// on an OpenAI surface (Responses, embeddings), with the code OpenAI uses
// for the status: a missing or wrong key is invalid_api_key, as on chat.
func openAIRefuse(w http.ResponseWriter) func(status int, msg string) {
	return func(status int, msg string) {
		code := "invalid_request"
		if status == http.StatusUnauthorized {
			code = "invalid_api_key"
		}
		writeError(w, status, code, msg)
	}
}

func typeForStatus(status int) string { return apierr.TypeForStatus(status) }

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) { apierr.WriteJSON(w, status, v) }

// writeError writes a plain typed error of the gateway itself.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	apierr.Write(w, status, code, msg)
}

// writeModelError writes one of the model's typed answers (docs/errors.md), with
// Retry-After whenever a recovery time is known and diagnostics.excluded for
// all_targets_cooling_down.
func writeModelError(w http.ResponseWriter, e *model.Error) int {
	status := e.Code.HTTPStatus()
	body := errorBody{Error: apiError{Message: e.Message, Type: e.Code.Type(), Code: string(e.Code), Provider: e.Provider, Model: e.Model}}
	if s := e.RetryAfterSeconds(); s > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(s, 10))
		body.Error.RetryAfter = s
	}
	if len(e.Excluded) > 0 {
		d := &diagnostics{TerminalReason: string(e.Code)}
		for _, x := range e.Excluded {
			v := excludedView{Provider: x.Provider, Connection: x.Connection, Model: x.Model, Reason: x.Reason.String(),
				LockReason: x.LockReason.String(), RemainingMs: x.RemainingMs}
			if x.RemainingMs > 0 {
				v.RetryAfterSeconds = max(1, (x.RemainingMs+999)/1000)
			}
			d.Excluded = append(d.Excluded, v)
		}
		body.Diagnostics = d
	}
	writeJSON(w, status, body)
	return status
}

var secretPattern = regexp.MustCompile(`(?i)\b(sk|pk|rk|ak|key)[-_][A-Za-z0-9_\-\*\.]{6,}|\bBearer\s+[A-Za-z0-9_\-\.=]{8,}`)

// redact removes the connection's credential and anything that looks like
// a key from an upstream body before it reaches a client or a log.
func redact(body []byte, secret string) []byte {
	s := string(body)
	if secret != "" && strings.Contains(s, secret) {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	if secretPattern.MatchString(s) {
		s = secretPattern.ReplaceAllString(s, "[redacted]")
	}
	// The request log's rules too (key=value pairs named secret, bearer
	// and basic credentials, known key shapes, long opaque tokens such as
	// a lease owner): a client never sees what the log would hide.
	return []byte(store.Redact(s))
}

// clientErrorBody returns an upstream error body in the shape the client API
// promises (docs/api.md: {"error":{"message","type","code"}}), or nil when b
// carries no usable message (the caller then writes the gateway's own
// error). A body already in that shape goes out as it came (it may carry
// the provider's param and code). Anthropic's {"type":"error","error":
// {"type","message"}}, Gemini's {"error":{"code":429,"message","status"}}
// and a bare {"error":"text"} are rewritten with their message and their
// own type or status as the code. Only the client's copy changes: the model
// classified the native body.
func clientErrorBody(b []byte, status int, provider string) []byte {
	var top struct {
		Type  json.RawMessage `json:"type"` // Anthropic's envelope has one
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &top) != nil || len(top.Error) == 0 {
		return nil
	}
	out := apiError{Type: typeForStatus(status), Code: "upstream_error", Provider: provider}
	var text string
	if json.Unmarshal(top.Error, &text) == nil {
		if text == "" {
			return nil
		}
		out.Message = text
	} else {
		var e struct {
			Message *string         `json:"message"`
			Type    *string         `json:"type"`
			Status  string          `json:"status"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(top.Error, &e) != nil || e.Message == nil {
			return nil
		}
		if e.Type != nil && len(e.Code) > 0 && len(top.Type) == 0 {
			return b
		}
		out.Message = *e.Message
		var code string
		switch {
		case json.Unmarshal(e.Code, &code) == nil && code != "":
			out.Code = code
		case e.Status != "":
			out.Code = e.Status
		case e.Type != nil && *e.Type != "":
			out.Code = *e.Type
		}
		if e.Type != nil && *e.Type != "" {
			out.Type = *e.Type
		}
	}
	nb, err := json.Marshal(errorBody{Error: out})
	if err != nil {
		return nil
	}
	return nb
}
