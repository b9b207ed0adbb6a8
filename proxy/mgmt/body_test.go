package mgmt

import (
	"encoding/json"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// ms stands for the gateway's Millis: a millisecond field whose refusal
// encoding/json reports as a type error.
type ms int64

func (m ms) Duration() time.Duration { return time.Duration(m) * time.Millisecond }

func (m *ms) UnmarshalJSON(b []byte) error {
	return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[ms]()}
}

// TestDecodeJSONNamesTheProblem pins "bad input: a clear typed 400" for
// management bodies: each refusal names the field and what it must be,
// never a Go type, and a millisecond field says what it accepts.
func TestDecodeJSONNamesTheProblem(t *testing.T) {
	type body struct {
		Name  string   `json:"name"`
		Caps  []int    `json:"caps"`
		Delay ms       `json:"delayMs"`
		Inner struct{} `json:"inner"`
	}
	for _, c := range []struct{ in, want string }{
		{``, "a JSON body is required"},
		{`null`, "invalid body: want a JSON object, got null"},
		{`[1]`, "invalid body: want a JSON object, got an array"},
		{`{"nmae":"x"}`, `invalid body: unknown field "nmae"`},
		{`{"name":1}`, `invalid body: field "name" must be a string, got number`},
		{`{"caps":"x"}`, `invalid body: field "caps" must be an array of integers, got string`},
		{`{"delayMs":"soon"}`, `invalid body: field "delayMs" must be a whole, non-negative number of milliseconds or a Go duration such as "30s", got "soon"`},
		{`{"name":"x"} {}`, "invalid body: trailing data after the JSON value"},
		{`{"name":"x"}`, ""},
	} {
		var v body
		if got := DecodeJSON([]byte(c.in), &v, false); got != c.want {
			t.Errorf("%s: got %q, want %q", c.in, got, c.want)
		}
	}
	if got := DecodeJSON(nil, &body{}, true); got != "" {
		t.Errorf("empty body with allowEmpty: %q", got)
	}
}

// TestRequestLogQuery pins the GET /api/request-log parameters: the
// defaults (the last hour, 10000 records), provider/connection in one, and
// a 400 text for each mistake.
func TestRequestLogQuery(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	q, problem := ParseRequestLogQuery(url.Values{"connection": {"p/c"}, "format": {"jsonl"}}, now)
	if problem != "" || q.Provider != "p" || q.Connection != "c" || q.Format != "jsonl" || q.Limit != RequestLogDefaultLimit ||
		!q.Since.Equal(now.Add(-time.Hour)) || !q.Until.Equal(now) {
		t.Fatalf("got %+v, %q", q, problem)
	}
	for _, c := range []struct {
		q    url.Values
		want string
	}{
		{url.Values{"sinse": {"-1h"}}, `unknown query parameter "sinse"`},
		{url.Values{"limit": {"1", "2"}}, `query parameter "limit" is given 2 times`},
		{url.Values{"provider": {"q"}, "connection": {"p/c"}}, `connection "p/c" is not of provider "q"`},
		{url.Values{"since": {"yesterday"}}, "since: want an RFC 3339 instant"},
		{url.Values{"since": {"-1h"}, "until": {"-2h"}}, "must be after since"},
		{url.Values{"limit": {"0"}}, "limit: want 1..100000"},
		{url.Values{"format": {"csv"}}, "format: want json or jsonl"},
	} {
		if _, problem := ParseRequestLogQuery(c.q, now); !strings.Contains(problem, c.want) {
			t.Errorf("%v: got %q, want %q", c.q, problem, c.want)
		}
	}
}
