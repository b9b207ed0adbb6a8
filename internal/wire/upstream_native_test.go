package wire

import "testing"

// finish_reason mapping of the native upstream answers
// (docs/classification.md#provider-types adapters): anthropic end_turn /
// stop_sequence → stop, max_tokens → length, tool_use → tool_calls,
// refusal → content_filter; gemini STOP → stop, MAX_TOKENS → length,
// SAFETY → content_filter, and a function call's STOP → tool_calls.
func TestAdapterFinishReasons(t *testing.T) {
	for in, want := range map[string]string{"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
		"tool_use": "tool_calls", "refusal": "content_filter", "pause_turn": "stop"} {
		if got := anthropicFinish(in); got != want {
			t.Errorf("anthropic %s → %s, want %s", in, got, want)
		}
	}
	for in, want := range map[string]string{"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter",
		"RECITATION": "content_filter", "OTHER": "stop"} {
		if got := geminiFinish(in, false); got != want {
			t.Errorf("gemini %s → %s, want %s", in, got, want)
		}
	}
	if geminiFinish("STOP", true) != "tool_calls" {
		t.Error("gemini STOP with a function call → tool_calls")
	}
}
