package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/breakwater-gw/breakwater/internal/wire"
	"github.com/breakwater-gw/breakwater/model"
)

// Provider wire adapters (docs/classification.md#provider-types). Clients always speak OpenAI chat
// completions. A provider whose type has a native wire format (anthropic,
// gemini) gets a wireAdapter that
//   - builds the upstream request (URL, auth headers, native body) from the
//     client's chat request, and
//   - wraps a 2xx upstream body in a translator that reads like an OpenAI
//     answer (chat.completion JSON, or chat.completion.chunk SSE ending with
//     data: [DONE]).
//
// Everything else in the pipeline (phase timers, watchdogs, the readiness
// gate, commit logic, model.ParseStreamEvent, classification) sees only
// OpenAI-shaped bytes, so it is unchanged. Error responses (non-2xx) are
// never translated: the model's built-in anthropic / gemini rules read the
// native status, headers and body (anthropic 529 overloaded, Gemini
// RetryInfo). In-stream native errors are passed through as one SSE data
// event whose object has an "error" member, which pipeStream already
// classifies via streamErrorStatus.
//
// The openai-compatible types have no adapter (provRuntime.wire == nil):
// the hot path only pays one nil check.
type wireAdapter interface {
	// encode gives the upstream URL and native body of one attempt at
	// upstreamModel. A request the native format cannot express returns a
	// *wireError: the target is passed over (model.ReportUnsupported)
	// before admission, and the upstream is not called.
	encode(req *chatRequest, upstreamModel string) (url string, body []byte, err error)
	// setAuth sets the connection's credential headers (also used by the
	// connection test).
	setAuth(h http.Header, apiKey string)
	// modelsURL is what the connection test GETs.
	modelsURL() string
	// wrap replaces a 2xx response's body with a translator to the OpenAI
	// format: SSE when the upstream answered text/event-stream, else JSON.
	// model is the upstream model asked for: the answer's model when the
	// upstream names none.
	wrap(resp *http.Response, model string)
}

// newWireAdapter returns the adapter of a provider type, nil for the
// OpenAI-compatible types. base is the baseURL without a trailing slash.
func newWireAdapter(typ, base string) wireAdapter {
	switch typ {
	case "anthropic":
		return &anthropicWire{base: base}
	case "gemini":
		return &geminiWire{base: base}
	}
	return nil
}

// wireError is a client request the provider's native format cannot
// express (internal/wire's UnsupportedError).
type wireError = wire.UnsupportedError

// unsupportedError is the model's typed error for a request a provider
// type cannot express (400 unsupported_by_provider_type when no other
// target serves it).
func unsupportedError(provider string, err error) (*model.Error, bool) {
	var we *wireError
	if !errors.As(err, &we) {
		return nil, false
	}
	return &model.Error{Code: model.CodeUnsupportedByProviderType, Provider: provider, Message: we.Error()}, true
}

// newJSONRequest is a POST of body with the headers every adapter sends.
func newJSONRequest(ctx context.Context, url string, body []byte) (*http.Request, error) {
	return http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
}

// ---- response translators ----

// jsonTranslator reads a native JSON answer whole and serves its OpenAI
// translation. A native body that is not the expected document is served
// as bytes that are not JSON, so deliverJSON takes the model's output
// validation path (OutcomeQuality, the synthetic 502) instead of
// delivering garbage as a success.
type jsonTranslator struct {
	src       io.ReadCloser
	translate func(native []byte) ([]byte, error)
	out       []byte
	done      bool
}

var notTranslatable = []byte("breakwater: the upstream answer is not a valid native response")

func (t *jsonTranslator) Read(p []byte) (int, error) {
	if !t.done {
		native, err := io.ReadAll(io.LimitReader(t.src, maxResponseBody+1))
		if err != nil {
			return 0, err
		}
		t.done = true
		if len(native) > maxResponseBody {
			t.out = native // deliverJSON's size check rejects it
		} else if out, terr := t.translate(native); terr == nil {
			t.out = out
		} else {
			t.out = notTranslatable
		}
	}
	if len(t.out) == 0 {
		return 0, io.EOF
	}
	n := copy(p, t.out)
	t.out = t.out[n:]
	return n, nil
}

func (t *jsonTranslator) Close() error { return t.src.Close() }

// sseTranslator reads native SSE events and serves OpenAI SSE bytes. Each
// native event yields zero or more output events (pings yield none).
type sseTranslator struct {
	src  io.ReadCloser
	rd   *sseReader
	raw  []byte
	data []byte
	buf  []byte // where data is assembled (sseReader.next)
	out  []byte // pending output
	off  int
	// event translates one native event's data, appending output events
	// to dst.
	event func(dst, data []byte) []byte
	// end is called once at the native end of stream; it may append a
	// last event (gemini's [DONE]).
	end   func(dst []byte) []byte
	err   error
	ended bool
}

func newSSETranslator(src io.ReadCloser, event func(dst, data []byte) []byte, end func(dst []byte) []byte) *sseTranslator {
	// Not a pooled sseReader (nothing calls Close on a stream body the
	// pipeline has finished with, so it would never return); its read
	// buffer is pooled and held only while it has unread bytes.
	return &sseTranslator{src: src, rd: &sseReader{src: src}, event: event, end: end}
}

func (t *sseTranslator) Read(p []byte) (int, error) {
	for t.off >= len(t.out) {
		if t.err != nil {
			return 0, t.err
		}
		t.out, t.off = t.out[:0], 0
		var err error
		t.raw, t.buf, t.data, err = t.rd.next(t.raw, t.buf)
		if err != nil {
			if err == io.EOF && !t.ended && t.end != nil {
				t.out = t.end(t.out)
			}
			t.ended = true
			t.err = err
			continue
		}
		if len(bytes.TrimSpace(t.data)) == 0 {
			continue // a comment, or an event line without data
		}
		t.out = t.event(t.out, t.data)
	}
	n := copy(p, t.out[t.off:])
	t.off += n
	return n, nil
}

func (t *sseTranslator) Close() error { return t.src.Close() }

// appendJSONString appends s as a JSON string (encoding/json's escaping,
// including <, > and & as \u escapes and invalid UTF-8 as U+FFFD), as
// the adapters' chat answers have it.
func appendJSONString(dst []byte, s string) []byte { return wire.AppendJSONStringHTML(dst, s) }
