package faults

import "testing"

// FuzzParseRules: the control API's PUT /_faults body is untrusted input;
// the parser never panics and what it accepts validates.
func FuzzParseRules(f *testing.F) {
	f.Add([]byte("- match: {provider: p}\n  respond: {status: 503, latency: 50ms}\n"))
	f.Add([]byte(`{"rules":[{"sequence":[{"use":"reset"},{"status":200,"stream":{"chunks":3}}],"flap":{"down":"1s","up":"2s"}}]}`))
	f.Add([]byte("upstream:\n  - {from: 1s, until: 2s, probability: 0.5, respond: {fault: stall, stream: {stallAfter: 2}}}\n"))
	f.Add([]byte("- - -"))
	f.Fuzz(func(t *testing.T, src []byte) {
		rules, err := ParseRules("fuzz", src)
		if err != nil {
			return
		}
		for i := range rules {
			if err := rules[i].Validate(); err != nil {
				t.Fatalf("accepted an invalid rule: %v", err)
			}
		}
		p := NewPicker(rules)
		p.Pick(0, "p", "k", "m", func() float64 { return 0.3 })
	})
}
