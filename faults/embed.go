package faults

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"strconv"

	bw "github.com/breakwater-gw/breakwater/internal/wire"
)

// Embeddings: POST …/v1/embeddings (OpenAI) and
// …/v1/models/{model}:batchEmbedContents (Gemini). The rules answer them as
// they answer chat attempts (status, latency, reset and timeout faults);
// a success is one deterministic vector per input (the same text always
// gets the same vector), EmbedDims long unless the request asks for
// dimensions.

// EmbedDims is the length of an embedding when the request names none.
const EmbedDims = 8

// embedVector is text's deterministic unit-length vector.
func embedVector(text string, dims int) []float32 {
	v := make([]float32, dims)
	h := fnv.New64a()
	io.WriteString(h, text)
	x := h.Sum64() | 1
	var norm float64
	for i := range v {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v[i] = float32(int64(x%2001)-1000) / 1000
		norm += float64(v[i]) * float64(v[i])
	}
	if norm > 0 {
		n := float32(math.Sqrt(norm))
		for i := range v {
			v[i] /= n
		}
	}
	return v
}

func appendVector(b []byte, v []float32, b64 bool) []byte {
	if b64 {
		raw := make([]byte, 4*len(v))
		for i, f := range v {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
		}
		b = append(b, '"')
		b = append(b, base64.StdEncoding.EncodeToString(raw)...)
		return append(b, '"')
	}
	b = append(b, '[')
	for i, f := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(f), 'g', -1, 32)
	}
	return append(b, ']')
}

// embedAnswer serves the rule's failure for an embeddings attempt; it
// reports whether the attempt is answered.
func (s *Server) embedAnswer(w http.ResponseWriter, r *http.Request, wf wire, resp *Response) bool {
	ctx := r.Context()
	switch resp.Fault {
	case Reset:
		if s.sleep(ctx, s.scale(resp.Latency)) {
			resetConn(w)
		}
		return true
	case Timeout:
		s.hold(ctx, 0)
		resetConn(w)
		return true
	}
	if !s.sleep(ctx, s.scale(resp.Latency)) {
		return true
	}
	if !resp.OK() {
		writeError(w, resp.StatusOrOK(), errorBodyFor(wf, resp), resp)
		return true
	}
	return false
}

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	body, err := readJSON(r, nil)
	var req *bw.EmbedRequest
	var texts []string
	if err == nil {
		req, err = bw.ParseEmbeddings(body)
	}
	if err == nil {
		texts, err = req.Texts()
	}
	if err != nil || (req.Dimensions != nil && *req.Dimensions > 4096) {
		writeError(w, 400, openaiWire{}.invalid("invalid request: want {model, input: string or strings, dimensions 1-4096}"), nil)
		return
	}
	resp := s.pick(r.PathValue("provider"), connectionOf(r), req.Model)
	if s.embedAnswer(w, r, openaiWire{}, &resp) {
		return
	}
	dims := EmbedDims
	if req.Dimensions != nil {
		dims = *req.Dimensions
	}
	b := []byte(`{"object":"list","data":[`)
	tokens := 0
	for i, t := range texts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		b = appendVector(b, embedVector(t, dims), req.EncodingFormat == "base64")
		b = append(b, '}')
		tokens += (len(t) + 3) / 4
	}
	m, _ := json.Marshal(req.Model)
	b = append(b, `],"model":`...)
	b = append(b, m...)
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(tokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(tokens), 10)
	b = append(b, "}}"...)
	writeHeaders(w, &resp)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusOrOK())
	w.Write(b)
}

// batchEmbed serves Gemini's models/{model}:batchEmbedContents.
func (s *Server) batchEmbed(w http.ResponseWriter, r *http.Request, model string) {
	body, err := readJSON(r, nil)
	var items []bw.GeminiEmbedItem
	if err == nil {
		items, err = bw.ParseGeminiEmbed(body)
	}
	if err != nil {
		writeError(w, 400, geminiWire{}.invalid("invalid request: want {requests: [{content: {parts: [{text}]}}]}"), nil)
		return
	}
	resp := s.pick(r.PathValue("provider"), connectionOf(r), model)
	if s.embedAnswer(w, r, geminiWire{}, &resp) {
		return
	}
	b := []byte(`{"embeddings":[`)
	for i, q := range items {
		if i > 0 {
			b = append(b, ',')
		}
		dims := q.Dimensions
		if dims <= 0 || dims > 4096 {
			dims = EmbedDims
		}
		b = append(b, `{"values":`...)
		b = appendVector(b, embedVector(q.Text, dims), false)
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	writeHeaders(w, &resp)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusOrOK())
	w.Write(b)
}
