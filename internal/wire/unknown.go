package wire

import (
	"encoding/json"
	"slices"

	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
)

// The top-level fields each surface reads; any other is dropped by the
// translation (a debug log names it).
var (
	msgFields = []string{"model", "max_tokens", "system", "messages", "stream", "stop_sequences", "temperature", "top_p",
		"top_k", "tools", "tool_choice", "metadata", "thinking"}
	respFields = []string{"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice",
		"parallel_tool_calls", "previous_response_id", "store", "stream", "background", "user", "metadata", "text", "reasoning"}
)

// UnknownMessagesFields lists a Messages body's top-level fields the
// translation does not read.
func UnknownMessagesFields(body []byte) []string { return unknownFields(body, msgFields) }

// UnknownResponsesFields lists a Responses body's top-level fields the
// translation does not read.
func UnknownResponsesFields(body []byte) []string { return unknownFields(body, respFields) }

func unknownFields(body []byte, known []string) []string {
	var out []string
	jsonvalid.Members(body, func(ks, ke, _, _ int) {
		var k string
		if json.Unmarshal(body[ks:ke], &k) == nil && !slices.Contains(known, k) && len(out) < 32 {
			out = append(out, k)
		}
	})
	return out
}
