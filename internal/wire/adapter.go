package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
)

// The upstream side of the native provider types (anthropic, gemini):
// the gateway's adapters send the client's chat request to such a
// provider in its own format and read its answer back as chat
// (upstream_anthropic.go, upstream_gemini.go). This file holds what both
// share: the chat request as they read it, the chat answer they write,
// and the refusal of a request a native format cannot express.

// UnsupportedError is a client request a provider type's native format
// cannot express (an unsupported content part, n > 1 on anthropic, ...):
// the gateway passes such a target over, a 400
// unsupported_by_provider_type when no other serves the request.
type UnsupportedError struct {
	Type string // the provider type
	Msg  string
}

func (e *UnsupportedError) Error() string {
	return "provider type " + e.Type + " (wire adapter) cannot express this request: " + e.Msg
}

// ---- the client's request (OpenAI chat completions), as the adapters read it ----

type oaRequest struct {
	Messages            []oaMessage     `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Stop                json.RawMessage `json:"stop"`
	N                   *int            `json:"n"`
	Seed                *int64          `json:"seed"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	Tools               []oaTool        `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	User                string          `json:"user"`
	Logprobs            bool            `json:"logprobs"`
	ResponseFormat      *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	Functions json.RawMessage `json:"functions"`
	Audio     json.RawMessage `json:"audio"`
}

type oaMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	ToolCalls    []oaToolCall    `json:"tool_calls"`
	ToolCallID   string          `json:"tool_call_id"`
	FunctionCall json.RawMessage `json:"function_call"`
}

type oaPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

type oaToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// decodeOA decodes the client body for an adapter and rejects what no
// adapter expresses. The body already passed the gateway's request checks
// (proxy.parseChatRequest).
func decodeOA(typ string, body []byte) (*oaRequest, error) {
	var r oaRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, &UnsupportedError{typ, "the body does not decode as a chat completion request: " + err.Error()}
	}
	bad := func(format string, a ...any) (*oaRequest, error) {
		return nil, &UnsupportedError{typ, fmt.Sprintf(format, a...)}
	}
	switch {
	case len(r.Functions) > 0 && string(r.Functions) != "null":
		return bad(`the legacy "functions" field is not supported; use "tools"`)
	case r.Logprobs:
		return bad(`"logprobs" is not supported`)
	case len(r.Audio) > 0 && string(r.Audio) != "null":
		return bad(`audio output is not supported`)
	}
	for i, t := range r.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return bad("tools[%d]: only function tools with a name are supported", i)
		}
	}
	return &r, nil
}

// maxTokens is the client's output budget, or def.
func (r *oaRequest) maxTokens(def int) int {
	switch {
	case r.MaxCompletionTokens != nil && *r.MaxCompletionTokens > 0:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil && *r.MaxTokens > 0:
		return *r.MaxTokens
	}
	return def
}

// stops reads "stop": a string or a list of strings.
func (r *oaRequest) stops(typ string) ([]string, error) {
	raw := bytes.TrimSpace(r.Stop)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) != nil {
		return nil, &UnsupportedError{typ, `"stop" must be a string or a list of strings`}
	}
	return many, nil
}

// parts reads a message's content: a string, a list of parts, or null.
func (m *oaMessage) parts(typ string, i int) ([]oaPart, error) {
	raw := bytes.TrimSpace(m.Content)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, &UnsupportedError{typ, fmt.Sprintf("messages[%d].content: %v", i, err)}
		}
		return []oaPart{{Type: "text", Text: s}}, nil
	}
	var ps []oaPart
	if err := json.Unmarshal(raw, &ps); err != nil {
		return nil, &UnsupportedError{typ, fmt.Sprintf("messages[%d].content must be a string or a list of content parts", i)}
	}
	for j, p := range ps {
		switch p.Type {
		case "text":
		case "image_url":
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return nil, &UnsupportedError{typ, fmt.Sprintf("messages[%d].content[%d]: image_url needs a url", i, j)}
			}
		default:
			return nil, &UnsupportedError{typ, fmt.Sprintf("messages[%d].content[%d]: content part type %q is not supported", i, j, p.Type)}
		}
	}
	return ps, nil
}

// textOnly refuses a non-text part in a message whose content the adapters
// read as text (assistant and tool messages): an image there would
// otherwise be dropped without a word.
func textOnly(typ string, i int, role string, ps []oaPart) error {
	for j, p := range ps {
		if p.Type != "text" {
			return &UnsupportedError{typ, fmt.Sprintf("messages[%d].content[%d]: %s messages take text only (got %q)", i, j, role, p.Type)}
		}
	}
	return nil
}

// text joins a content's text parts (tool results, system prompts).
func textOf(ps []oaPart) string {
	if len(ps) == 1 {
		return ps[0].Text
	}
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.Text)
	}
	return b.String()
}

// dataURL splits a data: URL into its media type and base64 payload.
func dataURL(u string) (mediaType, data string, ok bool) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", "", false
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok {
		return "", "", false
	}
	mediaType, enc, _ := strings.Cut(meta, ";")
	if enc != "base64" || mediaType == "" {
		return "", "", false
	}
	return mediaType, data, true
}

// toolChoice reads "tool_choice": "none" | "auto" | "required" | {function:{name}}.
func toolChoice(raw json.RawMessage) (mode, name string, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", "", true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto", "required":
			return s, "", true
		}
		return "", "", false
	}
	var o struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &o) != nil || o.Function.Name == "" {
		return "", "", false
	}
	return "function", o.Function.Name, true
}

// argsObject is a tool call's arguments as a JSON object ({} when empty).
func argsObject(typ string, args string) (json.RawMessage, error) {
	a := bytes.TrimSpace([]byte(args))
	if len(a) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if a[0] != '{' || !json.Valid(a) {
		return nil, &UnsupportedError{typ, "tool call arguments must be a JSON object"}
	}
	return json.RawMessage(a), nil
}

// ---- OpenAI-shaped output ----

type oaUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// AdapterCompletion is a chat.completion as the adapters write it.
type AdapterCompletion struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices []oaChoice `json:"choices"`
	Usage   *oaUsage   `json:"usage,omitempty"`
}

type oaChoice struct {
	Index        int          `json:"index"`
	Message      oaOutMessage `json:"message"`
	FinishReason string       `json:"finish_reason"`
	// StopReason is the stop string that ended the answer, where the
	// upstream says (Anthropic's stop_sequence), under the name
	// OpenAI-compatible servers that tell it (vLLM) give it.
	StopReason string `json:"stop_reason,omitempty"`
}

type oaOutMessage struct {
	Role             string          `json:"role"`
	Content          *string         `json:"content"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []oaOutToolCall `json:"tool_calls,omitempty"`
}

type oaOutToolCall struct {
	Index    *int   `json:"index,omitempty"` // stream deltas only
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// AdapterChunk is a chat.completion.chunk as the adapters write it.
type AdapterChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []oaChunkChoice `json:"choices"`
	Usage   *oaUsage        `json:"usage,omitempty"`
}

type oaChunkChoice struct {
	Index        int     `json:"index"`
	Delta        oaDelta `json:"delta"`
	FinishReason *string `json:"finish_reason"`
	StopReason   string  `json:"stop_reason,omitempty"` // as oaChoice's
}

type oaDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []oaOutToolCall `json:"tool_calls,omitempty"`
}

// malformedEvent stands for a native stream event that does not parse (or
// does not make sense): one data line that is not JSON, so the gateway's
// stream pipe (proxy.pipeStream) takes the same path as for a garbled
// OpenAI chunk — the output-validation failure (OutcomeQuality, the synthetic 502; the simulator's
// malformed-chunk) — whatever the provider type. The client never sees
// these bytes: before commit the attempt is retried, after it the stream
// ends with the gateway's own error event.
func malformedEvent(dst []byte, typ string) []byte {
	dst = append(dst, "data: breakwater: the upstream sent a malformed "...)
	dst = append(dst, typ...)
	return append(dst, " stream event\n\n"...)
}

// passError forwards a native error event's data unchanged: its object has
// an "error" member, so the gateway's stream pipe classifies the native
// body.
func passError(dst, data []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, bytes.ReplaceAll(bytes.TrimSpace(data), []byte("\n"), []byte(" "))...)
	return append(dst, "\n\n"...)
}

// chunkWriter writes chat.completion.chunk events for one stream. The
// common event (one text delta) is written from a precomputed prefix
// without encoding/json.
type chunkWriter struct {
	id, model string
	created   int64
	prefix    []byte // `data: {"id":…,"choices":[{"index":`
	// fallbackModel is the model asked for, for an upstream that names none.
	fallbackModel string
}

// init starts the chunks of one answer; an upstream that gives no id or
// model gets an id of its own and the model asked for, so no two answers
// share an id.
func (c *chunkWriter) init(id, model string) {
	c.id, c.model = answerIdentity(id, model, c.fallbackModel)
	if c.created == 0 {
		c.created = time.Now().Unix()
	}
	c.prefix = append(c.prefix[:0], `data: {"id":`...)
	c.prefix = AppendJSONStringHTML(c.prefix, c.id)
	c.prefix = append(c.prefix, `,"object":"chat.completion.chunk","created":`...)
	c.prefix = strconv.AppendInt(c.prefix, c.created, 10)
	c.prefix = append(c.prefix, `,"model":`...)
	c.prefix = AppendJSONStringHTML(c.prefix, c.model)
	c.prefix = append(c.prefix, `,"choices":[{"index":`...)
}

// text appends a content (or reasoning) delta for choice index.
func (c *chunkWriter) text(dst []byte, index int, s string, reasoning bool) []byte {
	if c.prefix == nil {
		c.init("", "")
	}
	dst = append(dst, c.prefix...)
	dst = strconv.AppendInt(dst, int64(index), 10)
	if reasoning {
		dst = append(dst, `,"delta":{"reasoning_content":`...)
	} else {
		dst = append(dst, `,"delta":{"content":`...)
	}
	dst = AppendJSONStringHTML(dst, s)
	return append(dst, "},\"finish_reason\":null}]}\n\n"...)
}

// chunk appends a general chunk (role, tool calls, finish, usage).
func (c *chunkWriter) chunk(dst []byte, ch oaChunkChoice, usage *oaUsage) []byte {
	if c.prefix == nil {
		c.init("", "")
	}
	b, _ := json.Marshal(AdapterChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
		Choices: []oaChunkChoice{ch}, Usage: usage})
	dst = append(dst, "data: "...)
	dst = append(dst, b...)
	return append(dst, "\n\n"...)
}

// role appends the chunk that opens choice index: its role delta, which
// the OpenAI stream shape gives every choice once, before any other delta
// of it.
func (c *chunkWriter) role(dst []byte, index int) []byte {
	return c.chunk(dst, oaChunkChoice{Index: index, Delta: oaDelta{Role: "assistant", Content: strPtr("")}}, nil)
}

func (c *chunkWriter) finish(dst []byte, index int, reason string, usage *oaUsage) []byte {
	return c.chunk(dst, oaChunkChoice{Index: index, FinishReason: &reason}, usage)
}

var doneBytes = []byte("data: [DONE]\n\n")

// AppendJSONStringHTML appends s as a JSON string as encoding/json writes
// it, <, > and & as \u escapes and invalid UTF-8 as U+FFFD included: the
// adapters' chat answers are byte for byte what encoding/json would make
// of them.
func AppendJSONStringHTML(dst []byte, s string) []byte {
	simple := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			simple = false
			break
		}
	}
	if simple {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(s)
	return append(dst, b...)
}

func strPtr(s string) *string { return &s }

// answerIdentity is an adapted answer's id and model: the upstream's, else
// an id of its own (never one shared by every such answer) and the model
// asked for.
func answerIdentity(id, model, asked string) (string, string) {
	if id == "" {
		id = newCompletionID()
	}
	if model == "" {
		model = asked
	}
	return id, model
}

// newCompletionID is a chat completion id for an answer whose upstream gave
// none (OpenAI's shape: "chatcmpl-" and an opaque suffix).
func newCompletionID() string {
	return fmt.Sprintf("chatcmpl-bw%016x%08x", rand.Uint64(), rand.Uint32())
}

// refuseLogitBias is a non-empty "logit_bias" as an *UnsupportedError, for both
// adapters: neither native format can bias tokens, and a bias of -100 bans
// one, so dropping it changes the request as much as "logprobs" would. An
// empty object or null asks nothing. The key is matched exactly, as
// the gateway matches a chat request's fields (a body that spells it with \u
// escapes means the same field); a body that cannot hold it is not scanned.
func refuseLogitBias(typ string, body []byte) error {
	if !bytes.Contains(body, []byte("logit_bias")) && !bytes.Contains(body, []byte(`\u`)) {
		return nil
	}
	set := false
	jsonvalid.Members(body, func(ks, ke, vs, ve int) {
		if set || !keyIs(body[ks:ke], "logit_bias") {
			return
		}
		raw := body[vs:ve]
		var m map[string]json.RawMessage
		set = string(raw) != "null" && (json.Unmarshal(raw, &m) != nil || len(m) > 0)
	})
	if set {
		return &UnsupportedError{typ, `"logit_bias" is not supported`}
	}
	return nil
}

// keyIs reports whether the raw JSON key (quotes included, valid JSON) is
// key, escapes decoded.
func keyIs(raw []byte, key string) bool {
	if tokIs(raw, key) {
		return true
	}
	return bytes.IndexByte(raw, '\\') >= 0 && string(unquote(nil, raw)) == key
}
