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
	provIdx map[string]int
	provs   []mprov
	connIdx map[model.ConnRef]int
	conns   []mconn
	// small topologies are searched linearly (faster than hashing)
	provIDs   []string
	connFirst []int      // index of a provider's first connection in conns
	connIDs   [][]string // connection ids per provider
	probes    []int      // probe attempts in flight per provider
	// permits are the probe permits each provider's breaker still holds
	// for attempts in flight: a probe that outlives probeTimeoutMs frees
	// its permit at that deadline though the attempt goes on.
	permits  [][]probePermit
	inAction bool
	// violations found while applying change records
	pending []Violation
}

type probePermit struct {
	generation, id uint64
	deadline       model.Time
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
		m.provIDs = append(m.provIDs, p.ID)
		m.connFirst = append(m.connFirst, len(m.conns))
		var ids []string
		for _, c := range p.Connections {
			ids = append(ids, c.ID)
		}
		m.connIDs = append(m.connIDs, ids)
		for _, c := range p.Connections {
			m.connIdx[model.ConnRef{Provider: p.ID, Connection: c.ID}] = len(m.conns)
			m.conns = append(m.conns, mconn{})
		}
	}
	m.probes = make([]int, len(t.Providers))
	m.permits = make([][]probePermit, len(t.Providers))
}

// takePermit forgets the permit of a probe that ended (answered, or never
// dispatched); one freed at its deadline is already gone.
func (m *mirror) takePermit(p int, a *model.Attempt) {
	ps := m.permits[p]
	for i, pp := range ps {
		if pp.generation == a.Permit.Generation && pp.id == a.Permit.Probe {
			m.permits[p] = append(ps[:i], ps[i+1:]...)
			return
		}
	}
}

// prov finds a provider's index (-1 when unknown).
func (m *mirror) prov(id string) int {
	if len(m.provIDs) <= 8 {
		for i, p := range m.provIDs {
			if p == id {
				return i
			}
		}
		return -1
	}
	if i, ok := m.provIdx[id]; ok {
		return i
	}
	return -1
}

// connAt finds a connection's index in conns (-1 when unknown).
func (m *mirror) connAt(p, c string) int {
	pi := m.prov(p)
	if pi < 0 {
		return -1
	}
	if ids := m.connIDs[pi]; len(ids) <= 8 {
		for j, id := range ids {
			if id == c {
				return m.connFirst[pi] + j
			}
		}
		return -1
	}
	if i, ok := m.connIdx[model.ConnRef{Provider: p, Connection: c}]; ok {
		return i
	}
	return -1
}

func (m *mirror) breaker(c *model.Change) {
	if i := m.prov(c.Provider); i >= 0 {
		m.provs[i].state = c.Breaker.State
		m.provs[i].fails = c.Breaker.FailureCount
	}
}

func (m *mirror) conn(c *model.Change) {
	i := m.connAt(c.Provider, c.Connection)
	if i < 0 {
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
	return m.provs[m.prov(id)]
}

func (m *mirror) preBegin(p, c string) preBegin {
	pi := m.prov(p)
	return preBegin{p: pi, prov: m.provs[pi], conn: m.conns[m.connAt(p, c)], ref: model.ConnRef{Provider: p, Connection: c}}
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
	case pre.conn.until > s.now && !a.Resume:
		// A resume may go back to the connection whose stream just broke,
		// cooling from that break (model/resume.go resumeNext); nothing
		// else cooling is ever selected.
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
		// The budget bounds the permits held in this HALF_OPEN cycle: a
		// probe past its probeTimeoutMs deadline (the breaker freed its
		// permit then), or one of an earlier cycle, may still be in flight
		// beside the new one.
		held := s.mirror.permits[pre.p][:0]
		for _, pp := range s.mirror.permits[pre.p] {
			if s.now < pp.deadline && pp.generation == a.Permit.Generation {
				held = append(held, pp)
			}
		}
		held = append(held, probePermit{generation: a.Permit.Generation, id: a.Permit.Probe,
			deadline: s.now.Add(s.set.ProbeTimeout(pre.prov.profile))})
		s.mirror.permits[pre.p] = held
		budget := max(1, s.set.ProviderBreaker.For(pre.prov.profile).HalfOpenRequests)
		if len(held) > budget {
			s.violate("probe budget", "%d probe permits held on %s, budget %d", len(held), pre.ref.Provider, budget)
		}
	}
}

// checkRecord: a breaker-neutral verdict (429, client errors, aborts)
// never moves the breaker's failure counter; probe permits come back.
func (s *sim) checkRecord(pre mprov, x *attempt, v *model.Verdict) {
	s.flushPending()
	if x.a.Probe() {
		p := s.mirror.prov(x.a.Provider)
		s.mirror.probes[p]--
		s.mirror.takePermit(p, &x.a)
	}
	post := s.mirror.provider(x.a.Provider)
	if v.Breaker == model.BreakerNeutral && post.fails > pre.fails && post.state == pre.state {
		s.violate("neutral outcomes never move the breaker", "%s: %s (%s) raised failureCount %d → %d",
			x.a.Provider, outcomeLabel(&x.out), v.Reason, pre.fails, post.fails)
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
// faults end (docs/README.md#troubleshooting: every self-healing state has a future expiry): the
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
	for st, n := range s.statusCount {
		if n > 0 {
			s.res.Statuses[st] += n
		}
	}
	for l, n := range s.resultCount {
		if n > 0 {
			s.res.Results[resultOrder[l]] += n
		}
	}
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
	// latest: when the lazy-recovery reads below run (after every timer);
	// timers: when the last running timer ends. The run's own end is no
	// timer: a run that goes on long after the faults (a late expect) with
	// nothing cooling has recovered.
	latest, timers := t, faultsEnd
	timer := func(end model.Time) {
		latest, timers = max(latest, end), max(timers, end)
	}
	for _, p := range s.eng.Providers(t) {
		if p.State == model.Open {
			timer(t.Add(p.RetryAfterMs))
		}
	}
	for _, c := range s.eng.Connections(t, "") {
		if !c.Status.Terminal() && c.CooldownRemainingMs > 0 {
			timer(t.Add(c.CooldownRemainingMs))
		}
		for _, l := range c.Lockouts {
			timer(t.Add(l.RemainingMs + 1))
		}
	}
	bound := RecoveryBound(&s.set)
	if timers.Sub(faultsEnd) > bound {
		s.violate("recovery is bounded", "a timer runs until %v after the faults ended at %v (bound %d ms)",
			s.offD(timers), s.offD(faultsEnd), bound)
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
