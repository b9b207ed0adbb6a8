package faults

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// postChat sends a streamed chat request with the given messages JSON and
// returns the status and the content of its chunks (and whether a
// malformed event came).
func postChat(t *testing.T, base, messages string) (int, string, int) {
	t.Helper()
	body := `{"model":"m","stream":true,"messages":` + messages + `}`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/p/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var text strings.Builder
	bad := 0
	for _, ev := range strings.Split(string(b), "\n\n") {
		data, ok := strings.CutPrefix(strings.TrimSpace(ev), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &c) != nil {
			bad++
			continue
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	return resp.StatusCode, text.String(), bad
}

func TestPrefillIsContinuedNotRepeated(t *testing.T) {
	r := Response{Stream: Stream{Chunks: 6, Numbered: true}}
	_, ts := newTestServer(t, []Rule{{Respond: &r}})
	full := AnswerText(&r)
	delivered := full[:40] // mid-chunk
	st, text, _ := postChat(t, ts.URL, `[{"role":"user","content":"hi"},{"role":"assistant","content":`+string(mustJSON(t, delivered))+`}]`)
	if st != 200 || text != full[40:] {
		t.Fatalf("status %d continuation %q, want %q", st, text, full[40:])
	}
	_, whole, _ := postChat(t, ts.URL, `[{"role":"user","content":"hi"}]`)
	if whole != full {
		t.Fatalf("answer %q", whole)
	}
}

func TestPrefillRefusalAndRestart(t *testing.T) {
	r := Response{Fault: PrefillRefusal}
	_, ts := newTestServer(t, []Rule{{Respond: &r}})
	if st, _, _ := postChat(t, ts.URL, `[{"role":"user","content":"hi"},{"role":"assistant","content":"lorem"}]`); st != 400 {
		t.Fatalf("prefill refusal answered %d", st)
	}
	if st, text, _ := postChat(t, ts.URL, `[{"role":"user","content":"hi"}]`); st != 200 || text == "" {
		t.Fatalf("an ordinary request to prefill-refusal: %d %q", st, text)
	}
	rs := Response{Fault: PrefillRestart, Stream: Stream{Numbered: true}}
	_, ts2 := newTestServer(t, []Rule{{Respond: &rs}})
	if _, text, _ := postChat(t, ts2.URL, `[{"role":"user","content":"hi"},{"role":"assistant","content":"lorem ipsum 000 "}]`); text != AnswerText(&rs) {
		t.Fatalf("restart sent %q", text)
	}
}

func TestMalformedEventComesBeforeItsChunkNotInsteadOfIt(t *testing.T) {
	r := Response{Fault: MalformedChunk, Stream: Stream{Chunks: 20, StallAfter: 10}}
	_, ts := newTestServer(t, []Rule{{Respond: &r}})
	_, text, bad := postChat(t, ts.URL, `[{"role":"user","content":"hi"}]`)
	if bad != 1 || text != AnswerText(&r) {
		t.Fatalf("bad events %d, text %q", bad, text)
	}
	run := Response{Fault: MalformedChunk, Stream: Stream{Chunks: 20, StallAfter: 10, Malformed: 4}}
	_, ts2 := newTestServer(t, []Rule{{Respond: &run}})
	if _, text, bad := postChat(t, ts2.URL, `[{"role":"user","content":"hi"}]`); bad != 4 || text != AnswerText(&run) {
		t.Fatalf("stream.malformed 4: %d bad events, text %q", bad, text)
	}
}
