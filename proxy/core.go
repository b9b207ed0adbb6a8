package proxy

import (
	"context"
	"errors"
	"slices"
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
	g.resizePools(s.RequestQueue.GlobalMaxConcurrent)
	g.log.Info("resilience settings changed", "patch", text)
	return s, nil
}

// attemptReader is a store that can read the request log back (docs/store.md#request-log).
type attemptReader interface {
	RecentAttempts(ctx context.Context, q store.LogQuery) ([]store.LogRecord, error)
}

// Now is the gateway's clock.
func (g *Gateway) Now() time.Time { return g.now() }

// KeepsRequestLog reports whether the store can read the request log back.
func (g *Gateway) KeepsRequestLog() bool {
	_, ok := g.store.(attemptReader)
	return ok
}

// RequestLog reads the request log records q matches, newest first; a
// failed read is logged here.
func (g *Gateway) RequestLog(ctx context.Context, q store.LogQuery) ([]store.LogRecord, error) {
	rd, ok := g.store.(attemptReader)
	if !ok {
		return nil, errors.New("the store keeps no request log")
	}
	recs, err := rd.RecentAttempts(ctx, q)
	if err != nil {
		g.log.Warn("reading the request log failed", "err", err)
	}
	return recs, err
}

// RateLimits is every connection's admission-queue status
// (docs/admission.md): the protection flag, whether the queue covers it,
// its limits and current pause, and its concurrency gate's load.
func (g *Gateway) RateLimits() []mgmt.RateLimit {
	load := map[model.ConnRef][2]int{}
	g.gate.snapshot(func(p, c string, inUse, queued int) {
		load[model.ConnRef{Provider: p, Connection: c}] = [2]int{inUse, queued}
	})
	s := g.settings()
	now := g.now().UnixMilli()
	out := []mgmt.RateLimit{}
	g.provMu.RLock()
	for _, pid := range g.provOrder {
		p := g.provs[pid]
		for _, c := range p.cfg.Connections {
			ref := model.ConnRef{Provider: pid, Connection: c.ID}
			o := p.conns[c.ID].cfg.RateLimitOverrides
			g.lock()
			prot, queued, _ := g.eng.RateLimitProtection(ref)
			g.unlock()
			mw, _ := s.QueueBudgets(model.ConnOverrides{MaxWaitMs: model.Millis(o.MaxWaitMs), ExecutionMaxWaitMs: model.Millis(o.ExecutionMaxWaitMs)})
			row := mgmt.RateLimit{ConnectionID: ref.String(), Provider: pid, Name: c.ID, RateLimitProtection: prot, Enabled: queued,
				RPM: o.RPM, MinTimeMs: int64(o.MinTimeMs), MaxWaitMs: mw, Running: load[ref][0], Queued: load[ref][1]}
			if until := g.pace.pausedUntil(ref, ""); until > now {
				row.PausedMs = until - now
			}
			out = append(out, row)
		}
	}
	g.provMu.RUnlock()
	return out
}

// HasConnection reports whether the config names connection ref.
func (g *Gateway) HasConnection(ref model.ConnRef) bool {
	p := g.provider(ref.Provider)
	return p != nil && p.conns[ref.Connection] != nil
}

// SetRateLimitProtection turns ref's rateLimitProtection on or off and
// answers the flag and whether the admission queue covers ref now. The
// choice lives in the connection's model state: persisted and shared with
// other replicas like a cooldown, so it survives a restart (docs/admission.md).
func (g *Gateway) SetRateLimitProtection(ref model.ConnRef, on bool) (protection, queued bool, err error) {
	g.lock()
	defer g.unlock()
	err = g.eng.SetRateLimitProtection(g.modelNow(), ref, on)
	protection, queued, _ = g.eng.RateLimitProtection(ref)
	return protection, queued, err
}

// preview asks the model what route would pick at now, holding out
// the connections leased to someone, as a request without a lease sees
// them. It changes no state (model.Engine.Preview). The caller holds g.lock.
func (g *Gateway) preview(now model.Time, route model.Route, held []model.ConnRef, until []model.Time, sel *model.Selection) mgmt.RoutePreview {
	req := model.Request{Route: route, Held: held, HeldUntil: until}
	g.eng.Preview(now, &req, sel)
	st, _ := g.eng.Strategy(route)
	out := mgmt.RoutePreview{Model: route.Name, Combo: route.Combo, Provider: route.Provider, Strategy: st.String(),
		OrderVaries: st == model.Random || st == model.Weighted || st == model.P2C,
		Candidates:  slices.Clone(sel.Candidates), Excluded: slices.Clone(sel.Excluded)}
	if out.Candidates == nil {
		out.Candidates = []model.Candidate{}
	}
	if out.Excluded == nil {
		out.Excluded = []model.Excluded{}
	}
	if sel.Earliest != 0 {
		out.EarliestMs = max(sel.Earliest.Sub(now), 0)
	}
	return out
}

// Combos is every combo with what it would pick now.
func (g *Gateway) Combos() []mgmt.Combo {
	now := g.modelNow()
	held, until := g.leases.heldUntilFor(now)
	out := []mgmt.Combo{}
	var sel model.Selection
	g.lock()
	defer g.unlock()
	for _, c := range g.eng.Topology().Combos {
		route, err := g.eng.Resolve(c.ID)
		if err != nil {
			continue
		}
		targets := c.Targets
		if targets == nil {
			targets = []model.ComboTarget{}
		}
		out = append(out, mgmt.Combo{ID: c.ID, Mode: c.Mode, Targets: targets, RoutePreview: g.preview(now, route, held, until, &sel)})
	}
	return out
}

// RoutePreview is what a request for name would pick now, or the model's
// error resolving name.
func (g *Gateway) RoutePreview(name string) (mgmt.RoutePreview, error) {
	now := g.modelNow()
	held, until := g.leases.heldUntilFor(now)
	var sel model.Selection
	g.lock()
	defer g.unlock()
	route, err := g.eng.Resolve(name)
	if err != nil {
		return mgmt.RoutePreview{}, err
	}
	return g.preview(now, route, held, until, &sel), nil
}

// Leases is the active exclusive session leases; a failed read is logged
// here.
func (g *Gateway) Leases(ctx context.Context) ([]store.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ls, err := g.leases.arb.Active(ctx)
	if err != nil {
		g.log.Warn("listing leases failed", "err", err)
	}
	return ls, err
}

// Providers is every provider's view, in config order.
func (g *Gateway) Providers() []mgmt.ProviderView {
	g.provMu.RLock()
	defer g.provMu.RUnlock()
	out := []mgmt.ProviderView{}
	for _, id := range g.provOrder {
		out = append(out, g.providerView(g.provs[id], nil))
	}
	return out
}

// Provider is provider id's view; ok is false when the config names no
// such provider.
func (g *Gateway) Provider(id string) (mgmt.ProviderView, bool) {
	g.provMu.RLock()
	defer g.provMu.RUnlock()
	p := g.provs[id]
	if p == nil {
		return mgmt.ProviderView{}, false
	}
	return g.providerView(p, nil), true
}

// PutProvider checks patch against provider id's config and, when it
// holds, puts the patched config in place (replaceProvider) under provMu,
// so two PUTs never patch the same old config.
func (g *Gateway) PutProvider(id string, patch *mgmt.ProviderPatch) (mgmt.ProviderView, error) {
	g.provMu.Lock()
	cur := g.provs[id]
	if cur == nil {
		g.provMu.Unlock()
		return mgmt.ProviderView{}, mgmt.ErrNoProvider
	}
	next, changed, problem := applyProviderPatch(patch, id, cur.cfg)
	if problem != "" {
		g.provMu.Unlock()
		return mgmt.ProviderView{}, errors.New(problem)
	}
	return g.replaceProvider(cur, next, changed), nil // unlocks provMu
}

// TestProvider runs the connection test of provider id (testProvider).
func (g *Gateway) TestProvider(ctx context.Context, id string) ([]mgmt.TestResult, bool) {
	p := g.provider(id)
	if p == nil {
		return nil, false
	}
	return g.testProvider(ctx, p), true
}

var _ mgmt.LeaseCore = (*Gateway)(nil)

// AcquireLease picks the connection: among the key's allowedConnections
// that serve the model and are eligible by the model's selection (breaker,
// cooldown, lockout, terminal) and not held by another owner, in the
// provider's strategy order (model.Engine.LeaseAcquire); the arbiter has
// the last word on each.
func (g *Gateway) AcquireLease(ctx context.Context, key mgmt.LeaseKey, c mgmt.LeaseCall) (mgmt.LeaseView, error) {
	g.lock()
	route, err := g.eng.Resolve(c.Model)
	g.unlock()
	if err == nil {
		err = model.LeaseAcquireRoute(&route)
	}
	if err != nil {
		return mgmt.LeaseView{}, err
	}
	now := g.modelNow()
	snap := g.leases.current(now)
	sel := selPool.Get().(*model.Selection)
	defer selPool.Put(sel)
	g.lock()
	offer, ue := g.eng.LeaseAcquire(now, route, key.Allowed, snap.held, snap.until, sel)
	g.unlock()
	if ue != nil {
		return mgmt.LeaseView{}, ue
	}
	cands := append([]model.Candidate(nil), sel.Candidates...)
	owner, err := newOwner()
	if err != nil {
		return mgmt.LeaseView{}, g.leaseStoreDown(err)
	}
	busy := 0
	for _, cand := range cands {
		l, res, err := g.leases.arb.Acquire(ctx, store.AcquireRequest{Owner: owner, APIKeyID: key.ID, Provider: cand.Provider,
			Connection: cand.Connection, Model: route.Model, TTL: time.Duration(c.TTLMs) * time.Millisecond})
		var lc *store.LeaseConflict
		switch {
		case err == nil:
			g.leases.put(l)
			v := mgmt.ViewOf(l, string(res))
			v.Owner = owner
			return v, nil
		case errors.As(err, &lc):
			// Another replica (or request) took it between our copy and
			// the arbiter: the next candidate.
			busy++
			if lc.Kind == store.ConnectionBusy {
				offer.NoteExpiry(model.TimeOf(lc.ExpiresAt))
			}
		default:
			return mgmt.LeaseView{}, g.leaseStoreDown(err)
		}
	}
	return mgmt.LeaseView{}, &mgmt.LeaseCapacity{RetryAfter: model.LeaseRetryAfterSeconds(g.modelNow(), offer.Earliest),
		Eligible: offer.Eligible, Free: offer.Free - busy}
}

// LeaseAction runs renew, release and status. The arbiter decides; when
// it refuses, the fence (docs/leases.md order) names why, from the
// owner's active lease.
func (g *Gateway) LeaseAction(ctx context.Context, key mgmt.LeaseKey, c mgmt.LeaseCall) (mgmt.LeaseView, error) {
	claim := model.LeaseClaim{OwnerHash: hashOwner(c.Owner), Generation: c.Generation, APIKeyID: key.ID}
	l, res, refused, err := g.leaseCall(ctx, key, c, &claim)
	if refused != nil {
		return mgmt.LeaseView{}, refused
	}
	if err == nil {
		if l.State == store.LeaseActive {
			g.leases.put(l)
		} else {
			g.leases.drop(claim.OwnerHash)
		}
		return mgmt.ViewOf(l, res), nil
	}
	if !errors.Is(err, store.ErrLeaseStale) {
		return mgmt.LeaseView{}, g.leaseStoreDown(err)
	}
	_, f, verr := g.leases.verify(ctx, c.Owner, &claim)
	if verr != nil {
		return mgmt.LeaseView{}, g.leaseStoreDown(verr)
	}
	if f == model.FenceValid {
		f = model.FenceStale // it changed between the two reads
	}
	return mgmt.LeaseView{}, fenceError(f)
}
