package model

import (
	"testing"

	"pgregory.net/rapid"
)

// refBreaker is a deliberately naive second implementation of the breaker
// rules of docs/breaker.md (no dedup), written from the spec rather than from
// breaker.go. The rapid test feeds both the same attempts and verdicts and
// demands the same state after every step.
type refBreaker struct {
	state     BreakerState
	fails     int
	lastFail  Time
	kind      FailureKind
	openedAt  Time
	cycles    int
	epoch     int
	permits   int
	probes    map[int]Time // probe id → deadline
	nextProbe int
}

type refAdmission struct {
	epoch int
	probe int // 0 = not a probe
}

type refModel struct {
	p        *BreakerProfile
	probeTTL int64
	b        refBreaker
	adm      map[*Attempt]refAdmission
}

func (m *refModel) hold() int64 {
	if d, ok := m.p.CooldownByKind[m.b.kind.String()]; ok && m.b.kind != KindNone {
		return int64(d)
	}
	base := int64(m.p.ResetTimeoutMs)
	if m.b.cycles <= m.p.BackoffEscalationCount {
		return base
	}
	v := base
	for i := 0; i < m.b.cycles-m.p.BackoffEscalationCount && v < base*int64(m.p.MaxBackoffMultiplier); i++ {
		v *= 2
	}
	return min(v, base*int64(m.p.MaxBackoffMultiplier))
}

func (m *refModel) tick(now Time) {
	b := &m.b
	if b.state == Open && now >= b.openedAt.Add(m.hold()) {
		b.state, b.permits, b.probes = HalfOpen, m.p.HalfOpenRequests, map[int]Time{}
		b.epoch++
	}
	if (b.state == Closed || b.state == Degraded) && b.fails > 0 {
		quiet := int64(m.p.ResetTimeoutMs)
		if d, ok := m.p.CooldownByKind[b.kind.String()]; ok && b.kind != KindNone {
			quiet = int64(d)
		}
		if now.Sub(b.lastFail) >= quiet*int64(m.p.MaxBackoffMultiplier) {
			b.fails, b.state = 0, Closed
		}
	}
	if b.state == HalfOpen {
		for id, dl := range b.probes {
			if now >= dl {
				delete(b.probes, id)
				b.permits++
			}
		}
	}
}

func (m *refModel) begin(now Time) refAdmission {
	b := &m.b
	if b.state == HalfOpen {
		b.permits--
		b.nextProbe++
		b.probes[b.nextProbe] = now.Add(m.probeTTL)
		return refAdmission{epoch: b.epoch, probe: b.nextProbe}
	}
	return refAdmission{epoch: b.epoch}
}

func (m *refModel) record(now Time, a refAdmission, v Verdict) {
	b := &m.b
	if a.epoch != b.epoch || b.state == Open {
		return
	}
	if b.state == HalfOpen {
		if _, ok := b.probes[a.probe]; !ok {
			return
		}
		delete(b.probes, a.probe)
		switch v.Breaker {
		case BreakerSuccess:
			b.state, b.fails, b.cycles, b.kind, b.permits, b.probes = Closed, 0, 0, KindNone, 0, map[int]Time{}
			b.epoch++
		case BreakerFailure:
			b.fails++
			b.lastFail, b.kind = now, v.Kind
			b.cycles++
			b.state, b.openedAt, b.permits, b.probes = Open, now, 0, map[int]Time{}
			b.epoch++
		default:
			b.permits++
		}
		return
	}
	switch v.Breaker {
	case BreakerSuccess:
		if b.fails > 0 {
			b.fails--
			if b.state == Degraded && b.fails <= m.p.DegradationThreshold {
				b.state = Closed
			}
		}
	case BreakerFailure:
		b.fails++
		b.lastFail, b.kind = now, v.Kind
		switch {
		case b.fails >= m.p.FailureThreshold:
			b.state, b.openedAt = Open, now
			b.epoch++
		case b.state == Closed && b.fails >= m.p.DegradationThreshold:
			b.state = Degraded
		}
	}
}

func TestRapidBreakerAgainstReference(t *testing.T) {
	// docs/breaker.md and docs/breaker.md#half-open to docs/breaker.md#trip-statuses, checked against refModel: breaker state
	// and failure count agree after every step of random traffic.
	rapid.Check(t, func(t *rapid.T) {
		r := newRunner(t, func(s *Settings) {
			s.ProviderBreaker.Dedup = BreakerDedup{}
			s.ProviderBreaker.Local.CooldownByKind = map[string]Millis{"transport": 4000}
			s.ProviderBreaker.Local.BackoffEscalationCount = 1
		}, 11)
		refs := map[string]*refModel{}
		for i := range r.e.provs {
			p := &r.e.provs[i]
			o := r.e.opts(p)
			refs[p.id] = &refModel{p: o.p, probeTTL: o.probeTimeout, b: refBreaker{probes: map[int]Time{}}, adm: map[*Attempt]refAdmission{}}
		}
		pending := map[Time]map[string]refAdmission{} // not needed: admissions keyed by attempt identity below
		_ = pending
		type key struct {
			p, c    string
			started Time
			permit  Permit
		}
		adm := map[key][]refAdmission{}
		r.onBegin = func(a Attempt) {
			k := key{a.Provider, a.Connection, a.Started, a.Permit}
			adm[k] = append(adm[k], refs[a.Provider].begin(r.now))
		}
		r.onRecord = func(a Attempt, v Verdict) {
			k := key{a.Provider, a.Connection, a.Started, a.Permit}
			q := adm[k]
			ad := q[0]
			adm[k] = q[1:]
			refs[a.Provider].record(r.now, ad, v)
		}
		r.onReset = func(p string) {
			m := refs[p]
			m.b = refBreaker{epoch: m.b.epoch + 1, probes: map[int]Time{}, nextProbe: m.b.nextProbe}
		}
		acts := rapid.SliceOfN(actionGen(), 50, 300).Draw(t, "actions")
		for i, a := range acts {
			for _, m := range refs {
				m.tick(r.now)
			}
			line := r.step(a)
			for _, m := range refs {
				m.tick(r.now)
			}
			for id, m := range refs {
				got := r.e.Providers(r.now)
				for _, v := range got {
					if v.Provider != id {
						continue
					}
					if v.State != m.b.state || v.FailureCount != m.b.fails {
						t.Fatalf("step %d (%s): breaker %s is %v/%d, reference says %v/%d", i, line, id, v.State, v.FailureCount, m.b.state, m.b.fails)
					}
				}
			}
		}
	})
}
