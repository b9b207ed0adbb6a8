package wire

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
)

// completion is a chat.completion's first choice as the answer
// translations read it: string values as their tokens (nil when absent
// or null), slices of the answer.
type completion struct {
	id, content, reasoning, refusal, finish []byte
	stopSeq                                 []byte // the choice's stop_reason when a string (below)
	calls                                   []compCall
	usage                                   ChatUsage
	hasUsage                                bool
	stack                                   [4]compCall
}

type compCall struct{ id, name, args []byte }

// readCompletion walks a chat.completion once.
func readCompletion(chat []byte, c *completion) error {
	if firstByte(chat) != '{' || !jsonvalid.Valid(chat) {
		return reqErr("", "the answer is not a JSON object")
	}
	c.calls = c.stack[:0]
	var choices []byte
	var err error
	for k, v := range members(chat[skipWS(chat, 0):]) {
		switch string(k) {
		case "id":
			c.id, err = strTok(v, nil, "id")
		case "choices":
			choices, err = arrTok(v, nil, "choices")
		case "usage":
			if firstByte(v) == '{' {
				c.hasUsage = true
				err = readUsage(v, &c.usage)
			}
		}
		if err != nil {
			return err
		}
	}
	ci := newIter(choices)
	_, ch, ok := ci.next()
	if choices == nil || !ok {
		return reqErr("choices", "the answer has no choice")
	}
	return c.readChoice(ch)
}

// readChoice reads the first choice: its finish and its message.
func (c *completion) readChoice(ch []byte) error {
	if firstByte(ch) != '{' {
		return reqErr("choices[0]", "must be an object")
	}
	var msg []byte
	var err error
	for k, v := range members(ch) {
		switch string(k) {
		case "message":
			msg, err = objTok(v, nil, "choices[0].message")
		case "finish_reason":
			c.finish, err = strTok(v, nil, "choices[0].finish_reason")
		case "stop_reason":
			// OpenAI-compatible servers that say which stop string ended
			// the answer (vLLM) put it here; a number is a stop token.
			if firstByte(v) == '"' {
				c.stopSeq = v
			}
		}
		if err != nil {
			return err
		}
	}
	if msg == nil {
		return nil
	}
	for k, v := range members(msg) {
		if err := c.readMessage(k, v); err != nil {
			return err
		}
	}
	return nil
}

// readMessage reads one member of the choice's message.
func (c *completion) readMessage(k, v []byte) error {
	var err error
	switch string(k) {
	case "content":
		c.content, err = strTok(v, nil, "message.content")
	case "reasoning_content":
		c.reasoning, err = strTok(v, nil, "message.reasoning_content")
	case "reasoning":
		// Some OpenAI-compatible servers name it reasoning; the
		// reasoning_content of the same answer wins.
		if firstByte(v) == '"' && c.reasoning == nil {
			c.reasoning = v
		}
	case "refusal":
		c.refusal, err = strTok(v, nil, "message.refusal")
	case "tool_calls":
		var calls []byte
		if calls, err = arrTok(v, nil, "message.tool_calls"); calls != nil {
			err = readCalls(calls, c)
		}
	}
	return err
}

func readCalls(raw []byte, c *completion) error {
	ti := newIter(raw)
	for {
		_, tc, ok := ti.next()
		if !ok {
			return nil
		}
		if firstByte(tc) != '{' {
			return reqErr("message.tool_calls", "must hold objects")
		}
		var x compCall
		var err error
		for k, v := range members(tc) {
			switch string(k) {
			case "id":
				x.id, err = strTok(v, nil, "tool_calls.id")
			case "function":
				var f []byte
				if f, err = objTok(v, nil, "tool_calls.function"); f != nil {
					gi := newIter(f)
					for err == nil {
						k, v, ok := gi.next()
						if !ok {
							break
						}
						switch string(k) {
						case "name":
							x.name, err = strTok(v, nil, "tool_calls.function.name")
						case "arguments":
							x.args, err = strTok(v, nil, "tool_calls.function.arguments")
						}
					}
				}
			}
			if err != nil {
				return err
			}
		}
		c.calls = append(c.calls, x)
	}
}

func readUsage(raw []byte, u *ChatUsage) error {
	var err error
	ui := newIter(raw)
	for {
		k, v, ok := ui.next()
		if !ok {
			return nil
		}
		switch string(k) {
		case "prompt_tokens":
			u.PromptTokens, _, err = intVal(v, nil, "usage.prompt_tokens")
		case "completion_tokens":
			u.CompletionTokens, _, err = intVal(v, nil, "usage.completion_tokens")
		case "total_tokens":
			u.TotalTokens, _, err = intVal(v, nil, "usage.total_tokens")
		case "prompt_tokens_details":
			if firstByte(v) == '{' {
				u.PromptTokensDetails = &struct {
					CachedTokens int `json:"cached_tokens"`
				}{}
				u.PromptTokensDetails.CachedTokens, err = detailCount(v, "cached_tokens", "usage.prompt_tokens_details.cached_tokens")
			}
		case "completion_tokens_details":
			if firstByte(v) == '{' {
				u.CompletionTokensDetails = &struct {
					ReasoningTokens int `json:"reasoning_tokens"`
				}{}
				u.CompletionTokensDetails.ReasoningTokens, err = detailCount(v, "reasoning_tokens", "usage.completion_tokens_details.reasoning_tokens")
			}
		}
		if err != nil {
			return err
		}
	}
}

// detailCount reads the count key of a usage details object (the last
// one when repeated; 0 when absent).
func detailCount(obj []byte, key, field string) (int, error) {
	n := 0
	for k, v := range members(obj) {
		if string(k) == key {
			var err error
			if n, _, err = intVal(v, nil, field); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// ChatToMessages translates a chat.completion into a Messages answer.
// model is the model the client asked for (the answer names it, as
// Anthropic's does).
func ChatToMessages(chat []byte, model string) ([]byte, error) {
	var c completion
	if err := readCompletion(chat, &c); err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(chat)+256)
	b = append(b, `{"id":"`...)
	if !bytes.HasPrefix(c.id, []byte(`"msg_`)) {
		b = append(b, "msg_"...)
	}
	b = appendTokText(b, c.id)
	b = append(b, `","type":"message","role":"assistant","model":`...)
	b = appendJSONBytes(b, model)
	b = append(b, `,"content":[`...)
	b = c.appendBlocks(b)
	b = append(b, `],"stop_reason":`...)
	stop, seq := MsgStop(str(c.finish), str(c.stopSeq))
	b = appendJSONBytes(b, stop)
	in, cached := c.usage.PromptTokens, 0
	if d := c.usage.PromptTokensDetails; d != nil && d.CachedTokens <= in {
		in -= d.CachedTokens
		cached = d.CachedTokens
	}
	b = appendStopSequence(b, seq)
	b = append(b, `,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(in), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(c.usage.CompletionTokens), 10)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, int64(cached), 10)
	return append(b, `,"cache_creation_input_tokens":0}}`...), nil
}

// appendBlocks writes the answer's content blocks: thinking, text (the
// refusal when there is no text), tool_use.
func (c *completion) appendBlocks(b []byte) []byte {
	n := 0
	sep := func() {
		if n > 0 {
			b = append(b, ',')
		}
		n++
	}
	if len(c.reasoning) > 2 {
		sep()
		b = append(b, `{"type":"thinking","thinking":`...)
		b = appendTok(b, c.reasoning)
		b = append(b, `,"signature":""}`...)
	}
	if len(c.content) <= 2 && len(c.refusal) > 2 {
		c.content = c.refusal
	}
	if len(c.content) > 2 {
		sep()
		b = append(b, `{"type":"text","text":`...)
		b = appendTok(b, c.content)
		b = append(b, '}')
	}
	var args []byte
	for i := range c.calls {
		sep()
		b, args = appendToolUse(b, args, &c.calls[i])
	}
	return b
}

// appendToolUse writes a tool call as a tool_use block; its arguments
// are the input when they are a JSON object, else {}. args is a reused
// buffer.
func appendToolUse(b, args []byte, tc *compCall) ([]byte, []byte) {
	b = append(b, `{"type":"tool_use"`...)
	if len(tc.id) > 2 {
		b = append(b, `,"id":`...)
		b = appendTok(b, tc.id)
	}
	if len(tc.name) > 2 {
		b = append(b, `,"name":`...)
		b = appendTok(b, tc.name)
	}
	b = append(b, `,"input":`...)
	args = unquote(args[:0], tc.args)
	in := bytes.TrimSpace(args)
	if len(in) == 0 || in[0] != '{' || !jsonvalid.Valid(in) {
		in = []byte(`{}`)
	}
	b = append(b, in...)
	return append(b, '}'), args
}

// ChatToRespOutput reads a chat.completion's output.
func ChatToRespOutput(chat []byte) (*RespOutput, error) {
	var c completion
	if err := readCompletion(chat, &c); err != nil {
		return nil, err
	}
	o := &RespOutput{Finish: str(c.finish), Reasoning: str(c.reasoning), Text: str(c.content), UpstreamID: str(c.id)}
	if len(c.calls) > 0 {
		o.Calls = make([]ChatToolCall, len(c.calls))
	}
	for i := range c.calls {
		tc := &c.calls[i]
		args := str(tc.args)
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		o.Calls[i] = ChatToolCall{ID: str(tc.id), Type: "function", Function: ChatFunction{Name: str(tc.name), Arguments: args}}
	}
	o.Usage, o.HasUsage = c.usage, c.hasUsage
	return o, nil
}
