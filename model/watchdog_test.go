package model

import "testing"

func TestParseStreamEvent(t *testing.T) {
	cases := []struct {
		name, data string
		want       StreamEvent
	}{
		{"chat text", `{"choices":[{"delta":{"content":"héllo"}}]}`, StreamEvent{UsefulBytes: 6}},
		{"chat role only (no progress)", `{"choices":[{"delta":{"role":"assistant"}}]}`, StreamEvent{}},
		{"chat empty content", `{"choices":[{"delta":{"content":""}}]}`, StreamEvent{}},
		{"chat reasoning (even empty)", `{"choices":[{"delta":{"reasoning_content":""}}]}`, StreamEvent{Reasoning: true}},
		{"chat tool call", `{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, StreamEvent{ToolCall: true}},
		{"usage only", `{"choices":[],"usage":{"total_tokens":3}}`, StreamEvent{MentionsUsage: true}},
		{"done", `[DONE]`, StreamEvent{Done: true}},
		{"malformed (cut)", `{"choices":[{"delta":`, StreamEvent{Malformed: true}},
		{"malformed (not JSON)", `lorem ipsum`, StreamEvent{Malformed: true}},
		{"valid JSON of unexpected types (nothing, not malformed)", `{"choices":5}`, StreamEvent{}},
		{"valid JSON, not an object (nothing, not malformed)", `"keep-alive"`, StreamEvent{}},
		{"responses text delta", `{"type":"response.output_text.delta","delta":"abc"}`, StreamEvent{UsefulBytes: 3}},
		{"responses reasoning delta", `{"type":"response.reasoning_summary_text.delta","delta":"abc"}`, StreamEvent{Reasoning: true}},
		{"anthropic text", `{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}`, StreamEvent{UsefulBytes: 2}},
		{"anthropic thinking", `{"type":"content_block_delta","delta":{"type":"thinking_delta","thinking":""}}`, StreamEvent{Reasoning: true}},
		{"anthropic tool json", `{"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":"{"}}`, StreamEvent{ToolCall: true}},
		{"anthropic ping", `{"type":"ping"}`, StreamEvent{}},
	}
	for _, c := range cases {
		if got := ParseStreamEvent([]byte(c.data)); got != c.want {
			t.Errorf("docs/streams.md %s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestStallWatchdog(t *testing.T) {
	// docs/streams.md / docs/cooldowns.md: no model output for the stall budget aborts; reasoning
	// frames restart the budget; heartbeats do not; timers catch silence.
	s := DefaultSettings()
	s.UpstreamTimeouts.FirstContentMs = 5000
	s.UpstreamTimeouts.StreamIdleMs = 2000
	w := NewWatchdog(&s, at(0))
	if w.Deadline() != at(5000) {
		t.Fatalf("first-content deadline %d", w.Deadline()-t0)
	}
	if _, abort := w.Check(at(4999)); abort {
		t.Fatal("aborted before firstContentMs")
	}
	w.Observe(at(1000), StreamEvent{Reasoning: true})
	if w.Deadline() != at(3000) {
		t.Fatalf("reasoning must restart the stall budget: %d", w.Deadline()-t0)
	}
	w.Observe(at(2500), StreamEvent{}) // heartbeat: no progress
	if k, abort := w.Check(at(3000)); !abort || k != OutcomeStall {
		t.Fatal("heartbeats must not keep a stream alive")
	}
	if w.ProducedOutput() {
		t.Fatal("reasoning only is not output")
	}
	w2 := NewWatchdog(&s, at(0))
	w2.Observe(at(100), StreamEvent{UsefulBytes: 10})
	if _, abort := w2.Check(at(2099)); abort || !w2.ProducedOutput() {
		t.Fatal("within the idle budget")
	}
}

func TestThroughputWatchdog(t *testing.T) {
	// docs/streams.md: opt-in; needs warm-up plus a full window; aborts below the
	// rate; suspends judgement while tool calls or reasoning are in flight.
	s := DefaultSettings()
	s.StreamRecovery.ThroughputWatchdog = ThroughputWatchdog{Enabled: true, WarmupMs: 10000, WindowMs: 10000, MinUsefulBytesPerSecond: 4, MinUsefulBytes: 1}
	s.UpstreamTimeouts.StreamIdleMs = 600000
	slow := NewWatchdog(&s, at(0))
	for ms := int64(0); ms <= 20000; ms += 1000 {
		slow.Observe(at(ms), StreamEvent{UsefulBytes: 3}) // 3 B/s < 4
		if k, abort := slow.Check(at(ms)); abort {
			if ms < 20000 || k != OutcomeThroughput {
				t.Fatalf("aborted at %d ms (%v); must wait warm-up + window (20 s)", ms, k)
			}
		} else if ms == 20000 {
			t.Fatal("3 B/s after warm-up and a full window must abort")
		}
	}
	fast := NewWatchdog(&s, at(0))
	for ms := int64(0); ms <= 30000; ms += 1000 {
		fast.Observe(at(ms), StreamEvent{UsefulBytes: 5})
		if _, abort := fast.Check(at(ms)); abort {
			t.Fatalf("5 B/s aborted at %d", ms)
		}
	}
	tool := NewWatchdog(&s, at(0))
	tool.Observe(at(0), StreamEvent{UsefulBytes: 1})
	tool.Observe(at(1000), StreamEvent{ToolCall: true})
	if _, abort := tool.Check(at(25000)); abort {
		t.Fatal("a tool call in flight suspends the throughput judgement")
	}
	off := NewWatchdog(func() *Settings { c := s; c.StreamRecovery.ThroughputWatchdog.Enabled = false; return &c }(), at(0))
	off.Observe(at(0), StreamEvent{UsefulBytes: 1})
	if _, abort := off.Check(at(25000)); abort {
		t.Fatal("the throughput watchdog is opt-in")
	}
}

// FuzzParseStreamEvent: upstream stream data never panics the parser and
// never yields negative progress.
func FuzzParseStreamEvent(f *testing.F) {
	for _, s := range []string{`{"choices":[{"delta":{"content":"x"}}]}`, `[DONE]`, `{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}`, `{"delta":"abc"}`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev := ParseStreamEvent(data)
		if ev.UsefulBytes < 0 || ev.UsefulBytes > len(data) {
			t.Fatalf("useful bytes %d out of range for %d input bytes", ev.UsefulBytes, len(data))
		}
	})
}

func TestParseStreamEventFinishAndError(t *testing.T) {
	// One reading per event (docs/streams.md, docs/classification.md#restatement): the finish reason
	// and an in-stream error object with the status it states come from
	// ParseStreamEvent, so the shell parses each event once.
	if ev := ParseStreamEvent([]byte(`{"choices":[{"delta":{},"finish_reason":"length"}]}`)); ev.FinishReason != "length" || ev.Error {
		t.Fatalf("finish: %+v", ev)
	}
	if ev := ParseStreamEvent([]byte(`{"choices":[{"delta":{"content":"x"},"finish_reason":null}]}`)); ev.FinishReason != "" || ev.UsefulBytes != 1 {
		t.Fatalf("no finish: %+v", ev)
	}
	if ev := ParseStreamEvent([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"x"}}`)); !ev.Error || ev.ErrorStatus != 529 {
		t.Fatalf("error event: %+v", ev)
	}
	for _, in := range []string{`{"error":null}`, `{"choices":[{"delta":{"content":"\"error\": no"}}]}`, `not json`} {
		if ev := ParseStreamEvent([]byte(in)); ev.Error {
			t.Fatalf("%s is not an error event: %+v", in, ev)
		}
	}
}

func TestStreamErrorStatus(t *testing.T) {
	// docs/classification.md#restatement: the status an in-stream error states.
	cases := map[string]int{
		`{"error":{"code":429,"message":"slow down"}}`:                    429,
		`{"error":{"code":"503"}}`:                                        503,
		`{"error":{"status":502}}`:                                        502,
		`{"error":{"type":"rate_limit_error","message":"x"}}`:             429,
		`{"error":{"type":"overloaded_error"}}`:                           529,
		`{"error":{"type":"invalid_request_error","code":"context_len"}}`: 400,
		`{"error":{"message":"internal"}}`:                                500,
		`{"error":"plain"}`:                                               500,
	}
	for in, want := range cases {
		if got, _ := StreamErrorStatus([]byte(in)); got != want {
			t.Errorf("StreamErrorStatus(%s) = %d, want %d", in, got, want)
		}
	}
}

func TestLegitimateEmpty(t *testing.T) {
	// docs/streams.md: finish reasons that make a stream without text valid.
	for f, want := range map[string]bool{"length": true, "tool_calls": true, "content_filter": true, "function_call": true, "stop": false, "": false} {
		if LegitimateEmpty(f) != want {
			t.Errorf("LegitimateEmpty(%q) != %v", f, want)
		}
	}
}

// A native Messages stream states its end in message_delta's stop_reason:
// read as the chat finish_reason it means, so a tool-only turn is a
// legitimate end without text.
func TestParseStreamEventMessagesStopReason(t *testing.T) {
	for stop, want := range map[string]string{"tool_use": "tool_calls", "max_tokens": "length", "end_turn": "stop", "refusal": "content_filter"} {
		ev := ParseStreamEvent([]byte(`{"type":"message_delta","delta":{"stop_reason":"` + stop + `","stop_sequence":null},"usage":{"output_tokens":4}}`))
		if ev.FinishReason != want {
			t.Errorf("%s: finish %q, want %q", stop, ev.FinishReason, want)
		}
	}
	if !LegitimateEmpty(ParseStreamEvent([]byte(`{"type":"message_delta","delta":{"stop_reason":"tool_use"}}`)).FinishReason) {
		t.Fatal("a tool_use end is a legitimate end without text")
	}
}

// A native Responses stream that ends with a function call, or cut at
// its budget, is a legitimate end without text.
func TestParseStreamEventResponsesEnds(t *testing.T) {
	ev := ParseStreamEvent([]byte(`{"type":"response.completed","response":{"output":[{"type":"function_call","name":"f"}]}}`))
	if !ev.Done || !LegitimateEmpty(ev.FinishReason) {
		t.Fatalf("completed with a call: %+v", ev)
	}
	ev = ParseStreamEvent([]byte(`{"type":"response.incomplete","response":{"incomplete_details":{"reason":"max_output_tokens"}}}`))
	if !ev.Done || ev.FinishReason != "length" {
		t.Fatalf("incomplete: %+v", ev)
	}
}
