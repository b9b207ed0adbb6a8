package faults

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Fault is a transport or stream misbehaviour of one response.
type Fault uint8

const (
	// None: an ordinary HTTP answer.
	None Fault = iota
	// Reset: the connection is reset before any header.
	Reset
	// Timeout: no response at all, until the client gives up (bounded).
	Timeout
	// Stall: a stream goes silent after Stream.StallAfter chunks, for
	// Stream.StallFor (0 = until the client gives up), then resumes.
	Stall
	// SlowStream: content arrives at Stream.BytesPerSecond.
	SlowStream
	// Cut: the connection closes after Stream.StallAfter chunks, without
	// [DONE] (mid-answer).
	Cut
	// MalformedChunk: an event whose data is not valid JSON comes before
	// content chunk number Stream.StallAfter+1 (a stream still sends every
	// content chunk; a JSON answer is cut in half).
	MalformedChunk
	// NoDone: the stream completes (finish_reason and usage sent) but ends
	// without the `data: [DONE]` line.
	NoDone
	// PrefillRefusal: a request whose last message is an assistant message
	// (a prefill) gets 400; others an ordinary answer (faults/prefill.go).
	PrefillRefusal
	// PrefillRestart: a prefill is ignored, the answer starts over.
	PrefillRestart
)

var faultNames = []string{"", "reset", "timeout", "stall", "slow-stream", "cut", "malformed-chunk", "no-done",
	"prefill-refusal", "prefill-restart"}

// FaultNames lists the fault names of the scenario format.
func FaultNames() []string { return slices.Clone(faultNames[1:]) }

func (f Fault) String() string {
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return fmt.Sprintf("Fault(%d)", f)
}

// MarshalText writes the scenario name.
func (f Fault) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText reads a scenario name.
func (f *Fault) UnmarshalText(b []byte) error {
	v, err := ParseFault(string(b))
	if err == nil {
		*f = v
	}
	return err
}

// ParseFault parses a fault name ("" is None).
func ParseFault(s string) (Fault, error) {
	for i, n := range faultNames {
		if n == s {
			return Fault(i), nil
		}
	}
	return None, fmt.Errorf("unknown fault %q (want one of %s)", s, strings.Join(faultNames[1:], ", "))
}

// Streaming reports whether the fault only shows in a stream body.
func (f Fault) Streaming() bool { return f >= Stall }

// Stream shapes a streamed (or generated) answer.
type Stream struct {
	// Chunks is the number of content chunks (default DefaultChunks).
	Chunks int `json:"chunks,omitempty"`
	// Interval is the time between chunks (default 0).
	Interval time.Duration `json:"interval,omitempty"`
	// StallAfter is the number of chunks sent before a stall, a cut or the
	// malformed chunk.
	StallAfter int `json:"stallAfter,omitempty"`
	// StallFor is how long a stall lasts; 0 = until the client gives up.
	StallFor time.Duration `json:"stallFor,omitempty"`
	// BytesPerSecond is a slow stream's content throughput.
	BytesPerSecond int `json:"bytesPerSecond,omitempty"`
	// Malformed is how many events in a row malformed-chunk sends (0 = 1):
	// one is skipped, a run past the gateway's bound ends the stream.
	Malformed int `json:"malformed,omitempty"`
	// Numbered gives every chunk its own text (ChunkTextAt), so a restarted
	// answer can be told from a continued one.
	Numbered bool `json:"numbered,omitempty"`
}

// DefaultChunks is the number of content chunks of an answer.
const DefaultChunks = 8

// ChunkText is the content of every chunk; ChunkBytes its length.
const ChunkText = "lorem ipsum dol "

// ChunkBytes is the number of useful content bytes per chunk.
const ChunkBytes = len(ChunkText)

// Response is one upstream behaviour: what one attempt gets.
type Response struct {
	// Use names the catalog entry this response started from (informational
	// once decoded: its fields are already merged in).
	Use string `json:"use,omitempty"`
	// Status is the HTTP status (default 200).
	Status int `json:"status,omitempty"`
	// Headers are response headers (names as written).
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the response body; empty means a default body for the status
	// (a chat completion for 2xx, an OpenAI-shaped error otherwise).
	Body string `json:"body,omitempty"`
	// Latency is the time until response headers; for streams, until the
	// first byte.
	Latency time.Duration `json:"latency,omitempty"`
	// Jitter adds a uniform random [0, Jitter) to Latency.
	Jitter time.Duration `json:"jitter,omitempty"`
	Fault  Fault         `json:"fault,omitempty"`
	Stream Stream        `json:"stream,omitzero"`
}

// StatusOrOK returns Status, or 200 when unset.
func (r *Response) StatusOrOK() int {
	if r.Status == 0 {
		return 200
	}
	return r.Status
}

// OK reports whether the response is a 2xx with no transport fault (stream
// faults may still break it).
func (r *Response) OK() bool {
	s := r.StatusOrOK()
	return s >= 200 && s <= 299 && r.Fault != Reset && r.Fault != Timeout
}

// Chunks returns the number of content chunks.
func (r *Response) Chunks() int {
	if r.Stream.Chunks > 0 {
		return r.Stream.Chunks
	}
	return DefaultChunks
}

// ChunkInterval is the time between content chunks: Stream.Interval, or
// for a slow stream the time one chunk takes at BytesPerSecond.
func (r *Response) ChunkInterval() time.Duration {
	if r.Fault == SlowStream && r.Stream.BytesPerSecond > 0 {
		return time.Duration(int64(ChunkBytes) * int64(time.Second) / int64(r.Stream.BytesPerSecond))
	}
	return r.Stream.Interval
}

// ErrorBody returns the body to send: Body, or the default for the status.
func (r *Response) ErrorBody() string {
	if r.Body != "" {
		return r.Body
	}
	return DefaultErrorBody(r.StatusOrOK())
}

// Clone returns a deep copy.
func (r Response) Clone() Response {
	r.Headers = maps.Clone(r.Headers)
	return r
}

// HeaderNames returns the header names in sorted order (for deterministic
// writing).
func (r *Response) HeaderNames() []string {
	names := slices.Collect(maps.Keys(r.Headers))
	slices.Sort(names)
	return names
}

// Validate checks a response for contradictions.
func (r *Response) Validate() error {
	switch {
	case r.Status != 0 && (r.Status < 100 || r.Status > 599):
		return fmt.Errorf("status %d is not an HTTP status", r.Status)
	case r.Fault.Streaming() && !r.OK():
		return fmt.Errorf("fault %s needs a 2xx stream, not status %d", r.Fault, r.Status)
	case r.Fault == SlowStream && r.Stream.BytesPerSecond <= 0:
		return fmt.Errorf("fault slow-stream needs stream.bytesPerSecond > 0")
	case (r.Fault == Cut || r.Fault == MalformedChunk || r.Fault == Stall) && r.Stream.StallAfter > r.Chunks():
		return fmt.Errorf("stream.stallAfter %d is past the last chunk (%d)", r.Stream.StallAfter, r.Chunks())
	case r.Stream.Chunks < 0 || r.Stream.StallAfter < 0 || r.Stream.BytesPerSecond < 0 || r.Stream.Malformed < 0:
		return fmt.Errorf("stream counts must not be negative")
	case r.Stream.Malformed > maxMalformed:
		return fmt.Errorf("stream.malformed %d is above %d", r.Stream.Malformed, maxMalformed)
	}
	return nil
}
