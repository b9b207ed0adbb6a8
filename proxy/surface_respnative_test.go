package proxy

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/breakwater-gw/breakwater/faults"
)

const respNativeConfig = `
providers:
  - {id: oa, baseURL: {{F}}/oa/v1, responsesAPI: true, models: [gpt], connections: [{id: o1, apiKey: o1}]}
  - {id: an, type: anthropic, baseURL: {{F}}/an/v1, models: [claude], connections: [{id: k1, apiKey: ak1}]}
combos:
  - {id: native-first, strategy: priority, targets: [oa/gpt, an/claude]}
  - {id: translated-first, strategy: priority, targets: [an/claude, oa/gpt]}
` + testBase

func newRespNativeGW(t *testing.T) (*gw, *faults.Server) {
	t.Helper()
	fs := faults.NewServer(nil, faults.Options{})
	ts := httptest.NewServer(fs)
	t.Cleanup(ts.Close)
	return newGW(t, newFakeUp(t), strings.ReplaceAll(respNativeConfig, "{{F}}", ts.URL)), fs
}

// A provider marked responsesAPI gets Responses requests natively (its
// own response ids, JSON and stream); a 503 there fails over to a
// translated target (the gateway's ids, stored); a request chat cannot
// carry (a built-in tool) passes translated targets over; a
// previous_response_id the gateway did not store goes native only.
func TestResponsesNativeUpstream(t *testing.T) {
	g, fs := newRespNativeGW(t)
	c := responsesClient(g, "any")
	ctx := context.Background()
	r, err := c.Responses.New(ctx, respParams("native-first", "hi"))
	if err != nil || r.ID != "resp_fault" || r.OutputText() != wantText {
		t.Fatalf("native JSON: %v %+v", err, r)
	}
	st := c.Responses.NewStreaming(ctx, respParams("native-first", "hi"))
	var done responses.Response
	for st.Next() {
		if ev := st.Current(); ev.Type == "response.completed" {
			done = ev.Response
		}
	}
	if err := st.Err(); err != nil || done.ID != "resp_fault" || done.OutputText() != wantText {
		t.Fatalf("native stream: %v %+v", err, done)
	}

	// A built-in tool: only the native target can serve it.
	body := `{"model":"translated-first","input":"search","tools":[{"type":"web_search"}]}`
	if r := g.do("POST", "/v1/responses", body); r.code != 200 || r.h.Get("X-Breakwater-Provider") != "oa" || !strings.Contains(r.body, `"resp_fault"`) {
		t.Fatalf("built-in tool: %d %s", r.code, r.body)
	}
	// An upstream's own id continues natively.
	p := respParams("translated-first", "more")
	p.PreviousResponseID = openai.String("resp_fault")
	if r, err := c.Responses.New(ctx, p); err != nil || r.ID != "resp_fault" {
		t.Fatalf("upstream id continues natively: %v %+v", err, r)
	}

	// The native target fails: the translated one serves, under the
	// gateway's id, stored; continuing it stays translated.
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "oa"}, Respond: &faults.Response{Status: 503}}}, false)
	r, err = c.Responses.New(ctx, respParams("native-first", "hi"))
	if err != nil || r.ID == "resp_fault" || !strings.HasPrefix(r.ID, "resp_") || r.OutputText() != wantText {
		t.Fatalf("fail-over to the translated target: %v %+v", err, r)
	}
	fs.SetRules(nil, false)
	p = respParams("an/claude", "more")
	p.PreviousResponseID = openai.String(r.ID)
	if r2, err := c.Responses.New(ctx, p); err != nil || r2.PreviousResponseID != r.ID {
		t.Fatalf("continuing the gateway's response: %v %+v", err, r2)
	}
}

// A native stream cut after content ends with the Responses error event
// and response.failed.
func TestResponsesNativeStreamCut(t *testing.T) {
	g, fs := newRespNativeGW(t)
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "oa"}, Respond: &faults.Response{Fault: faults.Cut, Stream: faults.Stream{StallAfter: 3}}}}, false)
	c := responsesClient(g, "any")
	st := c.Responses.NewStreaming(context.Background(), respParams("oa/gpt", "hi"))
	var types []string
	for st.Next() {
		types = append(types, st.Current().Type)
	}
	seq := strings.Join(types, " ")
	if !strings.Contains(seq, "response.output_text.delta") || strings.Contains(seq, "response.completed") || !strings.HasSuffix(seq, "error response.failed") {
		t.Fatalf("native cut: %s (%v)", seq, st.Err())
	}
}
