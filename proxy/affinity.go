package proxy

import (
	"crypto/sha256"
	"net/http"
)

// Session affinity (SPEC §2c) is the model's: the shell only turns the
// session header into an opaque key for model.Flow / model.Request.Session.

// sessionHeaders are read in order; none of them is ever forwarded upstream.
var sessionHeaders = []string{"X-Session-Id", "X-Breakwater-Session"}

// headerValue is h.Get(key) for a canonical key ("X-Session-Id"): the maps
// net/http parses (requests and upstream responses) are keyed canonically,
// so the lookup skips Get's canonicalization of the key, which on the
// request path cost more than the rest of the header handling.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// firstValue is key's first non-empty value as a one-element slice of h's
// own storage (what h.Get returns, without a copy), or nil.
func firstValue(h http.Header, key string) []string {
	if v := h[key]; len(v) > 0 && v[0] != "" {
		return v[:1:1]
	}
	return nil
}

// sessionKey returns a digest of the request's session header, or false.
// Session ids are never kept or logged in clear.
func sessionKey(r *http.Request) ([32]byte, bool) {
	for _, h := range sessionHeaders {
		if v := headerValue(r.Header, h); v != "" {
			return sha256.Sum256([]byte(v)), true
		}
	}
	return [32]byte{}, false
}
