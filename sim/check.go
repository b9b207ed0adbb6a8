package sim

import (
	"fmt"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// mirror follows the model's change records so that invariants can be
// checked on every event without asking the engine (which would refresh
// lazily and so change what is being checked).
type mirror struct {
	provIdx  map[string]int
	provs    []mprov
	connIdx  map[model.ConnRef]int
	conns    []mconn
	probes   []int // probe attempts in flight per provider
	inAction bool
	// violations found while applying change records
	pending []Violation
}

type mprov struct {
	state   model.BreakerState
	fails   int
	profile model.Profile
}

type mconn struct {
	status model.ConnStatus
	until  model.Time
}

type preBegin struct {
	p    int
	prov mprov
	conn mconn
	ref  model.ConnRef
}

func (m *mirror) init(t *model.Topology) {
	m.provIdx = map[string]int{}
	m.connIdx = map[model.ConnRef]int{}
	for i, p := range t.Providers {
		m.provIdx[p.ID] = i
		m.provs = append(m.provs, mprov{profile: p.Profile})
		for _, c := range p.Connections {
			m.connIdx[model.ConnRef{Provider: p.ID, Connection: c.ID}] = len(m.conns)
			m.conns = append(m.conns, mconn{})
		}
	}
	m.probes = make([]int, len(t.Providers))
}

func (m *mirror) breaker(c *model.Change) {
	if i, ok := m.provIdx[c.Provider]; ok {
		m.provs[i].state = c.Breaker.State
		m.provs[i].fails = c.Breaker.FailureCount
	}
}

func (m *mirror) conn(c *model.Change) {
	i, ok := m.connIdx[model.ConnRef{Provider: c.Provider, Connection: c.Connection}]
	if !ok {
		return
	}
	old := m.conns[i]
	if old.status.Terminal() && !c.Conn.Status.Terminal() && !m.inAction {
		m.pending = append(m.pending, Violation{Invariant: "terminal states clear only by operator",
			Detail: fmt.Sprintf("%s/%s went from %s to %s without an operator action", c.Provider, c.Connection, old.status, c.Conn.Status)})
	}
	m.conns[i] = mconn{status: c.Conn.Status, until: c.Conn.RateLimitedUntil}
}

func (m *mirror) provider(id string) mprov {
	return m.provs[m.provIdx[id]]
}

func (m *mirror) preBegin(p, c string) preBegin {
	ref := model.ConnRef{Provider: p, Connection: c}
	pi := m.provIdx[p]
	return preBegin{p: pi, prov: m.provs[pi], conn: m.conns[m.connIdx[ref]], ref: ref}
}

func (s *sim) violate(inv, format string, args ...any) {
	if len(s.res.Violations) >= 100 {
		return
	}
	s.res.Violations = append(s.res.Violations, Violation{At: s.offD(s.now), Invariant: inv, Detail: fmt.Sprintf(format, args...)})
}

// checkBegin: the safety invariants of an admitted attempt.
func (s *sim) checkBegin(pre *preBegin, a *model.Attempt) {
	s.flushPending()
	switch {
	case pre.conn.status.Terminal():
		s.violate("terminal connection never selected", "%s is %s", pre.ref, pre.conn.status)
	case pre.conn.until > s.now:
		s.violate("cooling connection never selected", "%s cools for %d ms more", pre.ref, pre.conn.until.Sub(s.now))
	}
	switch pre.prov.state {
	case model.Open:
		s.violate("OPEN breaker admits nothing", "an attempt on %s began while its breaker was OPEN", pre.ref)
	case model.HalfOpen:
		if !a.Probe() {
			s.violate("HALF_OPEN admits only probes", "a non-probe attempt on %s began while HALF_OPEN", pre.ref)
		}
	}
	if a.Probe() {
		s.mirror.probes[pre.p]++
		budget := max(1, s.set.ProviderBreaker.For(pre.prov.profile).HalfOpenRequests)
		if s.mirror.probes[pre.p] > budget {
			s.violate("probe budget", "%d probes in flight on %s, budget %d", s.mirror.probes[pre.p], pre.ref.Provider, budget)
		}
	}
}

// checkRecord: a breaker-neutral verdict (429, client errors, aborts)
// never moves the breaker's failure counter; probe permits come back.
func (s *sim) checkRecord(pre mprov, x *attempt, v *model.Verdict) {
	s.flushPending()
	if x.a.Probe() {
		pi := s.mirror.provIdx[x.cand.Provider]
		s.mirror.probes[pi]--
	}
	post := s.mirror.provider(x.cand.Provider)
	if v.Breaker == model.BreakerNeutral && post.fails > pre.fails && post.state == pre.state {
		s.violate("neutral outcomes never move the breaker", "%s: %s (%s) raised failureCount %d → %d",
			x.cand.Provider, outcomeLabel(&x.out), v.Reason, pre.fails, post.fails)
	}
}

func (s *sim) flushPending() {
	for _, v := range s.mirror.pending {
		v.At = s.offD(s.now)
		s.res.Violations = append(s.res.Violations, v)
	}
	s.mirror.pending = s.mirror.pending[:0]
}

// RecoveryBound is the longest any self-healing state may last after the
// faults end (SPEC §9: every self-healing state has a future expiry): the
// largest timer the settings allow.
func RecoveryBound(st *model.Settings) int64 {
	b := max(int64(st.ConnectionCooldown.MaxCooldownMs), int64(st.ConnectionCooldown.MaxStatedResetMs),
		int64(st.ModelLockout.MaxCooldownMs), 20*60*1000 /* expired ladder */)
	for _, p := range []model.Profile{model.ProfileAPIKey, model.ProfileOAuth, model.ProfileLocal} {
		bp := st.ProviderBreaker.For(p)
		b = max(b, int64(bp.ResetTimeoutMs)*int64(max(1, bp.MaxBackoffMultiplier)), st.ProbeTimeout(p))
		for _, d := range bp.CooldownByKind {
			b = max(b, int64(d))
		}
		if st.ProviderCooldown.Enabled {
			b = max(b, int64(st.ProviderCooldown.For(p).ProviderCooldownMs))
		}
	}
	return b + 1
}

// finishRun checks what is left at the end: nothing in flight, and after
// the faults end, every breaker, cooldown and lockout serving again within
// RecoveryBound (lazily, by reading at that instant).
func (s *sim) finishRun() {
	s.flushPending()
	s.res.Simulated = s.offD(s.lastEvent)
	s.finishExpects()
	if s.opts.NoInvariants {
		s.res.Passed = len(s.res.Failures) == 0
		return
	}
	for i, n := range s.mirror.probes {
		if n != 0 {
			s.violate("every probe is answered", "%d probe(s) of %s never recorded", n, s.sc.Topology.Providers[i].ID)
		}
	}
	if len(s.freeAtts) != len(s.atts) {
		s.violate("every Begin has one Record", "%d attempt(s) still in flight at the end", len(s.atts)-len(s.freeAtts))
	}
	if end, ok := faults.FaultsEnd(s.sc.Rules); ok && !s.sc.NoLiveness {
		s.liveness(s.abs(end))
	}
	s.res.Passed = len(s.res.Failures) == 0 && len(s.res.Violations) == 0
}

func (s *sim) liveness(faultsEnd model.Time) {
	t := max(s.now, faultsEnd)
	latest := t
	for _, p := range s.eng.Providers(t) {
		if p.State == model.Open {
			latest = max(latest, t.Add(p.RetryAfterMs))
		}
	}
	for _, c := range s.eng.Connections(t, "") {
		if !c.Status.Terminal() {
			latest = max(latest, t.Add(c.CooldownRemainingMs))
		}
		for _, l := range c.Lockouts {
			latest = max(latest, t.Add(l.RemainingMs+1))
		}
	}
	bound := RecoveryBound(&s.set)
	if latest.Sub(faultsEnd) > bound {
		s.violate("recovery is bounded", "a timer runs until %v after the faults ended at %v (bound %d ms)",
			s.offD(latest), s.offD(faultsEnd), bound)
	}
	at := latest.Add(1)
	for _, p := range s.eng.Providers(at) {
		if p.State == model.Open {
			s.violate("breakers recover lazily", "provider %s still OPEN at %v (retry after %d ms)", p.Provider, s.offD(at), p.RetryAfterMs)
		}
	}
	for _, c := range s.eng.Connections(at, "") {
		if c.Status.Terminal() {
			continue
		}
		if c.Status != model.StatusActive {
			s.violate("cooldowns recover lazily", "%s/%s is %s at %v", c.Provider, c.Connection, c.Status, s.offD(at))
		}
		if len(c.Lockouts) > 0 {
			s.violate("lockouts recover lazily", "%s/%s still has %d lockout(s) at %v", c.Provider, c.Connection, len(c.Lockouts), s.offD(at))
		}
	}
	s.eng.Changes() // the liveness reads are not part of the run's trace
}
