package proxy

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	anthopt "github.com/anthropics/anthropic-sdk-go/option"

	"github.com/breakwater-gw/breakwater/faults"
)

// Stream resume and the native Messages pass-through: an anthropic-type
// target of a Messages request gets the client's own body and its events
// go back as they came, so the gateway neither keeps that stream's text
// nor can send that target a prefill. A Messages client must never see
// the answer start over under a second message_start.

const nativeResumeConfig = `
providers:
  - id: oa
    baseURL: {{F}}/oa/v1
    continuation: assistant
    models: [m]
    connections: [{id: k1, apiKey: ok}]
  - id: an
    type: anthropic
    baseURL: {{F}}/an/v1
    models: [m]
    connections: [{id: k1, apiKey: ak}]
combos:
  - {id: native-first, strategy: priority, targets: [an/m, oa/m]}
  - {id: chat-first, strategy: priority, targets: [oa/m, an/m]}
resilience:
  waitForCooldown: {enabled: false}
  comboCooldownWait: {enabled: false}
`

// msgView is what a streaming anthropic-sdk-go client saw.
type msgView struct {
	text          string
	messageStarts int
	blockStarts   int
	stops         int
	err           error
}

func streamMessagesWithSDK(t *testing.T, g *gw, model string) msgView {
	t.Helper()
	client := anthropic.NewClient(anthopt.WithBaseURL(g.srv.URL), anthopt.WithAPIKey("unused"), anthopt.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 4096,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("tell me"))}})
	var v msgView
	var b strings.Builder
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "message_start":
			v.messageStarts++
		case "content_block_start":
			v.blockStarts++
		case "content_block_delta":
			b.WriteString(ev.Delta.Text)
		case "message_stop":
			v.stops++
		}
	}
	v.text, v.err = b.String(), st.Err()
	return v
}

func newNativeResumeGW(t *testing.T, rules []faults.Rule) (*gw, *faults.Server) {
	t.Helper()
	fs := faults.NewServer(rules, faults.Options{Speed: resumeSpeed, MaxHold: 10 * time.Second})
	ts := httptest.NewServer(fs)
	t.Cleanup(ts.Close)
	return newGW(t, newFakeUp(t), strings.ReplaceAll(nativeResumeConfig, "{{F}}", ts.URL)), fs
}

// A native Messages stream that breaks is not resumed: its text was never
// kept, so a continuation would repeat the answer from the start. The
// client gets the delivered part once and the break's error event.
func TestResumeNativeMessagesStreamIsNotResumed(t *testing.T) {
	g, fs := newNativeResumeGW(t, []faults.Rule{
		{Match: faults.Match{Provider: "an"}, Respond: catAnswer(faults.Cut, 40, 0)},
		{Match: faults.Match{Provider: "oa"}, Respond: catAnswer(faults.None, 0, 0)},
	})
	v := streamMessagesWithSDK(t, g, "native-first")
	if v.messageStarts != 1 || v.blockStarts != 1 {
		t.Fatalf("one message: message_start %d, content_block_start %d (text %q)", v.messageStarts, v.blockStarts, v.text)
	}
	if v.err == nil || !strings.Contains(v.err.Error(), "stream_interrupted") || v.stops != 0 {
		t.Fatalf("the break must end the stream with its error event: err %v, message_stop %d", v.err, v.stops)
	}
	if v.text != catText[:40*faults.ChunkBytes] {
		t.Fatalf("the delivered text once, nothing repeated:\n got %q\nwant %q", v.text, catText[:40*faults.ChunkBytes])
	}
	if n := attemptsOf(fs, "oa/ok"); n != 0 {
		t.Fatalf("no continuation attempt on oa, got %d", n)
	}
}

// A translated Messages stream is resumed, but never on a native target
// (the client's own body carries no prefill): that target is passed over
// and the stream continues on one that takes a prefill, here the
// connection that broke.
func TestResumeMessagesNeverContinuesOnANativeTarget(t *testing.T) {
	g, fs := newNativeResumeGW(t, []faults.Rule{
		{Match: faults.Match{Provider: "oa"}, Sequence: []faults.Response{*catAnswer(faults.Cut, 40, 0), *catAnswer(faults.None, 0, 0)}},
		{Match: faults.Match{Provider: "an"}, Respond: catAnswer(faults.None, 0, 0)},
	})
	v := streamMessagesWithSDK(t, g, "chat-first")
	if v.err != nil || v.text != catText {
		t.Fatalf("the whole text once, in order: err %v\n got %q\nwant %q", v.err, v.text, catText)
	}
	if v.messageStarts != 1 || v.blockStarts != 1 || v.stops != 1 {
		t.Fatalf("one message: message_start %d, content_block_start %d, message_stop %d", v.messageStarts, v.blockStarts, v.stops)
	}
	if n := attemptsOf(fs, "an/ak"); n != 0 {
		t.Fatalf("the native target must not be sent the continuation, got %d attempts", n)
	}
	if n := attemptsOf(fs, "oa/ok"); n != 2 {
		t.Fatalf("oa: the cut and the continuation, got %d attempts", n)
	}
}
