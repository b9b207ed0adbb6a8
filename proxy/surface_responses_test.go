package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/breakwater-gw/breakwater/faults"
)

// End-to-end tests of POST /v1/responses (docs/surfaces.md) with
// openai-go's Responses client against a real gateway.

func responsesClient(g *gw, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(g.srv.URL+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

func respParams(model, input string) responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: model, Instructions: openai.String("be brief"),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)}}
}

// Responses fail over like chat (a 503 of the first target), JSON and
// stream, with the Responses event sequence; previous_response_id
// continues a stored response, and GET /v1/responses/{id} returns it.
func TestResponsesSDKFailoverAndPrevious(t *testing.T) {
	g, fs := newMsgGW(t)
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "oa"}, Respond: &faults.Response{Status: 503}}}, false)
	c := responsesClient(g, "team-key")
	ctx := context.Background()
	var hr *http.Response
	r1, err := c.Responses.New(ctx, respParams("claude-chain", "hi"), option.WithResponseInto(&hr))
	if err != nil {
		t.Fatal(err)
	}
	if r1.OutputText() != wantText || r1.Status != responses.ResponseStatusCompleted || !strings.HasPrefix(r1.ID, "resp_") || r1.Usage.OutputTokens == 0 {
		t.Fatalf("response: %+v", r1)
	}
	if hr.Header.Get("X-Breakwater-Provider") != "an" || hr.Header.Get("X-Breakwater-Attempts") != "2" {
		t.Fatalf("headers: %v", hr.Header)
	}
	if n := fs.Stats().ByConnection["oa/o1"]["503"]; n == 0 {
		t.Fatalf("the first target was not tried: %v", fs.Stats().ByConnection)
	}

	p := respParams("claude-chain", "and then?")
	p.PreviousResponseID = openai.String(r1.ID)
	st := c.Responses.NewStreaming(ctx, p)
	var types []string
	var text strings.Builder
	var done responses.Response
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
		if ev.Type == "response.completed" {
			done = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	seq := strings.Join(types, " ")
	if !strings.HasPrefix(seq, "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta") ||
		!strings.HasSuffix(seq, "response.output_text.done response.content_part.done response.output_item.done response.completed") {
		t.Fatalf("event sequence: %s", seq)
	}
	if text.String() != wantText || done.OutputText() != wantText || done.PreviousResponseID != r1.ID {
		t.Fatalf("streamed: %q, completed %+v", text.String(), done)
	}

	got, err := c.Responses.Get(ctx, done.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != wantText || got.ID != done.ID {
		t.Fatalf("GET stored response: %v %+v", err, got)
	}
	// Another key cannot read or continue it.
	if r := g.do("GET", "/v1/responses/"+done.ID, "", "Authorization", "Bearer nope"); r.code != 401 {
		t.Fatalf("wrong key: %d", r.code)
	}
	p.PreviousResponseID = openai.String("resp_unknown")
	_, err = c.Responses.New(ctx, p)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Code != "previous_response_not_found" {
		t.Fatalf("unknown previous_response_id: %v", err)
	}
}

// previous_response_id sends the whole conversation upstream: the earlier
// input, the earlier answer (its function call) and the new input (the
// call's output); the function call streams as Responses events.
func TestResponsesSDKFunctionCalls(t *testing.T) {
	g, up := newToolGW(t)
	c := responsesClient(g, "any")
	ctx := context.Background()
	p := respParams("p/m", "weather in Paris?")
	p.Tools = []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "get_weather",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}}
	r1, err := c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Output) != 1 || r1.Output[0].Type != "function_call" || r1.Output[0].Name != "get_weather" ||
		r1.Output[0].Arguments.OfString != `{"city":"Paris"}` || r1.Output[0].CallID != "call_1" {
		t.Fatalf("function call: %+v", r1.Output)
	}
	if tools, _ := up.last()["tools"].([]any); len(tools) != 1 {
		t.Fatalf("upstream tools: %v", up.last())
	}

	p2 := responses.ResponseNewParams{Model: "p/m", PreviousResponseID: openai.String(r1.ID), Tools: p.Tools,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String("call_1"),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("sunny")}}}}}}
	st := c.Responses.NewStreaming(ctx, p2)
	var args strings.Builder
	var done responses.Response
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.completed":
			done = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if args.String() != `{"city":"Paris"}` || len(done.Output) != 2 || done.Output[1].Type != "function_call" || done.OutputText() != "let me look" {
		t.Fatalf("streamed call: %q %+v", args.String(), done.Output)
	}
	msgs := up.last()["messages"].([]any)
	roles := []string{}
	for _, m := range msgs {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if strings.Join(roles, ",") != "user,assistant,tool" {
		t.Fatalf("the conversation sent upstream (instructions are not inherited, the rest is): %v", msgs)
	}
}

// A stream cut after content that cannot be resumed ends with the error
// event and response.failed, never response.completed. (With stream
// resume on, the anthropic-type target continues the cut answer natively:
// docs/resume.md; this test pins the error path, so resume is off.)
func TestResponsesSDKStreamCut(t *testing.T) {
	g, fs := newMsgGW(t)
	if r := admin(g, "PATCH", "/api/resilience", `{"streamResume":{"enabled":false}}`); r.code != 200 {
		t.Fatalf("PATCH: %d %s", r.code, r.body)
	}
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "an"}, Respond: &faults.Response{Fault: faults.Cut, Stream: faults.Stream{StallAfter: 3}}}}, false)
	c := responsesClient(g, "team-key")
	st := c.Responses.NewStreaming(context.Background(), respParams("an/claude", "hi"))
	var types []string
	var failed responses.Response
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.failed" {
			failed = ev.Response
		}
	}
	seq := strings.Join(types, " ")
	if strings.Contains(seq, "response.completed") || !strings.HasSuffix(seq, "error response.failed") {
		t.Fatalf("a cut stream: %s (%v)", seq, st.Err())
	}
	if failed.Status != responses.ResponseStatusFailed || failed.Error.Code == "" {
		t.Fatalf("response.failed: %+v", failed)
	}
}

// Background mode runs synchronously and says so; bad bodies are 400s
// naming the field.
func TestResponsesBackgroundAndBadInput(t *testing.T) {
	g, _ := newMsgGW(t)
	r := g.do("POST", "/v1/responses", `{"model":"an/claude","input":"hi","background":true}`, "Authorization", "Bearer team-key")
	if r.code != 200 || !strings.Contains(r.body, `"status":"completed"`) || !strings.Contains(r.body, `"background":true`) || r.h.Get("X-Breakwater-Warning") == "" {
		t.Fatalf("background: %d %s %v", r.code, r.body, r.h)
	}
	for body, field := range map[string]string{
		`{"model":"an/claude","input":5}`:                                   "input",
		`{"model":"an/claude","input":"x","tools":[{"type":"web_search"}]}`: "tools[0].type",
		`{"model":"an/claude","input":[{"type":"message","role":"robot"}]}`: "input[0].role",
		`{"input":"x"}`: "model",
	} {
		r := g.do("POST", "/v1/responses", body, "Authorization", "Bearer team-key")
		if r.code != 400 || !strings.Contains(r.body, field) || r.h.Get("X-Breakwater-Attempts") != "0" {
			t.Errorf("%s: %d %s", body, r.code, r.body)
		}
	}
}

// Reasoning deltas of a translated stream reach a Responses client as a
// reasoning item streamed as its summary (docs/surfaces.md), which
// openai-go reads into the completed response's output.
func TestResponsesSDKStreamsReasoning(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"think "}}]}`,
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"reasoning_content":"hard"}}]}`,
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"42"}}]}`,
			`{"id":"c1","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`,
		} {
			io.WriteString(w, "data: "+ev+"\n\n")
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	g := newGW(t, newFakeUp(t), `
providers:
  - {id: p, baseURL: `+up.URL+`/v1, models: [m], connections: [{id: a, apiKey: a}]}
`+testBase)
	c := responsesClient(g, "any")
	st := c.Responses.NewStreaming(context.Background(), respParams("p/m", "hi"))
	var types []string
	var deltas strings.Builder
	var done responses.Response
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.reasoning_summary_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed":
			done = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	seq := strings.Join(types, " ")
	if deltas.String() != "think hard" || !strings.Contains(seq, "response.reasoning_summary_part.added response.reasoning_summary_text.delta") ||
		!strings.Contains(seq, "response.reasoning_summary_text.done response.reasoning_summary_part.done response.output_item.done") {
		t.Fatalf("reasoning events: %s (%q)", seq, deltas.String())
	}
	if len(done.Output) != 2 || done.Output[0].Type != "reasoning" || len(done.Output[0].Summary) != 1 ||
		done.Output[0].Summary[0].Text != "think hard" || done.OutputText() != "42" {
		t.Fatalf("completed response: %+v", done.Output)
	}
}
