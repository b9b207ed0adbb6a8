package proxy

import (
	"context"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/model/settings"
	"github.com/breakwater-gw/breakwater/proxy/mgmt"
	"github.com/breakwater-gw/breakwater/store"
)

// The gateway's side of the management API (mgmt.Core): each method takes
// the engine's lock around one model call at the gateway's clock; the
// handlers in proxy/mgmt decode, check and answer.
var _ mgmt.Core = (*Gateway)(nil)

// Health is the state GET /api/monitoring/health shows; the engine's
// reads refresh expired state.
func (g *Gateway) Health() mgmt.Health {
	now := g.modelNow()
	g.lock()
	h := mgmt.Health{Time: now.Std(), Providers: g.eng.Providers(now), Connections: g.eng.Connections(now, ""),
		SessionPins: len(g.eng.Pins(now))}
	g.unlock()
	h.Store = store.Health{Kind: "memory", Up: true}
	if sh, ok := g.store.(interface{ Health() store.Health }); ok {
		h.Store = sh.Health()
	}
	h.Draining = g.draining.Load()
	g.gate.snapshot(func(p, c string, inUse, queued int) {
		h.Queues = append(h.Queues, mgmt.Queue{Provider: p, Connection: c, InFlight: inUse, Queued: queued})
	})
	return h
}

// HasProvider reports whether the config names provider id.
func (g *Gateway) HasProvider(id string) bool { return g.provider(id) != nil }

// Connections lists the connections' state, of one provider when
// provider is not "".
func (g *Gateway) Connections(provider string) []model.ConnectionView {
	now := g.modelNow()
	g.lock()
	defer g.unlock()
	return g.eng.Connections(now, provider)
}

// Lockouts lists every model lockout.
func (g *Gateway) Lockouts() []model.LockoutView {
	now := g.modelNow()
	g.lock()
	defer g.unlock()
	return g.eng.Lockouts(now)
}

// ResetBreakers closes provider's breaker, or every one for "".
func (g *Gateway) ResetBreakers(provider string) (int, error) {
	g.lock()
	defer g.unlock()
	return g.eng.ResetBreakers(g.modelNow(), provider)
}

// ClearCooldowns ends the cooldowns of refs, or of every connection (of
// provider, when not "") when all.
func (g *Gateway) ClearCooldowns(refs []model.ConnRef, all bool, provider string) (model.ClearResult, error) {
	g.lock()
	defer g.unlock()
	return g.eng.ClearCooldowns(g.modelNow(), refs, all, provider)
}

// ClearLockout ends the lockout of modelID on ref.
func (g *Gateway) ClearLockout(ref model.ConnRef, modelID string) (int, error) {
	g.lock()
	defer g.unlock()
	return g.eng.ClearLockout(g.modelNow(), ref, modelID)
}

// ClearAllLockouts ends every model lockout.
func (g *Gateway) ClearAllLockouts() int {
	g.lock()
	defer g.unlock()
	return g.eng.ClearAllLockouts(g.modelNow())
}

// ResetConnection starts ref's state over.
func (g *Gateway) ResetConnection(ref model.ConnRef) (bool, error) {
	g.lock()
	defer g.unlock()
	return g.eng.ResetConnection(g.modelNow(), ref)
}

// LogOperator records an operator action in the request log (logOperator).
func (g *Gateway) LogOperator(action, provider, connection, modelID string, params any) {
	g.logOperator(action, provider, connection, modelID, params)
}

// Settings is the resilience settings as they apply and their layers.
func (g *Gateway) Settings() mgmt.Settings {
	rt := g.rt.Load()
	g.setMu.Lock()
	saved := g.saved
	g.setMu.Unlock()
	return mgmt.Settings{Settings: rt.s, Sources: rt.src, Saved: saved, Overrides: g.savedOverrides()}
}

// PatchSettings resolves patch over the saved layer with the file and env
// layers and only then persists and applies it: the engine, the admission
// gate and the settings every request reads.
func (g *Gateway) PatchSettings(ctx context.Context, patch settings.Layer, text string) (model.Settings, error) {
	g.setMu.Lock()
	defer g.setMu.Unlock()
	next, s, src, err := settings.ApplyPatch(g.lower, g.saved, patch)
	if err == nil {
		err = g.checkFallbackTarget(patch, s)
	}
	if err != nil {
		return s, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := g.store.SaveSettings(ctx, next); err != nil {
		g.log.Error("saving settings failed", "err", err)
		return s, mgmt.ErrSettingsNotSaved
	}
	g.saved = next
	g.rt.Store(&runtimeSettings{s: s, src: src})
	g.lock()
	g.eng.UpdateSettings(g.modelNow(), s)
	g.unlock()
	g.gate.setGlobalCap(s.RequestQueue.GlobalMaxConcurrent)
	g.log.Info("resilience settings changed", "patch", text)
	return s, nil
}
