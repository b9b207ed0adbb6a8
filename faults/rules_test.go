package faults

import (
	"strings"
	"testing"
	"time"
)

func TestPickLastMatchingRuleWins(t *testing.T) {
	rules := []Rule{
		{Match: Match{Provider: "p"}, Respond: &Response{Status: 500}},
		{Match: Match{Provider: "p", Connection: "k1"}, From: 10 * time.Second, Until: 20 * time.Second, Respond: &Response{Status: 429}},
		{Match: Match{Model: "m2"}, Sequence: []Response{{Status: 503}, {Status: 502}}},
	}
	p := NewPicker(rules)
	cases := []struct {
		at        time.Duration
		prov, con string
		model     string
		status    int
		rule      int
	}{
		{0, "p", "k1", "m", 500, 0},
		{10 * time.Second, "p", "k1", "m", 429, 1},
		{20 * time.Second, "p", "k1", "m", 500, 0}, // until is exclusive
		{10 * time.Second, "p", "k2", "m", 500, 0},
		{0, "q", "k1", "m", 200, -1},
		{0, "q", "k1", "m2", 503, 2}, // sequence item 1
		{0, "p", "k1", "m2", 502, 2}, // item 2
		{0, "p", "k1", "m2", 502, 2}, // the last repeats
	}
	for i, c := range cases {
		r, idx := p.Pick(c.at, c.prov, c.con, c.model, nil)
		if r.StatusOrOK() != c.status || idx != c.rule {
			t.Errorf("case %d: got %d from rule %d, want %d from rule %d", i, r.StatusOrOK(), idx, c.status, c.rule)
		}
	}
}

func TestFlapAndProbability(t *testing.T) {
	rules := []Rule{{From: 10 * time.Second, Flap: &Flap{Down: 5 * time.Second, Up: 15 * time.Second}, Respond: &Response{Status: 503}}}
	p := NewPicker(rules)
	for _, c := range []struct {
		at   time.Duration
		want int
	}{{9 * time.Second, 200}, {10 * time.Second, 503}, {14 * time.Second, 503}, {15 * time.Second, 200}, {30 * time.Second, 503}, {35 * time.Second, 200}} {
		if r, _ := p.Pick(c.at, "p", "k", "m", nil); r.StatusOrOK() != c.want {
			t.Errorf("at %v: %d, want %d", c.at, r.StatusOrOK(), c.want)
		}
	}
	half := NewPicker([]Rule{{Respond: &Response{Status: 503}, Probability: 0.5}})
	draws := []float64{0.1, 0.9}
	i := 0
	draw := func() float64 { v := draws[i%2]; i++; return v }
	if r, _ := half.Pick(0, "", "", "", draw); r.StatusOrOK() != 503 {
		t.Error("draw 0.1 < 0.5 should fire")
	}
	if r, _ := half.Pick(0, "", "", "", draw); r.StatusOrOK() != 200 {
		t.Error("draw 0.9 ≥ 0.5 should not fire")
	}
	// A rule without probability never draws.
	plain := NewPicker([]Rule{{Respond: &Response{Status: 503}}})
	plain.Pick(0, "", "", "", func() float64 { t.Fatal("drew"); return 0 })
}

func TestFaultsEnd(t *testing.T) {
	end, ok := FaultsEnd([]Rule{{Until: 5 * time.Second, Respond: &Response{Status: 503}}, {Respond: &Response{Status: 200}}})
	if !ok || end != 5*time.Second {
		t.Errorf("got %v %v", end, ok)
	}
	if _, ok := FaultsEnd([]Rule{{Respond: &Response{Status: 503}}}); ok {
		t.Error("an endless failing rule has no end")
	}
}

func TestParseRulesErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"- {respond: {status: 503, latncy: 5s}}", `x.yaml:1:27: [0].respond.latncy: unknown key "latncy" (did you mean "latency"?)`},
		{"- respond: {status: 503}\n  until: 5 seconds", `x.yaml:2:10: [0].until: bad duration "5 seconds"`},
		{"- respond: {use: rate-limt}", `unknown catalog entry "rate-limt" (did you mean "rate-limit"?)`},
		{"- respond: {fault: stal}", `unknown fault "stal" (did you mean "stall"?)`},
		{"- {match: {provider: p}}", "a rule needs respond or sequence"},
		{"- {from: 5s, until: 2s, respond: {status: 500}}", "until (2s) must be after from (5s)"},
		{"- {respond: {status: 500, fault: stall}}", "needs a 2xx stream"},
		{"rules: 3", "want a list"},
	}
	for _, c := range cases {
		_, err := ParseRules("x.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.src, err, c.want)
		}
	}
	rules, err := ParseRules("x.yaml", []byte(`{"rules":[{"match":{"provider":"p"},"respond":{"use":"rate-limit-retry-after","latency":"50ms"}}]}`))
	if err != nil || len(rules) != 1 || rules[0].Respond.Status != 429 || rules[0].Respond.Headers["Retry-After"] != "20" || rules[0].Respond.Latency != 50*time.Millisecond {
		t.Fatalf("JSON rules: %v %+v", err, rules)
	}
	// What GET /_faults shows, PUT /_faults takes back.
	back, err := ParseRules("round trip", mustJSON(t, map[string]any{"rules": EncodeRules(rules)}))
	if err != nil || len(back) != 1 || back[0].Respond.Latency != 50*time.Millisecond || back[0].Respond.Status != 429 {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}
