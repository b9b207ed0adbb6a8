package proxy

import (
	"crypto/sha256"
	"net/http"
)

// Session affinity (SPEC §2c) is the model's: the shell only turns the
// session header into an opaque key for model.Flow / model.Request.Session.

// sessionHeaders are read in order; none of them is ever forwarded upstream.
var sessionHeaders = []string{"X-Session-Id", "X-Breakwater-Session"}

// sessionKey returns a digest of the request's session header, or false.
// Session ids are never kept or logged in clear.
func sessionKey(r *http.Request) ([32]byte, bool) {
	for _, h := range sessionHeaders {
		if v := r.Header.Get(h); v != "" {
			return sha256.Sum256([]byte(v)), true
		}
	}
	return [32]byte{}, false
}
