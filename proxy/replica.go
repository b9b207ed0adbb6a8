package proxy

import (
	"github.com/breakwater-gw/breakwater/model/settings"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/store"
)

// replicaStore is a store shared with other gateway replicas (Postgres): it
// signals their changes, and ApplyRemote folds them into this engine.
type replicaStore interface {
	Updates() <-chan struct{}
	ApplyRemote(e *model.Engine, now model.Time) (store.RemoteResult, error)
}

// attemptLogger is a store that keeps the request log (docs/store.md#request-log).
type attemptLogger interface {
	LogAttempt(rec store.LogRecord)
}

// updates returns the store's replica signal, or nil (never fires) for a
// store that is not shared.
func (g *Gateway) updates() <-chan struct{} {
	if rs, ok := g.store.(replicaStore); ok {
		return rs.Updates()
	}
	return nil
}

// applyRemote folds other replicas' changes into the engine under its lock,
// and re-resolves the settings when another replica saved new ones. Our own
// pending records are handed to the store first so its merge sees them.
func (g *Gateway) applyRemote() {
	rs, ok := g.store.(replicaStore)
	if !ok {
		return
	}
	g.drainToStore()
	g.lock()
	res, err := rs.ApplyRemote(g.eng, g.modelNow())
	g.eng.RefreshCredentials() // another replica may have retired the key this one holds
	g.unlock()
	if err != nil {
		g.log.Warn("applying other replicas' changes failed; will retry on the next signal", "err", err)
		return
	}
	if res.Settings == nil {
		return
	}
	g.setMu.Lock()
	defer g.setMu.Unlock()
	layers := append(append([]settings.NamedLayer(nil), g.lower...), settings.NamedLayer{Name: "saved", Tree: res.Settings})
	s, src, err := settings.Resolve(layers...)
	if err != nil {
		g.log.Warn("another replica saved settings this one cannot use; keeping the current ones", "err", err)
		return
	}
	g.saved = res.Settings
	g.rt.Store(&runtimeSettings{s: s, src: src})
	g.lock()
	g.eng.UpdateSettings(g.modelNow(), s)
	g.unlock()
	g.gate.setGlobalCap(s.RequestQueue.GlobalMaxConcurrent)
	g.resizePools(s.RequestQueue.GlobalMaxConcurrent)
	g.log.Info("resilience settings changed by another replica")
}

// logAttempt hands one upstream attempt to the store's request log (docs/store.md#request-log): off the hot path (the store batches it), never a prompt or a
// completion, error bodies redacted by the store.
func (rs *reqState) logAttempt(a *model.Attempt, out *execResult, sent time.Time) {
	l, ok := rs.g.store.(attemptLogger)
	if !ok {
		return // only dispatched attempts get here: an execution-bound cut is logged too
	}
	rec := store.LogRecord{Time: sent, RequestID: rs.logID, Provider: a.Provider, Connection: a.Connection,
		Model: a.Model, Route: rs.req.Model, LatencyMs: rs.recordedAt.Sub(sent).Milliseconds(), ErrorType: out.outcome.Kind.String(), EgressIP: out.egressIP}
	if !rs.headersAt.IsZero() {
		rec.FirstByteMs = max(1, rs.headersAt.Sub(sent).Milliseconds())
	}
	switch out.outcome.Kind {
	case model.OutcomeResponse:
		rec.Status = out.outcome.Status
		if rec.Status < 400 {
			rec.ErrorType = ""
		}
	case model.OutcomeTransport:
		rec.ErrorType = out.outcome.Transport.String()
	}
	if out.delivered {
		rec.Status, rec.ErrorType = out.status, ""
	} else if out.committed && out.status != 0 && out.outcome.Kind != model.OutcomeResponse {
		// Content reached the client before the stream failed: the record
		// keeps the client's status with the error, so an export replays
		// the failure after content (never retried), not before it.
		rec.Status = out.status
	}
	if rs.lastV.Reason != model.ReasonNone {
		rec.Reason = rs.lastV.Reason.String()
	}
	rec.Reason = logResume(a, rec.Reason) // proxy/resume.go
	if out.local != nil {
		// A cut of the gateway's own (the execution bound, the request
		// deadline, the shutdown) is named by its code: recorded as a
		// neutral outcome, it would read as the client's abort.
		rec.ErrorType, rec.Reason = string(out.local.Code), string(out.local.Code)
	}
	if h := out.header; len(h) > 0 && rec.Status >= 400 {
		rec.Headers = map[string]string{}
		for k, v := range h {
			if len(v) > 0 {
				rec.Headers[strings.ToLower(k)] = v[0] // the store keeps only the classification-relevant ones
			}
		}
	}
	if rec.Status >= 400 {
		rec.ErrorBody = string(out.errBody)
	}
	l.LogAttempt(rec)
}
