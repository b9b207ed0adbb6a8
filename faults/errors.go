package faults

import bw "github.com/breakwater-gw/breakwater/internal/wire"

// genericError is how each format words the plain, generic case of an
// error status, so that the gateway classifies the body as that case and
// nothing more specific. A format whose type is "" answers the status
// with its catch-all (server_error, api_error, INTERNAL: "upstream
// error").
type genericError struct {
	msg            string // the message, unless anMsg words it for Anthropic
	oaType, oaCode string // OpenAI's error type and code
	anType, anMsg  string // Anthropic's error type, and its own message
	gmStatus       string // Google's status name
}

var genericErrors = map[int]genericError{
	400: {"invalid request", "invalid_request_error", "invalid_request", "invalid_request_error", "", "INVALID_ARGUMENT"},
	401: {"invalid api key", "authentication_error", "invalid_api_key", "authentication_error", "invalid x-api-key", "UNAUTHENTICATED"},
	402: {"payment required", "billing_error", "payment_required", "billing_error", "", ""},
	403: {"forbidden", "permission_error", "forbidden", "permission_error", "", "PERMISSION_DENIED"},
	404: {"the model does not exist", "invalid_request_error", "model_not_found", "not_found_error", "", "NOT_FOUND"},
	408: {"request timed out", "timeout_error", "timeout", "", "", ""},
	413: {"request too large", "", "", "request_too_large", "", ""},
	429: {"rate limit reached for requests", "rate_limit_error", "rate_limit_exceeded", "rate_limit_error", "", "RESOURCE_EXHAUSTED"},
	500: {"internal server error", "server_error", "server_error", "api_error", "", "INTERNAL"},
	502: {"bad gateway", "server_error", "server_error", "", "", ""},
	503: {"service unavailable", "server_error", "server_error", "", "", "UNAVAILABLE"},
	504: {"gateway timeout", "server_error", "server_error", "", "", "DEADLINE_EXCEEDED"},
	529: {"overloaded", "overloaded_error", "overloaded", "overloaded_error", "Overloaded", ""},
}

// catchAll is every format's message for a status it has no words for.
const catchAll = "upstream error"

// DefaultErrorBody is an OpenAI-shaped error body for a status, worded so
// that it classifies as the plain, generic case of that status.
func DefaultErrorBody(status int) string {
	e := genericErrors[status]
	if e.oaType == "" {
		return string(bw.ChatError(catchAll, "server_error", "server_error"))
	}
	return string(bw.ChatError(e.msg, e.oaType, e.oaCode))
}

// anthropicErrorBody is the Anthropic-shaped DefaultErrorBody.
func anthropicErrorBody(status int) string {
	e := genericErrors[status]
	switch {
	case e.anType == "":
		return string(bw.MsgError("api_error", catchAll))
	case e.anMsg != "":
		return string(bw.MsgError(e.anType, e.anMsg))
	}
	return string(bw.MsgError(e.anType, e.msg))
}

// geminiErrorBody is the Google-shaped (google.rpc.Status)
// DefaultErrorBody.
func geminiErrorBody(status int) string {
	e := genericErrors[status]
	if e.gmStatus == "" {
		return string(bw.GeminiError(status, "INTERNAL", catchAll))
	}
	return string(bw.GeminiError(status, e.gmStatus, e.msg))
}
