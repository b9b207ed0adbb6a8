package faults

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SpendWall is a fake subscription upstream with a spend wall (docs/spendwall.md,
// wire names docs/spendwall.md#wire-names), wrapped around any chat upstream (usually a Server).
// For each walled connection (the API key names it, as for Server):
//
//   - a chat request without `anthropic-usage-limit: slow` gets a 429 with
//     `anthropic-ratelimit-unified-status: rejected`, the slow-lane offer
//     `treatment` (when Offer) and the window reset;
//   - a chat request with the lane header goes to the inner upstream, and
//     its answer carries `anthropic-ratelimit-unified-slow-status: active`;
//   - GET  {base}/api/oauth/usage?at_wall=1&skip_spend=1 answers the
//     `juniper_tide` block;
//   - POST {base}/api/organizations/{org}/reset_rate_limits answers
//     ResetResult; `reset` lifts the wall of that connection.
//
// {base} is "" or "/{provider}" (a gateway provider's baseURL without /v1).
// Connections not walled pass straight through.
type SpendWall struct {
	inner http.Handler
	opts  SpendWallOptions

	mu     sync.Mutex
	walled map[string]bool
	stats  SpendWallStats
}

// SpendWallOptions configure a SpendWall.
type SpendWallOptions struct {
	// Walled lists the connections behind the wall (nil = every one).
	Walled []string
	// Offer sends the slow-lane offer with the wall.
	Offer bool
	// Reset is the announced window reset (zero = an hour from the call).
	Reset time.Time
	// UsageArm / UsageAvailable answer the usage endpoint's block.
	UsageArm       string
	UsageAvailable bool
	// ResetResult answers the reset endpoint: reset | not_limited |
	// already_used | not_offered; "" = 500.
	ResetResult string
	// NextAvailableAt goes with the reset answer (zero = omitted).
	NextAvailableAt time.Time
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// SpendWallStats counts what the wall saw.
type SpendWallStats struct {
	Walled     int // chat requests refused by the wall
	Lane       int // chat requests that carried the lane header
	UsageCalls int
	ResetCalls int
	// BadResetBodies counts reset calls without {"program":"juniper_tide"}.
	BadResetBodies int
}

// NewSpendWall wraps inner with a spend wall.
func NewSpendWall(inner http.Handler, opts SpendWallOptions) *SpendWall {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	w := &SpendWall{inner: inner, opts: opts}
	if opts.Walled != nil {
		w.walled = map[string]bool{}
		for _, c := range opts.Walled {
			w.walled[c] = true
		}
	}
	return w
}

// Stats returns the counters.
func (w *SpendWall) Stats() SpendWallStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Lift removes the wall of one connection.
func (w *SpendWall) Lift(conn string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.walled == nil {
		w.walled = map[string]bool{}
	}
	w.walled[conn] = false
}

func (w *SpendWall) isWalled(conn string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v, ok := w.walled[conn]; ok {
		return v
	}
	return w.opts.Walled == nil // nil Walled: every connection not lifted
}

func (w *SpendWall) count(f func(s *SpendWallStats)) {
	w.mu.Lock()
	f(&w.stats)
	w.mu.Unlock()
}

// ServeHTTP implements http.Handler.
func (w *SpendWall) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	conn := connectionOf(r)
	path := r.URL.Path
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/api/oauth/usage"):
		w.count(func(s *SpendWallStats) { s.UsageCalls++ })
		writeJSONBody(rw, http.StatusOK, map[string]any{"juniper_tide": map[string]any{
			"arm": w.opts.UsageArm, "available": w.opts.UsageAvailable}})
		return
	case r.Method == http.MethodPost && strings.Contains(path, "/api/organizations/") && strings.HasSuffix(path, "/reset_rate_limits"):
		w.count(func(s *SpendWallStats) { s.ResetCalls++ })
		var body struct {
			Program string `json:"program"`
		}
		b, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		if json.Unmarshal(b, &body) != nil || body.Program != "juniper_tide" {
			w.count(func(s *SpendWallStats) { s.BadResetBodies++ })
			writeJSONBody(rw, http.StatusBadRequest, map[string]any{"error": "want {\"program\":\"juniper_tide\"}"})
			return
		}
		if w.opts.ResetResult == "" {
			writeJSONBody(rw, http.StatusInternalServerError, map[string]any{"error": "reset failed"})
			return
		}
		out := map[string]any{"result": w.opts.ResetResult}
		if !w.opts.NextAvailableAt.IsZero() {
			out["next_available_at"] = w.opts.NextAvailableAt.UTC().Format(time.RFC3339)
		}
		if w.opts.ResetResult == "reset" {
			w.Lift(conn)
		}
		writeJSONBody(rw, http.StatusOK, out)
		return
	}
	if !w.isWalled(conn) {
		w.inner.ServeHTTP(rw, r)
		return
	}
	if strings.EqualFold(strings.TrimSpace(r.Header.Get("anthropic-usage-limit")), "slow") {
		w.count(func(s *SpendWallStats) { s.Lane++ })
		rw.Header().Set("anthropic-ratelimit-unified-slow-status", "active")
		w.inner.ServeHTTP(rw, r)
		return
	}
	w.count(func(s *SpendWallStats) { s.Walled++ })
	reset := w.opts.Reset
	if reset.IsZero() {
		reset = w.opts.Now().Add(time.Hour)
	}
	h := rw.Header()
	h.Set("anthropic-ratelimit-unified-status", "rejected")
	h.Set("anthropic-ratelimit-unified-reset", strconv.FormatInt(reset.Unix(), 10))
	if w.opts.Offer {
		h.Set("anthropic-ratelimit-unified-slow-offer", "treatment")
	}
	writeJSONBody(rw, http.StatusTooManyRequests, map[string]any{"type": "error",
		"error": map[string]any{"type": "rate_limit_error", "message": "usage limit reached"}})
}

func writeJSONBody(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
