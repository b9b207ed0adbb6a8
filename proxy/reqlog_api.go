package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
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
	lq, problem := parseRequestLogQuery(r.URL.Query(), g.now())
	if problem != "" {
		writeError(w, http.StatusBadRequest, "invalid_request", problem)
		return
	}
	// Bad parameters are a 400 whatever the store; only then: can it answer?
	rd, ok := g.store.(attemptReader)
	if !ok {
		writeError(w, http.StatusNotImplemented, "request_log_unavailable",
			"this gateway's store keeps no request log (an embedder's own state store; serve keeps one in memory or in Postgres)")
		return
	}
	// One more than asked tells truncation apart from an exact fit (at the
	// store's own cap, a full answer counts as truncated).
	limit := lq.Limit
	lq.Limit = min(limit+1, reqLogMaxLimit)
	recs, err := rd.RecentAttempts(r.Context(), lq.LogQuery)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "request_log_unavailable", "reading the request log failed: the store is unavailable")
		g.log.Warn("reading the request log failed", "err", err)
		return
	}
	truncated := len(recs) > limit || (lq.Limit == limit && len(recs) == limit)
	if truncated {
		recs = recs[:limit]
	}
	slices.Reverse(recs) // the store answers newest first; an export reads in time order
	writeRequestLog(w, recs, truncated, lq.format)
}

// requestLogQuery is a GET /api/request-log query: the store's query
// (Limit is the number of records asked for) and the answer's format.
type requestLogQuery struct {
	store.LogQuery
	format string // "", json or jsonl
}

// parseRequestLogQuery reads the query parameters of GET /api/request-log,
// or says why they are refused.
func parseRequestLogQuery(q url.Values, now time.Time) (requestLogQuery, string) {
	var lq requestLogQuery
	for k, vs := range q {
		if !slices.Contains(reqLogParams, k) {
			return lq, fmt.Sprintf("unknown query parameter %q (known: %s)", k, strings.Join(reqLogParams, ", "))
		}
		if len(vs) > 1 {
			// Only one would be used: say so rather than filter on the first.
			return lq, fmt.Sprintf("query parameter %q is given %d times; it takes one value", k, len(vs))
		}
	}
	// connection takes the bare id or, like the rest of the management
	// API, "provider/connection" (which also sets provider).
	lq.Provider, lq.Connection, lq.RequestID = q.Get("provider"), q.Get("connection"), q.Get("requestId")
	if p, c, ok := strings.Cut(lq.Connection, "/"); ok {
		if lq.Provider != "" && lq.Provider != p {
			return lq, fmt.Sprintf("connection %q is not of provider %q", lq.Connection, lq.Provider)
		}
		lq.Provider, lq.Connection = p, c
	}
	var err error
	if lq.Since, err = parseLogTime(q.Get("since"), now.Add(-time.Hour), now); err != nil {
		return lq, "since: " + err.Error()
	}
	if lq.Until, err = parseLogTime(q.Get("until"), now, now); err != nil {
		return lq, "until: " + err.Error()
	}
	if !lq.Until.After(lq.Since) {
		return lq, fmt.Sprintf("until (%s) must be after since (%s)", lq.Until.Format(time.RFC3339Nano), lq.Since.Format(time.RFC3339Nano))
	}
	lq.Limit = reqLogDefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > reqLogMaxLimit {
			return lq, fmt.Sprintf("limit: want 1..%d, got %q", reqLogMaxLimit, s)
		}
		lq.Limit = n
	}
	lq.format = q.Get("format")
	if lq.format != "" && lq.format != "json" && lq.format != "jsonl" {
		return lq, fmt.Sprintf("format: want json or jsonl, got %q", lq.format)
	}
	return lq, ""
}

// writeRequestLog answers the records as one JSON object, or as JSONL
// (one record a line) for format=jsonl.
func writeRequestLog(w http.ResponseWriter, recs []store.LogRecord, truncated bool, format string) {
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
