package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// LimitResetAnswer is what the simulated usage / reset endpoints of one
// connection answer when the model asks for a session limit reset
// (docs/spendwall.md; scenario key `spendWall.resetAnswer` on a connection). The
// answer is immediate on virtual time: the model's decision, not the
// endpoint latency, is what a scenario pins.
type LimitResetAnswer struct {
	Outcome model.LimitResetOutcome
	// NextAvailableIn is next_available_at as an offset from the call; 0 =
	// not stated.
	NextAvailableIn time.Duration
}

// limitReset carries out a StepLimitReset: the scenario's answer for the
// connection (none configured = the calls fail) goes back to the flow.
func (s *sim) limitReset(id int32, ref model.ConnRef) {
	r := &s.reqs[id]
	ans, ok := s.sc.LimitResets[ref.String()]
	res := model.LimitResetResult{Outcome: model.LimitResetFailed}
	if ok {
		res.Outcome = ans.Outcome
		if ans.NextAvailableIn > 0 {
			res.NextAvailableAt = s.now.Add(ans.NextAvailableIn.Milliseconds())
		}
	}
	s.tr.rec()
	s.traceConn(ref.Provider, ref.Connection)
	s.tr.ev("limit_reset")
	s.tr.int("req", int64(r.id))
	s.tr.str("result", res.Outcome.String())
	s.tr.end(s.off(s.now))
	s.tr.close()
	_, st := r.flow.LimitResetDone(s.now, s.eng, res)
	s.drain()
	if st != nil {
		s.answer(id, st, abortNone)
		return
	}
	s.step(id)
}

// expectLane checks a connection's spend-wall lane at an `at:` expect.
func (s *sim) expectLane(e *Expect, at time.Duration, ref, want string) {
	p, c, _ := strings.Cut(ref, "/")
	l, err := s.eng.SpendWall(s.now, model.ConnRef{Provider: p, Connection: c})
	got := "off"
	switch {
	case err != nil:
		got = err.Error()
	case l.Active:
		got = "active"
	}
	if got != want {
		s.fail(e, at, "connection "+ref+" lane", want, fmt.Sprintf("%s (%+v)", got, l))
	}
}
