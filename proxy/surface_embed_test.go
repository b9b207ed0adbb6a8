package proxy

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
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
