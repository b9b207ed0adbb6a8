package mgmt

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/store"
)

// GET /api/request-log bounds: records answered when no limit is given,
// and the most one answer holds.
const (
	RequestLogDefaultLimit = 10_000
	RequestLogMaxLimit     = 100_000
)

var requestLogParams = []string{"since", "until", "provider", "connection", "requestId", "limit", "format"}

// RequestLogQuery is a GET /api/request-log query: the store's query
// (Limit is the number of records asked for) and the answer's format.
type RequestLogQuery struct {
	store.LogQuery
	Format string // "", json or jsonl
}

// ParseRequestLogQuery reads the query parameters of GET /api/request-log,
// or says why they are refused.
func ParseRequestLogQuery(q url.Values, now time.Time) (RequestLogQuery, string) {
	var lq RequestLogQuery
	for k, vs := range q {
		if !slices.Contains(requestLogParams, k) {
			return lq, fmt.Sprintf("unknown query parameter %q (known: %s)", k, strings.Join(requestLogParams, ", "))
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
	lq.Limit = RequestLogDefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > RequestLogMaxLimit {
			return lq, fmt.Sprintf("limit: want 1..%d, got %q", RequestLogMaxLimit, s)
		}
		lq.Limit = n
	}
	lq.Format = q.Get("format")
	if lq.Format != "" && lq.Format != "json" && lq.Format != "jsonl" {
		return lq, fmt.Sprintf("format: want json or jsonl, got %q", lq.Format)
	}
	return lq, ""
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
