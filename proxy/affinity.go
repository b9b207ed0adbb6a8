package proxy

import (
	"crypto/sha256"
	"net/http"
)

// Session affinity (docs/selection.md#session-affinity) is the model's: the shell only turns the
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

// upstreamHeader is an upstream answer's head as the model reads it
// (model.Outcome.Headers). The Transport keys it canonically, so the
// model's fixed names are looked up as they are (model.CanonicalGetter):
// http.Header.Get canonicalises every name again, on every answer.
type upstreamHeader http.Header

func (h upstreamHeader) Get(name string) string { return http.Header(h).Get(name) }

func (h upstreamHeader) GetCanonical(canon string) string { return headerValue(http.Header(h), canon) }

// firstValue is key's first non-empty value as a one-element slice of h's
// own storage (what h.Get returns, without a copy), or nil.
func firstValue(h http.Header, key string) []string { return firstOf(h[key]) }

// firstOf is firstValue for a header's values already looked up.
func firstOf(v []string) []string {
	if len(v) > 0 && v[0] != "" {
		return v[:1:1]
	}
	return nil
}

// sessionKey returns a digest of the request's session header, scoped to
// the client key that sent it, or false. Session ids are never kept or
// logged in clear. The key's id is part of the digest: two tenants whose
// ids collide ("agent-1") have two sessions, not one that either can move.
func sessionKey(r *http.Request, clientKeyID string) ([32]byte, bool) {
	for _, h := range sessionHeaders {
		if v := headerValue(r.Header, h); v != "" {
			return sha256.Sum256([]byte("breakwater-session\x00" + clientKeyID + "\x00" + v)), true
		}
	}
	return [32]byte{}, false
}
