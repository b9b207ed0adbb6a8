package replay

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/sim"
)

// limitResetHandler answers the spend wall's usage and reset endpoints
// (docs/spendwall.md, wire names docs/spendwall.md#wire-names; proxy/spendwall.go callLimitReset) as the
// scenario's `spendWall.resetAnswer` says, per connection (the API key
// names it), and passes everything else to the fault upstream. It is the
// replay's counterpart of sim/spendwall.go: the simulator hands the model
// the answer's outcome directly; the gateway derives it from two calls, so
// each outcome is written as the calls that make the gateway read it:
//
//	reset, not_limited  usage {arm: reset, available: true}, reset {result}
//	already_used        usage {arm: reset, available: false}
//	not_offered         usage {arm: none}
//	failed / no answer  usage 500
//
// next_available_at is the call's instant plus nextAvailableIn (scaled), as
// the simulator computes it. faults.SpendWall is not used: its answers are
// the same for every connection, and its usage block carries no
// next_available_at (already_used / not_offered with a next time). The
// chat requests themselves (the wall's 429s, the lane) come from the
// file's `upstream:` rules, as in the simulator.
type limitResetHandler struct {
	inner   http.Handler
	answers map[string]sim.LimitResetAnswer // by connection id (API key)
	now     func() time.Time
}

// newLimitResetHandler returns the handler when a connection of sc asks for
// limit resets; nil otherwise. Connection ids are the fault upstream's
// names for connections, and must be unique across providers for the
// answers to be told apart (Run warns otherwise).
func newLimitResetHandler(sc *sim.Scenario, inner http.Handler, now func() time.Time) http.Handler {
	h := &limitResetHandler{inner: inner, answers: map[string]sim.LimitResetAnswer{}, now: now}
	any := false
	for _, p := range sc.Topology.Providers {
		for _, c := range p.Connections {
			if !c.SpendWall.LimitReset {
				continue
			}
			any = true
			if a, ok := sc.LimitResets[p.ID+"/"+c.ID]; ok {
				h.answers[c.ID] = a
			}
		}
	}
	if !any {
		return nil
	}
	return h
}

func (h *limitResetHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	usage := r.Method == http.MethodGet && strings.HasSuffix(path, "/api/oauth/usage")
	reset := r.Method == http.MethodPost && strings.Contains(path, "/api/organizations/") && strings.HasSuffix(path, "/reset_rate_limits")
	if !usage && !reset {
		h.inner.ServeHTTP(w, r)
		return
	}
	conn := strings.TrimSpace(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	ans, ok := h.answers[conn]
	if !ok || ans.Outcome == model.LimitResetFailed {
		writeJSONStatus(w, http.StatusInternalServerError, map[string]any{"error": "reset failed"})
		return
	}
	var next any
	if ans.NextAvailableIn > 0 {
		next = h.now().Add(ans.NextAvailableIn).UTC().Format(time.RFC3339Nano)
	}
	if usage {
		block := map[string]any{"arm": "reset", "available": true}
		switch ans.Outcome {
		case model.LimitResetAlreadyUsed:
			block["available"] = false
		case model.LimitResetNotOffered:
			block["arm"], block["available"] = "none", false
		}
		if next != nil && (ans.Outcome == model.LimitResetAlreadyUsed || ans.Outcome == model.LimitResetNotOffered) {
			block["next_available_at"] = next
		}
		writeJSONStatus(w, http.StatusOK, map[string]any{"juniper_tide": block})
		return
	}
	out := map[string]any{"result": ans.Outcome.String()}
	if next != nil {
		out["next_available_at"] = next
	}
	writeJSONStatus(w, http.StatusOK, out)
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
