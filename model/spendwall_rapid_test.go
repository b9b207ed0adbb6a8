package model

import (
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// TestSpendWallRapidInvariants drives random request sequences through an
// opted-in connection pair (docs/spendwall.md) and checks, after every step:
//   - an intercepted spend-wall 429 (verdict reason spend_wall) never
//     changes the connection's cooldown, backoff or error fields nor the
//     provider breaker;
//   - the lane never outlives its reset + 60 s grace, a lane is never
//     accepted for more than one 5-hour window, and no attempt carries the
//     lane header at or after the lane's end;
//   - nothing stays in flight once a request is answered.
func TestSpendWallRapidInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := SpendWallConfig{SlowLane: rapid.Bool().Draw(rt, "slowLane"), LimitReset: rapid.Bool().Draw(rt, "limitReset")}
		e := mustEngine(rt, topo(swProvider(cfg, 2)), func(s *Settings) {
			s.RequestBudget.DeadlineMs = Millis(rapid.Int64Range(10, 900).Draw(rt, "deadlineSec") * second)
		})
		now := at(0)
		pick := func(label string) Outcome {
			switch rapid.IntRange(0, 9).Draw(rt, label) {
			case 0, 1:
				return wall(rapid.Bool().Draw(rt, label+"offer"), now.Add(rapid.Int64Range(-minute, 6*hour).Draw(rt, label+"reset")))
			case 2:
				return lane(429, headerSlowStatus, "slot_busy", headerSlowRetryAfter,
					strconv.FormatInt(rapid.Int64Range(0, 700).Draw(rt, label+"ra"), 10),
					headerSlowMaxWait, strconv.FormatInt(rapid.Int64Range(0, 30000).Draw(rt, label+"mw"), 10))
			case 3:
				return lane(529)
			case 4:
				st := rapid.SampledFrom([]string{"weekly_limit", "budget_exhausted", "off", "ineligible", "active", "not_needed"}).Draw(rt, label+"st")
				return lane(429, headerSlowStatus, st)
			case 5:
				return lane(200, headerOverageInUse, "true")
			case 6:
				return status(503)
			default:
				return lane(200, headerSlowStatus, "active")
			}
		}
		for r := 0; r < rapid.IntRange(1, 12).Draw(rt, "requests"); r++ {
			now = now.Add(rapid.Int64Range(0, 2*hour).Draw(rt, "gap"))
			f := e.StartFlow(now, route(rt, e, "an/m1"), "", nil)
			var sel Selection
			done := false
			for i := 0; i < 300 && !done; i++ {
				st := f.Next(now, e, &sel)
				switch st.Kind {
				case StepAnswer:
					done = true
				case StepWait:
					now = now.Add(st.WaitMs)
				case StepLimitReset:
					res := LimitResetResult{Outcome: LimitResetOutcome(rapid.IntRange(0, 4).Draw(rt, "resetResult")),
						NextAvailableAt: now.Add(rapid.Int64Range(-hour, 40*24*hour).Draw(rt, "nextAvail"))}
					if _, ans := f.LimitResetDone(now, e, res); ans != nil {
						done = true
					}
				case StepAttempt:
					a := st.Attempt
					ci := e.provs[0].connIdx[a.Connection]
					l := e.provs[0].conns[ci].lane
					if a.SlowLane && (!l.Active || now >= l.Until) {
						rt.Fatalf("lane header at %d outside the lane %+v", now-t0, l)
					}
					o := pick("out")
					now = now.Add(rapid.Int64Range(1, 5000).Draw(rt, "latency"))
					beforeConn := e.provs[0].conns[ci].st
					beforeBreaker := e.provs[0].breaker.clone()
					v, ans := f.Record(now, e, &a, Report{Outcome: o})
					if v.Reason == ReasonSpendWall {
						c := e.provs[0].conns[ci].st
						if c.RateLimitedUntil != beforeConn.RateLimitedUntil || c.BackoffLevel != beforeConn.BackoffLevel ||
							c.LastErrorType != beforeConn.LastErrorType || c.ErrorCode != beforeConn.ErrorCode {
							rt.Fatalf("intercepted 429 changed the connection: %+v → %+v", beforeConn, c)
						}
						b := e.provs[0].breaker
						if b.State != beforeBreaker.State || b.FailureCount != beforeBreaker.FailureCount {
							rt.Fatalf("intercepted 429 moved the breaker: %+v → %+v", beforeBreaker, b)
						}
						if l := e.provs[0].conns[ci].lane; l.Active && (l.Until != l.Reset.Add(slowLaneGraceMs) || l.Reset.Sub(now) > slowLaneWindowMs) {
							rt.Fatalf("lane %+v accepted at %d outlives one window + grace", l, now-t0)
						}
					}
					if ans != nil {
						done = true
					}
				}
			}
			if !done {
				rt.Fatal("flow did not end")
			}
			for _, c := range e.provs[0].conns {
				if c.inflight != 0 {
					rt.Fatalf("%s: %d attempt(s) left in flight", c.id, c.inflight)
				}
			}
		}
	})
}
