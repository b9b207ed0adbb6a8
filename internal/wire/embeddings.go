package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"

	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
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
	case '"':
	case '[':
		// An empty list is refused here, as OpenAI refuses it, rather
		// than spent on an upstream attempt.
		if firstByte(r.Input[1:]) == ']' {
			return nil, reqErr("input", "must not be empty")
		}
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

// GeminiEmbedBatchLimit is the most requests one batchEmbedContents call
// takes; a longer input is sent as several calls (EmbeddingsToGeminiBatches).
const GeminiEmbedBatchLimit = 100

// EmbeddingsToGemini is a batchEmbedContents body for model with every
// input (EmbeddingsToGeminiBatches splits it at Gemini's limit).
func EmbeddingsToGemini(r *EmbedRequest, model string) ([]byte, error) {
	texts, err := r.Texts()
	if err != nil {
		return nil, err
	}
	return geminiBatch(texts, model, r.Dimensions)
}

// EmbeddingsToGeminiBatches is the batchEmbedContents bodies for model:
// the inputs in order, at most GeminiEmbedBatchLimit a body.
func EmbeddingsToGeminiBatches(r *EmbedRequest, model string) ([][]byte, error) {
	texts, err := r.Texts()
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, (len(texts)+GeminiEmbedBatchLimit-1)/GeminiEmbedBatchLimit)
	for len(texts) > 0 {
		n := min(len(texts), GeminiEmbedBatchLimit)
		b, err := geminiBatch(texts[:n], model, r.Dimensions)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
		texts = texts[n:]
	}
	return out, nil
}

func geminiBatch(texts []string, model string, dims *int) ([]byte, error) {
	name := "models/" + strings.TrimPrefix(model, "models/")
	reqs := make([]gemEmbedReq, len(texts))
	for i, t := range texts {
		reqs[i] = gemEmbedReq{Model: name, OutputDimensionality: dims}
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
// encodes it). Float values are copied as the upstream wrote them.
func GeminiToEmbeddings(native []byte, model string, base64Out bool) ([]byte, error) {
	return GeminiBatchesToEmbeddings([][]byte{native}, model, base64Out)
}

// GeminiBatchesToEmbeddings joins the answers of the batches of one
// input, in order, into one OpenAI embeddings list (GeminiToEmbeddings).
func GeminiBatchesToEmbeddings(natives [][]byte, model string, base64Out bool) ([]byte, error) {
	size := 128
	for _, nb := range natives {
		size += len(nb) + len(nb)/3
	}
	b := make([]byte, 0, size)
	b = append(b, `{"object":"list","data":[`...)
	n := 0
	var raw []byte
	for _, native := range natives {
		embs, err := geminiEmbeddings(native)
		if err != nil {
			return nil, err
		}
		for _, e := range elements(embs) {
			if b, raw, err = appendGeminiEmbedding(b, raw, e, n, base64Out); err != nil {
				return nil, err
			}
			n++
		}
	}
	if n == 0 {
		return nil, reqErr("embeddings", "the answer has no embedding")
	}
	b = append(b, `],"model":`...)
	b = appendJSONString(b, model)
	return append(b, `,"usage":{"prompt_tokens":0,"total_tokens":0}}`...), nil
}

// geminiEmbeddings is an answer's embeddings array (nil when it has none).
func geminiEmbeddings(native []byte) ([]byte, error) {
	if firstByte(native) != '{' || !jsonvalid.Valid(native) {
		return nil, reqErr("", "the answer is not a JSON object")
	}
	var embs []byte
	for k, v := range members(native[skipWS(native, 0):]) {
		if string(k) == "embeddings" {
			var err error
			if embs, err = arrTok(v, nil, "embeddings"); err != nil {
				return nil, err
			}
		}
	}
	return embs, nil
}

// appendGeminiEmbedding writes one embedding e as the list's entry n;
// raw is a reused buffer for base64 output.
func appendGeminiEmbedding(b, raw, e []byte, n int, base64Out bool) ([]byte, []byte, error) {
	var vals []byte
	if firstByte(e) == '{' {
		for k, v := range members(e) {
			if string(k) == "values" {
				var err error
				if vals, err = arrTok(v, nil, "embeddings.values"); err != nil {
					return nil, raw, err
				}
			}
		}
	}
	if n > 0 {
		b = append(b, ',')
	}
	b = append(b, `{"object":"embedding","index":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"embedding":`...)
	if !numbersOnly(vals) {
		return nil, raw, reqErr("embeddings.values", "must be an array of numbers")
	}
	if !base64Out {
		b = append(b, vals...) // the numbers as the upstream wrote them
		return append(b, '}'), raw, nil
	}
	raw = raw[:0]
	for rest := vals[1 : len(vals)-1]; len(rest) > 0; {
		tok := rest
		if c := bytes.IndexByte(rest, ','); c >= 0 {
			tok, rest = rest[:c], rest[c+1:]
		} else {
			rest = nil
		}
		f, _ := strconv.ParseFloat(string(bytes.TrimSpace(tok)), 64)
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(f)))
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, raw)
	return append(b, `"}`...), raw, nil
}

// numbersOnly reports whether a validated value is an array of numbers
// (nil, for absent values, is an empty one's stand-in and is not).
func numbersOnly(v []byte) bool {
	if len(v) < 2 || v[0] != '[' {
		return false
	}
	for _, c := range v[1 : len(v)-1] {
		switch {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E', c == ',', c == ' ', c == '\n', c == '\t', c == '\r':
		default:
			return false
		}
	}
	return true
}
