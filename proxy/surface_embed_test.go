package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/breakwater-gw/breakwater/faults"
)

const embedConfig = `
server: {managementKey: "${ADMIN}"}
providers:
  - id: oa
    baseURL: {{F}}/oa/v1
    models: [emb]
    connections:
      - {id: o1, apiKey: o1}
  - id: gm
    type: gemini
    baseURL: {{F}}/gm/v1
    models: [gemb]
    connections:
      - {id: g1, apiKey: g1}
  - id: an
    type: anthropic
    baseURL: {{F}}/an/v1
    models: [claude]
    connections:
      - {id: k1, apiKey: ak1}
combos:
  - {id: embed, strategy: priority, targets: [oa/emb, gm/gemb]}
  - {id: embed-an, strategy: priority, targets: [an/claude, oa/emb]}
` + testBase

func newEmbedGW(t *testing.T) (*gw, *faults.Server) {
	t.Helper()
	fs := faults.NewServer(nil, faults.Options{})
	ts := httptest.NewServer(fs)
	t.Cleanup(ts.Close)
	return newGW(t, newFakeUp(t), strings.ReplaceAll(embedConfig, "{{F}}", ts.URL), "ADMIN=s3cret"), fs
}

// Embeddings run through the same flow as chat: a 503 of the
// OpenAI-compatible target fails over to the gemini one
// (batchEmbedContents), batch input and dimensions kept, and the answer
// is the OpenAI list either way.
func TestEmbeddingsSDKFailoverToGemini(t *testing.T) {
	g, fs := newEmbedGW(t)
	c := openai.NewClient(option.WithBaseURL(g.srv.URL+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	ctx := context.Background()
	p := openai.EmbeddingNewParams{Model: "embed", Dimensions: openai.Int(4),
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"alpha", "beta", "alpha"}}}
	e, err := c.Embeddings.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Data) != 3 || len(e.Data[0].Embedding) != 4 || e.Data[2].Index != 2 {
		t.Fatalf("embeddings: %+v", e)
	}
	direct := e.Data[0].Embedding
	fs.SetRules([]faults.Rule{{Match: faults.Match{Provider: "oa"}, Respond: &faults.Response{Status: 503}}}, false)
	e, err = c.Embeddings.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Data) != 3 || len(e.Data[1].Embedding) != 4 || e.Data[0].Embedding[0] != e.Data[2].Embedding[0] {
		t.Fatalf("embeddings through gemini: %+v", e)
	}
	for i := range direct {
		if direct[i] != e.Data[0].Embedding[i] {
			t.Fatalf("the same text gets the same vector from both formats: %v %v", direct, e.Data[0].Embedding)
		}
	}
	if fs.Stats().ByConnection["oa/o1"]["503"] == 0 || fs.Stats().ByConnection["gm/g1"]["200"] == 0 {
		t.Fatalf("fail-over: %v", fs.Stats().ByConnection)
	}
	// base64 through the gemini translation decodes to the same floats
	r := g.do("POST", "/v1/embeddings", `{"model":"gm/gemb","input":"alpha","dimensions":4,"encoding_format":"base64"}`)
	if r.code != 200 || !strings.Contains(r.body, `"embedding":"`) || r.h.Get("X-Breakwater-Provider") != "gm" {
		t.Fatalf("base64: %d %s", r.code, r.body)
	}
}

// A provider type without embeddings is passed over; alone it is the
// typed 400; a bad body is a 400 naming the field.
func TestEmbeddingsUnsupportedAndBadInput(t *testing.T) {
	g, _ := newEmbedGW(t)
	if r := g.do("POST", "/v1/embeddings", `{"model":"embed-an","input":"x"}`); r.code != 200 || r.h.Get("X-Breakwater-Provider") != "oa" {
		t.Fatalf("anthropic passed over: %d %s", r.code, r.body)
	}
	if r := g.do("POST", "/v1/embeddings", `{"model":"an/claude","input":"x"}`); r.code != 400 || r.errCode() != "unsupported_by_provider_type" {
		t.Fatalf("anthropic alone: %d %s", r.code, r.body)
	}
	c := openai.NewClient(option.WithBaseURL(g.srv.URL+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	_, err := c.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "oa/emb",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}, Dimensions: openai.Int(0)})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.RawJSON(), "dimensions") {
		t.Fatalf("dimensions 0: %v", err)
	}
	if r := g.do("POST", "/v1/embeddings", `{"model":"oa/emb","input":5}`); r.code != 400 || !strings.Contains(r.body, "input") || r.h.Get("X-Breakwater-Attempts") != "0" {
		t.Fatalf("bad input: %d %s", r.code, r.body)
	}
}

// Gemini takes at most 100 inputs a batchEmbedContents call: a longer
// input is split into calls of at most 100, and the answers are joined in
// the input's order with the list's indexes running on.
func TestGeminiEmbeddingsSplitAtTheBatchLimit(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	gem := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Requests []struct {
				Content struct {
					Parts []struct {
						Text string `json:"text"`
					} `json:"parts"`
				} `json:"content"`
			} `json:"requests"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Header.Get("X-Goog-Api-Key") != "g1" {
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		sizes = append(sizes, len(req.Requests))
		mu.Unlock()
		if len(req.Requests) > 100 { // as Gemini refuses it
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"code":400,"message":"at most 100 requests can be in one batch","status":"INVALID_ARGUMENT"}}`)
			return
		}
		var b strings.Builder
		b.WriteString(`{"embeddings":[`)
		for i, q := range req.Requests {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"values":[%s,0.5]}`, strings.TrimPrefix(q.Content.Parts[0].Text, "t"))
		}
		b.WriteString(`]}`)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, b.String())
	}))
	defer gem.Close()
	g := newGW(t, newFakeUp(t), `
providers:
  - id: gm
    type: gemini
    baseURL: `+gem.URL+`/v1beta
    models: [gemb]
    connections:
      - {id: g1, apiKey: g1}
`+testBase)
	inputs := make([]string, 250)
	for i := range inputs {
		inputs[i] = fmt.Sprintf("t%d", i)
	}
	body, _ := json.Marshal(map[string]any{"model": "gm/gemb", "input": inputs})
	r := g.do("POST", "/v1/embeddings", string(body))
	if r.code != 200 {
		t.Fatalf("250 inputs: %d %s", r.code, r.body)
	}
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.body), &out); err != nil || len(out.Data) != 250 {
		t.Fatalf("list: %v, %d embeddings", err, len(out.Data))
	}
	for i, d := range out.Data {
		if d.Index != i || len(d.Embedding) != 2 || d.Embedding[0] != float64(i) {
			t.Fatalf("embedding %d: index %d, values %v (want the input's own, in order)", i, d.Index, d.Embedding)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(sizes) != "[100 100 50]" {
		t.Fatalf("batch sizes %v, want [100 100 50]", sizes)
	}
}
