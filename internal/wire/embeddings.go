package wire

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// OpenAI embeddings (POST /v1/embeddings) ⇄ Gemini batchEmbedContents.
// OpenAI-compatible upstreams take the client's body as it is.

// EmbedRequest is an embeddings request as the gateway reads it.
type EmbedRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     *int            `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
	User           string          `json:"user"`
}

// ParseEmbeddings checks an embeddings body: a model, an input that is a
// string, a list of strings or a list of token lists, and an
// encoding_format of float or base64.
func ParseEmbeddings(body []byte) (*EmbedRequest, error) {
	if firstByte(body) != '{' {
		return nil, reqErr("", "the body must be a JSON object")
	}
	var r EmbedRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, decodeErr(err)
	}
	if r.Model == "" {
		return nil, reqErr("model", "is required")
	}
	switch firstByte(r.Input) {
	case '"', '[':
	default:
		return nil, reqErr("input", "must be a string or an array")
	}
	if r.Dimensions != nil && *r.Dimensions < 1 {
		return nil, reqErr("dimensions", "must be at least 1")
	}
	switch r.EncodingFormat {
	case "", "float", "base64":
	default:
		return nil, reqErr("encoding_format", "must be float or base64 (got %q)", r.EncodingFormat)
	}
	return &r, nil
}

// Texts is the input as texts; token-id inputs have no text form.
func (r *EmbedRequest) Texts() ([]string, error) {
	if firstByte(r.Input) == '"' {
		var s string
		if err := json.Unmarshal(r.Input, &s); err != nil {
			return nil, reqErr("input", "must be a string or an array of strings")
		}
		return []string{s}, nil
	}
	var ss []string
	if err := json.Unmarshal(r.Input, &ss); err != nil {
		return nil, reqErr("input", "token-id inputs cannot be translated; send text")
	}
	if len(ss) == 0 {
		return nil, reqErr("input", "must not be empty")
	}
	return ss, nil
}

type gemEmbedReq struct {
	Model                string     `json:"model"`
	Content              gemContent `json:"content"`
	OutputDimensionality *int       `json:"outputDimensionality,omitempty"`
}

type gemContent struct {
	Parts []struct {
		Text string `json:"text"`
	} `json:"parts"`
}

// EmbeddingsToGemini is a batchEmbedContents body for model.
func EmbeddingsToGemini(r *EmbedRequest, model string) ([]byte, error) {
	texts, err := r.Texts()
	if err != nil {
		return nil, err
	}
	name := "models/" + strings.TrimPrefix(model, "models/")
	reqs := make([]gemEmbedReq, len(texts))
	for i, t := range texts {
		reqs[i] = gemEmbedReq{Model: name, OutputDimensionality: r.Dimensions}
		reqs[i].Content.Parts = make([]struct {
			Text string `json:"text"`
		}, 1)
		reqs[i].Content.Parts[0].Text = t
	}
	return json.Marshal(struct {
		Requests []gemEmbedReq `json:"requests"`
	}{reqs})
}

// GeminiToEmbeddings translates a batchEmbedContents answer into an
// OpenAI embeddings list (base64: little-endian float32, as OpenAI
// encodes it).
func GeminiToEmbeddings(native []byte, model string, base64Out bool) ([]byte, error) {
	var r struct {
		Embeddings []struct {
			Values []float64 `json:"values"`
		} `json:"embeddings"`
	}
	if err := json.Unmarshal(native, &r); err != nil {
		return nil, err
	}
	if len(r.Embeddings) == 0 {
		return nil, reqErr("embeddings", "the answer has no embedding")
	}
	b := append([]byte(nil), `{"object":"list","data":[`...)
	for i, e := range r.Embeddings {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		if base64Out {
			raw := make([]byte, 4*len(e.Values))
			for j, v := range e.Values {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(float32(v)))
			}
			b = appendJSONString(b, base64.StdEncoding.EncodeToString(raw))
		} else {
			b = append(b, '[')
			for j, v := range e.Values {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, v, 'g', -1, 32)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `],"model":`...)
	b = appendJSONString(b, model)
	return append(b, `,"usage":{"prompt_tokens":0,"total_tokens":0}}`...), nil
}
