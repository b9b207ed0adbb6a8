package mgmt

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/apierr"
	"github.com/breakwater-gw/breakwater/store"
)

// POST /api/v1/session-leases (docs/leases.md): client key auth, JSON
// actions acquire / renew / release / status. The gateway authenticates
// the key and talks to the arbiter (LeaseCore); this side checks the
// request and writes the answer.

// LeaseCore is the gateway's side of the lease API. Its errors are a
// *model.Error (a route the model refuses), a *model.LeaseError, a
// *LeaseCapacity or ErrLeaseStoreDown.
type LeaseCore interface {
	// AcquireLease leases one of key's connections serving c.Model.
	AcquireLease(ctx context.Context, key LeaseKey, c LeaseCall) (LeaseView, error)
	// LeaseAction runs renew, release or status for c's owner.
	LeaseAction(ctx context.Context, key LeaseKey, c LeaseCall) (LeaseView, error)
}

// LeaseKey is the client key a lease request came with.
type LeaseKey struct {
	ID      string
	Allowed []model.ConnRef
	// Managed: the key has the lease scope and allowedConnections.
	Managed bool
}

// Leases serves POST /api/v1/session-leases over a LeaseCore.
type Leases struct {
	Core LeaseCore
	// Key authenticates the client key: ok false for a missing or wrong
	// one, a nil key when the gateway has no client keys.
	Key func(r *http.Request) (key *LeaseKey, ok bool)
	// ReadBody reads the body under the lease bounds, answering a
	// refused one itself.
	ReadBody BodyReader
	// ModelError writes the model's typed answer (docs/errors.md).
	ModelError func(w http.ResponseWriter, e *model.Error) int
}

// ErrLeaseStoreDown is the arbiter failing: the lease API fails closed
// (docs/leases.md#the-database-arbitrates). The cause stays in the log.
var ErrLeaseStoreDown = errors.New("the lease store is unavailable")

// LeaseCapacity is an acquire every eligible connection of which is held
// by another lease: a 429 with Retry-After.
type LeaseCapacity struct {
	RetryAfter int64
	Eligible   int
	Free       int
}

func (e *LeaseCapacity) Error() string { return string(model.CodeLeaseCapacity) }

// LeaseView is a lease as the API shows it. Owner is set only in the
// acquire answer: the token is returned once and never again.
type LeaseView struct {
	Owner      string `json:"owner,omitempty"`
	Generation int64  `json:"generation"`
	Connection string `json:"connection"`
	Model      string `json:"model,omitempty"`
	State      string `json:"state"`
	Result     string `json:"result,omitempty"`
	ExpiresAt  string `json:"expiresAt"`
	TTLMs      int64  `json:"ttlMs"`
}

// ViewOf is l as the API shows it, with the action's result res.
func ViewOf(l store.Lease, res string) LeaseView {
	return LeaseView{Generation: l.Generation, Connection: l.Provider + "/" + l.Connection, Model: l.Model,
		State: string(l.State), Result: res, ExpiresAt: l.ExpiresAt.UTC().Format(time.RFC3339Nano), TTLMs: l.TTL().Milliseconds()}
}

// leaseCapacityBody is the 429 answer: no owner and no connection id in it.
type leaseCapacityBody struct {
	State         string       `json:"state"`
	Error         apierr.Error `json:"error"`
	Reason        string       `json:"reason"`
	RetryAfter    int64        `json:"retryAfter"`
	EligibleCount int          `json:"eligibleCount"`
	FreeCount     int          `json:"freeCount"`
}

// WriteLeaseError writes a lease error with code's status.
func WriteLeaseError(w http.ResponseWriter, code model.Code, msg string) int {
	status := model.LeaseHTTPStatus(code)
	apierr.WriteJSON(w, status, apierr.Body{Error: apierr.Error{Message: msg, Type: model.LeaseErrorType, Code: string(code)}})
	return status
}

// WriteLeaseErr writes err: a *model.LeaseError with its code, anything
// else as an invalid lease context.
func WriteLeaseErr(w http.ResponseWriter, err error) int {
	var le *model.LeaseError
	if errors.As(err, &le) {
		return WriteLeaseError(w, le.Code, le.Message)
	}
	return WriteLeaseError(w, model.CodeLeaseContextInvalid, err.Error())
}

// WriteLeaseStoreDown answers a failed arbiter.
func WriteLeaseStoreDown(w http.ResponseWriter) int {
	return WriteLeaseError(w, model.CodeLeaseStoreUnavailable, "the lease store is unavailable; try again shortly")
}

// ServeHTTP checks the key, the media type and the body, then runs the
// action.
func (l *Leases) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, ok := l.Key(r)
	if !ok {
		apierr.Write(w, http.StatusUnauthorized, "invalid_api_key", "missing or invalid API key (Authorization: Bearer <key>)")
		return
	}
	if key == nil || !key.Managed {
		WriteLeaseError(w, model.CodeLeaseKeyConfig, fmt.Sprintf("this API key cannot hold leases: it needs scope %q and a non-empty allowedConnections", model.LeaseScope))
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		WriteLeaseError(w, model.CodeLeaseUnsupportedMedia, "the body must be JSON (Content-Type: application/json)")
		return
	}
	body, ok := l.ReadBody(w, r)
	if !ok {
		return
	}
	call, err := DecodeLeaseRequest(body, r.Header)
	if err != nil {
		WriteLeaseErr(w, err)
		return
	}
	var v LeaseView
	if call.Action == "acquire" {
		v, err = l.Core.AcquireLease(r.Context(), *key, call)
	} else {
		v, err = l.Core.LeaseAction(r.Context(), *key, call)
	}
	if err != nil {
		l.writeErr(w, err)
		return
	}
	apierr.WriteJSON(w, http.StatusOK, v)
}

// writeErr answers one of LeaseCore's errors.
func (l *Leases) writeErr(w http.ResponseWriter, err error) {
	var me *model.Error
	var full *LeaseCapacity
	switch {
	case errors.As(err, &me):
		l.ModelError(w, me)
	case errors.As(err, &full):
		w.Header().Set("Retry-After", strconv.FormatInt(full.RetryAfter, 10))
		apierr.WriteJSON(w, http.StatusTooManyRequests, leaseCapacityBody{
			State:         model.LeaseWaitingState,
			Error:         apierr.Error{Type: model.LeaseErrorType, Code: string(model.CodeLeaseCapacity), Message: "every eligible connection is held by another lease; retry after the Retry-After seconds"},
			Reason:        model.LeaseNoFreeEligibleReason,
			RetryAfter:    full.RetryAfter,
			EligibleCount: full.Eligible,
			FreeCount:     full.Free,
		})
	case errors.Is(err, ErrLeaseStoreDown):
		WriteLeaseStoreDown(w)
	default:
		WriteLeaseErr(w, err)
	}
}
