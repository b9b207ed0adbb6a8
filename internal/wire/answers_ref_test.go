package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The reference: the chat answer translations as encoding/json reads and
// writes them. FuzzAnswersMatchReference pins the one-walk reader to
// them: wherever both translate an answer, the Messages answers are the
// same JSON value and the Responses outputs are equal.

// refChatCompletion is a chat answer as the surfaces read it.
type refChatCompletion struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Created int64  `json:"created"`
	Choices []struct {
		Message struct {
			Content          *string `json:"content"`
			ReasoningContent string  `json:"reasoning_content"`
			Refusal          *string `json:"refusal"`
			ToolCalls        []struct {
				ID       string       `json:"id"`
				Function ChatFunction `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *ChatUsage `json:"usage"`
}

type refMsgOutBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

type refMsgResponse struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []refMsgOutBlock `json:"content"`
	StopReason   string           `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        msgUsage         `json:"usage"`
}

// refChatToMessages translates a chat.completion into a Messages answer.
// model is the model the client asked for (the answer names it, as
// Anthropic's does).
func refChatToMessages(chat []byte, model string) ([]byte, error) {
	var c refChatCompletion
	if err := json.Unmarshal(chat, &c); err != nil {
		return nil, err
	}
	if len(c.Choices) == 0 {
		return nil, reqErr("choices", "the answer has no choice")
	}
	ch := &c.Choices[0]
	out := refMsgResponse{ID: MessageID(c.ID), Type: "message", Role: "assistant", Model: model,
		StopReason: StopReason(ch.FinishReason), Content: []refMsgOutBlock{}}
	if r := ch.Message.ReasoningContent; r != "" {
		out.Content = append(out.Content, refMsgOutBlock{Type: "thinking", Thinking: &r, Signature: new(string)})
	}
	if t := ch.Message.Content; t != nil && *t != "" {
		out.Content = append(out.Content, refMsgOutBlock{Type: "text", Text: t})
	} else if rf := ch.Message.Refusal; rf != nil && *rf != "" {
		out.Content = append(out.Content, refMsgOutBlock{Type: "text", Text: rf})
	}
	for _, tc := range ch.Message.ToolCalls {
		in := json.RawMessage(bytes.TrimSpace([]byte(tc.Function.Arguments)))
		if len(in) == 0 || in[0] != '{' || !json.Valid(in) {
			in = json.RawMessage(`{}`)
		}
		out.Content = append(out.Content, refMsgOutBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: in})
	}
	if u := c.Usage; u != nil {
		out.Usage = msgUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
		if d := u.PromptTokensDetails; d != nil && d.CachedTokens <= u.PromptTokens {
			out.Usage.InputTokens -= d.CachedTokens
			out.Usage.CacheReadInputTokens = d.CachedTokens
		}
	}
	return json.Marshal(out)
}

// refChatToRespOutput reads a chat.completion's output.
func refChatToRespOutput(chat []byte) (*RespOutput, error) {
	var c refChatCompletion
	if err := json.Unmarshal(chat, &c); err != nil {
		return nil, err
	}
	if len(c.Choices) == 0 {
		return nil, reqErr("choices", "the answer has no choice")
	}
	ch := &c.Choices[0]
	o := &RespOutput{Finish: ch.FinishReason, Reasoning: ch.Message.ReasoningContent, UpstreamID: c.ID}
	if ch.Message.Content != nil {
		o.Text = *ch.Message.Content
	}
	for _, tc := range ch.Message.ToolCalls {
		args := tc.Function.Arguments
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		o.Calls = append(o.Calls, ChatToolCall{ID: tc.ID, Type: "function", Function: ChatFunction{Name: tc.Function.Name, Arguments: args}})
	}
	if c.Usage != nil {
		o.Usage, o.HasUsage = *c.Usage, true
	}
	return o, nil
}

func FuzzAnswersMatchReference(f *testing.F) {
	f.Add([]byte(benchChat))
	f.Add([]byte(`{"id":"msg_c1","choices":[{"message":{"content":"hi\u00e9","reasoning_content":"r","refusal":null,"tool_calls":[{"id":"t","function":{"name":"f","arguments":" {\"x\":1} "}},{"function":{"arguments":"[1]"}}]},"finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}`))
	f.Add([]byte(`{"id":"c","choices":[{"message":{"content":"","refusal":"no"},"finish_reason":"content_filter"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if foldedKey(b) || foldedAnswerKey(b) || bytes.Contains(b, []byte(`"reasoning"`)) {
			return // case-folded keys and the reasoning alias: only one side reads them
		}
		got, err := ChatToMessages(b, "claude")
		want, rerr := refChatToMessages(b, "claude")
		if err == nil && rerr == nil {
			var g, w any
			if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil || !reflect.DeepEqual(g, w) {
				t.Fatalf("answer %s\ngot  %s\nwant %s", b, got, want)
			}
		}
		o, err := ChatToRespOutput(b)
		ro, rerr := refChatToRespOutput(b)
		if err == nil && rerr == nil && !reflect.DeepEqual(o, ro) {
			t.Fatalf("answer %s\ngot  %+v\nwant %+v", b, o, ro)
		}
	})
}

var answerKeys = strings.Fields(`choices message tool_calls function arguments finish_reason usage prompt_tokens
completion_tokens total_tokens prompt_tokens_details completion_tokens_details cached_tokens reasoning_tokens
reasoning_content refusal`)

func foldedAnswerKey(b []byte) bool {
	for _, m := range keyRE.FindAllSubmatch(b, -1) {
		k := string(m[1])
		for _, known := range answerKeys {
			if k != known && strings.EqualFold(k, known) {
				return true
			}
		}
	}
	return false
}
