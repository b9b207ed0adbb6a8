package proxy

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/mgmt"
	"github.com/breakwater-gw/breakwater/store"
)

// POST /api/v1/session-leases (docs/leases.md, docs/leases.md#the-database-arbitrates, docs/leases.md): client key
// auth, JSON actions acquire / renew / release / status.

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

// leaseView is a lease as the API shows it. Owner is set only in the
// acquire answer: the token is returned once and never again.
type leaseView struct {
	Owner      string `json:"owner,omitempty"`
	Generation int64  `json:"generation"`
	Connection string `json:"connection"`
	Model      string `json:"model,omitempty"`
	State      string `json:"state"`
	Result     string `json:"result,omitempty"`
	ExpiresAt  string `json:"expiresAt"`
	TTLMs      int64  `json:"ttlMs"`
}

func viewOf(l store.Lease, res string) leaseView {
	return leaseView{Generation: l.Generation, Connection: l.Provider + "/" + l.Connection, Model: l.Model,
		State: string(l.State), Result: res, ExpiresAt: l.ExpiresAt.UTC().Format(time.RFC3339Nano), TTLMs: l.TTL().Milliseconds()}
}

// leaseCapacityBody is the 429 answer: no owner and no connection id in it.
type leaseCapacityBody struct {
	State         string   `json:"state"`
	Error         apiError `json:"error"`
	Reason        string   `json:"reason"`
	RetryAfter    int64    `json:"retryAfter"`
	EligibleCount int      `json:"eligibleCount"`
	FreeCount     int      `json:"freeCount"`
}

func writeLeaseError(w http.ResponseWriter, code model.Code, msg string) int {
	status := model.LeaseHTTPStatus(code)
	writeJSON(w, status, errorBody{Error: apiError{Message: msg, Type: model.LeaseErrorType, Code: string(code)}})
	return status
}

func writeLeaseErr(w http.ResponseWriter, err error) int {
	var le *model.LeaseError
	if errors.As(err, &le) {
		return writeLeaseError(w, le.Code, le.Message)
	}
	return writeLeaseError(w, model.CodeLeaseContextInvalid, err.Error())
}

// writeLeaseStoreDown answers a failed arbiter: fail closed (docs/leases.md#the-database-arbitrates).
// The cause stays in the log (it never carries a token: the store hashes
// owners before any query).
func (g *Gateway) writeLeaseStoreDown(w http.ResponseWriter, err error) int {
	g.log.Warn("lease arbiter unavailable; refusing the lease operation", "err", err)
	return writeLeaseError(w, model.CodeLeaseStoreUnavailable, "the lease store is unavailable; try again shortly")
}

func (g *Gateway) handleSessionLeases(w http.ResponseWriter, r *http.Request) {
	key, ok := g.authClient(r)
	if !ok {
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "missing or invalid API key (Authorization: Bearer <key>)")
		return
	}
	if key == nil || !g.view().managed[key.id] {
		writeLeaseError(w, model.CodeLeaseKeyConfig, fmt.Sprintf("this API key cannot hold leases: it needs scope %q and a non-empty allowedConnections", model.LeaseScope))
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeLeaseError(w, model.CodeLeaseUnsupportedMedia, "the body must be JSON (Content-Type: application/json)")
		return
	}
	body, err := readBody(w, r, maxLeaseBody, g.bodyReadTimeout)
	if err != nil {
		var be *errBadRequest
		if errors.As(err, &be) {
			writeJSON(w, be.status, errorBody{Error: apiError{Message: be.msg, Type: model.LeaseErrorType, Code: string(model.CodeLeaseContextInvalid)}})
			return
		}
		writeLeaseError(w, model.CodeLeaseContextInvalid, err.Error())
		return
	}
	call, err := mgmt.DecodeLeaseRequest(body, r.Header)
	if err != nil {
		writeLeaseErr(w, err)
		return
	}
	switch call.Action {
	case "acquire":
		g.leaseAcquire(w, r, key, call)
	case "renew", "release", "status":
		g.leaseOwnerAction(w, r, key, call)
	}
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

// leaseAcquire picks the connection: among the key's allowedConnections
// that serve the model and are eligible by the model's selection (breaker,
// cooldown, lockout, terminal) and not held by another owner, in the
// provider's strategy order (model.Engine.LeaseAcquire); the arbiter has
// the last word on each.
func (g *Gateway) leaseAcquire(w http.ResponseWriter, r *http.Request, key *clientKey, c leaseCall) {
	g.lock()
	route, err := g.eng.Resolve(c.Model)
	g.unlock()
	if err != nil {
		var me *model.Error
		if errors.As(err, &me) {
			writeModelError(w, me)
			return
		}
		writeLeaseError(w, model.CodeLeaseContextInvalid, err.Error())
		return
	}
	if err := model.LeaseAcquireRoute(&route); err != nil {
		writeLeaseErr(w, err)
		return
	}
	now := g.modelNow()
	snap := g.leases.current(now)
	sel := selPool.Get().(*model.Selection)
	defer selPool.Put(sel)
	g.lock()
	offer, ue := g.eng.LeaseAcquire(now, route, key.allowed, snap.held, snap.until, sel)
	g.unlock()
	if ue != nil {
		writeModelError(w, ue)
		return
	}
	cands := append([]model.Candidate(nil), sel.Candidates...)
	owner, err := newOwner()
	if err != nil {
		g.writeLeaseStoreDown(w, err)
		return
	}
	busy := 0
	for _, cand := range cands {
		l, res, err := g.leases.arb.Acquire(r.Context(), store.AcquireRequest{Owner: owner, APIKeyID: key.id, Provider: cand.Provider,
			Connection: cand.Connection, Model: route.Model, TTL: time.Duration(c.TTLMs) * time.Millisecond})
		var lc *store.LeaseConflict
		switch {
		case err == nil:
			g.leases.put(l)
			v := viewOf(l, string(res))
			v.Owner = owner
			writeJSON(w, http.StatusOK, v)
			return
		case errors.As(err, &lc):
			// Another replica (or request) took it between our copy and
			// the arbiter: the next candidate.
			busy++
			if lc.Kind == store.ConnectionBusy {
				offer.NoteExpiry(model.TimeOf(lc.ExpiresAt))
			}
		default:
			g.writeLeaseStoreDown(w, err)
			return
		}
	}
	ra := model.LeaseRetryAfterSeconds(g.modelNow(), offer.Earliest)
	w.Header().Set("Retry-After", strconv.FormatInt(ra, 10))
	writeJSON(w, http.StatusTooManyRequests, leaseCapacityBody{
		State:         model.LeaseWaitingState,
		Error:         apiError{Type: model.LeaseErrorType, Code: string(model.CodeLeaseCapacity), Message: "every eligible connection is held by another lease; retry after the Retry-After seconds"},
		Reason:        model.LeaseNoFreeEligibleReason,
		RetryAfter:    ra,
		EligibleCount: offer.Eligible,
		FreeCount:     offer.Free - busy,
	})
}

// leaseOwnerAction runs renew, release and status. The arbiter decides;
// when it refuses, the fence (docs/leases.md order) names why, from the
// owner's active lease.
func (g *Gateway) leaseOwnerAction(w http.ResponseWriter, r *http.Request, key *clientKey, c leaseCall) {
	ctx := r.Context()
	arb := g.leases.arb
	claim := model.LeaseClaim{OwnerHash: hashOwner(c.Owner), Generation: c.Generation, APIKeyID: key.id}
	var l store.Lease
	var res string
	var err error
	switch c.Action {
	case "renew":
		l, err = arb.Renew(ctx, c.Owner, key.id, c.Generation, time.Duration(c.TTLMs)*time.Millisecond)
		res = string(store.LeaseRenewed)
	case "release":
		l, err = arb.Release(ctx, c.Owner, key.id, c.Generation, c.Reason)
		res = string(store.LeaseReleasedRes)
	case "status":
		var ok bool
		if l, ok, err = arb.Status(ctx, c.Owner); err == nil {
			f := model.CheckFence(g.modelNow(), nil, &claim)
			if ok {
				row := rowOf(l)
				f = model.CheckFence(g.modelNow(), &row, &claim)
			} else {
				g.leases.drop(claim.OwnerHash)
			}
			if f != model.FenceValid {
				writeLeaseError(w, f.Code(), fenceMessage(f))
				return
			}
		}
	}
	if err == nil {
		if l.State == store.LeaseActive {
			g.leases.put(l)
		} else {
			g.leases.drop(claim.OwnerHash)
		}
		writeJSON(w, http.StatusOK, viewOf(l, res))
		return
	}
	if !errors.Is(err, store.ErrLeaseStale) {
		g.writeLeaseStoreDown(w, err)
		return
	}
	_, f, verr := g.leases.verify(ctx, c.Owner, &claim)
	if verr != nil {
		g.writeLeaseStoreDown(w, verr)
		return
	}
	if f == model.FenceValid {
		f = model.FenceStale // it changed between the two reads
	}
	writeLeaseError(w, f.Code(), fenceMessage(f))
}

func fenceMessage(f model.Fence) string {
	switch f {
	case model.FenceRequired:
		return "no active lease for this owner; acquire one"
	case model.FenceStale:
		return "the lease generation is not the current one"
	case model.FenceAuthorizationMismatch:
		return "this lease belongs to another API key"
	case model.FenceConnectionMismatch:
		return "the request would use a connection the lease does not hold"
	}
	return "lease fence refused"
}
