package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/store"
)

// attemptReader is a store that can read the request log back (docs/store.md#request-log).
type attemptReader interface {
	RecentAttempts(ctx context.Context, q store.LogQuery) ([]store.LogRecord, error)
}

const (
	reqLogDefaultLimit = 10_000
	reqLogMaxLimit     = 100_000
)

var reqLogParams = []string{"since", "until", "provider", "connection", "requestId", "limit", "format"}

// handleRequestLog is GET /api/request-log: the request log records of a
// window, oldest first, as JSON ({"records": [...], "truncated": bool}) or
// as JSONL (format=jsonl: one store.LogRecord per line, the input of
// `breakwater incident export -log`). The records are what the store kept:
// classification headers and redacted error bodies, never a prompt, a
// completion, a credential or a session id.
//
// since / until take RFC 3339 or a negative duration relative to now
// ("-1h"); since defaults to one hour ago, until to now. When more than
// limit records match, the NEWEST limit are returned and truncated is set
// (header X-Breakwater-Truncated: true): narrow the window rather than
// export half an incident without noticing.
func (g *Gateway) handleRequestLog(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k, vs := range q {
		if !slices.Contains(reqLogParams, k) {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("unknown query parameter %q (known: %s)", k, strings.Join(reqLogParams, ", ")))
			return
		}
		if len(vs) > 1 {
			// Only one would be used: say so rather than filter on the first.
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("query parameter %q is given %d times; it takes one value", k, len(vs)))
			return
		}
	}
	// connection takes the bare id or, like the rest of the management
	// API, "provider/connection" (which also sets provider).
	provider, connection := q.Get("provider"), q.Get("connection")
	if p, c, ok := strings.Cut(connection, "/"); ok {
		if provider != "" && provider != p {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("connection %q is not of provider %q", connection, provider))
			return
		}
		provider, connection = p, c
	}
	now := g.now()
	since, err := parseLogTime(q.Get("since"), now.Add(-time.Hour), now)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "since: "+err.Error())
		return
	}
	until, err := parseLogTime(q.Get("until"), now, now)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "until: "+err.Error())
		return
	}
	if !until.After(since) {
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("until (%s) must be after since (%s)", until.Format(time.RFC3339Nano), since.Format(time.RFC3339Nano)))
		return
	}
	limit := reqLogDefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > reqLogMaxLimit {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("limit: want 1..%d, got %q", reqLogMaxLimit, s))
			return
		}
		limit = n
	}
	format := q.Get("format")
	if format != "" && format != "json" && format != "jsonl" {
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("format: want json or jsonl, got %q", format))
		return
	}
	// One more than asked tells truncation apart from an exact fit (at the
	// store's own cap, a full answer counts as truncated).
	asked := min(limit+1, reqLogMaxLimit)
	// Bad parameters are a 400 whatever the store; only then: can it answer?
	rd, ok := g.store.(attemptReader)
	if !ok {
		writeError(w, http.StatusNotImplemented, "request_log_unavailable",
			"this gateway's store keeps no request log (an embedder's own state store; serve keeps one in memory or in Postgres)")
		return
	}
	recs, err := rd.RecentAttempts(r.Context(), store.LogQuery{Since: since, Until: until,
		Provider: provider, Connection: connection, RequestID: q.Get("requestId"), Limit: asked})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "request_log_unavailable", "reading the request log failed: the store is unavailable")
		g.log.Warn("reading the request log failed", "err", err)
		return
	}
	truncated := len(recs) > limit || (asked == limit && len(recs) == limit)
	if truncated {
		recs = recs[:limit]
	}
	slices.Reverse(recs) // the store answers newest first; an export reads in time order
	if truncated {
		w.Header().Set("X-Breakwater-Truncated", "true")
	}
	if format != "jsonl" {
		if recs == nil {
			recs = []store.LogRecord{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"records": recs, "truncated": truncated})
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			return // the client went away
		}
	}
	_ = bw.Flush()
}

// parseLogTime reads an RFC 3339 instant, "now", or a negative duration
// relative to now; "" is def.
func parseLogTime(s string, def, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return def, nil
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "-"):
		d, err := time.ParseDuration(s)
		if err != nil {
			return time.Time{}, fmt.Errorf("want a relative time such as -1h, got %q", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want an RFC 3339 instant such as 2026-01-02T15:04:05Z, now, or a relative time such as -1h; got %q", s)
	}
	return t, nil
}
