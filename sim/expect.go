package sim

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

func (s *sim) fail(e *Expect, at time.Duration, what, expected, found string) {
	s.res.Failures = append(s.res.Failures, Failure{Line: e.Line, At: at, What: what, Expected: expected, Found: found})
}

// expectState evaluates an `at:` expect: it reads the model through its
// refreshing read path, as GET /api/monitoring/health would.
func (s *sim) expectState(i int) {
	e := &s.sc.Expects[i]
	at := s.offD(s.now)
	n0 := len(s.res.Failures)
	if ob := s.opts.Observe; ob != nil && ob.State != nil {
		ob.State(StateObservation{At: at, Line: e.Line, Providers: s.eng.Providers(s.now), Connections: s.eng.Connections(s.now, "")})
	}
	if len(e.Breaker) > 0 {
		s.expectBreakers(e, at)
	}
	if len(e.Connections) > 0 {
		s.expectConnections(e, at)
	}
	if len(e.Lockouts) > 0 || e.NoLockouts {
		s.expectLockouts(e, at)
	}
	s.drain()
	s.tr.rec()
	s.tr.ev("expect")
	s.tr.int("line", int64(e.Line))
	s.tr.bool("ok", len(s.res.Failures) == n0)
	s.tr.end(s.off(s.now))
	s.tr.close()
}

func (s *sim) expectBreakers(e *Expect, at time.Duration) {
	views := s.eng.Providers(s.now)
	for _, p := range slices.Sorted(maps.Keys(e.Breaker)) {
		want := e.Breaker[p]
		idx := slices.IndexFunc(views, func(v model.ProviderView) bool { return v.Provider == p })
		if idx < 0 {
			s.fail(e, at, "breaker "+p, want.String(), "no such provider")
			continue
		}
		if v := views[idx]; v.State != want {
			s.fail(e, at, "breaker "+p, want.String(), fmt.Sprintf("%s (failureCount %d, retryAfter %dms)", v.State, v.FailureCount, v.RetryAfterMs))
		}
	}
}

func (s *sim) expectConnections(e *Expect, at time.Duration) {
	views := s.eng.Connections(s.now, "")
	var snap *model.State
	for _, ref := range slices.Sorted(maps.Keys(e.Connections)) {
		want := e.Connections[ref]
		idx := slices.IndexFunc(views, func(v model.ConnectionView) bool { return v.Provider+"/"+v.Connection == ref })
		if idx < 0 {
			s.fail(e, at, "connection "+ref, "a connection", "no such connection")
			continue
		}
		s.expectConnection(e, at, ref, &want, &views[idx])
		if want.Uses != nil {
			if snap == nil {
				st := s.eng.Snapshot(s.now)
				snap = &st
			}
			if uses := connUses(snap, ref); uses != *want.Uses {
				s.fail(e, at, "connection "+ref+" uses", strconv.Itoa(*want.Uses), strconv.Itoa(uses))
			}
		}
		if want.Lane != "" {
			s.expectLane(e, at, ref, want.Lane) // spendwall.go
		}
	}
}

// expectConnection checks a connection's view v against want: status,
// backoff level, cooldown and last error.
func (s *sim) expectConnection(e *Expect, at time.Duration, ref string, want *ConnExpect, v *model.ConnectionView) {
	found := fmt.Sprintf("status %s, backoffLevel %d, cooldown %dms, lastError %q", v.Status, v.BackoffLevel, v.CooldownRemainingMs, v.LastErrorType)
	if want.Status != "" && v.Status.String() != want.Status {
		s.fail(e, at, "connection "+ref+" status", want.Status, found)
	}
	if want.BackoffLevel != nil && v.BackoffLevel != *want.BackoffLevel {
		s.fail(e, at, "connection "+ref+" backoffLevel", strconv.Itoa(*want.BackoffLevel), found)
	}
	if want.HasCooldown && v.CooldownRemainingMs != want.Cooldown.Milliseconds() {
		s.fail(e, at, "connection "+ref+" cooldown", fmt.Sprintf("%dms", want.Cooldown.Milliseconds()), found)
	}
	if want.LastError != "" && v.LastErrorType.String() != want.LastError {
		s.fail(e, at, "connection "+ref+" lastError", want.LastError, found)
	}
}

// connUses is the uses count of connection ref (provider/connection) in
// snap; -1 when it has none.
func connUses(snap *model.State, ref string) int {
	uses := -1
	for _, c := range snap.Connections {
		if c.Provider+"/"+c.Connection == ref {
			uses = int(c.Conn.Uses)
		}
	}
	return uses
}

func (s *sim) expectLockouts(e *Expect, at time.Duration) {
	active := s.eng.Lockouts(s.now)
	if e.NoLockouts && len(active) > 0 {
		s.fail(e, at, "lockouts", "none", DescribeLockouts(active))
	}
	for _, want := range e.Lockouts {
		ok := slices.ContainsFunc(active, func(l model.LockoutView) bool {
			return l.Provider+"/"+l.Connection == want.Connection && LockName(l) == want.Model &&
				(want.Reason == "" || l.Reason.String() == want.Reason) &&
				(!want.HasRemaining || l.RemainingMs == want.Remaining.Milliseconds())
		})
		if !ok {
			exp := want.Connection + " " + want.Model
			if want.Reason != "" {
				exp += " (" + want.Reason + ")"
			}
			if want.HasRemaining {
				exp += fmt.Sprintf(" %dms left", want.Remaining.Milliseconds())
			}
			s.fail(e, at, "lockout", exp, DescribeLockouts(active))
		}
	}
}

// LockName is how expects name a lockout: the model, or "exact:" + model.
func LockName(l model.LockoutView) string {
	if l.Exact {
		return "exact:" + l.Model
	}
	return l.Model
}

// DescribeLockouts is the "found" text of a failing lockouts expect.
func DescribeLockouts(ls []model.LockoutView) string {
	if len(ls) == 0 {
		return "no active lockout"
	}
	var parts []string
	for _, l := range ls {
		parts = append(parts, fmt.Sprintf("%s/%s %s (%s, %dms left, failures %d)", l.Provider, l.Connection, LockName(l), l.Reason, l.RemainingMs, l.FailureCount))
	}
	return strings.Join(parts, "; ")
}

// finishExpects evaluates the request and window expects once every
// request has finished.
func (s *sim) finishExpects() {
	end := s.offD(s.now)
	for i := range s.sc.Expects {
		e := &s.sc.Expects[i]
		switch e.Kind {
		case ExpectRequest:
			s.finishRequestExpect(e, end)
		case ExpectWindow:
			s.finishWindowExpect(e)
		}
	}
}

// finishRequestExpect checks how request e.Request was answered.
func (s *sim) finishRequestExpect(e *Expect, end time.Duration) {
	o := s.reqExpect[int32(e.Request)]
	what := fmt.Sprintf("request %d", e.Request)
	if o == nil || !o.done {
		s.fail(e, end, what, "to have been sent and answered", "never answered")
		return
	}
	at := s.offD(o.at)
	found := fmt.Sprintf("status %d, servedBy %q, attempts %d, result %s", o.status, o.servedBy, o.attempts, o.result)
	if o.code != "" {
		found += ", code " + o.code
	}
	if e.Status != 0 && o.status != e.Status {
		s.fail(e, at, what+" status", strconv.Itoa(e.Status), found)
	}
	if e.ServedBy != "" && o.servedBy != e.ServedBy {
		s.fail(e, at, what+" servedBy", e.ServedBy, found)
	}
	if e.Attempts != nil && o.attempts != *e.Attempts {
		s.fail(e, at, what+" attempts", strconv.Itoa(*e.Attempts), found)
	}
	if e.Code != "" && o.code != e.Code {
		s.fail(e, at, what+" code", e.Code, found)
	}
	if e.Result != "" && o.result != e.Result {
		s.fail(e, at, what+" result", e.Result, found)
	}
	if took := time.Duration(o.took) * time.Millisecond; (e.TookAtLeast > 0 && took < e.TookAtLeast) ||
		(e.TookAtMost > 0 && took > e.TookAtMost) {
		s.fail(e, at, what+" took", fmt.Sprintf("between %v and %v", e.TookAtLeast, e.TookAtMost), fmt.Sprintf("%v; %s", took, found))
	}
	if e.RetryAfter != nil {
		s.expectRetryAfter(e, at, what, found, o.retryAfter)
	}
}

// expectRetryAfter checks the Retry-After seconds a client reads from
// retryAfterMs.
func (s *sim) expectRetryAfter(e *Expect, at time.Duration, what, found string, retryAfterMs int64) {
	got := 0
	if retryAfterMs > 0 {
		got = int(max(1, (retryAfterMs+999)/1000))
	}
	if got != *e.RetryAfter {
		s.fail(e, at, what+" retryAfter", fmt.Sprintf("%ds", *e.RetryAfter), fmt.Sprintf("%ds (%dms); %s", got, retryAfterMs, found))
	}
}

// finishWindowExpect checks the requests sent in e's window.
func (s *sim) finishWindowExpect(e *Expect) {
	var w *windowAgg
	for j := range s.windows {
		if s.windows[j].exp == e {
			w = &s.windows[j]
		}
	}
	what := fmt.Sprintf("requests sent in [%v, %v)", e.From, e.Until)
	at := e.Until
	for _, st := range slices.Sorted(maps.Keys(e.Statuses)) {
		if got := w.statuses[st]; got != e.Statuses[st] {
			s.fail(e, at, what+fmt.Sprintf(" with status %d", st), strconv.Itoa(e.Statuses[st]), fmt.Sprintf("%d (all: %s)", got, countsInt(w.statuses)))
		}
	}
	if e.UpstreamCalls != nil && w.calls != *e.UpstreamCalls {
		s.fail(e, at, what+" upstreamCalls", strconv.Itoa(*e.UpstreamCalls), strconv.Itoa(w.calls))
	}
	if e.Requests != nil && w.requests != *e.Requests {
		s.fail(e, at, what+" count", strconv.Itoa(*e.Requests), strconv.Itoa(w.requests))
	}
	for _, k := range slices.Sorted(maps.Keys(e.Served)) {
		if got := w.served[k]; got != e.Served[k] {
			s.fail(e, at, what+" served by "+k, strconv.Itoa(e.Served[k]), fmt.Sprintf("%d (all: %s)", got, countsStr(w.served)))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.Results)) {
		if got := w.results[k]; got != e.Results[k] {
			s.fail(e, at, what+" with result "+k, strconv.Itoa(e.Results[k]), fmt.Sprintf("%d (all: %s)", got, countsStr(w.results)))
		}
	}
}

func countsInt(m map[int]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func countsStr(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
