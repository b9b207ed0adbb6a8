package faults

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
)

// What of the request the fault upstream honours, so a client sees its
// parameters work: the output budget (max_tokens, max_completion_tokens,
// max_output_tokens, generationConfig.maxOutputTokens: the answer is cut
// to it, 4 tokens a chunk, and ends with the format's length reason),
// tools (the answer is a call of the first tool, or the one tool_choice
// names, with the least arguments its JSON schema accepts: each required
// property, strings "x", numbers their minimum or 0, booleans false,
// arrays empty, enums their first value; none when tool_choice is
// "none"), and a JSON
// response format (response_format / text.format json_object or
// json_schema, generationConfig.responseMimeType application/json: the
// text is the JSON document {"text":"…"}).
type shape struct {
	maxTokens int
	tool      string
	args      string // the call's arguments, a JSON object
	json      bool
}

type shapeKey struct{}

// withShape reads a request body's shape into r's context.
func withShape(r *http.Request, body []byte) *http.Request {
	var b struct {
		MaxTokens           int             `json:"max_tokens"`
		MaxCompletionTokens int             `json:"max_completion_tokens"`
		MaxOutputTokens     int             `json:"max_output_tokens"`
		Tools               json.RawMessage `json:"tools"`
		ToolChoice          json.RawMessage `json:"tool_choice"`
		ResponseFormat      struct {
			Type string `json:"type"`
		} `json:"response_format"`
		Text struct {
			Format struct {
				Type string `json:"type"`
			} `json:"format"`
		} `json:"text"`
		GenerationConfig struct {
			MaxOutputTokens  int    `json:"maxOutputTokens"`
			ResponseMimeType string `json:"responseMimeType"`
		} `json:"generationConfig"`
	}
	if json.Unmarshal(body, &b) != nil {
		return r
	}
	var sh shape
	for _, n := range []int{b.MaxCompletionTokens, b.MaxTokens, b.MaxOutputTokens, b.GenerationConfig.MaxOutputTokens} {
		if n > 0 {
			sh.maxTokens = n
			break
		}
	}
	for _, t := range []string{b.ResponseFormat.Type, b.Text.Format.Type} {
		sh.json = sh.json || t == "json_object" || t == "json_schema"
	}
	sh.json = sh.json || b.GenerationConfig.ResponseMimeType == "application/json"
	var schema json.RawMessage
	sh.tool, schema = toolToCall(b.Tools, b.ToolChoice)
	if sh.tool != "" {
		sh.args = string(minimalArgs(schema, 0))
	}
	if sh == (shape{}) {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), shapeKey{}, sh))
}

// toolToCall is the tool the answer calls and its parameters' schema:
// tool_choice's named one, else the first declared (OpenAI chat,
// Responses, Anthropic and Gemini shapes), "" when none or tool_choice is
// none.
func toolToCall(tools, choice json.RawMessage) (string, json.RawMessage) {
	var c any
	_ = json.Unmarshal(choice, &c)
	named := ""
	switch v := c.(type) {
	case string:
		if v == "none" {
			return "", nil
		}
	case map[string]any:
		if v["type"] == "none" {
			return "", nil
		}
		if n, ok := v["name"].(string); ok && n != "" {
			named = n
		} else if f, ok := v["function"].(map[string]any); ok {
			if n, ok := f["name"].(string); ok && n != "" {
				named = n
			}
		}
	}
	type decl struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	}
	var ts []struct {
		Name        string          `json:"name"`
		Parameters  json.RawMessage `json:"parameters"`
		InputSchema json.RawMessage `json:"input_schema"`
		Function    decl            `json:"function"`
		Decls       []decl          `json:"functionDeclarations"`
	}
	if json.Unmarshal(tools, &ts) != nil {
		return named, nil
	}
	var all []decl
	for _, t := range ts {
		switch {
		case t.Function.Name != "":
			all = append(all, t.Function)
		case t.Name != "":
			p := t.Parameters
			if len(p) == 0 {
				p = t.InputSchema
			}
			all = append(all, decl{t.Name, p})
		default:
			all = append(all, t.Decls...)
		}
	}
	for _, d := range all {
		if named == "" || d.Name == named {
			return d.Name, d.Parameters
		}
	}
	return named, nil
}

// minimalArgs is the least value a JSON schema accepts: an object holds
// its required properties only, each at its least value.
func minimalArgs(schema json.RawMessage, depth int) []byte {
	var s struct {
		Type       any                        `json:"type"`
		Enum       []json.RawMessage          `json:"enum"`
		Const      json.RawMessage            `json:"const"`
		Minimum    *float64                   `json:"minimum"`
		MinItems   int                        `json:"minItems"`
		Items      json.RawMessage            `json:"items"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if depth > 8 || json.Unmarshal(schema, &s) != nil {
		if depth == 0 {
			return []byte("{}")
		}
		return []byte("null")
	}
	if len(s.Const) > 0 {
		return s.Const
	}
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	typ, _ := s.Type.(string)
	if ts, ok := s.Type.([]any); ok && len(ts) > 0 {
		typ, _ = ts[0].(string)
	}
	if typ == "" && (s.Properties != nil || depth == 0) {
		typ = "object"
	}
	switch typ {
	case "object":
		b := []byte{'{'}
		for i, name := range s.Required {
			if i > 0 {
				b = append(b, ',')
			}
			k, _ := json.Marshal(name)
			b = append(append(b, k...), ':')
			b = append(b, minimalArgs(s.Properties[name], depth+1)...)
		}
		return append(b, '}')
	case "string":
		return []byte(`"x"`)
	case "integer", "number":
		if s.Minimum != nil {
			v := *s.Minimum
			if typ == "integer" {
				v = math.Ceil(v)
			}
			return strconv.AppendFloat(nil, v, 'g', -1, 64)
		}
		return []byte("0")
	case "boolean":
		return []byte("false")
	case "array":
		b := []byte{'['}
		for i := 0; i < s.MinItems && i < 8; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, minimalArgs(s.Items, depth+1)...)
		}
		return append(b, ']')
	}
	return []byte("null")
}

// shapeAnswer applies the request's shape to an answer: the chunk
// budget (a cut text finishes with "length"), the JSON document, the tool
// call.
func shapeAnswer(r *http.Request, resp *Response, a *answer) {
	sh, ok := r.Context().Value(shapeKey{}).(shape)
	if !ok || !resp.OK() || resp.Body != "" {
		return
	}
	if sh.tool != "" && resp.Fault == None {
		a.tool, a.args = sh.tool, sh.args
		if a.args == "" {
			a.args = "{}"
		}
		return
	}
	a.json = sh.json
	if sh.maxTokens > 0 {
		if n := (sh.maxTokens + 3) / 4; n < resp.Chunks() {
			resp.Stream.Chunks = n
			a.finish = "length"
		}
	}
}

// serveTool writes a tool-call answer after the response's latency.
func (s *Server) serveTool(w http.ResponseWriter, ctx context.Context, wf wire, resp *Response, a *answer, stream bool) {
	if !s.sleep(ctx, s.scale(resp.Latency)) {
		return
	}
	writeHeaders(w, resp)
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusOrOK())
		io.WriteString(w, wf.completion(a.completion(1)))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(resp.StatusOrOK())
	io.WriteString(w, wf.start(a.opening()))
	for _, c := range a.toolChunks() {
		io.WriteString(w, wf.event(c))
	}
	io.WriteString(w, wf.end(true))
}
