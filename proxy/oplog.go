package proxy

import (
	"encoding/json"

	"github.com/breakwater-gw/breakwater/store"
)

// logOperator records an operator action that changed state in the request
// log (store.OperatorAction), beside the attempts it explains: an incident
// exported from the log replays it at its instant. params, when not nil, is
// kept as JSON; it never holds a credential.
func (g *Gateway) logOperator(action, provider, connection, model string, params any) {
	l, ok := g.store.(attemptLogger)
	if !ok {
		return
	}
	rec := store.LogRecord{Time: g.now(), Provider: provider, Connection: connection, Model: model,
		ErrorType: store.OperatorAction, Reason: action}
	if params != nil {
		if b, err := json.Marshal(params); err == nil {
			rec.ErrorBody = string(b)
		}
	}
	l.LogAttempt(rec)
}
