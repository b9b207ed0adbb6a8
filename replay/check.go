package replay

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/sim"
)

// expectState reads the gateway's state for an `at:` expect and checks it
// as the simulator does (sim/expect.go), with a tolerance on exact times.
func (r *runner) expectState(ctx context.Context, i int) {
	e := &r.sc.Expects[i]
	t1 := time.Now()
	st, err := r.e.readState(ctx, &r.sc.Topology)
	readTook := time.Since(t1)
	if err != nil {
		r.fail(e.Line, e.At, "state", "GET /api/monitoring/health to answer", err.Error())
		return
	}
	st.At = time.Duration(float64(e.At) * r.o.Speed).Round(time.Millisecond)
	st.Line = e.Line
	r.mu.Lock()
	r.res.States = append(r.res.States, st)
	r.mu.Unlock()
	tol := r.readWindow(e.At, t1, readTook)
	r.checkBreakers(e, &st)
	r.checkConnections(e, &st, tol)
	r.checkLockouts(e, &st, tol)
}

// window is how far a remaining time read by an `at:` expect may be
// below (lo) and above (hi) the expected one.
type window struct{ lo, hi time.Duration }

// readWindow is the window of a read of scaled instant at that started at
// t1 and took readTook. On the replay's own clock the clock stands at the
// instant during the read, so only the gateway's own moments count
// (Settle + the read + Slack either way). On the wall clock (-target,
// -wall-clock) a read that ran late is judged at the instant it ran,
// which the replay measured: the expected remaining time is lower by the
// time from the instant to the read's end, however late a loaded machine
// made it (the gateway cannot have started the timer before its instant,
// as nothing the replay sends or installs runs early). Above, the timer
// may have started a little after its instant (Settle + the read +
// Slack, as on the own clock).
func (r *runner) readWindow(at time.Duration, t1 time.Time, readTook time.Duration) window {
	w := window{lo: r.o.Settle + readTook + r.o.Slack, hi: r.o.Settle + readTook + r.o.Slack}
	if r.ownClock() {
		return w
	}
	r.mu.Lock()
	instant := r.t0.Add(at)
	r.mu.Unlock()
	w.lo = max(t1.Sub(instant), 0) + readTook + r.o.Slack
	return w
}

func (w window) String() string {
	if w.lo == w.hi {
		return fmt.Sprintf("±%dms", w.hi.Milliseconds())
	}
	return fmt.Sprintf("-%dms/+%dms", w.lo.Milliseconds(), w.hi.Milliseconds())
}

// checkBreakers checks an `at:` expect's breaker states.
func (r *runner) checkBreakers(e *sim.Expect, st *sim.StateObservation) {
	for _, p := range slices.Sorted(maps.Keys(e.Breaker)) {
		want := e.Breaker[p]
		idx := slices.IndexFunc(st.Providers, func(v model.ProviderView) bool { return v.Provider == p })
		if idx < 0 {
			r.fail(e.Line, e.At, "breaker "+p, want.String(), "no such provider")
			continue
		}
		if v := st.Providers[idx]; v.State != want {
			r.fail(e.Line, e.At, "breaker "+p, want.String(), fmt.Sprintf("%s (failureCount %d, retryAfter %dms)", v.State, v.FailureCount, v.RetryAfterMs))
		}
	}
}

// checkConnections checks an `at:` expect's connection states; tol is
// how far a remaining time may be off.
func (r *runner) checkConnections(e *sim.Expect, st *sim.StateObservation, tol window) {
	for _, ref := range slices.Sorted(maps.Keys(e.Connections)) {
		want := e.Connections[ref]
		idx := slices.IndexFunc(st.Connections, func(v model.ConnectionView) bool { return v.Provider+"/"+v.Connection == ref })
		if idx < 0 {
			r.fail(e.Line, e.At, "connection "+ref, "a connection", "no such connection")
			continue
		}
		v := st.Connections[idx]
		found := fmt.Sprintf("status %s, backoffLevel %d, cooldown %dms, lastError %q", v.Status, v.BackoffLevel, v.CooldownRemainingMs, v.LastErrorType)
		if want.Status != "" && v.Status.String() != want.Status {
			r.fail(e.Line, e.At, "connection "+ref+" status", want.Status, found)
		}
		if want.BackoffLevel != nil && v.BackoffLevel != *want.BackoffLevel {
			r.fail(e.Line, e.At, "connection "+ref+" backoffLevel", strconv.Itoa(*want.BackoffLevel), found)
		}
		if want.HasCooldown && !near(v.CooldownRemainingMs, want.Cooldown, tol) {
			r.fail(e.Line, e.At, "connection "+ref+" cooldown", fmt.Sprintf("%dms %s", want.Cooldown.Milliseconds(), tol), found)
		}
		if want.LastError != "" && v.LastErrorType.String() != want.LastError {
			r.fail(e.Line, e.At, "connection "+ref+" lastError", want.LastError, found)
		}
		if want.Uses != nil && int(v.Uses) != *want.Uses {
			r.fail(e.Line, e.At, "connection "+ref+" uses", strconv.Itoa(*want.Uses), strconv.FormatUint(v.Uses, 10))
		}
	}
}

// checkLockouts checks an `at:` expect's model lockouts.
func (r *runner) checkLockouts(e *sim.Expect, st *sim.StateObservation, tol window) {
	if len(e.Lockouts) == 0 && !e.NoLockouts {
		return
	}
	var active []model.LockoutView
	for _, c := range st.Connections {
		active = append(active, c.Lockouts...)
	}
	if e.NoLockouts && len(active) > 0 {
		r.fail(e.Line, e.At, "lockouts", "none", sim.DescribeLockouts(active))
	}
	for _, want := range e.Lockouts {
		ok := slices.ContainsFunc(active, func(l model.LockoutView) bool {
			return l.Provider+"/"+l.Connection == want.Connection && sim.LockName(l) == want.Model &&
				(want.Reason == "" || l.Reason.String() == want.Reason) &&
				(!want.HasRemaining || near(l.RemainingMs, want.Remaining, tol))
		})
		if !ok {
			exp := want.Connection + " " + want.Model
			if want.Reason != "" {
				exp += " (" + want.Reason + ")"
			}
			if want.HasRemaining {
				exp += fmt.Sprintf(" %dms %s left", want.Remaining.Milliseconds(), tol)
			}
			r.fail(e.Line, e.At, "lockout", exp, sim.DescribeLockouts(active))
		}
	}
}

func near(gotMs int64, want time.Duration, tol window) bool {
	d := time.Duration(gotMs)*time.Millisecond - want
	return d <= tol.hi && d >= -tol.lo
}

// finishExpects checks the request and window expects once every request
// has finished.
func (r *runner) finishExpects() {
	skippedCalls := false
	for i := range r.sc.Expects {
		e := &r.sc.Expects[i]
		switch e.Kind {
		case sim.ExpectRequest:
			r.checkRequest(e)
		case sim.ExpectWindow:
			if !r.checkWindow(e, &r.orig.Expects[i]) {
				skippedCalls = true
			}
		}
	}
	if skippedCalls {
		r.res.Skipped = append(r.res.Skipped, "upstreamCalls of a window with a request the client gave up on (no X-Breakwater-Attempts header)")
	}
	slices.SortStableFunc(r.res.RequestLog, func(a, b sim.RequestObservation) int { return a.N - b.N })
}

// checkRequest checks a `request: N` expect against what its client saw.
func (r *runner) checkRequest(e *sim.Expect) {
	o := r.done[e.Request]
	what := fmt.Sprintf("request %d", e.Request)
	if o == nil {
		r.failFile(e.Line, r.res.Simulated, what, "to have been sent and answered", "never answered")
		return
	}
	at := o.DoneAt
	found := fmt.Sprintf("status %d, servedBy %q, attempts %s, result %s", o.Status, o.ServedBy, attemptsStr(o.Attempts), o.Result)
	if o.Code != "" {
		found += ", code " + o.Code
	}
	if e.Status != 0 && o.Status != e.Status {
		r.failFile(e.Line, at, what+" status", strconv.Itoa(e.Status), found)
	}
	if e.ServedBy != "" && o.ServedBy != e.ServedBy {
		r.failFile(e.Line, at, what+" servedBy", e.ServedBy, found)
	}
	if e.Attempts != nil && o.Attempts != *e.Attempts {
		r.failFile(e.Line, at, what+" attempts", strconv.Itoa(*e.Attempts), found)
	}
	if e.Code != "" && o.Code != e.Code {
		r.failFile(e.Line, at, what+" code", e.Code, found)
	}
	if e.Result != "" && o.Result != e.Result {
		r.failFile(e.Line, at, what+" result", e.Result, found)
	}
	// took is in the file's time, as SentAt and DoneAt are; the
	// wall-clock tolerance grows with the speed-up.
	if took, tol := o.DoneAt-o.SentAt, time.Duration(float64(r.o.Settle+r.o.Slack)*r.o.Speed); (e.TookAtLeast > 0 && took < e.TookAtLeast-tol) ||
		(e.TookAtMost > 0 && took > e.TookAtMost+tol) {
		r.failFile(e.Line, at, what+" took", fmt.Sprintf("between %v and %v (±%v)", e.TookAtLeast, e.TookAtMost, tol), fmt.Sprintf("%v; %s", took, found))
	}
	if e.RetryAfter != nil {
		// The gateway rounds up what is left when it answers, a
		// moment after the simulator's instant: one second less is
		// the same answer.
		got := int(o.RetryAfterMs / 1000)
		if got != *e.RetryAfter && got != *e.RetryAfter-1 {
			r.failFile(e.Line, at, what+" retryAfter", fmt.Sprintf("%ds (or %ds)", *e.RetryAfter, *e.RetryAfter-1), fmt.Sprintf("%ds; %s", got, found))
		}
	}
}

// windowTally is what the requests sent in one expect window saw.
type windowTally struct {
	statuses        map[int]int
	served, results map[string]int
	calls, count    int
	unknownCalls    bool
}

// tallyWindow counts the answered requests sent in oe's window, by the
// file's own send times (no rounding).
func (r *runner) tallyWindow(oe *sim.Expect) windowTally {
	w := windowTally{statuses: map[int]int{}, served: map[string]int{}, results: map[string]int{}}
	for n, sent := range r.sent {
		o := r.done[n]
		if o == nil || sent < oe.From || (oe.Until > 0 && sent >= oe.Until) {
			continue
		}
		w.count++
		w.statuses[o.Status]++
		w.results[o.Result]++
		switch {
		case r.e.counter != nil:
			w.calls += r.e.counter.of(n) // the upstream's own count (upcount.go)
		case o.Attempts < 0:
			w.unknownCalls = true
		default:
			w.calls += o.Attempts
		}
		if (o.Result == sim.ResultServed || o.Result == sim.ResultFallback) && o.ServedBy != "" {
			w.served[o.ServedBy]++
		}
	}
	return w
}

// checkWindow checks a `requests:` window expect e (scaled; oe as in the
// file). It reports false when its upstreamCalls could not be checked.
func (r *runner) checkWindow(e, oe *sim.Expect) bool {
	what := fmt.Sprintf("requests sent in [%v, %v)", oe.From, oe.Until)
	at := oe.Until
	w := r.tallyWindow(oe)
	for _, st := range slices.Sorted(maps.Keys(e.Statuses)) {
		if got := w.statuses[st]; got != e.Statuses[st] {
			r.failFile(e.Line, at, what+fmt.Sprintf(" with status %d", st), strconv.Itoa(e.Statuses[st]), fmt.Sprintf("%d (all: %v)", got, w.statuses))
		}
	}
	checked := true
	if e.UpstreamCalls != nil {
		if w.unknownCalls && r.stats != nil && oe.From == 0 && oe.Until == 0 {
			// A request the client gave up on carries no attempts
			// header: count from the fault upstream when the window
			// covers the whole run.
			w.calls, w.unknownCalls = r.stats.Total, false
		}
		if w.unknownCalls {
			checked = false
		} else if w.calls != *e.UpstreamCalls {
			r.failFile(e.Line, at, what+" upstreamCalls", strconv.Itoa(*e.UpstreamCalls), strconv.Itoa(w.calls))
		}
	}
	if e.Requests != nil && w.count != *e.Requests {
		r.failFile(e.Line, at, what+" count", strconv.Itoa(*e.Requests), strconv.Itoa(w.count))
	}
	r.checkCounts(e.Line, at, what+" served by ", e.Served, w.served)
	r.checkCounts(e.Line, at, what+" with result ", e.Results, w.results)
	return checked
}

// checkCounts fails each expected count found different.
func (r *runner) checkCounts(line int, at time.Duration, what string, want, got map[string]int) {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g := got[k]; g != want[k] {
			r.failFile(line, at, what+k, strconv.Itoa(want[k]), fmt.Sprintf("%d (all: %v)", g, got))
		}
	}
}

func attemptsStr(n int) string {
	if n < 0 {
		return "unknown"
	}
	return strconv.Itoa(n)
}

// failFile records a failure whose time is already in the file's time.
func (r *runner) failFile(line int, at time.Duration, what, expected, found string) {
	r.res.Failures = append(r.res.Failures, sim.Failure{Line: line, At: at, What: what, Expected: expected, Found: found})
}
