package scenarios

import (
	"bytes"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/sim"
)

// A native target (an anthropic one of a Messages request) gets the
// client's own body, which carries no prefill: the simulator, as the
// gateway, never continues a broken stream there (docs/resume.md). A
// translated Messages stream cut after content is continued by the
// primary itself; the anthropic target is never sent the continuation.
// (Not a library file: the gateway's translated surfaces carry no resume
// comment, so a live replay could not tell this resume from a plain answer.)
const nativeNoContinuation = `
name: a translated Messages stream is never continued on a native target
settings:
  waitForCooldown: {enabled: false}
  upstreamTimeouts: {firstContentMs: 10s, streamIdleMs: 10s}
providers:
  - {id: primary, profile: apikey, models: [m], continuation: assistant, connections: [{id: k1}]}
  - {id: an, type: anthropic, profile: apikey, models: [m], connections: [{id: k1}]}
combos:
  - {id: c, strategy: priority, targets: [primary/m, an/m]}
upstream:
  - match: {provider: primary}
    until: 1m
    sequence:
      - {use: stream-cut, stream: {chunks: 60, interval: 50ms, stallAfter: 40}}
      - {stream: {chunks: 60, interval: 50ms}}
  - match: {provider: an}
    respond: {stream: {chunks: 60, interval: 50ms}}
traffic:
  - {at: 0s, model: c, stream: true, format: messages}
expect:
  - request: 1
    status: 200
    servedBy: primary/k1
    result: fallback
`

func TestSimNeverContinuesOnANativeTarget(t *testing.T) {
	sc, err := Load("native-no-continuation.yaml", []byte(nativeNoContinuation), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var trace bytes.Buffer
	res, err := sim.Run(sc, sim.Options{Trace: &trace})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) > 0 || len(res.Violations) > 0 {
		t.Fatalf("failures %v, violations %v\n%s", res.Failures, res.Violations, trace.String())
	}
	for _, line := range strings.Split(trace.String(), "\n") {
		if strings.Contains(line, `"ev":"begin"`) && strings.Contains(line, `"conn":"an/k1"`) {
			t.Fatalf("the anthropic target was sent an attempt: %s", line)
		}
	}
}
