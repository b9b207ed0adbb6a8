package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/model"
)

// isErrorEventT: the event is an in-stream error object (the model's
// reading, model.ParseStreamEvent).
func isErrorEventT(data []byte) bool { return model.ParseStreamEvent(data).Error }

func TestTopLevelValueAndBodyFor(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"say \"model\": x"}], "model" : "combo" ,"stream":true,"nested":{"model":"inner"}}`
	r, err := parseChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "combo" || !r.Stream {
		t.Fatalf("parsed %+v", r)
	}
	out := r.bodyFor("glm-5")
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("bodyFor produced invalid JSON %s: %v", out, err)
	}
	if v["model"] != "glm-5" || v["nested"].(map[string]any)["model"] != "inner" || v["stream"] != true {
		t.Fatalf("bodyFor = %s", out)
	}
	if got := r.bodyFor("combo"); &got[0] != &r.body[0] {
		t.Fatal("same model should forward the original bytes")
	}
	// A repeated key the gateway reads is refused: it would route on the
	// last copy while an upstream reading the first acted on the other
	// (the upstream was sent {"model":"nope","model":"m1"}).
	for _, dup := range []string{`{"model":"a","model":"b"}`, `{"model":"a","stream":false,"stream":true}`, `{"model":"a","messages":[],"messages":[]}`} {
		if _, err := parseChatRequest([]byte(dup)); err == nil || !strings.Contains(err.Error(), "appears more than once") {
			t.Errorf("parseChatRequest(%s): %v, want a repeated-field error", dup, err)
		}
	}
	// Other keys may repeat: the gateway does not read them.
	if r, err := parseChatRequest([]byte(`{"model":"a","user":"x","user":"y"}`)); err != nil || r.Model != "a" {
		t.Fatalf("a repeated key the gateway does not read: %+v %v", r, err)
	}
	for _, bad := range []string{``, `[]`, `{"model":1}`, `{"model":""}`, `{}`, `{"model":"x","stream":"yes"}`, `{"model":"x"`, `{"model":"x"} trailing`} {
		if _, err := parseChatRequest([]byte(bad)); err == nil {
			t.Errorf("parseChatRequest(%q): want an error", bad)
		}
	}
}

func TestRedact(t *testing.T) {
	out := string(redact([]byte(`{"error":{"message":"Incorrect API key provided: sk-abc123456789xyz. Bearer tok_abcdefghijk and mysecret"}}`), "mysecret"))
	for _, leak := range []string{"sk-abc123456789xyz", "tok_abcdefghijk", "mysecret"} {
		if strings.Contains(out, leak) {
			t.Errorf("redact left %q in %s", leak, out)
		}
	}
	// What the request log hides, the client's copy hides too
	// (store.Redact): a named key=value and a lease owner echoed back.
	owner := "bwl_" + strings.Repeat("Ab3_", 10) + "xyz"
	out = string(redact([]byte(`{"error":{"message":"bad request api_key=ck-12345678 owner `+owner+`"}}`), "other"))
	for _, leak := range []string{"ck-12345678", owner} {
		if strings.Contains(out, leak) {
			t.Errorf("redact left %q in %s", leak, out)
		}
	}
	if !strings.Contains(out, "bad request") {
		t.Errorf("redact took the message itself: %s", out)
	}
}

// TestRedactURLNeverShowsASecret: a URL's password and query values stay
// out of error messages and the management API, also when the URL does not
// parse (the config error quotes it).
func TestRedactURLNeverShowsASecret(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://u:pw-SECRET@host/v1", "https://u:xxxxx@host/v1"},
		{"https://host/v1?key=pw-SECRET", "https://host/v1?key=xxxxx"},
		{"http://u:pw-SECRET@127.0.0.1:bad/v1", "http://u:xxxxx@127.0.0.1:bad/v1"},
		{"mysql://u:pw-SECRET@h:bad/db", "mysql://u:xxxxx@h:bad/db"},
		{"http://h:bad/v1?key=pw-SECRET#x", "http://h:bad/v1?xxxxx#x"},
		{"u:pw-SECRET@h:bad", "u:xxxxx@h:bad"},
		{"http://h:bad/a@b:c", "http://h:bad/a@b:c"}, // an @ in the path is not userinfo
	} {
		if got := redactURL(c.in); got != c.want || strings.Contains(got, "SECRET") {
			t.Errorf("redactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, src := range []string{
		"providers: [{id: p, baseURL: \"http://u:pw-SECRET@127.0.0.1:bad/v1\", models: [m], connections: [{id: c1}]}]\n",
		"store: {url: \"mysql://u:pw-SECRET@h:bad/db\"}\n",
	} {
		_, _, err := ParseConfig("t.yaml", []byte(src), nil)
		if err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: error %v, want one without the password", src, err)
		}
	}
}

// headerValue skips Header.Get's canonicalization: every key the gateway
// reads with it must already be canonical, or it would never match.
func TestHeaderValueKeysAreCanonical(t *testing.T) {
	keys := append([]string{"X-Request-Id", "Content-Type", "Authorization", hdrLeaseOwner, hdrLeaseGeneration}, sessionHeaders...)
	for _, k := range keys {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("%q is not canonical (%q)", k, c)
		}
		h := http.Header{}
		h.Set(k, "v")
		if headerValue(h, k) != "v" {
			t.Errorf("%q: not found after Set", k)
		}
	}
}

// The client's X-Request-Id is echoed as sent, but logs and the request log
// keep it with anything shaped like a key redacted (a client that put its
// key there had it stored verbatim); an ordinary id, a UUID included, is
// kept as is so an operator can look the request up by it.
func TestRequestIDLoggedRedacted(t *testing.T) {
	for in, wantLog := range map[string]string{
		"sk-live-SECRETSECRETXYZ":              "[redacted]",
		"550e8400-e29b-41d4-a716-446655440000": "550e8400-e29b-41d4-a716-446655440000",
		"req-123":                              "req-123",
	} {
		r, _ := http.NewRequest("POST", "/v1/chat/completions", nil)
		r.Header.Set("X-Request-Id", in)
		id, logID := newRequestID(r)
		if id != in || logID != wantLog {
			t.Errorf("%q: id %q log %q, want %q and %q", in, id, logID, in, wantLog)
		}
	}
	r, _ := http.NewRequest("POST", "/v1/chat/completions", nil)
	if id, logID := newRequestID(r); len(id) != 24 || logID != id {
		t.Errorf("a generated id: %q %q", id, logID)
	}
}

// The model reads an answer's head through upstreamHeader: a lookup by
// canonical name gives what http.Header's Get gives, present or absent.
func TestUpstreamHeaderCanonicalLookup(t *testing.T) {
	h := http.Header{}
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Add("retry-after", "7")
	h.Add("retry-after", "9")
	var u model.Headers = upstreamHeader(h)
	c, ok := u.(model.CanonicalGetter)
	if !ok {
		t.Fatal("upstreamHeader is not a model.CanonicalGetter")
	}
	for _, name := range []string{"X-Ratelimit-Remaining-Requests", "Retry-After", "X-Ratelimit-Reset-Requests"} {
		if got, want := c.GetCanonical(name), h.Get(name); got != want {
			t.Errorf("GetCanonical(%q) = %q, http.Header.Get %q", name, got, want)
		}
		if got, want := u.Get(strings.ToLower(name)), h.Get(name); got != want {
			t.Errorf("Get(%q) = %q, http.Header.Get %q", strings.ToLower(name), got, want)
		}
	}
}
