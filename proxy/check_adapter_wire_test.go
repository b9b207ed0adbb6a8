package proxy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/internal/wire"
)

// Outside-in checks of the wire adapters (docs/classification.md#provider-types) found by driving a
// gateway with anthropic- and gemini-type providers.

// docs/classification.md#provider-types ("behaviour never depends on the id an operator picks" — nor
// on the wire) and docs/scenarios.md (sim and replay take the same decisions):
// the fault catalog's malformed-chunk is one event whose data is not JSON,
// which the malformed-event rule skips (model.MalformedEvents, as the
// simulator does, sim/timeline.go). A native stream event that does not
// parse must end the same way through an adapter as a garbled OpenAI
// chunk: the whole answer, and no server_error verdict (breaker failure,
// connection cooldown, on gemini an exact-model lockout).
func TestCheckAdapterMalformedChunkSameVerdictEveryType(t *testing.T) {
	type seen struct {
		lastEvent, status, lastErrorType string
		lockouts                         int
		failures                         float64
	}
	run := func(provider, conn, model string) seen {
		g, fs := newWireGW(t)
		fs.SetRules([]faults.Rule{{Respond: &faults.Response{Fault: faults.MalformedChunk, Stream: faults.Stream{StallAfter: 2}}}}, false)
		r := g.stream(provider + "/" + model)
		ev := sseEvents(r.body)
		if r.code != 200 || len(ev) == 0 || ev[len(ev)-1] != "[DONE]" || strings.Contains(r.body, `"lor`+"\n") {
			t.Fatalf("%s: want the whole answer, the bad event skipped: %d %s", provider, r.code, r.body)
		}
		c := g.conn(provider, conn)
		var lk []any
		if l, ok := c["lockouts"].([]any); ok {
			lk = l
		}
		lastType, _ := c["lastErrorType"].(string)
		p := g.health()["providers"].(map[string]any)[provider].(map[string]any)
		return seen{lastEvent: ev[len(ev)-1], status: fmt.Sprint(c["status"]), lastErrorType: lastType,
			lockouts: len(lk), failures: p["failureCount"].(float64)}
	}
	want := run("oa", "o1", "gpt")
	for _, p := range [][3]string{{"an", "k1", "claude"}, {"gm", "k1", "flash"}} {
		got := run(p[0], p[1], p[2])
		if got != want {
			t.Errorf("%s: malformed-chunk through the adapter\n got %+v\nwant %+v (the openai type's)", p[0], got, want)
		}
	}
}

// docs/classification.md#provider-types (tool_use → tool_calls): a tool without parameters streams an
// empty input (no input_json_delta bytes, or one with partial_json ""). The
// client's concatenated arguments must still be a JSON object ("{}", as the
// JSON translation gives), not "" that an OpenAI client fails to parse.
func TestCheckAdapterAnthropicStreamToolWithoutInput(t *testing.T) {
	ev := func(s string) string { return "data: " + s + "\n\n" }
	native := ev(`{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":3}}}`) +
		ev(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"tu0","name":"now","input":{}}}`) +
		ev(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}`) +
		ev(`{"type":"content_block_stop","index":0}`) +
		ev(`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"tu1","name":"ping","input":{}}}`) +
		ev(`{"type":"content_block_stop","index":1}`) +
		ev(`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu2","name":"f","input":{}}}`) +
		ev(`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`) +
		ev(`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"1}"}}`) +
		ev(`{"type":"content_block_stop","index":2}`) +
		ev(`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}`) +
		ev(`{"type":"message_stop"}`)
	args := map[int]string{}
	for _, e := range translateStream(t, &anthropicWire{}, native) {
		var c wire.AdapterChunk
		if e == "[DONE]" || json.Unmarshal([]byte(e), &c) != nil || len(c.Choices) == 0 {
			continue
		}
		for _, tc := range c.Choices[0].Delta.ToolCalls {
			args[*tc.Index] += tc.Function.Arguments
		}
	}
	want := map[int]string{0: "{}", 1: "{}", 2: `{"a":1}`}
	if fmt.Sprint(args) != fmt.Sprint(want) {
		t.Fatalf("streamed tool arguments %v, want %v", args, want)
	}
}
