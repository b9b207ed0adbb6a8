package faults

import (
	"fmt"
	"strings"
)

// anthropicWire is the Anthropic Messages API format (POST …/v1/messages).
type anthropicWire struct{}

func (anthropicWire) completion(model string, chunks int) string {
	return fmt.Sprintf(`{"id":"msg_fault","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":8,"output_tokens":%d}}`,
		model, strings.Repeat(ChunkText, chunks), chunks*4)
}

func (anthropicWire) streamStart(model string) string {
	return sseEvent("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_fault","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"usage":{"input_tokens":8,"output_tokens":1}}}`, model)) +
		sseEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
		sseEvent("ping", `{"type":"ping"}`)
}

func (anthropicWire) chunk(_, text string, _ bool) string {
	return sseEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, text))
}

func (anthropicWire) malformed() string {
	return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"lor\n\n"
}

func (anthropicWire) streamEnd(_ string, n int, done bool) string {
	s := sseEvent("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		sseEvent("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, n*4))
	if done {
		s += sseEvent("message_stop", `{"type":"message_stop"}`)
	}
	return s
}

// errorBody is Anthropic's error shape; the wording classifies as the
// generic case of the status, like DefaultErrorBody.
func (anthropicWire) errorBody(status int) string {
	typ, msg := "api_error", "upstream error"
	switch status {
	case 400:
		typ, msg = "invalid_request_error", "invalid request"
	case 401:
		typ, msg = "authentication_error", "invalid x-api-key"
	case 402:
		typ, msg = "billing_error", "payment required"
	case 403:
		typ, msg = "permission_error", "forbidden"
	case 404:
		typ, msg = "not_found_error", "the model does not exist"
	case 413:
		typ, msg = "request_too_large", "request too large"
	case 429:
		typ, msg = "rate_limit_error", "rate limit reached for requests"
	case 500:
		msg = "internal server error"
	case 529:
		typ, msg = "overloaded_error", "Overloaded"
	}
	return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
}
