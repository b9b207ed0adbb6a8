// Package apierr writes the gateway's JSON answers and its OpenAI-shaped
// error envelope {"error":{...}} (docs/api.md). The client surfaces and the
// management API answer through it, so an error reads the same wherever
// it comes from.
package apierr

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/breakwater-gw/breakwater/model"
)

// Error is the body of the envelope's "error" member.
type Error struct {
	Message    string `json:"message"`
	Type       string `json:"type"`
	Code       string `json:"code"`
	Provider   string `json:"provider,omitempty"`
	Model      string `json:"model,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"` // seconds
	Field      string `json:"field,omitempty"`
	// Problems lists every problem of a rejected settings patch or body.
	Problems []Problem `json:"problems,omitempty"`
}

// Problem is one problem of a rejected settings patch or body.
type Problem struct {
	Field      string `json:"field,omitempty"`
	Problem    string `json:"problem"`
	Suggestion string `json:"suggestion,omitempty"`
	Source     string `json:"source,omitempty"`
}

// Body is the envelope without diagnostics.
type Body struct {
	Error Error `json:"error"`
}

// TypeForStatus is the OpenAI error type of an answer's status.
func TypeForStatus(status int) string {
	switch {
	case status == 400 || status == 405 || status == 413 || status == 422:
		return "invalid_request_error" // a 405 is a malformed request, as OpenAI types it
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 429:
		return "rate_limit_error"
	}
	return "server_error"
}

// WriteJSON writes v with status, newline-terminated, with its length.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the answer failed","type":"server_error","code":"internal_error"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// Write writes a plain typed error of the gateway itself.
func Write(w http.ResponseWriter, status int, code, msg string) {
	WriteJSON(w, status, Body{Error: Error{Message: msg, Type: TypeForStatus(status), Code: code}})
}

// WriteSettings answers a bad settings patch with every problem.
func WriteSettings(w http.ResponseWriter, err error) {
	ses := model.SettingsErrors(err)
	body := Body{Error: Error{Message: err.Error(), Type: "invalid_request_error", Code: "invalid_settings"}}
	for _, se := range ses {
		body.Error.Problems = append(body.Error.Problems, Problem{Field: se.Field, Problem: se.Problem, Suggestion: se.Suggestion, Source: se.Source})
	}
	if len(ses) > 0 {
		body.Error.Field = ses[0].Field
	}
	WriteJSON(w, http.StatusBadRequest, body)
}
