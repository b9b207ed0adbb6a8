package chaos

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// Run runs one chaos run: faults on the schedule while the load runs, then
// the liveness phase, then the end-of-run checks. It returns the report
// (Report.Passed says whether every invariant held); an error means the
// run could not be carried out (bad options, a gateway that would not
// start), not that an invariant failed.
func Run(ctx context.Context, o Options) (*Report, error) {
	started := time.Now()
	var leak *Leak
	if o.Target == "" && !o.NoLeakCheck {
		leak = baseline()
	}
	// One seed for everything: the schedule, the load, the fault upstreams'
	// probabilities and the gateway's random strategies.
	if o.Seed == 0 && o.Schedule != nil && o.Schedule.HasSeed {
		o.Seed = o.Schedule.Seed
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	e, err := setupEnv(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer e.teardown(context.Background())
	r := &runner{e: e, o: &o, started: started}
	if err := r.prepare(); err != nil {
		return nil, err
	}
	if err := r.warmup(ctx); err != nil {
		return nil, err
	}
	if err := r.faultPhase(ctx); err != nil {
		if ctx.Err() == nil || r.gen == nil {
			return nil, err
		}
		return r.interrupted(leak), nil
	}
	r.livenessPhase(ctx)
	if ctx.Err() != nil {
		return r.interrupted(leak), nil
	}
	r.finish(ctx)
	if ctx.Err() != nil {
		return r.interrupted(leak), nil
	}
	e.teardown(ctx)
	closeIdle(r.q.client)
	if leak != nil {
		leak.settle()
		r.tr.Leak = leak
	}
	return r.report(), nil
}

// interrupted ends a run the caller cancelled (Ctrl-C, SIGTERM) and
// reports what ran: the load stops (requests in flight end as "aborted",
// not judged), everything is torn down, and the checks that need the
// whole run (liveness, restore) are skipped. It never passes.
func (r *runner) interrupted(leak *Leak) *Report {
	at := time.Since(r.t0)
	r.gen.halt()
	if r.monStop != nil {
		select {
		case <-r.monStop:
		default:
			close(r.monStop)
		}
		<-r.monDone
	}
	r.tr.Liveness.Skipped = "the run was interrupted"
	r.collect()
	r.closeClients()
	r.e.teardown(context.Background())
	closeIdle(r.q.client)
	if leak != nil {
		leak.settle()
		r.tr.Leak = leak
	}
	rep := r.report()
	rep.Passed = false
	rep.Interrupted = fmt.Sprintf("stopped %.1fs into the fault phase (of %v); what ran is below, the checks that need the whole run are skipped", at.Seconds(), r.dur)
	return rep
}

// runner holds one run's state.
type runner struct {
	e       *env
	o       *Options
	sched   *Schedule
	dur     time.Duration
	seed    uint64
	load    load
	started time.Time
	t0      time.Time

	q        *requester
	rec      *recorder
	gen      *loadGen
	mon      *monitor
	monStop  chan struct{}
	monDone  chan struct{}
	tr       Trace
	probes   int64 // requests the checks sent to the main gateway
	counted  int64 // the gateway's count of chat requests, summed over restarts
	countErr error
	notes    []string
}

func (r *runner) prepare() error {
	e, o := r.e, r.o
	r.dur = o.Duration
	r.sched = o.Schedule
	r.seed = o.Seed
	if r.sched != nil {
		if r.dur == 0 {
			r.dur = r.sched.Duration
		}
		if r.seed == 0 && r.sched.HasSeed {
			r.seed = r.sched.Seed
		}
	}
	if r.dur == 0 {
		r.dur = DefaultDuration
	}
	if r.dur < time.Second || r.dur > maxDuration {
		return fmt.Errorf("duration must be in [1s, %v], got %v", maxDuration, r.dur)
	}
	if r.seed == 0 {
		r.seed = 1
	}
	if r.sched == nil {
		r.sched = RandomSchedule(&e.topo, r.dur, r.seed)
	}
	for i := range r.sched.Faults {
		f := &r.sched.Faults[i]
		if f.At >= r.dur && f.Action != ActionRestart || f.At > r.dur || f.Until > r.dur {
			return fmt.Errorf("%s: faults[%d] (line %d) runs past the fault phase (%v): lengthen -duration or shorten the schedule", r.sched.File, i, f.Line, r.dur)
		}
		switch f.Action {
		case ActionRestart:
			if !e.inProcess {
				return fmt.Errorf("%s:%d: action restart needs the in-process gateway (no -target)", r.sched.File, f.Line)
			}
		case ActionDBDown:
			if e.db == nil {
				return fmt.Errorf("%s:%d: action db-down needs a Postgres store (store.url: postgres://… on loopback) in an in-process run", r.sched.File, f.Line)
			}
		case ActionDown:
			if u := e.byProv[f.Rule.Match.Provider]; u == nil || u.srv == nil {
				return fmt.Errorf("%s:%d: action down needs a fault upstream this run started for provider %s", r.sched.File, f.Line, f.Rule.Match.Provider)
			}
		}
	}
	l, err := resolveLoad(&o.Load, &r.sched.Load, &e.topo, &e.settings)
	if err != nil {
		return err
	}
	r.load = l
	every := o.SampleEvery
	if every <= 0 {
		every = DefaultSampleEvery
	}
	r.tr = Trace{SampleEveryMs: every.Milliseconds(), FaultEndMs: r.dur.Milliseconds(), Topo: &e.topo, Settings: &e.settings, GatewayCounted: -1}
	r.tr.Windows = windows(r.sched, r.dur, &e.topo, &e.settings)
	r.tr.FaultEndMs = lastFaultEnd(r.tr.Windows)
	var base []faults.Rule
	if len(e.ups) > 0 {
		base = e.ups[0].baseRules
	}
	bound, why := LivenessBound(&e.settings, &e.topo, r.tr.Windows, base, every)
	if o.LivenessBound > 0 {
		bound, why = o.LivenessBound, []string{"set by the caller"}
	}
	r.tr.Liveness = Liveness{BoundMs: bound.Milliseconds(), Why: why, RecoveredAtMs: -1}
	r.q = &requester{client: newClient(l.MaxInFlight + l.Workers + 8), base: e.base, key: e.clientKey, deadline: l.Timeout}
	return nil
}

// warmup waits until every breaker and connection serves before the faults
// start (a restored store may hold an earlier incident), sending one request
// per model at a time so that half-open breakers get their probe.
func (r *runner) warmup(ctx context.Context) error {
	deadline := time.Now().Add(r.tr.Liveness.Duration() + 5*time.Second)
	for {
		var s Sample
		r.e.readHealth(ctx, &s)
		if s.HealthErr == "" && len(notServing(&s, nil)) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if s.HealthErr != "" {
				return fmt.Errorf("the gateway's health does not answer before the run: %s", s.HealthErr)
			}
			return fmt.Errorf("the gateway does not serve before the faults start: %s", strings.Join(notServing(&s, nil), ", "))
		}
		for _, m := range r.load.Models {
			res := r.q.do(ctx, m, false, time.Now())
			r.probes++
			_ = res
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lastFaultEnd is when the last window that can fail anything ends (ms).
func lastFaultEnd(ws []Window) int64 {
	var end int64
	for i := range ws {
		if w := &ws[i]; w.Failing || w.Action == ActionDown {
			end = max(end, w.EndMs)
		}
	}
	return end
}

// Duration is the liveness bound.
func (l *Liveness) Duration() time.Duration { return time.Duration(l.BoundMs) * time.Millisecond }

func (r *runner) rulesFor(u *upstream) []faults.Rule {
	var out []faults.Rule
	for i := range r.sched.Faults {
		f := &r.sched.Faults[i]
		if f.Action != ActionRule || (f.Rule.Match.Provider != "" && !slices.Contains(u.providers, f.Rule.Match.Provider)) {
			continue
		}
		rule := f.Rule
		rule.From, rule.Until = f.At, f.End(r.dur)
		out = append(out, rule)
	}
	return out
}

// faultPhase starts the load and the monitor, starts and ends the
// windows the gateway cannot be told about in advance (down, db-down,
// restart) on time, and at the end puts every upstream back up.
func (r *runner) faultPhase(ctx context.Context) error {
	if err := r.startLoad(ctx); err != nil {
		return err
	}
	r.playEvents(ctx, r.events())
	// The fault phase is over: only the steady rules remain, everything is up.
	// This runs even when the run was interrupted: a -target run must not
	// leave its fault rules in upstreams it does not own.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, u := range r.e.ups {
		if u.srv != nil {
			_ = u.setDown(false)
		}
		if err := u.put(cctx, nil); err != nil {
			r.notes = append(r.notes, err.Error())
		}
	}
	if r.e.db != nil {
		r.e.db.SetDown(false)
	}
	return ctx.Err()
}

// startLoad starts the run's clock, the upstreams' fault rules, the
// monitor and the load.
func (r *runner) startLoad(ctx context.Context) error {
	e := r.e
	r.t0 = time.Now()
	r.rec = newRecorder(r.t0, 250*time.Millisecond, int((r.dur+r.tr.Liveness.Duration()+2*r.load.Timeout)/(250*time.Millisecond))+8)
	every := time.Duration(r.tr.SampleEveryMs) * time.Millisecond
	maxKeep := int((r.dur+r.tr.Liveness.Duration()+2*r.load.Timeout)/every) + 64
	r.mon = &monitor{e: e, start: r.t0, every: every, maxKeep: maxKeep}
	for _, u := range e.ups { // the upstreams' rule clocks start now
		if err := u.put(ctx, r.rulesFor(u)); err != nil {
			return err
		}
	}
	r.monStop, r.monDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.monDone)
		r.mon.run(ctx, r.monStop)
	}()
	r.gen = newLoadGen(r.q, r.rec, &r.load, r.seed)
	r.gen.start(ctx, r.load.Workers)
	return nil
}

// faultEvent is a moment the run itself acts on a fault.
type faultEvent struct {
	at   time.Duration
	f    *Fault
	down bool // start of a window (true) or its end
}

// events lists the starts and ends of the down and db-down windows and
// the restarts, in time order.
func (r *runner) events() []faultEvent {
	var evs []faultEvent
	for i := range r.sched.Faults {
		f := &r.sched.Faults[i]
		switch f.Action {
		case ActionDown, ActionDBDown:
			evs = append(evs, faultEvent{f.At, f, true}, faultEvent{f.End(r.dur), f, false})
		case ActionRestart:
			evs = append(evs, faultEvent{f.At, f, true})
		}
	}
	slices.SortStableFunc(evs, func(a, b faultEvent) int { return int(a.at - b.at) })
	return evs
}

// playEvents acts on each event when its time comes, until the fault
// phase ends or the run is cancelled.
func (r *runner) playEvents(ctx context.Context, evs []faultEvent) {
	next := 0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lastProgress := time.Time{}
	for {
		el := time.Since(r.t0)
		for next < len(evs) && evs[next].at <= el {
			if err := r.act(ctx, evs[next].f, evs[next].down); err != nil {
				r.notes = append(r.notes, err.Error())
			}
			next++
		}
		if r.o.Progress != nil && time.Since(lastProgress) >= time.Second {
			lastProgress = time.Now()
			r.progress("faults")
		}
		if el >= r.dur || ctx.Err() != nil {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

func (r *runner) act(ctx context.Context, f *Fault, start bool) error {
	e := r.e
	switch f.Action {
	case ActionDown:
		return e.byProv[f.Rule.Match.Provider].setDown(start)
	case ActionDBDown:
		e.db.SetDown(start)
	case ActionRestart:
		r.restart(ctx)
	}
	return nil
}

func (r *runner) progress(phase string) {
	s := r.rec.summary()
	var b strings.Builder
	fmt.Fprintf(&b, "chaos %-8s %6.1fs  requests %d  ok %d  typed %d  stream_err %d  violations %d",
		phase, time.Since(r.t0).Seconds(), s.Finished, s.ByKind["success"], s.ByKind["typed_error"], s.ByKind["stream_error"], s.ByKind["violation"])
	if ss := r.mon.all(); len(ss) > 0 {
		last := ss[len(ss)-1]
		for _, p := range sortedKeys(last.Providers) {
			if st := last.Providers[p].State; st != "CLOSED" {
				fmt.Fprintf(&b, "  %s:%s", p, st)
			}
		}
	}
	fmt.Fprintln(r.o.Progress, b.String())
}

// restart drains the load, compares a restored twin's decisions with the
// running gateway's, restarts the gateway on the same store and compares
// the state before and after.
func (r *runner) restart(ctx context.Context) {
	at := time.Since(r.t0).Milliseconds()
	rc := RestartCheck{AtMs: at, Kind: "restart"}
	r.gen.pause()
	r.mon.pause(true)
	defer func() {
		r.mon.pause(false)
		r.mon.markRestart()
		r.gen.resume()
		r.tr.Restarts = append(r.tr.Restarts, rc)
	}()
	r.compareDecisions(ctx, &rc)
	var a Sample
	r.e.readHealth(ctx, &a)
	ta := time.Now()
	r.countRequests(ctx)
	r.closeClients()
	if err := r.e.stopGateway(ctx); err != nil {
		rc.Err = "stopping the gateway: " + err.Error()
	}
	if err := r.e.startGateway(ctx); err != nil {
		rc.Err = "starting the gateway again: " + err.Error()
		return
	}
	var b Sample
	r.e.readHealth(ctx, &b)
	rc.GapMs = time.Since(ta).Milliseconds()
	rc.Diffs = compareState(&a, &b, rc.GapMs)
}

// closeClients closes the clients' idle connections before the gateway
// stops: a connection the client dialled but never used looks active to
// the server's Shutdown for 5 s.
func (r *runner) closeClients() {
	closeIdle(r.q.client)
	closeIdle(r.e.ctl)
}

// countRequests adds the gateway's own request count before it stops.
func (r *runner) countRequests(ctx context.Context) {
	n, err := r.e.requestsCounted(ctx)
	if err != nil {
		r.countErr = err
		return
	}
	r.counted += n
}

// compareDecisions starts a twin gateway restored from the flushed store
// and sends the same probe requests, one per model, alternately to the
// running gateway and to the twin: a restart must not change a decision.
func (r *runner) compareDecisions(ctx context.Context, rc *RestartCheck) {
	e := r.e
	if why := r.randomDecisions(); why != "" {
		rc.DecisionsSkipped = why
		return
	}
	st, saved, err := e.storedState(ctx)
	if err != nil {
		rc.DecisionsSkipped = "reading the stored state: " + err.Error()
		return
	}
	var snap Sample
	e.readHealth(ctx, &snap)
	tw, err := e.startTwin(ctx, st, saved)
	if err != nil {
		rc.Err = "starting a restored twin: " + err.Error()
		return
	}
	defer tw.stop(ctx)
	// Timers that end while the probes run may flip a decision on one side
	// only; models whose providers have one are not compared.
	margin := int64(len(r.load.Models))*2*r.maxProbeMs() + 1000
	near := nearTimers(&snap, margin)
	twinQ := *r.q
	twinQ.base = func() string { return tw.base }
	skipped := 0
	for _, m := range r.load.Models {
		_, ps := resolvable(&e.topo, m)
		if slices.ContainsFunc(ps, func(p string) bool { return near[p] }) {
			skipped++
			continue
		}
		before := r.activeFaults(ps)
		a := r.q.do(ctx, m, false, time.Now())
		r.probes++
		b := twinQ.do(ctx, m, false, time.Now())
		if r.activeFaults(ps) != before {
			// A fault window began or ended between the two requests: they
			// did not meet the same upstream, so they prove nothing.
			skipped++
			continue
		}
		pa, pb := probeOf(&a), probeOf(&b)
		rc.DecisionsChecked++
		if pa != pb {
			rc.Decisions = append(rc.Decisions, fmt.Sprintf("not restarted: %s (%s attempts, %v); restarted: %s (%s attempts, %v)",
				pa, a.Attempts, a.Latency().Round(time.Millisecond), pb, b.Attempts, b.Latency().Round(time.Millisecond)))
		}
	}
	if rc.DecisionsChecked == 0 && skipped > 0 {
		rc.DecisionsSkipped = fmt.Sprintf("every model reaches a provider whose timer ends within %d ms or whose faults changed during the comparison", margin)
	}
}

// randomDecisions says why decisions cannot be compared now: an active
// fault or a routing strategy that draws at random ("" when they can).
func (r *runner) randomDecisions() string {
	el := time.Since(r.t0)
	for i := range r.sched.Faults {
		f := &r.sched.Faults[i]
		if f.Action == ActionRule && f.At <= el && el < f.End(r.dur) && (f.Rule.Probability > 0 && f.Rule.Probability < 1 || f.Rule.Flap != nil || len(f.Rule.Sequence) > 1) {
			return fmt.Sprintf("a probabilistic, flapping or sequence fault is active (%s)", f.Label())
		}
	}
	random := func(s model.Strategy) bool { return s == model.Random || s == model.Weighted || s == model.P2C }
	for _, p := range r.e.topo.Providers {
		if random(p.Strategy) {
			return "provider " + p.ID + " uses a random strategy"
		}
	}
	for _, c := range r.e.topo.Combos {
		if random(c.Strategy) {
			return "combo " + c.ID + " uses a random strategy"
		}
	}
	return ""
}

// nearTimers names the providers whose breaker or a connection's
// cooldown ends within margin ms, or whose breaker is half-open.
func nearTimers(snap *Sample, margin int64) map[string]bool {
	near := map[string]bool{}
	for p, ps := range snap.Providers {
		if ps.RetryMs > 0 && ps.RetryMs < margin || ps.State == "HALF_OPEN" {
			near[p] = true
		}
	}
	for c, cs := range snap.Conns {
		if cs.CooldownMs > 0 && cs.CooldownMs < margin {
			p, _, _ := strings.Cut(c, "/")
			near[p] = true
		}
	}
	return near
}

// activeFaults names the schedule items that affect providers now.
func (r *runner) activeFaults(providers []string) string {
	el := time.Since(r.t0)
	var b strings.Builder
	for i := range r.sched.Faults {
		f := &r.sched.Faults[i]
		if f.Action == ActionRestart || f.Action == ActionDBDown {
			continue
		}
		if p := f.Rule.Match.Provider; p != "" && !slices.Contains(providers, p) {
			continue
		}
		const edge = 50 * time.Millisecond // the upstreams' rule clocks started a moment before the run's
		if (el-f.At).Abs() < edge || (el-f.End(r.dur)).Abs() < edge {
			return fmt.Sprintf("edge@%d", time.Now().UnixNano())
		}
		if el >= f.At && el < f.End(r.dur) {
			fmt.Fprintf(&b, "%d,", i)
		}
	}
	return b.String()
}

func (r *runner) maxProbeMs() int64 {
	var m int64 = 50
	for i := range r.tr.Windows {
		m = max(m, r.tr.Windows[i].MaxAttemptMs)
	}
	return m
}

func probeOf(o *Outcome) Probe {
	return Probe{Model: o.Model, Status: o.Status, Class: o.Class, Served: o.Provider + "/" + o.Conn}
}

// compareState lists what differs between two health reads gapMs apart
// beyond what the elapsed time explains (a timer that ran out).
func compareState(a, b *Sample, gapMs int64) []string {
	if a.HealthErr != "" || b.HealthErr != "" {
		return []string{fmt.Sprintf("health unreadable (before: %q, after: %q)", a.HealthErr, b.HealthErr)}
	}
	tol := 300 + gapMs/10
	var out []string
	for _, p := range sortedKeys(a.Providers) {
		x, y := a.Providers[p], b.Providers[p]
		expired := x.RetryMs > 0 && x.RetryMs <= gapMs+tol
		switch {
		case x.State == "OPEN" && expired && (y.State == "OPEN" || y.State == "HALF_OPEN"):
		case x.State != y.State:
			out = append(out, fmt.Sprintf("breaker %s %s → %s", p, x.State, y.State))
			continue
		case x.State == "OPEN" && !expired && abs(x.RetryMs-gapMs-y.RetryMs) > tol:
			out = append(out, fmt.Sprintf("breaker %s OPEN retry %d ms → %d ms after %d ms", p, x.RetryMs, y.RetryMs, gapMs))
		}
		if x.Failures != y.Failures && !(x.State == "OPEN" && expired) {
			out = append(out, fmt.Sprintf("breaker %s failures %d → %d", p, x.Failures, y.Failures))
		}
	}
	for _, c := range sortedKeys(a.Conns) {
		x, y := a.Conns[c], b.Conns[c]
		expired := x.CooldownMs > 0 && x.CooldownMs <= gapMs+tol
		switch {
		case x.Status != y.Status && !(expired && y.Status == "active"):
			out = append(out, fmt.Sprintf("connection %s %s → %s", c, x.Status, y.Status))
		case x.CooldownMs > 0 && !expired && abs(x.CooldownMs-gapMs-y.CooldownMs) > tol:
			out = append(out, fmt.Sprintf("connection %s cooldown %d ms → %d ms after %d ms", c, x.CooldownMs, y.CooldownMs, gapMs))
		}
		if x.Backoff != y.Backoff {
			out = append(out, fmt.Sprintf("connection %s backoff level %d → %d", c, x.Backoff, y.Backoff))
		}
		if y.Lockouts < x.Lockouts && x.LockoutMs > gapMs+tol {
			out = append(out, fmt.Sprintf("connection %s lockouts %d → %d", c, x.Lockouts, y.Lockouts))
		}
	}
	return out
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// livenessPhase keeps the load running until everything serves again or
// the bound passes, then stops the load and sends one request per model.
func (r *runner) livenessPhase(ctx context.Context) {
	bound := r.tr.Liveness.Duration()
	end := r.t0.Add(time.Duration(r.tr.FaultEndMs)*time.Millisecond + bound)
	lastProgress := time.Now()
	for time.Now().Before(end) && ctx.Err() == nil {
		s := r.mon.sampleOnce(ctx)
		if s.HealthErr == "" && s.Providers != nil && len(notServing(&s, r.tr.terminalAllowed)) == 0 {
			break
		}
		if r.o.Progress != nil && time.Since(lastProgress) >= time.Second {
			lastProgress = time.Now()
			r.progress("liveness")
		}
		time.Sleep(time.Duration(r.tr.SampleEveryMs) * time.Millisecond)
	}
	r.gen.halt()
	close(r.monStop)
	<-r.monDone
	r.mon.sampleOnce(ctx)
	for _, m := range r.load.Models {
		o := r.q.do(ctx, m, false, time.Now())
		r.probes++
		r.tr.Liveness.Final = append(r.tr.Liveness.Final, probeOf(&o))
	}
}

// finish counts, checks persistence and collects the trace.
func (r *runner) finish(ctx context.Context) {
	e := r.e
	if e.inProcess {
		r.countRequests(ctx)
		if r.countErr == nil {
			r.tr.GatewayCounted = r.counted - r.probes
		}
		if !r.o.NoPersistCheck {
			r.tr.Persist = r.persistCheck(ctx)
		}
	}
	r.collect()
	// The report's liveness says when everything served again, or what
	// still did not.
	at, ns := r.tr.Recovery()
	r.tr.Liveness.RecoveredAtMs = at
	if at < 0 {
		r.tr.Liveness.NotServing = ns
	}
}

// persistCheck stops the gateway and starts a new one on the same store:
// the final state must come back.
func (r *runner) persistCheck(ctx context.Context) *RestartCheck {
	rc := &RestartCheck{AtMs: time.Since(r.t0).Milliseconds(), Kind: "end"}
	var a Sample
	r.e.readHealth(ctx, &a)
	ta := time.Now()
	r.closeClients()
	if err := r.e.stopGateway(ctx); err != nil {
		rc.Err = "stopping the gateway: " + err.Error()
		return rc
	}
	if err := r.e.startGateway(ctx); err != nil {
		rc.Err = "starting a gateway on the same store: " + err.Error()
		return rc
	}
	var b Sample
	r.e.readHealth(ctx, &b)
	rc.GapMs = time.Since(ta).Milliseconds()
	rc.Diffs = compareState(&a, &b, rc.GapMs)
	return rc
}

// baseline counts goroutines and open files before anything starts.
func baseline() *Leak {
	runtime.GC()
	r := selfResources()
	return &Leak{GoroutinesBefore: r.Goroutines, FDsBefore: r.FDs}
}

// settle waits (bounded) for goroutines and files to return to the
// baseline, then records what is left.
func (l *Leak) settle() {
	start := time.Now()
	var r Resources
	for {
		// Pooled objects that hold descriptors (the splice pipes io.Copy
		// between two TCP connections keeps in a sync.Pool) are closed by
		// finalizers: let the collector run them.
		runtime.GC()
		r = selfResources()
		if r.Goroutines <= l.GoroutinesBefore && r.FDs <= l.FDsBefore {
			break
		}
		// Closing connections and stopping servers finish asynchronously:
		// wait for the exact baseline a while, then settle for the slack.
		if el := time.Since(start); el > 5*time.Second || el > 2*time.Second && r.Goroutines <= l.GoroutinesBefore+leakSlack && r.FDs <= l.FDsBefore+leakSlack {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.GoroutinesAfter, l.FDsAfter, l.WaitedMs = r.Goroutines, r.FDs, time.Since(start).Milliseconds()
	if l.GoroutinesAfter > l.GoroutinesBefore {
		l.Stacks = goroutineTops(40)
	}
}

// settled waits for the leak baseline to settle and returns it; with no
// baseline (the check is off) it returns nil.
func (l *Leak) settled() *Leak {
	if l == nil {
		return nil
	}
	l.settle()
	return l
}

// goroutineTops returns the top frame of up to n goroutines.
func goroutineTops(n int) []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(g, "\n")
		if len(lines) >= 2 {
			out = append(out, strings.TrimSpace(lines[1]))
		}
		if len(out) >= n {
			break
		}
	}
	return out
}

// collect puts the monitor's samples, the request summary and the
// per-request violations into the trace (a finished or an interrupted run).
func (r *runner) collect() {
	r.tr.Samples = r.mon.all()
	r.tr.Requests = r.rec.summary()
	r.tr.PerRequest = r.rec.perRequest()
}
