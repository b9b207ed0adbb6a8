package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/internal/wire"
)

// POST /v1/embeddings (OpenAI embeddings). Like chat, the request runs
// through handleChat — the same flow, breaker, cooldowns, lockouts and
// fallbacks — with an embeddings wire adapter per attempt instead of the
// provider's chat adapter: OpenAI-compatible types get the client's body
// at {baseURL}/embeddings, gemini gets batchEmbedContents, and anthropic
// (no embeddings API) passes the target over
// (unsupported_by_provider_type when no target can serve).

const embeddingsPath = "/v1/embeddings"

// surfaceWire is a request's wire override: nil for chat completions,
// the embeddings adapters for an embeddings request, the Messages native
// pass-through for a Messages request (surface_native.go). header bounds
// each later Gemini embeddings batch, as the attempt clock bounds the
// first call's wait for its answer.
func surfaceWire(r *http.Request, nr *nativeReq, header time.Duration) func(*provRuntime) wireAdapter {
	if r.URL == nil {
		return nil
	}
	switch r.URL.Path {
	case embeddingsPath:
	case messagesPath:
		return nativeWire(nr)
	case responsesPath:
		return respNativeWire(nr)
	default:
		return nil
	}
	var cache map[*provRuntime]wireAdapter
	ctx := r.Context()
	return func(p *provRuntime) wireAdapter {
		if w, ok := cache[p]; ok {
			return w
		}
		if cache == nil {
			cache = map[*provRuntime]wireAdapter{}
		}
		w := &embedWire{typ: p.cfg.Type, base: strings.TrimRight(p.cfg.BaseURL, "/"), ctx: ctx, header: header, prov: p}
		cache[p] = w
		return w
	}
}

// wireFor is the adapter an attempt at p uses: the request's surface
// override, else the provider's own (nil for OpenAI-compatible chat).
func (rs *reqState) wireFor(p *provRuntime) wireAdapter {
	if rs.wireOver != nil {
		return rs.wireOver(p)
	}
	return p.wire
}

// embedWire is one provider type's embeddings call.
//
// Gemini takes at most wire.GeminiEmbedBatchLimit inputs a
// batchEmbedContents call: a longer input is sent as that many calls, one
// after another on the attempt's connection, and the answers are joined
// in order. The first call is the attempt as the flow sees it; a later
// one that fails (transport, a non-2xx status) fails the attempt as an
// answer that cannot be translated does, and the flow tries elsewhere.
type embedWire struct {
	typ, base string
	b64       bool // the client asked for base64 (gemini answers floats)

	ctx    context.Context // the client's request: the later batches end with it
	header time.Duration   // responseHeaderMs: the bound of one later batch
	prov   *provRuntime
	url    string   // gemini: the batchEmbedContents URL
	rest   [][]byte // gemini: the batches after the first
	apiKey string   // gemini: the attempt's key, for the later batches
}

func (e *embedWire) encode(req *chatRequest, upstreamModel string) (string, []byte, error) {
	switch e.typ {
	case "gemini":
		r, err := wire.ParseEmbeddings(req.body)
		if err != nil {
			return "", nil, &wireError{Type: e.typ, Msg: err.Error()}
		}
		e.b64 = r.EncodingFormat == "base64"
		batches, err := wire.EmbeddingsToGeminiBatches(r, upstreamModel)
		if err != nil {
			return "", nil, &wireError{Type: e.typ, Msg: err.Error()}
		}
		m := url.PathEscape(strings.TrimPrefix(upstreamModel, "models/"))
		e.url, e.rest = e.base+"/models/"+m+":batchEmbedContents", batches[1:]
		return e.url, batches[0], nil
	case "anthropic":
		return "", nil, &wireError{Type: e.typ, Msg: "the provider type has no embeddings API"}
	}
	return e.base + "/embeddings", req.bodyFor(upstreamModel), nil
}

func (e *embedWire) setAuth(h http.Header, apiKey string) {
	if e.typ == "gemini" && apiKey != "" {
		h.Set("X-Goog-Api-Key", apiKey)
		e.apiKey = apiKey
	}
	// OpenAI-compatible types: the connection's Authorization, as for chat.
}

func (e *embedWire) modelsURL() string { return e.base + "/models" }

func (e *embedWire) wrap(resp *http.Response, model string) {
	if e.typ != "gemini" {
		return
	}
	resp.ContentLength = -1
	b64, rest := e.b64, e.rest
	resp.Body = &jsonTranslator{src: resp.Body, translate: func(first []byte) ([]byte, error) {
		answers := [][]byte{first}
		for _, body := range rest {
			b, err := e.batch(body)
			if err != nil {
				return nil, err
			}
			answers = append(answers, b)
		}
		return wire.GeminiBatchesToEmbeddings(answers, model, b64)
	}}
}

// batch makes one later batchEmbedContents call and reads its answer.
func (e *embedWire) batch(body []byte) ([]byte, error) {
	var w connWatch // this call's own guard (transport.go)
	ctx := withReuseGuard(e.ctx, &w, e.prov.plain)
	if e.header > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.header)
		defer cancel()
	}
	req, err := newJSONRequest(ctx, e.url, body)
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = hdrJSON
	req.Header["Accept"] = hdrJSON
	req.Header["User-Agent"] = hdrUserAgent
	e.setAuth(req.Header, e.apiKey)
	if !e.prov.plain {
		w.sendOnce(req) // a written batch is not sent again either
	}
	resp, err := e.prov.roundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("batch answered %d", resp.StatusCode)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
}

// handleEmbeddings serves POST /v1/embeddings.
func (g *Gateway) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	refuse := openAIRefuse(w)
	sr, ok := g.surfaceBody(w, r, refuse)
	if !ok {
		return
	}
	if _, err := wire.ParseEmbeddings(sr.body); err != nil {
		w.Header().Set("X-Breakwater-Attempts", "0")
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	sr.chat = sr.body
	g.serveChat(w, r, sr) // the client speaks the OpenAI shapes the pipeline writes
}
