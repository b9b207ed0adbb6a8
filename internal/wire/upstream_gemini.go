package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Gemini's generateContent format. The gemini adapter's side: the
// request it sends (a chat request translated) and the answer and stream
// events it reads back as chat. The fault upstream's side: a Gemini
// answer as a Gemini upstream writes it, translated from a chat answer:
// one candidate whose content parts are the reasoning
// ({"text":…,"thought":true}), the text and the function calls;
// finishReason and usageMetadata; the model as modelVersion.

// ParseGeminiAction splits the last segment of a Gemini model path,
// models/{model}:{method}, into the model and the method; ok is false
// when either is missing.
func ParseGeminiAction(action string) (model, method string, ok bool) {
	i := strings.LastIndexByte(action, ':')
	if i <= 0 || i == len(action)-1 {
		return "", "", false
	}
	return action[:i], action[i+1:], true
}

// GeminiFinish maps a chat finish_reason to a Gemini finishReason (a
// function call ends with STOP, as Gemini's do).
func GeminiFinish(finish string) string {
	switch finish {
	case "length":
		return "MAX_TOKENS"
	case "content_filter":
		return "SAFETY"
	}
	return "STOP"
}

// GeminiError is a Google API error body (google.rpc.Status).
func GeminiError(code int, status, msg string) []byte {
	b := strconv.AppendInt([]byte(`{"error":{"code":`), int64(code), 10)
	b = appendJSONString(append(b, `,"message":`...), msg)
	b = appendJSONString(append(b, `,"status":`...), status)
	return append(b, "}}"...)
}

// ChatToGemini translates a chat.completion into a generateContent
// answer; model is the model the client asked for, id the responseId.
func ChatToGemini(chat []byte, model, id string) ([]byte, error) {
	var c completion
	if err := readCompletion(chat, &c); err != nil {
		return nil, err
	}
	g := gemAnswer{model: model, id: id}
	if len(c.reasoning) > 2 {
		g.parts = appendPart(g.parts, str(c.reasoning), true)
	}
	if len(c.content) > 2 {
		g.parts = appendPart(g.parts, str(c.content), false)
	}
	for i := range c.calls {
		g.parts = appendCallPart(g.parts, str(c.calls[i].name), str(c.calls[i].args))
	}
	g.finish = GeminiFinish(str(c.finish))
	if c.hasUsage {
		g.usage = &c.usage
	}
	return g.append(nil, true), nil
}

// gemAnswer is one generateContent answer or stream event.
type gemAnswer struct {
	model, id string
	parts     []byte // the content parts, comma-separated
	finish    string // "" in a stream's content events
	usage     *ChatUsage
}

// append appends the answer; whole answers (and a stream's last event)
// carry at least an empty text part, as Gemini's do.
func (g *gemAnswer) append(dst []byte, whole bool) []byte {
	parts := g.parts
	if len(parts) == 0 && whole {
		parts = []byte(`{"text":""}`)
	}
	dst = append(dst, `{"candidates":[{"content":{"role":"model","parts":[`...)
	dst = append(dst, parts...)
	dst = append(dst, "]}"...)
	if g.finish != "" {
		dst = appendJSONString(append(dst, `,"finishReason":`...), g.finish)
	}
	dst = append(dst, `,"index":0}]`...)
	if u := g.usage; u != nil {
		total := u.TotalTokens
		if total == 0 {
			total = u.PromptTokens + u.CompletionTokens
		}
		dst = strconv.AppendInt(append(dst, `,"usageMetadata":{"promptTokenCount":`...), int64(u.PromptTokens), 10)
		dst = strconv.AppendInt(append(dst, `,"candidatesTokenCount":`...), int64(u.CompletionTokens), 10)
		dst = strconv.AppendInt(append(dst, `,"totalTokenCount":`...), int64(total), 10)
		dst = append(dst, '}')
	}
	dst = appendJSONString(append(dst, `,"modelVersion":`...), g.model)
	dst = appendJSONString(append(dst, `,"responseId":`...), g.id)
	return append(dst, '}')
}

// appendPart appends a text part (a thought when thought).
func appendPart(parts []byte, text string, thought bool) []byte {
	if len(parts) > 0 {
		parts = append(parts, ',')
	}
	parts = appendJSONString(append(parts, `{"text":`...), text)
	if thought {
		parts = append(parts, `,"thought":true`...)
	}
	return append(parts, '}')
}

// appendCallPart appends a functionCall part; arguments that are not a
// JSON object become {}.
func appendCallPart(parts []byte, name, args string) []byte {
	if len(parts) > 0 {
		parts = append(parts, ',')
	}
	parts = appendJSONString(append(parts, `{"functionCall":{"name":`...), name)
	parts = append(parts, `,"args":`...)
	obj := bytes.TrimSpace([]byte(args))
	if len(obj) == 0 || obj[0] != '{' || !json.Valid(obj) {
		obj = []byte(`{}`)
	}
	return append(append(parts, obj...), "}}"...)
}

// GemStream translates one chat.completion.chunk stream into Gemini's
// streamGenerateContent?alt=sse events: an event for each chunk with
// text or reasoning; function calls, whose arguments chat streams in
// pieces and Gemini sends whole, wait for the last event, which carries
// them with finishReason and usage. That event goes out once both the
// finish reason and the usage are known (OpenAI streams may send the
// usage in a chunk of its own after the finish), or at [DONE] or End.
// Gemini streams have no terminator.
type GemStream struct {
	Model string // the model the client asked for
	ID    string // the responseId

	calls  []ChatToolCall
	usage  *ChatUsage
	finish string
	done   bool
	chunk  ChatChunk
}

// Event appends the Gemini events for one chat SSE event's data.
func (s *GemStream) Event(dst, data []byte) []byte {
	data = bytes.TrimSpace(data)
	if s.done {
		return dst
	}
	if string(data) == "[DONE]" {
		return s.End(dst)
	}
	g := gemAnswer{model: s.Model, id: s.ID}
	if text, ok := textDelta(data); ok {
		if len(text) == 0 {
			return dst
		}
		g.parts = append(appendRawString(append(g.parts, `{"text":`...), text), '}')
		return AppendSSE(dst, "", g.append(nil, false))
	}
	c := &s.chunk
	*c = ChatChunk{}
	if json.Unmarshal(data, c) != nil {
		return AppendSSE(dst, "", GeminiError(502, "INTERNAL", "the upstream sent a malformed stream event"))
	}
	if c.Error != nil {
		return AppendSSE(dst, "", GeminiError(500, "INTERNAL", c.Error.Message))
	}
	if c.Usage != nil {
		s.usage = c.Usage
	}
	for i := range c.Choices {
		if ch := &c.Choices[i]; ch.Index == 0 {
			s.choice(&g, ch.Delta.ReasoningContent, ch.Delta.Reasoning, ch.Delta.Content)
			s.addCalls(c, i)
			if f := ch.FinishReason; f != nil && *f != "" {
				s.finish = GeminiFinish(*f)
			}
		}
	}
	if s.finish != "" && s.usage != nil {
		return s.last(dst, g.parts)
	}
	if len(g.parts) == 0 {
		return dst
	}
	return AppendSSE(dst, "", g.append(nil, false))
}

// last appends the stream's last event: parts, the calls, finishReason
// and usage.
func (s *GemStream) last(dst, parts []byte) []byte {
	s.done = true
	g := gemAnswer{model: s.Model, id: s.ID, parts: parts, finish: s.finish, usage: s.usage}
	for _, tc := range s.calls {
		g.parts = appendCallPart(g.parts, tc.Function.Name, tc.Function.Arguments)
	}
	return AppendSSE(dst, "", g.append(nil, true))
}

// choice adds a delta's reasoning and text parts.
func (s *GemStream) choice(g *gemAnswer, reasoning, reasoningAlt, content *string) {
	if reasoning == nil {
		reasoning = reasoningAlt
	}
	if reasoning != nil && *reasoning != "" {
		g.parts = appendPart(g.parts, *reasoning, true)
	}
	if content != nil && *content != "" {
		g.parts = appendPart(g.parts, *content, false)
	}
}

// addCalls gathers the tool call deltas of choice i: a new index starts
// a call, later deltas add to its arguments.
func (s *GemStream) addCalls(c *ChatChunk, i int) {
	for _, tc := range c.Choices[i].Delta.ToolCalls {
		if tc.Index >= len(s.calls) {
			if tc.Index > len(s.calls)+64 {
				continue // an index no stream reaches: never grow for it
			}
			s.calls = append(s.calls, make([]ChatToolCall, tc.Index+1-len(s.calls))...)
		}
		call := &s.calls[tc.Index]
		if tc.Function.Name != "" {
			call.Function.Name = tc.Function.Name
		}
		call.Function.Arguments += tc.Function.Arguments
	}
}

// End appends the last event when the stream finished without usage (or
// without a finish reason: STOP); a Gemini stream has no terminator of
// its own.
func (s *GemStream) End(dst []byte) []byte {
	if s.done {
		return dst
	}
	if s.finish == "" {
		s.finish = "STOP"
	}
	return s.last(dst, nil)
}

// ---- the gemini adapter: requests ----

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

// ChatRequestToGemini translates an OpenAI chat request (a body that
// passed the gateway's request checks) into a generateContent request: system / developer → systemInstruction; user → role user,
// assistant → role model (tool calls as functionCall parts), tool →
// functionResponse parts in a user turn (the function name comes from the
// assistant's earlier tool call with that id); generationConfig from
// temperature, top_p, max tokens, stop, n, seed, penalties and
// response_format json_object.
func ChatRequestToGemini(body []byte) ([]byte, error) {
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
	return &UnsupportedError{Type: "gemini", Msg: fmt.Sprintf(format, a...)}
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

// GeminiAnswerToChat translates a GenerateContentResponse into a
// chat.completion created at created; model is the model asked for, the
// answer's when the upstream names none.
func GeminiAnswerToChat(native []byte, created int64, model string) ([]byte, error) {
	var r gmResponse
	if err := json.Unmarshal(native, &r); err != nil {
		return nil, err
	}
	if len(r.Error) > 0 && string(r.Error) != "null" {
		return nil, fmt.Errorf("an error object in a 2xx answer")
	}
	out := AdapterCompletion{Object: "chat.completion", Created: created, Usage: r.usage()}
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

// NewGeminiChatStream starts a stream's translation: its chunks are
// created at created; model is the model asked for, the answer's when the
// upstream names none.
func NewGeminiChatStream(created int64, model string) *GeminiChatStream {
	s := &GeminiChatStream{}
	s.cw.created = created
	s.cw.fallbackModel = model
	return s
}

// GeminiChatStream is one streamGenerateContent (alt=sse) translation
// into chat.completion.chunk events (Event for each native event, End at
// the native end of the stream). Gemini
// streams end without a terminal event: [DONE] is added at the end of a
// stream that stated a finishReason; one that did not is left cut, so
// pipeStream treats it as an early EOF.
type GeminiChatStream struct {
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
func (s *GeminiChatStream) choice(dst []byte, i int) ([]byte, *gmChoice) {
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

// Event appends the chat events of one native event's data.
func (s *GeminiChatStream) Event(dst, data []byte) []byte {
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

// End appends data: [DONE] when the stream stated a finishReason.
func (s *GeminiChatStream) End(dst []byte) []byte {
	if s.finished {
		return append(dst, doneBytes...)
	}
	return dst
}
