package faults

import (
	"fmt"
	"strings"
)

// geminiWire is the Gemini generateContent format
// (POST …/v1/models/{model}:generateContent, and
// :streamGenerateContent?alt=sse for streams).
type geminiWire struct{}

func (geminiWire) completion(model string, chunks int) string {
	return fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[{"text":%q}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":%d,"totalTokenCount":%d},"modelVersion":%q,"responseId":"fault"}`,
		strings.Repeat(ChunkText, chunks), chunks*4, 8+chunks*4, model)
}

func (geminiWire) streamStart(string) string { return "" }

func (geminiWire) chunk(model, text string, _ bool) string {
	return sseEvent("", fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[{"text":%q}]},"index":0}],"modelVersion":%q,"responseId":"fault"}`, text, model))
}

func (geminiWire) malformed() string {
	return "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"lor\n\n"
}

// streamEnd: Gemini streams have no terminator; the last event carries
// finishReason and usage.
func (geminiWire) streamEnd(model string, n int, _ bool) string {
	return sseEvent("", fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":%d,"totalTokenCount":%d},"modelVersion":%q,"responseId":"fault"}`,
		n*4, 8+n*4, model))
}

// errorBody is Google's error shape (google.rpc.Status); the wording
// classifies as the generic case of the status.
func (geminiWire) errorBody(status int) string {
	st, msg := "INTERNAL", "upstream error"
	switch status {
	case 400:
		st, msg = "INVALID_ARGUMENT", "invalid request"
	case 401:
		st, msg = "UNAUTHENTICATED", "invalid api key"
	case 403:
		st, msg = "PERMISSION_DENIED", "forbidden"
	case 404:
		st, msg = "NOT_FOUND", "the model does not exist"
	case 429:
		st, msg = "RESOURCE_EXHAUSTED", "rate limit reached for requests"
	case 500:
		msg = "internal server error"
	case 503:
		st, msg = "UNAVAILABLE", "service unavailable"
	case 504:
		st, msg = "DEADLINE_EXCEEDED", "gateway timeout"
	}
	return fmt.Sprintf(`{"error":{"code":%d,"message":%q,"status":%q}}`, status, msg, st)
}
