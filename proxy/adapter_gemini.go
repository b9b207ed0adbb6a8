package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
)

// geminiWire speaks the Gemini generateContent API. baseURL includes the
// version segment, as for the openai type:
// https://generativelanguage.googleapis.com/v1beta →
// POST {baseURL}/models/{model}:generateContent,
// POST {baseURL}/models/{model}:streamGenerateContent?alt=sse,
// GET {baseURL}/models.
type geminiWire struct{ base string }

func (g *geminiWire) modelsURL() string { return g.base + "/models" }

func (g *geminiWire) setAuth(h http.Header, apiKey string) {
	if apiKey != "" {
		h.Set("X-Goog-Api-Key", apiKey)
	}
}

// geminiURL is the generateContent URL of a model ("models/x" or "x").
func (g *geminiWire) url(model string, stream bool) string {
	m := url.PathEscape(strings.TrimPrefix(model, "models/"))
	if stream {
		return g.base + "/models/" + m + ":streamGenerateContent?alt=sse"
	}
	return g.base + "/models/" + m + ":generateContent"
}

func (g *geminiWire) encode(req *chatRequest, upstreamModel string) (string, []byte, error) {
	body, err := geminiBody(req.body)
	return g.url(upstreamModel, req.Stream), body, err
}

type gmRequest struct {
	Contents          []gmContent   `json:"contents"`
	SystemInstruction *gmContent    `json:"systemInstruction,omitempty"`
	GenerationConfig  *gmGenConfig  `json:"generationConfig,omitempty"`
	Tools             []gmTool      `json:"tools,omitempty"`
	ToolConfig        *gmToolConfig `json:"toolConfig,omitempty"`
}

type gmContent struct {
	Role  string   `json:"role,omitempty"`
	Parts []gmPart `json:"parts"`
}

type gmPart struct {
	Text             string              `json:"text,omitempty"`
	Thought          bool                `json:"thought,omitempty"`
	InlineData       *gmBlob             `json:"inlineData,omitempty"`
	FunctionCall     *gmFunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *gmFunctionResponse `json:"functionResponse,omitempty"`
}

type gmBlob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type gmFunctionCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type gmFunctionResponse struct {
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

type gmGenConfig struct {
	Temperature      *float64 `json:"temperature,omitempty"`
	TopP             *float64 `json:"topP,omitempty"`
	MaxOutputTokens  int      `json:"maxOutputTokens,omitempty"`
	StopSequences    []string `json:"stopSequences,omitempty"`
	CandidateCount   int      `json:"candidateCount,omitempty"`
	Seed             *int64   `json:"seed,omitempty"`
	PresencePenalty  *float64 `json:"presencePenalty,omitempty"`
	FrequencyPenalty *float64 `json:"frequencyPenalty,omitempty"`
	ResponseMimeType string   `json:"responseMimeType,omitempty"`
}

type gmTool struct {
	FunctionDeclarations []gmFunctionDecl `json:"functionDeclarations"`
}

type gmFunctionDecl struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type gmToolConfig struct {
	FunctionCallingConfig struct {
		Mode                 string   `json:"mode"`
		AllowedFunctionNames []string `json:"allowedFunctionNames,omitempty"`
	} `json:"functionCallingConfig"`
}

// geminiBody translates an OpenAI chat request into a generateContent
// request: system / developer → systemInstruction; user → role user,
// assistant → role model (tool calls as functionCall parts), tool →
// functionResponse parts in a user turn (the function name comes from the
// assistant's earlier tool call with that id); generationConfig from
// temperature, top_p, max tokens, stop, n, seed, penalties and
// response_format json_object.
func geminiBody(body []byte) ([]byte, error) {
	const typ = "gemini"
	r, err := decodeOA(typ, body)
	if err != nil {
		return nil, err
	}
	if err := refuseLogitBias(typ, body); err != nil {
		return nil, err
	}
	var out gmRequest
	if out.GenerationConfig, err = gmGeneration(r); err != nil {
		return nil, err
	}
	b := gmBuilder{out: &out, names: map[string]string{}}
	for i := range r.Messages {
		if err := b.addMessage(&r.Messages[i], i); err != nil {
			return nil, err
		}
	}
	if len(b.system) > 0 {
		out.SystemInstruction = &gmContent{Parts: b.system}
	}
	if err := out.setTools(r); err != nil {
		return nil, err
	}
	if len(out.Contents) == 0 {
		return nil, gmBad("the request has no user, assistant or tool message (generateContent needs at least one)")
	}
	return json.Marshal(out)
}

// gmBad is the gemini adapter's refusal of a request it cannot express.
func gmBad(format string, a ...any) error {
	return &wireError{Type: "gemini", Msg: fmt.Sprintf(format, a...)}
}

// gmGeneration is the request's generationConfig (nil when it sets
// nothing).
func gmGeneration(r *oaRequest) (*gmGenConfig, error) {
	gc := gmGenConfig{Temperature: r.Temperature, TopP: r.TopP, MaxOutputTokens: r.maxTokens(0), Seed: r.Seed,
		PresencePenalty: r.PresencePenalty, FrequencyPenalty: r.FrequencyPenalty}
	var err error
	if gc.StopSequences, err = r.stops("gemini"); err != nil {
		return nil, err
	}
	if r.N != nil && *r.N > 1 {
		gc.CandidateCount = *r.N
	}
	if r.ResponseFormat != nil {
		switch r.ResponseFormat.Type {
		case "", "text":
		case "json_object":
			gc.ResponseMimeType = "application/json"
		default:
			return nil, gmBad(`response_format %q is not supported`, r.ResponseFormat.Type)
		}
	}
	if reflect.DeepEqual(gc, gmGenConfig{}) {
		return nil, nil
	}
	return &gc, nil
}

// gmBuilder collects a request's contents and system instruction.
type gmBuilder struct {
	out    *gmRequest
	system []gmPart
	names  map[string]string // tool call id → function name
}

// add appends parts to the last content when it is role's, else as a
// new content.
func (b *gmBuilder) add(role string, parts ...gmPart) {
	out := b.out
	if n := len(out.Contents); n > 0 && out.Contents[n-1].Role == role {
		out.Contents[n-1].Parts = append(out.Contents[n-1].Parts, parts...)
		return
	}
	out.Contents = append(out.Contents, gmContent{Role: role, Parts: parts})
}

// addMessage translates chat message i.
func (b *gmBuilder) addMessage(m *oaMessage, i int) error {
	const typ = "gemini"
	ps, err := m.parts(typ, i)
	if err != nil {
		return err
	}
	if m.Role == "assistant" || m.Role == "tool" {
		if err := textOnly(typ, i, m.Role, ps); err != nil {
			return err
		}
	}
	switch m.Role {
	case "system", "developer":
		for j, p := range ps {
			if p.Type != "text" {
				return gmBad("messages[%d].content[%d]: a system message takes text only", i, j)
			}
			if p.Text != "" {
				b.system = append(b.system, gmPart{Text: p.Text})
			}
		}
	case "user":
		return b.addUser(ps, i)
	case "assistant":
		return b.addAssistant(m, ps, i)
	case "tool":
		name, ok := b.names[m.ToolCallID]
		if !ok {
			return gmBad("messages[%d]: tool_call_id %q names no earlier assistant tool call", i, m.ToolCallID)
		}
		b.add("user", gmPart{FunctionResponse: &gmFunctionResponse{Name: name, Response: toolResponse(textOf(ps))}})
	default:
		return gmBad("messages[%d]: role %q is not supported", i, m.Role)
	}
	return nil
}

func (b *gmBuilder) addUser(ps []oaPart, i int) error {
	var parts []gmPart
	for _, p := range ps {
		if p.Type == "text" {
			if p.Text != "" {
				parts = append(parts, gmPart{Text: p.Text})
			}
			continue
		}
		mt, data, ok := dataURL(p.ImageURL.URL)
		if !ok {
			return gmBad("messages[%d]: an image_url must be a base64 data: URL (Gemini does not fetch URLs)", i)
		}
		parts = append(parts, gmPart{InlineData: &gmBlob{MimeType: mt, Data: data}})
	}
	if len(parts) == 0 {
		parts = []gmPart{{Text: " "}}
	}
	b.add("user", parts...)
	return nil
}

func (b *gmBuilder) addAssistant(m *oaMessage, ps []oaPart, i int) error {
	if len(m.FunctionCall) > 0 && string(m.FunctionCall) != "null" {
		return gmBad(`messages[%d]: the legacy "function_call" is not supported; use "tool_calls"`, i)
	}
	var parts []gmPart
	if t := textOf(ps); t != "" {
		parts = append(parts, gmPart{Text: t})
	}
	for _, tc := range m.ToolCalls {
		args, err := argsObject("gemini", tc.Function.Arguments)
		if err != nil {
			return err
		}
		if tc.Function.Name == "" {
			return gmBad("messages[%d]: a tool call needs a function name", i)
		}
		b.names[tc.ID] = tc.Function.Name
		parts = append(parts, gmPart{FunctionCall: &gmFunctionCall{Name: tc.Function.Name, Args: args}})
	}
	if len(parts) > 0 {
		b.add("model", parts...)
	}
	return nil
}

// setTools translates tools and tool_choice into function declarations
// and a function calling config.
func (out *gmRequest) setTools(r *oaRequest) error {
	if len(r.Tools) > 0 {
		var decls []gmFunctionDecl
		for _, t := range r.Tools {
			d := gmFunctionDecl{Name: t.Function.Name, Description: t.Function.Description}
			if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && string(p) != "null" {
				d.Parameters = p
			}
			decls = append(decls, d)
		}
		out.Tools = []gmTool{{FunctionDeclarations: decls}}
	}
	mode, name, ok := toolChoice(r.ToolChoice)
	if !ok {
		return gmBad(`"tool_choice" must be "none", "auto", "required" or {"type":"function","function":{"name":…}}`)
	}
	if mode == "" || len(out.Tools) == 0 {
		return nil
	}
	tc := &gmToolConfig{}
	switch mode {
	case "none":
		tc.FunctionCallingConfig.Mode = "NONE"
	case "auto":
		tc.FunctionCallingConfig.Mode = "AUTO"
	case "required":
		tc.FunctionCallingConfig.Mode = "ANY"
	case "function":
		tc.FunctionCallingConfig.Mode = "ANY"
		tc.FunctionCallingConfig.AllowedFunctionNames = []string{name}
	}
	out.ToolConfig = tc
	return nil
}

// toolResponse is a tool result as a functionResponse.response (a JSON
// object): the result itself when it is one, else {"content": text}.
func toolResponse(text string) json.RawMessage {
	t := bytes.TrimSpace([]byte(text))
	if len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(map[string]string{"content": text})
	return b
}

// ---- responses ----

type gmResponse struct {
	Candidates []struct {
		Index   int `json:"index"`
		Content *struct {
			Parts []struct {
				Text         *string         `json:"text"`
				Thought      bool            `json:"thought"`
				FunctionCall *gmFunctionCall `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata *struct {
		PromptTokenCount     int `json:"promptTokenCount"`
		CandidatesTokenCount int `json:"candidatesTokenCount"`
		ThoughtsTokenCount   int `json:"thoughtsTokenCount"`
		TotalTokenCount      int `json:"totalTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion string          `json:"modelVersion"`
	ResponseID   string          `json:"responseId"`
	Error        json.RawMessage `json:"error"`
}

func (r *gmResponse) usage() *oaUsage {
	u := r.UsageMetadata
	if u == nil {
		return nil
	}
	c := u.CandidatesTokenCount + u.ThoughtsTokenCount
	total := u.TotalTokenCount
	if total == 0 {
		total = u.PromptTokenCount + c
	}
	return &oaUsage{PromptTokens: u.PromptTokenCount, CompletionTokens: c, TotalTokens: total}
}

// geminiFinish maps a finishReason to an OpenAI finish_reason.
func geminiFinish(r string, toolCalls bool) string {
	switch r {
	case "MAX_TOKENS":
		return "length"
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY":
		return "content_filter"
	}
	if toolCalls {
		return "tool_calls"
	}
	return "stop" // STOP, OTHER, MALFORMED_FUNCTION_CALL, ...
}

func (g *geminiWire) wrap(resp *http.Response, model string) {
	resp.ContentLength = -1
	created := time.Now().Unix()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		st := &gmStream{}
		st.cw.created = created
		st.cw.fallbackModel = model
		resp.Body = newSSETranslator(resp.Body, st.event, st.end)
		return
	}
	resp.Body = &jsonTranslator{src: resp.Body, translate: func(b []byte) ([]byte, error) { return geminiJSON(b, created, model) }}
}

// geminiJSON translates a GenerateContentResponse into a chat.completion.
func geminiJSON(native []byte, created int64, model string) ([]byte, error) {
	var r gmResponse
	if err := json.Unmarshal(native, &r); err != nil {
		return nil, err
	}
	if len(r.Error) > 0 && string(r.Error) != "null" {
		return nil, fmt.Errorf("an error object in a 2xx answer")
	}
	out := oaCompletion{Object: "chat.completion", Created: created, Usage: r.usage()}
	out.ID, out.Model = answerIdentity(r.ResponseID, r.ModelVersion, model)
	if len(r.Candidates) == 0 {
		if r.PromptFeedback == nil || r.PromptFeedback.BlockReason == "" {
			return nil, fmt.Errorf("no candidates")
		}
		// The prompt was blocked: an empty, filtered answer.
		out.Choices = []oaChoice{{Message: oaOutMessage{Role: "assistant", Content: strPtr("")}, FinishReason: "content_filter"}}
		return json.Marshal(out)
	}
	calls := 0
	for _, c := range r.Candidates {
		msg := oaOutMessage{Role: "assistant"}
		var text, reasoning strings.Builder
		if c.Content != nil {
			for _, p := range c.Content.Parts {
				switch {
				case p.FunctionCall != nil:
					msg.ToolCalls = append(msg.ToolCalls, geminiToolCall(p.FunctionCall, calls, nil))
					calls++
				case p.Text != nil && p.Thought:
					reasoning.WriteString(*p.Text)
				case p.Text != nil:
					text.WriteString(*p.Text)
				}
			}
		}
		if text.Len() > 0 || len(msg.ToolCalls) == 0 {
			msg.Content = strPtr(text.String())
		}
		msg.ReasoningContent = reasoning.String()
		out.Choices = append(out.Choices, oaChoice{Index: c.Index, Message: msg,
			FinishReason: geminiFinish(c.FinishReason, len(msg.ToolCalls) > 0)})
	}
	return json.Marshal(out)
}

// geminiToolCall is a functionCall as an OpenAI tool call. Gemini calls
// have no id; the gateway numbers them (call_0, call_1, … per answer).
func geminiToolCall(fc *gmFunctionCall, n int, index *int) oaOutToolCall {
	tc := oaOutToolCall{Index: index, ID: "call_" + strconv.Itoa(n), Type: "function"}
	tc.Function.Name = fc.Name
	tc.Function.Arguments = "{}"
	if a := bytes.TrimSpace(fc.Args); len(a) > 0 && string(a) != "null" {
		tc.Function.Arguments = string(a)
	}
	return tc
}

// gmStream is one streamGenerateContent (alt=sse) translation. Gemini
// streams end without a terminal event: [DONE] is added at the end of a
// stream that stated a finishReason; one that did not is left cut, so
// pipeStream treats it as an early EOF.
type gmStream struct {
	cw       chunkWriter
	started  bool // cw holds the answer's identity
	finished bool
	usage    bool // the usage went out, with the first candidate's finish
	// calls counts the answer's function calls: their ids (call_0,
	// call_1, …) are unique in the answer, across its choices.
	calls   int
	choices map[int]*gmChoice // candidate index → its state, once it appeared
	ev      gmResponse
}

// gmChoice is one choice (candidate) of a streamed answer.
type gmChoice struct {
	calls int // its tool calls so far: the next one's delta index
}

// choice is the state of the choice with candidate index i. The first time
// a choice appears it gets its role delta, before anything else of it: the
// OpenAI stream shape opens every choice with one, and the SDKs' stream
// helpers refuse a choice without it (openai-node: "missing role for
// choice 1" with n: 2).
func (s *gmStream) choice(dst []byte, i int) ([]byte, *gmChoice) {
	if ch := s.choices[i]; ch != nil {
		return dst, ch
	}
	if s.choices == nil {
		s.choices = map[int]*gmChoice{}
	}
	ch := &gmChoice{}
	s.choices[i] = ch
	return s.cw.role(dst, i), ch
}

func (s *gmStream) event(dst, data []byte) []byte {
	ev := &s.ev
	*ev = gmResponse{}
	if json.Unmarshal(data, ev) != nil {
		return malformedEvent(dst, "gemini")
	}
	if len(ev.Error) > 0 && string(ev.Error) != "null" {
		return passError(dst, data) // native body, classified as is
	}
	if !s.started {
		s.started = true
		s.cw.init(ev.ResponseID, ev.ModelVersion)
	}
	if len(ev.Candidates) == 0 && ev.PromptFeedback != nil && ev.PromptFeedback.BlockReason != "" {
		s.finished = true
		dst, _ = s.choice(dst, 0)
		return s.cw.finish(dst, 0, "content_filter", ev.usage())
	}
	for _, c := range ev.Candidates {
		var ch *gmChoice
		dst, ch = s.choice(dst, c.Index)
		if c.Content != nil {
			for _, p := range c.Content.Parts {
				switch {
				case p.FunctionCall != nil:
					// The delta index counts the choice's own tool
					// calls (0, 1, … in each choice); the id is the
					// answer's.
					k := ch.calls
					ch.calls++
					tc := geminiToolCall(p.FunctionCall, s.calls, &k)
					s.calls++
					dst = s.cw.chunk(dst, oaChunkChoice{Index: c.Index, Delta: oaDelta{ToolCalls: []oaOutToolCall{tc}}}, nil)
				case p.Text != nil && *p.Text != "":
					dst = s.cw.text(dst, c.Index, *p.Text, p.Thought)
				}
			}
		}
		if c.FinishReason != "" {
			s.finished = true
			// The usage covers the whole answer: once, not once per
			// candidate (a client adding it up would count it twice).
			var u *oaUsage
			if !s.usage {
				u = ev.usage()
				s.usage = u != nil
			}
			dst = s.cw.finish(dst, c.Index, geminiFinish(c.FinishReason, ch.calls > 0), u)
		}
	}
	return dst
}

func (s *gmStream) end(dst []byte) []byte {
	if s.finished {
		return append(dst, doneBytes...)
	}
	return dst
}

// refuseLogitBias is a non-empty "logit_bias" as a *wireError, for both
// adapters: neither native format can bias tokens, and a bias of -100 bans
// one, so dropping it changes the request as much as "logprobs" would. An
// empty object or null asks nothing. The key is matched exactly, as
// parseChatRequest matches its fields (a body that spells it with \u
// escapes means the same field); a body that cannot hold it is not scanned.
func refuseLogitBias(typ string, body []byte) error {
	if !bytes.Contains(body, []byte("logit_bias")) && !bytes.Contains(body, []byte(`\u`)) {
		return nil
	}
	set := false
	jsonvalid.Members(body, func(ks, ke, vs, ve int) {
		if set || !keyEquals(body[ks:ke], "logit_bias") {
			return
		}
		raw := body[vs:ve]
		var m map[string]json.RawMessage
		set = string(raw) != "null" && (json.Unmarshal(raw, &m) != nil || len(m) > 0)
	})
	if set {
		return &wireError{Type: typ, Msg: `"logit_bias" is not supported`}
	}
	return nil
}
