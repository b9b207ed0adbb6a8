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

// Every format carries the shaped answer the same way, since each renders
// the one chat answer: with a JSON response format and an output budget
// the text is the whole JSON document (its close included, streamed or
// not) and the answer ends with the format's length reason.
func TestShapedAnswerInEveryFormat(t *testing.T) {
	_, ts := newTestServer(t, nil)
	doc := `{\"text\":\"` + strings.Repeat(ChunkText, 3) + `\"}`
	for _, c := range []struct{ name, path, body, length string }{
		{"chat", "/p/v1/chat/completions", `{"model":"m","messages":[],"max_tokens":9,"response_format":{"type":"json_object"}STREAM}`, `"finish_reason":"length"`},
		{"messages", "/p/v1/messages", `{"model":"m","messages":[],"max_tokens":9,"response_format":{"type":"json_object"}STREAM}`, `"stop_reason":"max_tokens"`},
		{"gemini", "/p/v1/models/g:ACTION", `{"contents":[],"generationConfig":{"maxOutputTokens":9,"responseMimeType":"application/json"}}`, `"finishReason":"MAX_TOKENS"`},
		{"responses", "/p/v1/responses", `{"model":"m","input":"hi","max_output_tokens":9,"text":{"format":{"type":"json_object"}}STREAM}`, `"reason":"max_output_tokens"`},
	} {
		for _, stream := range []bool{false, true} {
			path, body := strings.Replace(c.path, "ACTION", "generateContent", 1), strings.Replace(c.body, "STREAM", "", 1)
			if stream {
				path, body = strings.Replace(c.path, "ACTION", "streamGenerateContent", 1), strings.Replace(c.body, "STREAM", `,"stream":true`, 1)
			}
			resp, got := post(t, ts.URL+path, body, "Authorization", "Bearer k")
			text := got
			if stream {
				text = streamedText(t, got)
			}
			if resp.StatusCode != 200 || !strings.Contains(text, doc) || !strings.Contains(got, c.length) {
				t.Errorf("%s stream=%v: %d, want the text %s and %s in\n%s", c.name, stream, resp.StatusCode, doc, c.length, got)
			}
		}
	}
}

// streamedText joins the text deltas of a stream in any format, as a JSON
// string's content.
func streamedText(t *testing.T, body string) string {
	t.Helper()
	var b strings.Builder
	for _, d := range dataLines(body) {
		var ev struct {
			Type    string `json:"type"`
			Delta   any    `json:"delta"`
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Candidates []struct {
				Content struct {
					Parts []struct{ Text string } `json:"parts"`
				} `json:"content"`
			} `json:"candidates"`
		}
		if json.Unmarshal([]byte(d), &ev) != nil {
			continue
		}
		switch delta := ev.Delta.(type) {
		case string: // Responses
			b.WriteString(delta)
		case map[string]any: // Messages
			s, _ := delta["text"].(string)
			b.WriteString(s)
		}
		for _, c := range ev.Choices {
			b.WriteString(c.Delta.Content)
		}
		for _, c := range ev.Candidates {
			for _, p := range c.Content.Parts {
				b.WriteString(p.Text)
			}
		}
	}
	q, _ := json.Marshal(b.String())
	return string(q)
}
