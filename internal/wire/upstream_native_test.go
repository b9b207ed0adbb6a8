package wire

import "testing"

// finish_reason mapping of the native upstream answers
// (docs/classification.md#provider-types adapters): anthropic end_turn /
// stop_sequence → stop, max_tokens → length, tool_use → tool_calls,
// refusal → content_filter.
func TestAdapterFinishReasons(t *testing.T) {
	for in, want := range map[string]string{"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
		"tool_use": "tool_calls", "refusal": "content_filter", "pause_turn": "stop"} {
		if got := anthropicFinish(in); got != want {
			t.Errorf("anthropic %s → %s, want %s", in, got, want)
		}
	}
}
