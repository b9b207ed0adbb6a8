package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/breakwater-gw/breakwater/proxy/mgmt"
	"github.com/breakwater-gw/breakwater/store"
)

// attemptReader is a store that can read the request log back (docs/store.md#request-log).
type attemptReader interface {
	RecentAttempts(ctx context.Context, q store.LogQuery) ([]store.LogRecord, error)
}

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
	lq, problem := mgmt.ParseRequestLogQuery(r.URL.Query(), g.now())
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
	lq.Limit = min(limit+1, mgmt.RequestLogMaxLimit)
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
	writeRequestLog(w, recs, truncated, lq.Format)
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
