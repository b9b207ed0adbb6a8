package chaos

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakwater-gw/breakwater/model"
)

// Trace is what a run observed; the invariant checks are pure functions of
// it, so a broken trace written by hand must fail them (invariants_test).
type Trace struct {
	SampleEveryMs int64
	// FaultEndMs is when the fault phase ended (every window is over).
	FaultEndMs int64
	Windows    []Window
	Samples    []Sample
	Topo       *model.Topology
	Settings   *model.Settings
	// Requests and PerRequest hold the per-request checks' results.
	Requests   Requests
	PerRequest map[string][]Violation
	Liveness   Liveness
	// Leak is nil when the leak checks do not apply (target mode).
	Leak *Leak
	// Restarts are the checks around every gateway restart; Persist is the
	// end-of-run restore check (nil = not run).
	Restarts []RestartCheck
	Persist  *RestartCheck
	// GatewayCounted is the gateway's own count of client chat requests
	// from the load (-1 = unknown).
	GatewayCounted int64
}

// Liveness is the recovery after the faults end.
type Liveness struct {
	BoundMs int64    `json:"boundMs"`
	Why     []string `json:"why,omitempty"`
	// RecoveredAtMs is the first sample after the faults where everything
	// served (-1 = never within the bound).
	RecoveredAtMs int64 `json:"recoveredAtMs"`
	// NotServing lists what still did not serve at the end.
	NotServing []string `json:"notServing,omitempty"`
	// Final are the last requests, one per model, after recovery.
	Final []Probe `json:"final,omitempty"`
	// Skipped says why liveness was not checked ("" = checked).
	Skipped string `json:"skipped,omitempty"`
}

// Probe is one request's decision, as compared across a restart.
type Probe struct {
	Model  string `json:"model"`
	Status int    `json:"status"`
	Class  string `json:"class"`
	Served string `json:"served,omitempty"` // provider/connection
}

func (p Probe) String() string {
	s := fmt.Sprintf("%s → %s", p.Model, p.Class)
	if p.Served != "/" && p.Served != "" {
		s += " via " + p.Served
	}
	return s
}

// Leak is the resource count before the run and after everything stopped.
type Leak struct {
	GoroutinesBefore int      `json:"goroutinesBefore"`
	GoroutinesAfter  int      `json:"goroutinesAfter"`
	FDsBefore        int      `json:"fdsBefore"`
	FDsAfter         int      `json:"fdsAfter"`
	WaitedMs         int64    `json:"waitedMs"`
	Stacks           []string `json:"stacks,omitempty"` // goroutines left over (first lines)
}

// RestartCheck compares the state before and after a restart (or, at the
// end of a run, the final state with what a new gateway restores), and the
// decisions a restarted twin takes with those of the gateway that was not
// restarted.
type RestartCheck struct {
	AtMs  int64  `json:"atMs"`
	Kind  string `json:"kind"` // "restart" or "end"
	GapMs int64  `json:"gapMs"`
	// Diffs lists state that differs beyond what the elapsed time explains.
	Diffs []string `json:"diffs,omitempty"`
	// Decisions lists probe decisions that differ (restarted vs not).
	Decisions        []string `json:"decisions,omitempty"`
	DecisionsChecked int      `json:"decisionsChecked"`
	DecisionsSkipped string   `json:"decisionsSkipped,omitempty"`
	Err              string   `json:"err,omitempty"`
}

// Status of an invariant check.
const (
	Pass = "pass"
	Fail = "fail"
	Skip = "skip"
)

// Result is one invariant's verdict.
type Result struct {
	Name       string      `json:"name"`
	Status     string      `json:"status"`
	Detail     string      `json:"detail,omitempty"`
	Count      int64       `json:"count,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
}

// Invariant is a named check over a trace.
type Invariant struct {
	Name  string
	Doc   string
	Check func(tr *Trace) Result
}

// Invariants lists every check a chaos run makes, in report order.
var Invariants = []Invariant{
	{InvDeadline, "every request ends within the client deadline (requestBudget.deadlineMs + 2 s): none hangs", perRequest(InvDeadline)},
	{InvTyped, "every request ends with a success or a typed error (OpenAI-shaped body, or an SSE error event): none is lost", perRequest(InvTyped)},
	{InvTruncated, "no truncated success: a 200 is a whole chat completion; a stream ends with [DONE] or an error event", perRequest(InvTruncated)},
	{InvRetryAfter, "the gateway's own 429/503 (circuit open, cooling, queue timeout) carry Retry-After", perRequest(InvRetryAfter)},
	{"requests-accounted", "every request sent got exactly one outcome, and the gateway counted every one", checkAccounted},
	{"management-answers", "GET /api/monitoring/health answers during the whole run", checkHealthAnswers},
	{"breaker-opens-within-threshold", "when a whole provider fails, its breaker opens by the time failureThreshold failures were answered (dedup accounted for)", checkBreakerOpens},
	{"429-never-opens-breaker", "a 429 storm (on a provider or one of its keys) never counts a breaker failure and never opens a breaker", check429},
	{"bad-key-spares-siblings", "one failing connection never cools its sibling connections", checkBadKey},
	{"bad-model-spares-connection", "one missing model never cools the connections that serve it", checkBadModel},
	{"liveness", "after the faults stop, every breaker, cooldown and lockout serves again within the bound derived from the settings, and every model answers 200", checkLiveness},
	{"restart-restores-state", "a restarted gateway restores breakers, cooldowns and lockouts and takes the same later decisions", checkRestarts},
	{"no-goroutine-leak", "the goroutine count returns to its baseline after the run (in-process)", checkGoroutines},
	{"no-fd-leak", "the open file count returns to its baseline after the run (in-process)", checkFDs},
}

// Check runs every invariant on a trace.
func Check(tr *Trace) []Result {
	out := make([]Result, 0, len(Invariants))
	for _, inv := range Invariants {
		r := inv.Check(tr)
		r.Name = inv.Name
		out = append(out, r)
	}
	return out
}

// Passed reports whether no result failed.
func Passed(rs []Result) bool {
	return !slices.ContainsFunc(rs, func(r Result) bool { return r.Status == Fail })
}

func perRequest(name string) func(*Trace) Result {
	return func(tr *Trace) Result {
		n := tr.Requests.Violations[name]
		if n == 0 {
			return Result{Status: Pass, Detail: fmt.Sprintf("%d requests", tr.Requests.Finished)}
		}
		return Result{Status: Fail, Count: n, Violations: tr.PerRequest[name],
			Detail: fmt.Sprintf("%d of %d requests", n, tr.Requests.Finished)}
	}
}

func checkAccounted(tr *Trace) Result {
	r := tr.Requests
	if r.Sent != r.Finished {
		return Result{Status: Fail, Detail: fmt.Sprintf("%d requests sent, %d finished: %d lost by the load generator or the gateway", r.Sent, r.Finished, r.Sent-r.Finished)}
	}
	var sum int64
	for _, n := range r.ByKind {
		sum += n
	}
	if sum != r.Finished {
		return Result{Status: Fail, Detail: fmt.Sprintf("%d outcomes for %d finished requests", sum, r.Finished)}
	}
	if tr.GatewayCounted >= 0 && tr.GatewayCounted != r.Sent {
		return Result{Status: Fail, Detail: fmt.Sprintf("%d requests sent, the gateway counted %d (breakwater_requests_total)", r.Sent, tr.GatewayCounted)}
	}
	d := fmt.Sprintf("%d sent, %d finished", r.Sent, r.Finished)
	if tr.GatewayCounted >= 0 {
		d += fmt.Sprintf(", %d counted by the gateway", tr.GatewayCounted)
	}
	return Result{Status: Pass, Detail: d}
}

func checkHealthAnswers(tr *Trace) Result {
	var vs []Violation
	var n int64
	for _, s := range tr.Samples {
		if s.HealthErr != "" {
			n++
			if len(vs) < maxKept {
				vs = append(vs, Violation{AtMs: s.AtMs, What: s.HealthErr})
			}
		}
	}
	if n > 0 {
		return Result{Status: Fail, Count: n, Violations: vs, Detail: fmt.Sprintf("%d of %d health reads failed", n, len(tr.Samples))}
	}
	if len(tr.Samples) == 0 {
		return Result{Status: Fail, Detail: "no health sample at all"}
	}
	var worst float64
	for _, s := range tr.Samples {
		worst = max(worst, s.HealthMs)
	}
	return Result{Status: Pass, Detail: fmt.Sprintf("%d reads, slowest %.1f ms", len(tr.Samples), worst)}
}

// overlapping lists the other windows whose effects may show within
// [from, to] (ms): a window's answers are recorded up to its lag after it
// ends.
func overlapping(tr *Trace, self int, from, to int64) []*Window {
	var out []*Window
	for i := range tr.Windows {
		w := &tr.Windows[i]
		if w.Index != self && w.StartMs < to && w.EndMs+tr.lagMs(w) > from && (w.Failing || w.Action != ActionRule) && w.Action != ActionRestart && w.Action != ActionDBDown {
			out = append(out, w)
		}
	}
	return out
}

// touches reports whether window w may answer attempts of provider p,
// connection c ("" = any).
func touches(w *Window, p, c string) bool {
	return (w.Match.Provider == "" || w.Match.Provider == p) && (c == "" || w.Match.Connection == "" || w.Match.Connection == c)
}

// lagMs is how long after an upstream answer the health endpoint may
// still not show its effect: the attempt itself, two samples and slack.
func (tr *Trace) lagMs(w *Window) int64 {
	return w.MaxAttemptMs + 2*tr.SampleEveryMs + 500
}

// tripCount sums the trip-failure labels answered by provider p's upstream
// in sample s.
func tripCount(s *Sample, p string) int {
	n := 0
	for label, c := range s.Upstream[p] {
		switch label {
		case "408", "500", "502", "503", "504", "reset", "timeout":
			n += c
		}
	}
	return n
}

// answeredIn counts the attempts provider p's upstream answered with one of
// labels between fromMs and toMs (from the samples' cumulative /_stats).
// known is false when no sample in the trace carries upstream counts (they
// could not be read): then nothing can be said about the window.
func answeredIn(tr *Trace, p string, labels []string, fromMs, toMs int64) (n int, known bool) {
	count := func(s *Sample) int {
		c := 0
		for _, l := range labels {
			c += s.Upstream[p][l]
		}
		return c
	}
	base, last := 0, -1
	for k := range tr.Samples {
		s := &tr.Samples[k]
		if s.Upstream == nil {
			continue
		}
		known = true
		if s.AtMs <= fromMs {
			base = count(s)
		}
		if s.AtMs <= toMs {
			last = count(s)
		}
	}
	return max(0, last-base), known
}

func open(state string) bool { return state == "OPEN" || state == "HALF_OPEN" }

func checkBreakerOpens(tr *Trace) Result {
	var res []string
	var vs []Violation
	checked := 0
	for i := range tr.Windows {
		w := &tr.Windows[i]
		if w.Class != ClassProviderTrip || !w.Check {
			continue
		}
		p := providerOf(tr.Topo, w.Match.Provider)
		lag := tr.lagMs(w)
		if skip := overriddenTrip(tr, w, p.ID); skip != "" {
			res = append(res, fmt.Sprintf("%s: skipped (%s)", w.Label, skip))
			continue
		}
		bp := tr.Settings.ProviderBreaker.For(p.Profile)
		threshold := bp.FailureThreshold
		transport := !slices.ContainsFunc(w.Labels, func(l string) bool { return l != "reset" && l != "timeout" })
		dedup := dedupDelayMs(tr.Settings, threshold, len(p.Connections), transport)
		reached, openAt, already := tripTimes(tr, w, p.ID, threshold, lag)
		switch {
		case already:
			res = append(res, fmt.Sprintf("%s: already open when the window started", w.Label))
			checked++
		case reached < 0 && openAt >= 0:
			res = append(res, fmt.Sprintf("%s: opened at %d ms (fewer than %d failures answered: it had failures before)", w.Label, openAt, threshold))
			checked++
		case reached < 0:
			res = append(res, fmt.Sprintf("%s: not exercised (fewer than %d trip failures answered in the window)", w.Label, threshold))
		case w.StartMs+dedup > w.EndMs:
			// The breaker counts one failure per dedup window: this fault
			// window ended before threshold failures could count.
			res = append(res, fmt.Sprintf("%s: not exercised (with the breaker's failure dedup, %d failures need %d ms of failures; the window lasted %d ms)", w.Label, threshold, dedup, w.EndMs-w.StartMs))
		default:
			deadline := max(reached, w.StartMs+dedup) + lag
			if openAt >= 0 && openAt <= deadline {
				res = append(res, fmt.Sprintf("%s: opened at %d ms (%d failures answered by %d ms; bound %d ms)", w.Label, openAt, threshold, reached, deadline))
				checked++
				continue
			}
			what := fmt.Sprintf("%s: breaker of %s not open by %d ms although %d trip failures (failureThreshold %d, profile %s) were answered by %d ms", w.Label, p.ID, deadline, threshold, threshold, p.Profile, reached)
			if openAt >= 0 {
				what += fmt.Sprintf(" (it opened only at %d ms)", openAt)
			}
			vs = append(vs, Violation{AtMs: deadline, What: what})
		}
	}
	return verdict(vs, res, checked, "no whole-provider failure window")
}

// overriddenTrip names the later window that answers provider p's
// requests with something that does not trip the breaker while w runs
// ("" when there is none).
func overriddenTrip(tr *Trace, w *Window, p string) string {
	skip := ""
	for _, o := range overlapping(tr, w.Index, w.StartMs, w.EndMs) {
		if o.Index > w.Index && touches(o, p, "") && !o.Trip {
			skip = fmt.Sprintf("overridden by %q during the window", o.Label)
		}
	}
	return skip
}

// tripTimes scans the samples of window w (up to lag after it) for when
// provider p had answered threshold trip failures since the window began
// (reached) and when its breaker was first seen open (openAt), -1 for
// never; already says the breaker was open when the window started.
func tripTimes(tr *Trace, w *Window, p string, threshold int, lag int64) (reached, openAt int64, already bool) {
	var base *Sample
	reached, openAt = -1, -1
	started := false
	for k := range tr.Samples {
		s := &tr.Samples[k]
		if s.Providers == nil || s.Upstream == nil {
			continue
		}
		if s.AtMs < w.StartMs || s.AfterRestart {
			// A restart's probes reach the upstream too: count from after it.
			base = s
			if s.AtMs < w.StartMs {
				continue
			}
		}
		if base == nil {
			base = s
		}
		if !started {
			started = true
			already = open(base.Providers[p].State)
		}
		if s.AtMs > w.EndMs+lag {
			break
		}
		if reached < 0 && s.AtMs <= w.EndMs && tripCount(s, p)-tripCount(base, p) >= threshold {
			reached = s.AtMs
		}
		if openAt < 0 && open(s.Providers[p].State) {
			openAt = s.AtMs
		}
	}
	return reached, openAt, already
}

func verdict(vs []Violation, notes []string, checked int, none string) Result {
	if len(vs) > 0 {
		var d []string
		for _, v := range vs {
			d = append(d, v.What)
		}
		return Result{Status: Fail, Count: int64(len(vs)), Violations: vs, Detail: strings.Join(d, "; ")}
	}
	if checked == 0 {
		d := none
		if len(notes) > 0 {
			d = strings.Join(notes, "; ")
		}
		return Result{Status: Skip, Detail: d}
	}
	return Result{Status: Pass, Detail: strings.Join(notes, "; ")}
}

func check429(tr *Trace) Result {
	var notes []string
	var vs []Violation
	checked := 0
	for i := range tr.Windows {
		w := &tr.Windows[i]
		if !w.Only429 || w.Match.Model != "" || !w.Check {
			continue
		}
		for _, p := range tr.Topo.Providers {
			if w.Match.Provider != "" && w.Match.Provider != p.ID {
				continue
			}
			skip := ""
			for _, o := range overlapping(tr, w.Index, w.StartMs+tr.lagMs(w), w.EndMs) {
				if touches(o, p.ID, "") && !o.Only429 {
					skip = fmt.Sprintf("%q fails %s too", o.Label, p.ID)
				}
			}
			if skip != "" {
				notes = append(notes, fmt.Sprintf("%s on %s: skipped (%s)", w.Label, p.ID, skip))
				continue
			}
			if n, known := answeredIn(tr, p.ID, w.Labels, w.StartMs, w.EndMs); known && n == 0 {
				notes = append(notes, fmt.Sprintf("%s on %s: not exercised (the upstream answered no 429 in the window)", w.Label, p.ID))
				continue
			}
			from := w.StartMs + tr.lagMs(w)
			var prev *ProviderSample
			n := 0
			for k := range tr.Samples {
				s := &tr.Samples[k]
				if s.AtMs < from || s.AtMs > w.EndMs || s.Providers == nil {
					continue
				}
				cur := s.Providers[p.ID]
				n++
				if prev != nil {
					switch {
					case cur.State == "OPEN" && prev.State != "OPEN":
						vs = append(vs, Violation{AtMs: s.AtMs, What: fmt.Sprintf("%s: breaker of %s went %s → OPEN during a 429-only window", w.Label, p.ID, prev.State)})
					case (cur.State == "CLOSED" || cur.State == "DEGRADED") && prev.State == cur.State && cur.Failures > prev.Failures:
						vs = append(vs, Violation{AtMs: s.AtMs, What: fmt.Sprintf("%s: breaker of %s counted failures %d → %d during a 429-only window", w.Label, p.ID, prev.Failures, cur.Failures)})
					}
				}
				prev = &cur
			}
			if n >= 2 {
				checked++
				notes = append(notes, fmt.Sprintf("%s on %s: breaker unmoved over %d samples", w.Label, p.ID, n))
			}
		}
	}
	return verdict(vs, notes, checked, "no 429 window")
}

// checkSpared checks that connections stay out of cooldown while a window
// that should not touch them runs: once seen serving in the window, a
// connection must not be seen cooling (or terminal) before it ends.
func checkSpared(tr *Trace, class WindowClass, spared func(w *Window, p *model.ProviderConfig) []string, none string) Result {
	var notes []string
	var vs []Violation
	checked := 0
	for i := range tr.Windows {
		w := &tr.Windows[i]
		if w.Class != class || !w.Check {
			continue
		}
		p := providerOf(tr.Topo, w.Match.Provider)
		if n, known := answeredIn(tr, p.ID, w.Labels, w.StartMs, w.EndMs); known && n == 0 {
			notes = append(notes, fmt.Sprintf("%s: not exercised (the upstream answered no %s in the window)", w.Label, strings.Join(w.Labels, "/")))
			continue
		}
		from := w.StartMs + tr.lagMs(w)
		for _, c := range spared(w, p) {
			skip := ""
			for _, o := range overlapping(tr, w.Index, from, w.EndMs) {
				if touches(o, p.ID, c) {
					skip = fmt.Sprintf("%q touches it too", o.Label)
				}
			}
			if skip != "" {
				notes = append(notes, fmt.Sprintf("%s, %s/%s: skipped (%s)", w.Label, p.ID, c, skip))
				continue
			}
			key := p.ID + "/" + c
			seen, n := false, 0
			for k := range tr.Samples {
				s := &tr.Samples[k]
				if s.AtMs < from || s.AtMs > w.EndMs || s.Conns == nil {
					continue
				}
				cs, ok := s.Conns[key]
				if !ok {
					continue
				}
				n++
				if cs.Status == "active" && cs.CooldownMs == 0 {
					seen = true
					continue
				}
				if seen {
					vs = append(vs, Violation{AtMs: s.AtMs, What: fmt.Sprintf("%s: %s went %s (cooldown %d ms) while only %s failed", w.Label, key, cs.Status, cs.CooldownMs, matchLabel(w.Match))})
					break
				}
			}
			if seen {
				checked++
				notes = append(notes, fmt.Sprintf("%s: %s stayed active over %d samples", w.Label, key, n))
			}
		}
	}
	return verdict(vs, notes, checked, none)
}

func checkBadKey(tr *Trace) Result {
	return checkSpared(tr, ClassBadKey, func(w *Window, p *model.ProviderConfig) []string {
		var out []string
		for _, c := range p.Connections {
			if c.ID != w.Match.Connection {
				out = append(out, c.ID)
			}
		}
		return out
	}, "no bad-key window")
}

func checkBadModel(tr *Trace) Result {
	return checkSpared(tr, ClassBadModel, func(w *Window, p *model.ProviderConfig) []string {
		var out []string
		for _, c := range p.Connections {
			out = append(out, c.ID)
		}
		return out
	}, "no bad-model window")
}

// serving lists what does not serve in a sample; terminal connections a
// fault may have caused are allowed.
func notServing(s *Sample, allowTerminal func(conn string) bool) []string {
	var out []string
	for _, p := range sortedKeys(s.Providers) {
		if st := s.Providers[p].State; st != "CLOSED" && st != "DEGRADED" {
			out = append(out, fmt.Sprintf("breaker %s %s", p, st))
		}
	}
	for _, c := range sortedKeys(s.Conns) {
		cs := s.Conns[c]
		switch {
		case cs.Status == "banned" || cs.Status == "expired" || cs.Status == "credits_exhausted":
			if allowTerminal == nil || !allowTerminal(c) {
				out = append(out, fmt.Sprintf("connection %s %s (terminal)", c, cs.Status))
			}
		case !cs.Serving():
			out = append(out, fmt.Sprintf("connection %s %s cooldown %d ms lockouts %d", c, cs.Status, cs.CooldownMs, cs.Lockouts))
		}
	}
	return out
}

// terminalAllowed says whether some window may have made conn terminal.
func (tr *Trace) terminalAllowed(conn string) bool {
	p, c, _ := strings.Cut(conn, "/")
	for i := range tr.Windows {
		if w := &tr.Windows[i]; w.Terminal && touches(w, p, c) {
			return true
		}
	}
	return false
}

// Recovery is the first sample at or after the end of the faults where
// everything served (-1 = none), and what did not serve in the last sample
// before it (or the last sample of all when nothing recovered).
func (tr *Trace) Recovery() (atMs int64, notServingYet []string) {
	for k := range tr.Samples {
		s := &tr.Samples[k]
		if s.AtMs < tr.FaultEndMs || s.Providers == nil {
			continue
		}
		ns := notServing(s, tr.terminalAllowed)
		if len(ns) == 0 {
			return s.AtMs, notServingYet
		}
		notServingYet = ns
	}
	return -1, notServingYet
}

func checkLiveness(tr *Trace) Result {
	l := &tr.Liveness
	if l.Skipped != "" {
		return Result{Status: Skip, Detail: l.Skipped}
	}
	deadline := tr.FaultEndMs + l.BoundMs
	recovered, last := tr.Recovery()
	if recovered < 0 || recovered > deadline {
		what := fmt.Sprintf("not everything served within %d ms of the end of the faults (bound from the settings)", l.BoundMs)
		if len(last) > 0 {
			what += ": " + strings.Join(last, ", ")
		}
		return Result{Status: Fail, Detail: what, Violations: []Violation{{AtMs: deadline, What: what}}}
	}
	var bad []Violation
	for _, p := range l.Final {
		if p.Status != 200 {
			bad = append(bad, Violation{AtMs: recovered, What: "after recovery " + p.String()})
		}
	}
	if len(bad) > 0 {
		return Result{Status: Fail, Count: int64(len(bad)), Violations: bad, Detail: fmt.Sprintf("recovered at +%d ms but %d model(s) did not answer 200", recovered-tr.FaultEndMs, len(bad))}
	}
	return Result{Status: Pass, Detail: fmt.Sprintf("everything served %d ms after the faults ended (bound %d ms); %d models answered 200", recovered-tr.FaultEndMs, l.BoundMs, len(l.Final))}
}

func checkRestarts(tr *Trace) Result {
	all := append([]RestartCheck(nil), tr.Restarts...)
	if tr.Persist != nil {
		all = append(all, *tr.Persist)
	}
	if len(all) == 0 {
		return Result{Status: Skip, Detail: "no restart in this run"}
	}
	var vs []Violation
	var notes []string
	for _, r := range all {
		if r.Err != "" {
			vs = append(vs, Violation{AtMs: r.AtMs, What: fmt.Sprintf("%s: %s", r.Kind, r.Err)})
			continue
		}
		for _, d := range r.Diffs {
			vs = append(vs, Violation{AtMs: r.AtMs, What: fmt.Sprintf("%s at %d ms: state not restored: %s", r.Kind, r.AtMs, d)})
		}
		for _, d := range r.Decisions {
			vs = append(vs, Violation{AtMs: r.AtMs, What: fmt.Sprintf("%s at %d ms: decision changed: %s", r.Kind, r.AtMs, d)})
		}
		n := fmt.Sprintf("%s at %d ms: state restored (gap %d ms)", r.Kind, r.AtMs, r.GapMs)
		switch {
		case r.DecisionsChecked > 0:
			n += fmt.Sprintf(", %d decisions compared", r.DecisionsChecked)
		case r.DecisionsSkipped != "":
			n += ", decisions not compared: " + r.DecisionsSkipped
		}
		notes = append(notes, n)
	}
	return verdict(vs, notes, len(all), "")
}

// leakSlack: goroutines that may legitimately outlive a run by a moment
// (the runtime's and net/http's own) are waited for; a few remain allowed.
const leakSlack = 2

func checkGoroutines(tr *Trace) Result {
	if tr.Leak == nil {
		return Result{Status: Skip, Detail: "in-process runs only"}
	}
	l := tr.Leak
	if l.GoroutinesAfter > l.GoroutinesBefore+leakSlack {
		return Result{Status: Fail, Detail: fmt.Sprintf("%d goroutines before the run, %d after (waited %d ms): %s", l.GoroutinesBefore, l.GoroutinesAfter, l.WaitedMs, strings.Join(l.Stacks, " | "))}
	}
	return Result{Status: Pass, Detail: fmt.Sprintf("%d before, %d after", l.GoroutinesBefore, l.GoroutinesAfter)}
}

func checkFDs(tr *Trace) Result {
	if tr.Leak == nil || tr.Leak.FDsBefore < 0 {
		return Result{Status: Skip, Detail: "in-process runs on Linux only"}
	}
	l := tr.Leak
	if l.FDsAfter > l.FDsBefore+leakSlack {
		return Result{Status: Fail, Detail: fmt.Sprintf("%d open files before the run, %d after (waited %d ms)", l.FDsBefore, l.FDsAfter, l.WaitedMs)}
	}
	return Result{Status: Pass, Detail: fmt.Sprintf("%d before, %d after", l.FDsBefore, l.FDsAfter)}
}
