package replay

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// requestRecorder keeps what the in-process gateway says about each
// finished chat request in its own log line ("chat request": status,
// attempts, provider, connection), by the X-Request-Id replay sent
// ("replay-N"). A client that gave up before the answer's headers saw no
// X-Breakwater-Attempts or -Connection, but the gateway decided them: its
// log line is how the replay observes a 499 as the simulator does. Other
// records go on to the replay's logger, at that logger's own level.
type requestRecorder struct {
	next  slog.Handler
	attrs []slog.Attr
	st    *recorderState
	prog  *progress
}

type recorderState struct {
	mu   sync.Mutex
	seen map[int]gatewayRequest
	cond *sync.Cond
	// stepped: closed at request n's first "flow step" line, once the
	// model has made its first decision for it (an attempt, a wait or an
	// answer).
	stepped map[int]chan struct{}
}

// gatewayRequest is one "chat request" log line.
type gatewayRequest struct {
	status, attempts     int
	provider, connection string
}

func newRequestRecorder(next slog.Handler, prog *progress) *requestRecorder {
	st := &recorderState{seen: map[int]gatewayRequest{}, stepped: map[int]chan struct{}{}}
	st.cond = sync.NewCond(&st.mu)
	return &requestRecorder{next: next, st: st, prog: prog}
}

// Enabled takes every level: the gateway logs a request's line at debug
// unless it failed.
func (h *requestRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *requestRecorder) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "flow step" {
		h.noteStep(r)
	}
	if r.Message == "chat request" {
		var g gatewayRequest
		n := -1
		visit := func(a slog.Attr) bool {
			switch a.Key {
			case "request_id":
				if v, ok := strings.CutPrefix(a.Value.String(), replayRequestID); ok {
					if i, err := strconv.Atoi(v); err == nil {
						n = i
					}
				}
			case "status":
				g.status = int(a.Value.Int64())
			case "attempts":
				g.attempts = int(a.Value.Int64())
			case "provider":
				g.provider = a.Value.String()
			case "connection":
				g.connection = a.Value.String()
			}
			return true
		}
		for _, a := range h.attrs {
			visit(a)
		}
		r.Attrs(visit)
		if n >= 0 {
			h.st.mu.Lock()
			h.st.seen[n] = g
			h.st.cond.Broadcast()
			h.st.mu.Unlock()
		}
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *requestRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &requestRecorder{next: h.next.WithAttrs(as), attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...), st: h.st, prog: h.prog}
}

func (h *requestRecorder) WithGroup(name string) slog.Handler {
	return &requestRecorder{next: h.next.WithGroup(name), attrs: h.attrs, st: h.st, prog: h.prog}
}

// noteStep closes the stepped channel of the request a "flow step" line
// names.
func (h *requestRecorder) noteStep(r slog.Record) {
	n, attempt := -1, false
	find := func(a slog.Attr) bool {
		switch a.Key {
		case "step":
			attempt = a.Value.String() == "attempt"
		case "request_id":
			if v, ok := strings.CutPrefix(a.Value.String(), replayRequestID); ok {
				if i, err := strconv.Atoi(v); err == nil {
					n = i
				}
			}
		}
		return true
	}
	for _, a := range h.attrs {
		find(a)
	}
	r.Attrs(find)
	if n < 0 {
		return
	}
	if h.prog != nil {
		h.prog.step(n, attempt)
	}
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	ch := chanOf(h.st.stepped, n)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// stepped returns a channel closed once the gateway's model made its
// first decision for request n.
func (h *requestRecorder) stepped(n int) <-chan struct{} {
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	return chanOf(h.st.stepped, n)
}

// of returns request n's line, waiting for it while ctx lasts (the gateway
// logs it as its handler returns, a moment after the client left).
func (h *requestRecorder) of(ctx context.Context, n int) (gatewayRequest, bool) {
	stop := context.AfterFunc(ctx, func() {
		h.st.mu.Lock()
		h.st.cond.Broadcast()
		h.st.mu.Unlock()
	})
	defer stop()
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	for {
		if g, ok := h.st.seen[n]; ok {
			return g, true
		}
		if ctx.Err() != nil {
			return gatewayRequest{}, false
		}
		h.st.cond.Wait()
	}
}

// replayNum is the replay request number of a gateway log id.
func replayNum(id string) (int, bool) {
	v, ok := strings.CutPrefix(id, replayRequestID)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

// replayRequestID prefixes the X-Request-Id of replay request N.
const replayRequestID = "replay-"
