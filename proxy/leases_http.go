package proxy

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/mgmt"
	"github.com/breakwater-gw/breakwater/store"
)

// The gateway's side of POST /api/v1/session-leases (docs/leases.md,
// docs/leases.md#the-database-arbitrates): the client key, the body's
// bounds and the arbiter. mgmt.Leases checks the request and answers.

// Lease request headers (docs/api.md). They are read by the gateway only:
// the upstream request is built from scratch, so they never reach an
// upstream, and no log line or request-log record carries them.
const (
	hdrLeaseOwner      = mgmt.HeaderLeaseOwner
	hdrLeaseGeneration = mgmt.HeaderLeaseGeneration
	maxLeaseBody       = 64 << 10
)

// leaseCall is a validated lease request (proxy/mgmt decodes it).
type leaseCall = mgmt.LeaseCall

// writeLeaseError writes a lease error (mgmt.WriteLeaseError).
func writeLeaseError(w http.ResponseWriter, code model.Code, msg string) int {
	return mgmt.WriteLeaseError(w, code, msg)
}

// writeLeaseErr writes a lease error (mgmt.WriteLeaseErr).
func writeLeaseErr(w http.ResponseWriter, err error) int { return mgmt.WriteLeaseErr(w, err) }

// writeLeaseStoreDown answers a failed arbiter: fail closed (docs/leases.md#the-database-arbitrates).
// The cause stays in the log (it never carries a token: the store hashes
// owners before any query).
func (g *Gateway) writeLeaseStoreDown(w http.ResponseWriter, err error) int {
	g.leaseStoreDown(err)
	return mgmt.WriteLeaseStoreDown(w)
}

// leaseStoreDown logs a failed arbiter and answers mgmt.ErrLeaseStoreDown.
func (g *Gateway) leaseStoreDown(err error) error {
	g.log.Warn("lease arbiter unavailable; refusing the lease operation", "err", err)
	return mgmt.ErrLeaseStoreDown
}

// leasesHandler is the lease API's handler (mgmt.Leases) over the gateway.
func (g *Gateway) leasesHandler() http.Handler {
	return &mgmt.Leases{Core: g, Key: g.leaseKey, ReadBody: g.readLeaseBody, ModelError: writeModelError}
}

// leaseKey authenticates a lease request's client key (authClient).
func (g *Gateway) leaseKey(r *http.Request) (*mgmt.LeaseKey, bool) {
	key, ok := g.authClient(r)
	if !ok || key == nil {
		return nil, ok
	}
	return &mgmt.LeaseKey{ID: key.id, Allowed: key.allowed, Managed: g.view().managed[key.id]}, true
}

// readLeaseBody reads a lease body under maxLeaseBody and the body read
// timeout; a refused one is a lease error with readBody's status.
func (g *Gateway) readLeaseBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := readBody(w, r, maxLeaseBody, g.bodyReadTimeout)
	if err == nil {
		return body, true
	}
	var be *errBadRequest
	if errors.As(err, &be) {
		writeJSON(w, be.status, errorBody{Error: apiError{Message: be.msg, Type: model.LeaseErrorType, Code: string(model.CodeLeaseContextInvalid)}})
		return nil, false
	}
	writeLeaseError(w, model.CodeLeaseContextInvalid, err.Error())
	return nil, false
}

// newOwner mints an owner token: bwl_ + 43 base64url characters of 256
// random bits.
func newOwner() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return model.LeaseOwnerPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// leaseCall asks the arbiter to renew, release or report c's lease. A
// status whose lease the fence refuses is answered refused.
func (g *Gateway) leaseCall(ctx context.Context, key mgmt.LeaseKey, c leaseCall, claim *model.LeaseClaim) (l store.Lease, res string, refused, err error) {
	arb := g.leases.arb
	switch c.Action {
	case "renew":
		l, err = arb.Renew(ctx, c.Owner, key.ID, c.Generation, time.Duration(c.TTLMs)*time.Millisecond)
		res = string(store.LeaseRenewed)
	case "release":
		l, err = arb.Release(ctx, c.Owner, key.ID, c.Generation, c.Reason)
		res = string(store.LeaseReleasedRes)
	case "status":
		var ok bool
		if l, ok, err = arb.Status(ctx, c.Owner); err == nil {
			f := model.CheckFence(g.modelNow(), nil, claim)
			if ok {
				row := rowOf(l)
				f = model.CheckFence(g.modelNow(), &row, claim)
			} else {
				g.leases.drop(claim.OwnerHash)
			}
			if f != model.FenceValid {
				return l, res, fenceError(f), nil
			}
		}
	}
	return l, res, nil, err
}

// fenceError is the lease error of a fence refusal.
func fenceError(f model.Fence) error {
	return f.Refusal()
}
