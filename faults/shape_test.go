package faults

import (
	"encoding/json"
	"strings"
	"testing"
)

// The fault upstream's tool-call answer carries the least arguments the
// tool's JSON schema accepts (faults/shape.go): required strings "x",
// numbers their minimum or 0, enums their first value; optional
// properties left out. Each wire format carries the same arguments.
func TestToolAnswerArgumentsFitTheSchema(t *testing.T) {
	schema := `{"type":"object","properties":{"path":{"type":"string"},"n":{"type":"integer","minimum":2},"mode":{"enum":["r","w"]},
"opts":{"type":"object","properties":{"deep":{"type":"boolean"}},"required":["deep"]},"tags":{"type":"array"},"skip":{"type":"string"}},
"required":["path","n","mode","opts","tags"]}`
	want := `{"path":"x","n":2,"mode":"r","opts":{"deep":false},"tags":[]}`
	if got := string(minimalArgs(json.RawMessage(schema), 0)); got != want {
		t.Fatalf("minimal arguments: %s, want %s", got, want)
	}
	_, ts := newTestServer(t, nil)
	for _, c := range []struct{ path, body, find string }{
		{"/p/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"f","parameters":` + schema + `}}]}`,
			`"arguments":"{\"path\":\"x\",\"n\":2,`},
		{"/an/v1/messages", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"go"}],"tools":[{"name":"f","input_schema":` + schema + `}]}`,
			`"input":` + want},
		{"/gm/v1/models/g:generateContent", `{"contents":[{"role":"user","parts":[{"text":"go"}]}],"tools":[{"functionDeclarations":[{"name":"f","parameters":` + schema + `}]}]}`,
			`"args":` + want},
		{"/p/v1/responses", `{"model":"m","input":"go","tools":[{"type":"function","name":"f","parameters":` + schema + `}]}`,
			`"arguments":"{\"path\":\"x\",\"n\":2,`},
	} {
		resp, body := post(t, ts.URL+c.path, c.body, "Authorization", "Bearer k", "x-api-key", "k", "x-goog-api-key", "k")
		if resp.StatusCode != 200 || !strings.Contains(body, c.find) {
			t.Errorf("%s: %d %s\nwant %s", c.path, resp.StatusCode, body, c.find)
		}
	}
	// A tool without a schema, or tool_choice naming the second: {} and
	// the named tool's schema.
	_, body := post(t, ts.URL+"/p/v1/chat/completions", `{"model":"m","messages":[],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "Authorization", "Bearer k")
	if !strings.Contains(body, `"name":"g","arguments":"{\"q\":\"x\"}"`) {
		t.Fatalf("named tool: %s", body)
	}
}
