package proxy

import (
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// defaultPassHeaders are the client headers an upstream may need to read
// the request as the client meant it: Anthropic's beta features and API
// version, OpenAI's beta opt-ins.
var defaultPassHeaders = []string{"Anthropic-Beta", "Anthropic-Version", "Openai-Beta"}

// credentialHeaders never pass, whatever the allow-list says: the
// client's credential is for the gateway, the upstream gets the
// connection's own.
var credentialHeaders = map[string]bool{"Authorization": true, "Proxy-Authorization": true, "X-Api-Key": true,
	"X-Goog-Api-Key": true, "Api-Key": true, "Cookie": true, "Set-Cookie": true}

// validateSurfaces checks server.passHeaders and stores it canonical.
func (c *Config) validateSurfaces() []error {
	var errs []error
	for i, p := range c.Providers {
		if p.ResponsesAPI && (p.Type == "anthropic" || p.Type == "gemini") {
			errs = append(errs, c.errAt("providers["+strconv.Itoa(i)+"].responsesAPI", "only OpenAI-compatible types serve the Responses API (type %s)", p.Type))
		}
	}
	if c.Server.PassHeaders == nil {
		c.Server.PassHeaders = defaultPassHeaders
		return errs
	}
	out := make([]string, 0, len(c.Server.PassHeaders))
	for _, h := range c.Server.PassHeaders {
		k := textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(h))
		switch {
		case k == "" || strings.ContainsAny(k, " :\t"):
			errs = append(errs, c.errAt("server.passHeaders", "%q is not a header name", h))
		case credentialHeaders[k]:
			errs = append(errs, c.errAt("server.passHeaders", "%s carries a credential and never passes to an upstream", k))
		default:
			out = append(out, k)
		}
	}
	c.Server.PassHeaders = out
	return errs
}

// passesHeaders reports whether the client sent a header passHeaders
// would copy.
func (rs *reqState) passesHeaders() bool {
	for _, k := range rs.g.conf().Server.PassHeaders {
		if len(rs.r.Header[k]) > 0 {
			return true
		}
	}
	return false
}

// passHeaders copies the allow-listed client headers onto an upstream
// request. It reports whether it copied a header net/http's Transport
// reads as "this request may be sent twice" (Idempotency-Key,
// X-Idempotency-Key): the caller then makes the request unreplayable
// (see upstreamRequest).
func (rs *reqState) passHeaders(h http.Header) (replayable bool) {
	for _, k := range rs.g.conf().Server.PassHeaders {
		if v := rs.r.Header[k]; len(v) > 0 {
			h[k] = v
			replayable = replayable || k == "Idempotency-Key" || k == "X-Idempotency-Key"
		}
	}
	return replayable
}
