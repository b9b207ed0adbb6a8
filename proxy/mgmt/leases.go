// Package mgmt is the gateway's management API over HTTP: the handlers
// for health, breakers, cooldowns, lockouts, resilience settings, the
// request log, rate limits, the provider views and edits, connection
// tests and the dashboard, the session-lease API (POST
// /api/v1/session-leases), and the decoding of management and lease
// request bodies into typed values, with 400 messages that name the
// field. The handlers reach the gateway through Core and LeaseCore: the
// gateway holds the locking, authenticates keys, checks a provider edit
// against its config, talks to the lease arbiter and calls the model, so
// no rule lives here.
package mgmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/store"
)

// Lease request headers (docs/api.md). They are read by the gateway only:
// the upstream request is built from scratch, so they never reach an
// upstream, and no log line or request-log record carries them.
const (
	HeaderLeaseOwner      = "X-Breakwater-Lease-Owner"
	HeaderLeaseGeneration = "X-Breakwater-Lease-Generation"
)

// leaseRequest is the decoded body. Generation and ttlMs keep their raw
// JSON so that a huge or fractional number is refused, not rounded.
type leaseRequest struct {
	Action     string          `json:"action"`
	Model      *string         `json:"model"`
	TTLMs      json.RawMessage `json:"ttlMs"`
	Owner      *string         `json:"owner"`
	Generation json.RawMessage `json:"generation"`
	Reason     *string         `json:"reason"`
}

// LeaseCall is a validated lease request (POST /api/v1/session-leases).
type LeaseCall struct {
	Action     string // acquire, renew, release or status
	Model      string // acquire only
	TTLMs      int64  // acquire and renew; clamped
	Owner      string // renew, release, status
	Generation int64  // renew, release, status
	Reason     string // release only; "" when none given
}

// DecodeLeaseRequest validates a body (and the lease headers, which may
// carry the owner and generation instead of the body). Every problem is a
// *model.LeaseError; nothing is changed before it returns.
func DecodeLeaseRequest(body []byte, h http.Header) (LeaseCall, error) {
	v, err := parseLeaseBody(body)
	if err != nil {
		return LeaseCall{}, err
	}
	c := LeaseCall{Action: v.Action}
	switch v.Action {
	case "acquire", "renew", "release", "status":
	case "":
		return LeaseCall{}, leaseInvalid("field \"action\" is required: acquire, renew, release or status")
	default:
		return LeaseCall{}, leaseInvalid("unknown action; want acquire, renew, release or status")
	}
	c.TTLMs = model.DefaultLeaseTTLMs
	if len(v.TTLMs) > 0 && string(v.TTLMs) != "null" {
		if c.Action != "acquire" && c.Action != "renew" {
			return LeaseCall{}, leaseInvalid("ttlMs applies to acquire and renew only")
		}
		if c.TTLMs, err = parseTTLMs(v.TTLMs); err != nil {
			return LeaseCall{}, err
		}
	}
	if c.Action == "acquire" {
		if err := v.acquire(&c, h); err != nil {
			return LeaseCall{}, err
		}
		return c, nil
	}
	if v.Model != nil {
		return LeaseCall{}, leaseInvalid("model applies to acquire only")
	}
	if c.Owner, c.Generation, err = v.holder(h); err != nil {
		return LeaseCall{}, err
	}
	if c.Reason, err = v.releaseReason(c.Action); err != nil {
		return LeaseCall{}, err
	}
	return c, nil
}

// leaseInvalid is a lease request refused as malformed.
func leaseInvalid(format string, a ...any) error {
	return &model.LeaseError{Code: model.CodeLeaseContextInvalid, Message: fmt.Sprintf(format, a...)}
}

// parseLeaseBody decodes a lease request body: one JSON object with known
// fields only.
func parseLeaseBody(body []byte) (leaseRequest, error) {
	var v leaseRequest
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' {
		return v, leaseInvalid("the body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return v, leaseInvalid("field %q has the wrong type", te.Field)
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return v, leaseInvalid("unknown field %s; known: action, model, ttlMs, owner, generation, reason", f)
		}
		return v, leaseInvalid("the body is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return v, leaseInvalid("the body must be one JSON object")
	}
	return v, nil
}

// acquire fills c from an acquire request: a model, and no owner,
// generation or reason (acquire mints the owner).
func (v *leaseRequest) acquire(c *LeaseCall, h http.Header) error {
	if v.Model == nil || strings.TrimSpace(*v.Model) == "" {
		return leaseInvalid("field \"model\" is required for acquire")
	}
	if v.Owner != nil || len(v.Generation) > 0 || h.Get(HeaderLeaseOwner) != "" || h.Get(HeaderLeaseGeneration) != "" {
		return leaseInvalid("acquire mints a new owner: send no owner or generation")
	}
	if v.Reason != nil {
		return leaseInvalid("reason applies to release only")
	}
	c.Model = strings.TrimSpace(*v.Model)
	return nil
}

// holder returns the owner and generation of a renew, release or status
// call. They come from the body or the headers; both present must agree.
func (v *leaseRequest) holder(h http.Header) (string, int64, error) {
	owner, hOwner := "", h.Get(HeaderLeaseOwner)
	if v.Owner != nil {
		owner = *v.Owner
		if hOwner != "" && hOwner != owner {
			return "", 0, leaseInvalid("the owner in the body and in %s differ", HeaderLeaseOwner)
		}
	} else {
		owner = hOwner
	}
	if err := model.ParseLeaseOwner(owner); err != nil {
		return "", 0, err
	}
	genText, hGen := "", h.Get(HeaderLeaseGeneration)
	if len(v.Generation) > 0 && string(v.Generation) != "null" {
		raw := v.Generation
		if raw[0] == '"' {
			if err := json.Unmarshal(raw, &genText); err != nil {
				return "", 0, leaseInvalid("field \"generation\" is not a valid string")
			}
		} else {
			genText = string(raw)
		}
		if hGen != "" && hGen != genText {
			return "", 0, leaseInvalid("the generation in the body and in %s differ", HeaderLeaseGeneration)
		}
	} else {
		genText = hGen
	}
	gen, err := model.ParseLeaseGeneration(genText)
	if err != nil {
		return "", 0, err
	}
	return owner, gen, nil
}

// releaseReason is the reason a release gives for ending ("" when none).
func (v *leaseRequest) releaseReason(action string) (string, error) {
	if v.Reason == nil {
		return "", nil
	}
	if action != "release" {
		return "", leaseInvalid("reason applies to release only")
	}
	switch *v.Reason {
	case store.EndOwnerExit, store.EndClientCancelled:
		return *v.Reason, nil
	}
	return "", leaseInvalid("reason must be %s or %s", store.EndOwnerExit, store.EndClientCancelled)
}

// parseTTLMs reads ttlMs: an integer of milliseconds or a Go duration
// string (docs/settings.md#layers "*Ms" fields), then the clamp.
func parseTTLMs(raw json.RawMessage) (int64, error) {
	bad := &model.LeaseError{Code: model.CodeLeaseContextInvalid, Message: "ttlMs must be an integer of milliseconds or a duration string (\"90s\")"}
	var ms int64
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, bad
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, bad
		}
		ms = d.Milliseconds()
		if d > 0 && ms == 0 {
			ms = 1
		}
	} else {
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			// A huge positive integer is clamped, like any long TTL.
			if f, ferr := strconv.ParseFloat(string(raw), 64); ferr == nil && f > 0 && !strings.ContainsAny(string(raw), ".eE") {
				n = model.MaxLeaseTTLMs
			} else {
				return 0, bad
			}
		}
		ms = n
	}
	if ms < 0 {
		return 0, &model.LeaseError{Code: model.CodeLeaseContextInvalid, Message: "ttlMs must not be negative"}
	}
	return model.ClampLeaseTTLMs(ms)
}
