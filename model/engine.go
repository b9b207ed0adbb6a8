package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Engine holds every resilience rule and all of their state. It is driven by
// its caller: every entry point takes now, nothing runs in the background,
// and every state change comes out as a Change record (see Changes).
//
// An Engine is not safe for concurrent use; the proxy serialises calls, the
// simulator is single-threaded.
type Engine struct {
	topo     Topology
	settings Settings
	bopts    *[3]breakerOpts // per Profile, resolved from settings (setSettings)
	clf      *Classifier
	rng      *rand.Rand

	provs    []provState
	provIdx  map[string]int
	combos   []comboState
	comboIdx map[string]int
	// routes remembers the names that resolved (Resolve): a route depends
	// on the topology alone, and a new topology is a new Engine value
	// (UpdateTopology), which starts it empty. At most maxRoutes: a
	// provider without a model list resolves any "provider/model" a client
	// sends.
	routes map[string]Route

	pins    map[pinKey]Pin
	changes []Change
	peek    bool // inside Preview: the strategies neither move a cursor nor draw (preview.go)
}

type provState struct {
	cfg           *ProviderConfig
	id            string
	typ           string
	profile       Profile
	perModelQuota bool
	egressBucket  bool
	dailyResetMin int
	models        map[string]bool // nil = any model
	families      map[string]string
	breaker       Breaker
	bopts         *breakerOpts // the profile's resolved breaker options (Engine.opts)
	window        Window
	conns         []connState
	connIdx       map[string]int
	order         []int32 // static order for fill-first / priority
	capped        int     // connections with a concurrency cap (connState.capped): 0 = none is ever full
	cursor        uint64  // round-robin cursor
}

type connState struct {
	id       string
	cfg      ConnectionConfig
	st       Conn
	locks    lockoutSet
	inflight int
	lane     LaneState // spend-wall lane (docs/spendwall.md): process memory, not in State
	// cred is the fingerprint of the key this process uses for the
	// connection, and retiredAs the terminal status that key was retired
	// with (StatusActive: not retired). Process memory: replicas may hold
	// different keys for one shared state (SetCredential).
	cred      string
	retiredAs ConnStatus
	// byModel counts inflight per model with a modelConcurrency cap
	// (nil until one is used).
	byModel map[string]int
}

// modelInflight adds d to model's count of attempts begun and not over.
func (c *connState) modelInflight(model string, d int) {
	if c.byModel == nil {
		c.byModel = map[string]int{}
	}
	if c.byModel[model] += d; c.byModel[model] <= 0 {
		delete(c.byModel, model)
	}
}

// refreshRetired re-reads whether this process's key is a retired one
// (the shared Retired list may have changed).
func (c *connState) refreshRetired() {
	c.retiredAs, _ = c.st.retired(c.cred)
}

type comboState struct {
	cfg    *ComboConfig
	tp     []int32 // provider index per target
	tc     []int32 // pinned connection index per target, -1 when none
	cursor uint64
	// stirs marks the targets whose listing moves a cursor or draws
	// (provState.stirsOrder, not for a pinned connection); stirring counts
	// them. lastStirring reads them on every lazy selection.
	stirs    []bool
	stirring int
	index    []int32 // 0, 1, … len(targets)-1: orderTargets' starting order
}

// Window is the provider-level window gate of the optional provider
// cooldown (docs/breaker.md#provider-cooldown): failures inside the trailing window, and the instant
// a trip's cooling ends.
type Window struct {
	Failures  []Time `json:"failures,omitempty"`
	CoolUntil Time   `json:"coolUntil,omitempty"` // cooling while now < CoolUntil
}

// NewEngine builds an engine over a topology. settings must already be
// normalised (Normalize); rng is the only source of randomness (random,
// weighted and p2c strategies), so a seeded source makes the engine
// deterministic.
func NewEngine(topo Topology, settings Settings, rng *rand.Rand) (*Engine, error) {
	if err := topo.validate(); err != nil {
		return nil, err
	}
	if rng == nil {
		rng = rand.New(rand.NewPCG(1, 2))
	}
	e := &Engine{topo: topo, rng: rng, provIdx: map[string]int{}, comboIdx: map[string]int{}}
	e.setSettings(settings)
	e.provs = make([]provState, len(e.topo.Providers))
	for i := range e.topo.Providers {
		e.provs[i] = e.newProvState(&e.topo.Providers[i])
		e.provIdx[e.topo.Providers[i].ID] = i
	}
	e.combos = make([]comboState, len(e.topo.Combos))
	for i := range e.topo.Combos {
		e.combos[i] = e.newComboState(&e.topo.Combos[i])
		e.comboIdx[e.topo.Combos[i].ID] = i
	}
	return e, nil
}

// newProvState is a provider's state at the engine's start: its options,
// quota shape, model sets and connection order.
func (e *Engine) newProvState(cfg *ProviderConfig) provState {
	typ := cfg.Type
	if typ == "" {
		typ = "openai"
	}
	p := provState{cfg: cfg, id: cfg.ID, typ: typ, profile: cfg.Profile, connIdx: map[string]int{}}
	p.bopts = e.profileOpts(p.profile)
	p.perModelQuota = perModelQuotaDefault(typ)
	if cfg.PerModelQuota != nil {
		p.perModelQuota = *cfg.PerModelQuota
	}
	p.egressBucket = EgressBucketed(typ)
	p.dailyResetMin, _ = parseDailyReset(cfg.DailyResetUTC)
	if len(cfg.Models) > 0 {
		p.models = map[string]bool{}
		for _, m := range cfg.Models {
			p.models[m] = true
		}
	}
	if len(cfg.QuotaFamilies) > 0 {
		p.families = map[string]string{}
		for _, m := range cfg.Models {
			p.families[m] = familyOf(cfg, m)
		}
	}
	p.conns = make([]connState, len(cfg.Connections))
	p.order = make([]int32, len(cfg.Connections))
	for j, c := range cfg.Connections {
		p.conns[j] = connState{id: c.ID, cfg: c}
		if p.conns[j].capped() {
			p.capped++
		}
		p.connIdx[c.ID] = j
		p.order[j] = int32(j)
	}
	if cfg.Strategy == Priority {
		slices.SortStableFunc(p.order, func(a, b int32) int { return cfg.Connections[a].Priority - cfg.Connections[b].Priority })
	}
	return p
}

// newComboState is a combo's index of its targets: provider and connection
// indexes, and which targets stir their provider's order (docs/selection.md).
func (e *Engine) newComboState(cfg *ComboConfig) comboState {
	n := len(cfg.Targets)
	cs := comboState{cfg: cfg, tp: make([]int32, n), tc: make([]int32, n), stirs: make([]bool, n), index: make([]int32, n)}
	for j, t := range cfg.Targets {
		cs.index[j] = int32(j)
		pi := e.provIdx[t.Provider]
		cs.tp[j] = int32(pi)
		cs.tc[j] = -1
		if t.Connection != "" {
			cs.tc[j] = int32(e.provs[pi].connIdx[t.Connection])
		} else if e.provs[pi].stirsOrder() {
			cs.stirs[j] = true
			cs.stirring++
		}
	}
	return cs
}

// Settings returns the settings the engine runs with.
func (e *Engine) Settings() Settings { return e.settings }

// Topology returns the topology the engine routes over.
func (e *Engine) Topology() *Topology { return &e.topo }

// EgressBucketed reports whether a provider of this type is limited per
// egress IP (docs/cooldowns.md#egress-buckets: the opencode free tier).
// Shells use it to learn egress IPs only where they matter.
func EgressBucketed(typ string) bool {
	return typ == "opencode"
}

func (e *Engine) setSettings(s Settings) {
	e.settings = s
	e.bopts = &[3]breakerOpts{}
	for prof := range Profile(len(e.bopts)) {
		e.bopts[prof] = resolveBreakerOpts(&e.settings, prof)
	}
	for i := range e.provs {
		e.provs[i].bopts = e.profileOpts(e.provs[i].profile)
	}
	e.clf = NewClassifier(&e.settings)
}

// UpdateSettings swaps the settings at run time (PATCH /api/resilience).
// Breaker options are read on every step, so an OPEN breaker's deadline and
// a DEGRADED breaker's thresholds are re-evaluated at once (
// docs/breaker.md#options).
func (e *Engine) UpdateSettings(now Time, s Settings) {
	e.Refresh(now) // what was due under the old settings happens first
	e.setSettings(s)
	for i := range e.provs {
		p := &e.provs[i]
		o := e.opts(p)
		if p.breaker.State == Degraded && p.breaker.FailureCount < o.p.DegradationThreshold {
			tr := p.breaker.moveTo(Closed, "settings-changed")
			e.emitBreaker(now, p, tr)
		}
		e.refreshProvider(now, p)
	}
}

// opts is the provider's breaker options under the current settings.
func (e *Engine) opts(p *provState) *breakerOpts { return p.bopts }

func (e *Engine) profileOpts(prof Profile) *breakerOpts {
	if int(prof) < len(e.bopts) {
		return &e.bopts[prof]
	}
	return &e.bopts[ProfileAPIKey] // byProfile: any other profile reads the API-key options
}

// refreshProvider applies the breaker's lazy transitions at now.
func (e *Engine) refreshProvider(now Time, p *provState) {
	o := e.opts(p)
	if !p.breaker.due(now, o) {
		return
	}
	if tr, changed := p.breaker.refresh(now, o); changed {
		e.emitBreaker(now, p, tr)
	}
}

// Attempt is one dispatch to one connection, from Begin to Record.
type Attempt struct {
	Provider   string `json:"provider"`
	Connection string `json:"connection"`
	Model      string `json:"model"`
	Started    Time   `json:"started"`
	Permit     Permit `json:"permit"`
	Target     int    `json:"target"` // combo target index, 0 for single-model routes
	// Limited: the connection goes through the admission-queue limiter
	// (docs/admission.md rateLimitProtection or the apikey safety net).
	Limited bool `json:"limited,omitempty"`
	// SlowLane: the connection's spend-wall lane is active; the shell adds
	// the lane request header (docs/spendwall.md).
	SlowLane bool `json:"slowLane,omitempty"`
	// Resume: the attempt continues a broken stream (model/resume.go): the
	// shell sends the conversation plus the delivered text as a prefilled
	// assistant turn in the provider's Continuation style, and streams only
	// the continuation into the client's stream.
	Resume       bool         `json:"resume,omitempty"`
	Continuation Continuation `json:"continuation,omitempty"`
	// Continued (set by the shell on a resume attempt): the continuation's
	// content reached the client.
	Continued bool `json:"continued,omitempty"`
	p, c      int32
	done      bool
	detached  bool // a spend-wall held copy: its in-flight count was already released
}

// Dispatch marks the instant the attempt really left for the upstream, after
// the shell's local admission queue. The thundering-herd guard compares this
// instant with the cooldown's, so time spent queued is not mistaken for
// concurrency with an earlier failure.
func (a *Attempt) Dispatch(now Time) { a.Started = now }

// Probe reports whether the attempt holds a HALF_OPEN probe permit.
func (a *Attempt) Probe() bool { return a.Permit.Probe != 0 }

// Begin starts an attempt on a candidate: it takes the breaker permit (the
// one try-acquire operation of docs/breaker.md#half-open) and counts the use.
// It fails with ErrCircuitOpen when the breaker admits nothing.
func (e *Engine) Begin(now Time, c Candidate) (Attempt, error) {
	var ok bool
	if c.p, c.c, ok = e.locate(c.p, c.c, c.Provider, c.Connection); !ok { // a candidate from before UpdateTopology finds its connection by id
		return Attempt{}, fmt.Errorf("begin: candidate %s/%s does not belong to this engine", c.Provider, c.Connection)
	}
	p := &e.provs[c.p]
	e.refreshProvider(now, p)
	pm, ok := p.breaker.acquire(now, e.opts(p))
	if !ok {
		return Attempt{}, &Error{Code: CodeCircuitOpen, Provider: p.id, RetryAfterMs: p.breaker.retryAfter(now, e.opts(p))}
	}
	if pm.Probe != 0 {
		e.emitBreaker(now, p, Transition{})
	}
	e.pinOnBegin(now, &c)
	cs := &p.conns[c.c]
	cs.inflight++
	if cs.cfg.ModelConcurrency[c.Model] > 0 {
		cs.modelInflight(c.Model, +1)
	}
	cs.st.Uses++
	cs.st.LastUsedAt = now
	e.emitConn(now, ChangeUsage, p, cs)
	cs.lane.refresh(now)
	return Attempt{Provider: p.id, Connection: cs.id, Model: c.Model, Started: now, Permit: pm, Target: c.Target,
		Limited: e.limiterApplies(p, cs), SlowLane: cs.lane.Active && cs.cfg.SpendWall.SlowLane, p: c.p, c: c.c}, nil
}

// unuse takes back the use Begin counted for an attempt that never reached
// the upstream (refused by the admission stage).
func (e *Engine) unuse(now Time, a *Attempt) {
	if a == nil || a.done || !e.relocate(a) {
		return
	}
	p := &e.provs[a.p]
	if cs := &p.conns[a.c]; cs.st.Uses > 0 {
		cs.st.Uses--
		e.emit(Change{At: now, Kind: ChangeUsage, Provider: p.id, Connection: cs.id, Conn: cs.st})
	}
}

// Record applies one attempt's outcome: classification, then the breaker,
// the connection, the model lockout and the provider window, each in its own
// layer. It returns the verdict so the shell knows what to do next.
func (e *Engine) Record(now Time, a *Attempt, o Outcome) Verdict {
	if a == nil || a.done {
		return Verdict{Reason: ReasonUnknown, Next: NextStop, Message: "record: unknown or finished attempt"}
	}
	if !e.relocate(a) {
		// Its connection was removed by UpdateTopology while it ran.
		a.done = true
		return Verdict{Reason: ReasonUnknown, Next: NextStop, ClientStatus: o.Status,
			Message: "record: the connection was removed from the topology while the attempt ran"}
	}
	a.done = true
	p := &e.provs[a.p]
	c := &p.conns[a.c]
	if c.inflight > 0 && !a.detached {
		c.inflight--
		if c.cfg.ModelConcurrency[a.Model] > 0 {
			c.modelInflight(a.Model, -1)
		}
	}
	ctx := ClassifyContext{Provider: p.id, ProviderType: p.typ, Model: a.Model, Profile: p.profile,
		PerModelQuota: p.perModelQuota, Now: now}
	v := e.clf.Classify(ctx, o)
	e.refreshProvider(now, p)
	connDirty := e.applyBreaker(now, p, c, a, &v)
	if a.Permit.Probe != 0 && v.Breaker == BreakerSuccess {
		e.endOutageLocks(now, p) // the probe found the provider healthy
	}
	connDirty = e.applyConn(now, p, c, a, &v) || connDirty
	e.applyWindow(now, p, c, a, &v, &connDirty)
	if connDirty {
		e.emitConn(now, ChangeConnection, p, c)
	}
	e.applyEgressBucket(now, p, c, &v)
	e.applyLockout(now, p, c, a, &v)
	return v
}

// egressFreshMs is how long a recorded egress IP stays trustworthy.
const egressFreshMs = 24 * hour

// applyEgressBucket: on an egress-bucketed provider a 429 that is a rate
// limit or exhausted quota cools every sibling whose last known egress IP is
// the failing one's (docs/classification.md): they would fail for certain. Never terminal;
// terminal siblings, longer cooldowns and disableCooling are left alone.
func (e *Engine) applyEgressBucket(now Time, p *provState, c *connState, v *Verdict) {
	if !p.egressBucket || v.ClientStatus != 429 || c.cfg.DisableCooling || c.st.Status.Terminal() ||
		(v.Reason != ReasonRateLimitExceeded && v.Reason != ReasonQuotaExhausted) ||
		c.st.EgressIP == "" || now.Sub(c.st.EgressAt) >= egressFreshMs || c.st.RateLimitedUntil <= now {
		return
	}
	for i := range p.conns {
		s := &p.conns[i]
		if s == c || s.cfg.DisableCooling || s.st.Status.Terminal() || s.st.EgressIP != c.st.EgressIP ||
			now.Sub(s.st.EgressAt) >= egressFreshMs || s.st.RateLimitedUntil >= c.st.RateLimitedUntil {
			continue
		}
		s.st.RateLimitedUntil = c.st.RateLimitedUntil
		s.st.CooldownSetAt = now
		s.st.LastError = "egress bucket shared with " + c.id + ": " + v.Message
		s.st.LastErrorType = v.Reason
		s.st.ErrorCode = 429
		s.st.LastErrorAt = now
		e.emit(Change{At: now, Kind: ChangeConnection, Provider: p.id, Connection: s.id, Conn: s.st})
	}
}

// SetEgressIP records the egress address an attempt on ref went out from
// (the shell learns it from its dialer or the request log).
func (e *Engine) SetEgressIP(now Time, ref ConnRef, ip string) error {
	p, c, err := e.conn(ref)
	if err != nil {
		return err
	}
	if c.st.EgressIP == ip && now.Sub(c.st.EgressAt) < hour {
		return nil // fresh enough: spare the store a write per request
	}
	c.st.EgressIP, c.st.EgressAt = ip, now
	e.emit(Change{At: now, Kind: ChangeConnection, Provider: p.id, Connection: c.id, Conn: c.st})
	return nil
}

// applyBreaker feeds the provider breaker. It reports whether it changed
// the connection's dedup fields.
func (e *Engine) applyBreaker(now Time, p *provState, c *connState, a *Attempt, v *Verdict) (connDirty bool) {
	b := &p.breaker
	if v.Breaker == BreakerNeutral && a.Permit.Probe == 0 {
		return false
	}
	counted := true
	if v.Breaker == BreakerFailure && a.Permit.Probe == 0 {
		d := &e.settings.ProviderBreaker.Dedup
		if c.st.HasBreakerFail && now.Sub(c.st.LastBreakerFailAt) < int64(d.ConnectionMs) {
			counted = false
		}
		if v.Transport && b.HasTransportFail && now.Sub(b.LastTransportAt) < int64(d.TransportMs) {
			counted = false
		}
		if counted && a.Permit.Generation == b.Generation && (b.State == Closed || b.State == Degraded) {
			c.st.LastBreakerFailAt, c.st.HasBreakerFail = now, true
			connDirty = true
			if v.Transport {
				b.LastTransportAt, b.HasTransportFail = now, true
			}
		}
	}
	before := b.FailureCount
	beforeProbes := b.ProbesLeft
	tr := b.record(now, a.Permit, v.Breaker, v.Kind, counted, e.opts(p))
	if tr.Changed() || before != b.FailureCount || beforeProbes != b.ProbesLeft {
		e.emitBreaker(now, p, tr)
	}
	return connDirty
}

// applyConn applies the verdict's connection action (docs/cooldowns.md, docs/classification.md#verdicts). It
// reports whether the connection's state changed.
func (e *Engine) applyConn(now Time, p *provState, c *connState, a *Attempt, v *Verdict) bool {
	st := &c.st
	cc := &e.settings.ConnectionCooldown
	prof := cc.For(p.profile)
	switch v.Conn {
	case ConnNone:
		return false
	case ConnClear:
		if st.Status.Terminal() || st.clean() {
			return false
		}
		st.clearErrors()
		return true
	}
	if st.Status.Terminal() {
		return false // terminal is never overwritten by a transient state
	}
	st.noteError(now, v)
	action := v.Conn
	if action == ConnRecordOnly && v.Reason == ReasonStreamStall && e.settings.StreamStallCooldown.Enabled {
		action = ConnBackoff
	}
	if action == ConnRecordOnly {
		return true
	}
	if action == ConnTerminal {
		st.Status = v.Terminal
		st.RateLimitedUntil = 0
		return true
	}
	if c.cfg.DisableCooling {
		return true
	}
	hintCap := int64(cc.MaxCooldownMs)
	if v.Hint.stated() {
		hintCap = int64(cc.MaxStatedResetMs)
	}
	hint := min(v.Hint.Ms, hintCap)
	if action == ConnExpiredLadder || action == ConnRejectedLadder {
		st.stepLadder(now, action)
		return true
	}
	// Thundering-herd guard: an attempt that started before the current
	// cooldown was set is part of the burst that set it, even if it reports
	// after the cooldown ended. It may extend the cooldown with its own hint
	// but never escalates it.
	if st.CooldownSetAt != 0 && a.Started <= st.CooldownSetAt {
		if hint > 0 {
			st.extend(now, now.Add(hint))
		}
		return true
	}
	level := st.levelAt(now, int64(cc.BackoffDecayMs))
	cd, escalate := connCooldownMs(now, p, cc, prof, v, action, level, hint)
	st.BackoffLevel = level
	if escalate {
		st.BackoffLevel = min(level+1, prof.MaxBackoffSteps)
	}
	st.LastFailureAt, st.HasFailure = now, true
	if cd > 0 {
		st.extend(now, now.Add(cd))
		st.CooldownSetAt = now
	}
	return true
}

// stepLadder counts a failure on the expired-key or rejected-key ladder
// (docs/cooldowns.md): a cooldown per step, then the terminal state.
func (st *Conn) stepLadder(now Time, action ConnAction) {
	if action == ConnExpiredLadder {
		n, counted := st.Auth.step(now)
		if !counted {
			return
		}
		if n > expiredRetryMax {
			st.Status = StatusExpired
			st.RateLimitedUntil = 0
			st.Auth = Streak{}
			return
		}
		cd := int64(expiredRetryBaseMs) << (n - 1)
		st.Auth.CooldownUntil = now.Add(cd)
		st.extend(now, now.Add(cd))
		st.CooldownSetAt = now
		return
	}
	n, counted := st.Rejected.step(now)
	if !counted {
		return
	}
	if n >= rejectedThreshold {
		st.Status = StatusBanned
		st.RateLimitedUntil = 0
		st.Rejected = Streak{}
		return
	}
	cd := rejectedLadder[min(n, len(rejectedLadder))-1]
	st.Rejected.CooldownUntil = now.Add(cd)
	st.extend(now, now.Add(cd))
	st.CooldownSetAt = now
}

// connCooldownMs is the cooldown a failure sets on a connection at backoff
// level (docs/cooldowns.md), and whether it escalates the level.
func connCooldownMs(now Time, p *provState, cc *ConnectionCooldownSettings, prof *CooldownProfile, v *Verdict, action ConnAction, level int, hint int64) (cd int64, escalate bool) {
	escalate = v.Escalate
	switch action {
	case ConnBackoff:
		cd = max(transientCap(cc, backoffMs(int64(prof.BaseCooldownMs), level, prof.MaxBackoffSteps, int64(cc.MaxCooldownMs))), hint)
	case ConnHint:
		if hint > 0 {
			cd = hint
		} else {
			cd = backoffMs(int64(prof.BaseCooldownMs), level, prof.MaxBackoffSteps, int64(cc.MaxCooldownMs))
		}
	case ConnFixed:
		cd = v.CooldownMs
		if v.Reason == ReasonConcurrencyLimited && cd <= 0 {
			cd = int64(cc.ConcurrencyCooldownMs)
		}
		cd = max(cd, hint)
	case ConnQuota:
		escalate = false
		if v.Hint.Ms > 0 {
			// A reset the upstream stated, in headers or words, is honoured
			// up to the operator ceiling.
			cd = min(v.Hint.Ms, int64(cc.MaxStatedResetMs))
		} else {
			cd = min(untilDailyReset(now, p.dailyResetMin), int64(cc.MaxCooldownMs))
		}
	}
	return cd, escalate
}

// untilDailyReset is the time from now to the next daily reset at
// resetMin minutes after midnight UTC (never the host's local midnight).
func untilDailyReset(now Time, resetMin int) int64 {
	const day = 24 * hour
	ms := int64(now) % day
	if ms < 0 {
		ms += day
	}
	d := int64(resetMin)*minute - ms
	if d <= 0 {
		d += day
	}
	return d
}

// applyLockout applies the verdict's model lockout (docs/lockouts.md), or the success
// decay that halves failureCount and removes the entry at 0.
func (e *Engine) applyLockout(now Time, p *provState, c *connState, a *Attempt, v *Verdict) {
	if a.Model == "" {
		return
	}
	ml := &e.settings.ModelLockout
	if v.Breaker == BreakerSuccess {
		e.decayLockouts(now, p, c, a.Model)
		return
	}
	la := v.Lockout
	if la.Scope == ScopeNone {
		return
	}
	status := v.ClientStatus
	if status == 0 && v.Reason == ReasonQualityFailure {
		status = 502 // the gateway's own synthetic 502
	}
	if la.Generic && (!ml.Enabled || !slices.Contains(ml.ErrorCodes, status)) {
		return
	}
	var key LockKey
	switch la.Scope {
	case ScopeModelFamily:
		key = LockKey{Name: p.family(a.Model)}
	case ScopeExactModel:
		key = LockKey{Name: a.Model, Exact: true}
	default:
		key = LockKey{Name: a.Model}
	}
	window := int64(ml.EscalationWindowMs)
	i := c.locks.find(key)
	if i >= 0 && c.locks[i].inert(now, window) {
		c.locks = slices.Delete(c.locks, i, i+1)
		i = -1
	}
	failures := 1
	if i >= 0 {
		failures = c.locks[i].FailureCount + 1
	}
	cd := lockoutCooldown(ml, &e.settings.ConnectionCooldown, v, failures, untilDailyReset(now, p.dailyResetMin))
	if i < 0 {
		c.locks = append(c.locks, Lockout{Key: key})
		i = len(c.locks) - 1
	}
	l := &c.locks[i]
	l.FailureCount = failures
	l.LastFailureAt = now
	l.LastCooldownMs = cd
	reason := la.Reason
	if reason == ReasonNone {
		reason = v.Reason
	}
	// A lockout only extends while active; an expired one starts anew.
	if until := now.Add(cd); !l.Active(now) || until > l.Until {
		l.Until = until
		l.LockedAt = now
		l.Reason = reason
	}
	e.emit(Change{At: now, Kind: ChangeLockout, Provider: p.id, Connection: c.id, Lockout: *l})
}

// decayLockouts is a success's effect on the lockouts covering model
// (docs/lockouts.md): failureCount halves, and an entry at 0 is removed.
func (e *Engine) decayLockouts(now Time, p *provState, c *connState, model string) {
	if len(c.locks) == 0 {
		return
	}
	fam := p.family(model)
	for i := 0; i < len(c.locks); {
		l := &c.locks[i]
		covers := (l.Key.Exact && l.Key.Name == model) || (!l.Key.Exact && (l.Key.Name == model || l.Key.Name == fam))
		if !covers {
			i++
			continue
		}
		l.FailureCount /= 2
		if l.FailureCount == 0 {
			e.emit(Change{At: now, Kind: ChangeLockoutRemoved, Provider: p.id, Connection: c.id, Lockout: *l})
			c.locks = slices.Delete(c.locks, i, i+1)
			continue
		}
		e.emit(Change{At: now, Kind: ChangeLockout, Provider: p.id, Connection: c.id, Lockout: *l})
		i++
	}
}

// family returns the model's quota family key name.
func (p *provState) family(model string) string {
	if p.families == nil {
		return model
	}
	if f, ok := p.families[model]; ok {
		return f
	}
	return familyOf(p.cfg, model)
}

// applyWindow feeds the optional provider cooldown tracker (docs/breaker.md#provider-cooldown).
func (e *Engine) applyWindow(now Time, p *provState, c *connState, a *Attempt, v *Verdict, connDirty *bool) {
	pc := &e.settings.ProviderCooldown
	if !pc.Enabled {
		return
	}
	w := &p.window
	if v.Breaker == BreakerSuccess {
		if len(w.Failures) > 0 {
			w.Failures = w.Failures[:0]
			e.emit(Change{At: now, Kind: ChangeWindow, Provider: p.id, Window: w.clone()})
		}
		if c.st.WindowFailures > 0 {
			c.st.WindowFailures = 0
			*connDirty = true
		}
		return
	}
	if !v.WindowCounts {
		return // classification decides what counts (docs/breaker.md#provider-cooldown, docs/breaker.md#provider-cooldown)
	}
	c.st.WindowFailures++
	c.st.WindowLastAt = now
	*connDirty = true
	if now < w.CoolUntil {
		return // failures while cooling neither count nor extend it
	}
	wp := pc.For(p.profile)
	kept := w.Failures[:0]
	for _, t := range w.Failures {
		if now.Sub(t) < int64(wp.ProviderFailureWindowMs) {
			kept = append(kept, t)
		}
	}
	w.Failures = append(kept, now)
	if len(w.Failures) >= wp.ProviderFailureThreshold {
		w.CoolUntil = now.Add(int64(wp.ProviderCooldownMs))
		w.Failures = w.Failures[:0]
	}
	e.emit(Change{At: now, Kind: ChangeWindow, Provider: p.id, Window: w.clone()})
}

// windowCooling reports the provider gate's remaining cooling at now.
func (e *Engine) windowCooling(now Time, p *provState) int64 {
	if !e.settings.ProviderCooldown.Enabled || now >= p.window.CoolUntil {
		return 0
	}
	return p.window.CoolUntil.Sub(now)
}

// connWindowCooling is the provider:connection entry's remaining cooling.
func (e *Engine) connWindowCooling(now Time, c *connState) int64 {
	pc := &e.settings.ProviderCooldown
	if !pc.Enabled || c.st.WindowFailures == 0 {
		return 0
	}
	d := backoffMs(int64(pc.MinRetryCooldownMs), c.st.WindowFailures-1, 10, int64(pc.MaxRetryCooldownMs))
	if el := now.Sub(c.st.WindowLastAt); el < d {
		return d - el
	}
	return 0
}

func (w Window) clone() Window {
	if len(w.Failures) == 0 {
		w.Failures = nil
		return w
	}
	w.Failures = append([]Time(nil), w.Failures...)
	return w
}
