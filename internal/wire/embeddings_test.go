package wire

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// Gemini's batchEmbedContents carries one request per input with the
// dimensions; its answer becomes the OpenAI list, base64 as OpenAI
// encodes it (little-endian float32).
func TestEmbeddingsGemini(t *testing.T) {
	r, err := ParseEmbeddings([]byte(`{"model":"e","input":["a","b"],"dimensions":2,"encoding_format":"base64"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := EmbeddingsToGemini(r, "text-embedding-004")
	if err != nil || string(b) != `{"requests":[{"model":"models/text-embedding-004","content":{"parts":[{"text":"a"}]},"outputDimensionality":2},{"model":"models/text-embedding-004","content":{"parts":[{"text":"b"}]},"outputDimensionality":2}]}` {
		t.Fatalf("request: %v %s", err, b)
	}
	out, err := GeminiToEmbeddings([]byte(`{"embeddings":[{"values":[0.5,-1]},{"values":[2,0]}]}`), "e", true)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			Index     int    `json:"index"`
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &list); err != nil || len(list.Data) != 2 || list.Data[1].Index != 1 {
		t.Fatalf("answer: %v %s", err, out)
	}
	raw, _ := base64.StdEncoding.DecodeString(list.Data[0].Embedding)
	if len(raw) != 8 || math.Float32frombits(binary.LittleEndian.Uint32(raw[4:])) != -1 {
		t.Fatalf("base64 floats: %v", raw)
	}
	// Float output keeps the numbers as the upstream wrote them.
	out, err = GeminiToEmbeddings([]byte(`{"embeddings":[{"values":[0.5, -1e-3]}]}`), "e", false)
	if err != nil || !strings.Contains(string(out), `"embedding":[0.5, -1e-3]}`) || !json.Valid(out) {
		t.Fatalf("float answer: %v %s", err, out)
	}
	if _, err := GeminiToEmbeddings([]byte(`{"embeddings":[{"values":["x"]}]}`), "e", false); err == nil {
		t.Fatal("a non-number value must be refused")
	}
	for body, field := range map[string]string{`{"input":"x"}`: "model", `{"model":"m","input":5}`: "input",
		`{"model":"m","input":[]}`: "input", `{"model":"m","input":[ ]}`: "input",
		`{"model":"m","input":"x","dimensions":0}`: "dimensions", `{"model":"m","input":"x","encoding_format":"hex"}`: "encoding_format"} {
		if _, err := ParseEmbeddings([]byte(body)); err == nil || !strings.HasPrefix(err.Error(), field) {
			t.Errorf("%s: %v", body, err)
		}
	}
}

func FuzzEmbeddings(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":["a","b"],"dimensions":3}`), []byte(`{"embeddings":[{"values":[1,2]}]}`))
	f.Add([]byte(`{"model":"m","input":[[1,2]]}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, req, answer []byte) {
		r, err := ParseEmbeddings(req)
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("not a RequestError: %T", err)
			}
			return
		}
		if b, err := EmbeddingsToGemini(r, "m"); err == nil && !json.Valid(b) {
			t.Fatalf("invalid request: %s", b)
		}
		for _, b64 := range []bool{false, true} {
			if out, err := GeminiToEmbeddings(answer, "m", b64); err == nil && !json.Valid(out) {
				t.Fatalf("invalid answer: %s", out)
			}
		}
	})
}
