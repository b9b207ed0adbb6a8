package sim

import (
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Observer receives what a run decided, so another shell can be compared
// with the simulator decision by decision (replay's sim↔gateway conformance
// test, `breakwater replay -compare`). Either func may be nil. Observing
// does not change any decision; the `at:` reads it adds refresh state
// lazily, which is equivalent to having ticked, but they add change records
// to the trace, so a trace hash taken with an Observer is not the canonical
// one.
type Observer struct {
	// Request is called once per finished request, in finishing order.
	Request func(RequestObservation)
	// State is called at every `at:` expect with the full refreshed state,
	// read as GET /api/monitoring/health reads it.
	State func(StateObservation)
}

// RequestObservation is one request as its client saw it.
type RequestObservation struct {
	// N is the request's number (1-based, in sending order).
	N int `json:"n"`
	// SentAt and DoneAt are offsets from the scenario start.
	SentAt time.Duration `json:"sentAtNs"`
	DoneAt time.Duration `json:"doneAtNs"`
	Status int           `json:"status"`
	// ServedBy is the last connection attempted ("provider/connection"),
	// "" when no attempt was made.
	ServedBy string `json:"servedBy,omitempty"`
	Code     string `json:"code,omitempty"`
	Result   string `json:"result"`
	Attempts int    `json:"attempts"`
	// RetryAfterMs is the recovery time behind the client's Retry-After.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

// StateObservation is the state read at one `at:` expect.
type StateObservation struct {
	At          time.Duration          `json:"atNs"`
	Line        int                    `json:"line"`
	Providers   []model.ProviderView   `json:"providers"`
	Connections []model.ConnectionView `json:"connections"`
}

func (r *request) lastConnString() string {
	if !r.hasLast {
		return ""
	}
	return r.lastConn.String()
}
