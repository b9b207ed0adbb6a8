package mgmt

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/model"
)

// leaseCore answers every lease call with err and counts the calls.
type leaseCore struct {
	err   error
	calls int
}

func (f *leaseCore) AcquireLease(context.Context, LeaseKey, LeaseCall) (LeaseView, error) {
	f.calls++
	return LeaseView{}, f.err
}

func (f *leaseCore) LeaseAction(context.Context, LeaseKey, LeaseCall) (LeaseView, error) {
	f.calls++
	return LeaseView{}, f.err
}

func postLease(core LeaseCore, key *LeaseKey, body string) *httptest.ResponseRecorder {
	l := &Leases{Core: core,
		Key:        func(*http.Request) (*LeaseKey, bool) { return key, true },
		ReadBody:   newAPI(nil).ReadBody,
		ModelError: func(w http.ResponseWriter, e *model.Error) int { w.WriteHeader(599); return 599 }}
	req := httptest.NewRequest(http.MethodPost, "/api/v1/session-leases", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	l.ServeHTTP(rec, req)
	return rec
}

// TestLeaseKeyWithoutScopeNeverReachesTheCore: a key that cannot hold
// leases is refused with LEASE_KEY_CONFIG before any arbiter call.
func TestLeaseKeyWithoutScopeNeverReachesTheCore(t *testing.T) {
	core := &leaseCore{}
	rec := postLease(core, &LeaseKey{ID: "k"}, `{"action":"acquire","model":"p/m"}`)
	if !strings.Contains(rec.Body.String(), string(model.CodeLeaseKeyConfig)) || core.calls != 0 {
		t.Fatalf("got %d %s after %d core calls, want %s and none", rec.Code, rec.Body.String(), core.calls, model.CodeLeaseKeyConfig)
	}
}

// TestLeaseCoreErrorsAnswer: each LeaseCore error has its answer: the
// model's own, the 429 with Retry-After, the fail-closed store error and
// a lease error's code.
func TestLeaseCoreErrorsAnswer(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
		text string
	}{
		{&model.Error{Code: model.CodeModelNotFound}, 599, ""},
		{&LeaseCapacity{RetryAfter: 7, Eligible: 2}, http.StatusTooManyRequests, `"eligibleCount":2`},
		{ErrLeaseStoreDown, model.LeaseHTTPStatus(model.CodeLeaseStoreUnavailable), string(model.CodeLeaseStoreUnavailable)},
		{&model.LeaseError{Code: model.CodeLeaseFenceStale, Message: "m"}, model.LeaseHTTPStatus(model.CodeLeaseFenceStale), string(model.CodeLeaseFenceStale)},
		{errors.New("x"), model.LeaseHTTPStatus(model.CodeLeaseContextInvalid), string(model.CodeLeaseContextInvalid)},
	} {
		rec := postLease(&leaseCore{err: tc.err}, &LeaseKey{ID: "k", Managed: true}, `{"action":"acquire","model":"p/m"}`)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.text) {
			t.Errorf("%v: got %d %s, want %d with %s", tc.err, rec.Code, rec.Body.String(), tc.code, tc.text)
		}
		if _, ok := tc.err.(*LeaseCapacity); ok && rec.Header().Get("Retry-After") != "7" {
			t.Errorf("the 429 has Retry-After %q, want 7", rec.Header().Get("Retry-After"))
		}
	}
}
