package replay

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/sim"
)

// Options control one replay.
type Options struct {
	// Speed divides every duration of the file and its settings (default 1).
	Speed float64
	// Target is a running gateway's base URL; "" starts one in-process.
	Target string
	// ManagementKey authenticates management calls to Target (default: env
	// BREAKWATER_ADMIN_KEY).
	ManagementKey string
	// ClientKey authenticates client requests to Target when it has
	// clientKeys (default: env BREAKWATER_CLIENT_KEY).
	ClientKey string
	// Upstream is the control URL of the `breakwater upstream` the target's
	// providers point at; replay installs the file's rules there and counts
	// upstream calls from its /_stats. Without it a target run cannot
	// inject faults: the rules and the upstream-call checks are skipped.
	Upstream string
	// Clean resets the target's breakers, cooldowns and lockouts, and every
	// connection of the scenario (terminal state, last error, backoff),
	// before the run (target mode only; an in-process gateway always starts
	// clean).
	Clean bool
	// ApplySettings PATCHes the file's (scaled) settings onto the target.
	ApplySettings bool
	// Settle is how long after its instant an `at:` expect is read (default
	// 100ms); it is bounded by half the gap to the next scheduled event, so a
	// read never sees what a later instant does.
	Settle time.Duration
	// Slack is the tolerance of exact-time checks (`cooldown:`,
	// `remaining:`, wall-clock `retryAfter:`): found may differ from
	// expected by Settle + the read's own duration + Slack (default 50ms);
	// on the wall clock it may be lower by the time from the instant to
	// the read's end + Slack (check.go readWindow).
	Slack time.Duration
	// WallClock gives the in-process gateway the plain wall clock instead
	// of the schedule-anchored one (clock.go); a -target gateway always
	// runs on its own wall clock.
	WallClock bool
	// SkipIdle lets an in-process replay jump over idle time: when no
	// client request is in flight, the wait for the next instant is cut to
	// skipIdleKeep of real time and the gateway's clock jumps to that
	// instant. Every gateway timer that runs belongs to a request in flight
	// (attempt deadlines, cooldown waits, queue budgets); what idle time
	// changes (cooldowns ending, backoff decaying, a breaker going
	// HALF_OPEN, a daily reset) the gateway reads from its clock. So a file
	// of hours with short bursts of traffic replays in seconds at speed 1,
	// with no duration scaled. Ignored with Target or WallClock.
	SkipIdle bool
	// Logger receives the gateway's logs (default: discard).
	Logger *slog.Logger

	waiting func(int)   // the clock's waiting-time hook (clock.go)
	busy    func(bool)  // the clock's busy-time hook (clock.go)
	bound   func(int64) // the clock's bound hook (clock.go)
}

// Result is one replay's outcome; Failures use the file's own times.
type Result struct {
	Scenario string        `json:"scenario"`
	File     string        `json:"file"`
	Speed    float64       `json:"speed"`
	Target   string        `json:"target,omitempty"`
	Passed   bool          `json:"passed"`
	Failures []sim.Failure `json:"failures,omitempty"`
	// Skipped lists checks this mode cannot make.
	Skipped []string `json:"skipped,omitempty"`
	// Warnings are what scaling could not do exactly, and similar.
	Warnings []string `json:"warnings,omitempty"`
	Expects  int      `json:"expects"`
	Requests int      `json:"requests"`
	// Upstream is the number of upstream attempts the fault upstream
	// answered (-1 when unknown).
	Upstream int            `json:"upstreamCalls"`
	Statuses map[int]int    `json:"statuses"`
	Results  map[string]int `json:"results"`
	// Scenario time covered (in the file's time) and the wall time it took.
	Simulated time.Duration `json:"simulatedNs"`
	Wall      time.Duration `json:"wallNs"`
	// MaxLag is the latest any scheduled event ran after its instant (wall
	// clock): large values mean the machine could not keep up with -speed.
	MaxLag time.Duration `json:"maxLagNs"`
	// RequestLog and States are what the gateway did, in the simulator's
	// terms, for comparison with sim.Observer (Compare).
	RequestLog []sim.RequestObservation `json:"requestLog"`
	States     []sim.StateObservation   `json:"states"`
}

// event kinds, in their order at one instant (docs/scenarios.md: actions, then
// arrivals, then expects).
const (
	evAction = iota
	evArrival
	evExpect
)

type event struct {
	at   time.Duration
	kind int
	idx  int // action / expect index, or request number
	item int // traffic item of an arrival
	seq  int
}

// Run replays sc (as loaded, unscaled) and checks its expects.
func Run(ctx context.Context, sc *sim.Scenario, o Options) (*Result, error) {
	o.fillDefaults()
	scaled, warns, err := Scale(sc, o.Speed)
	if err != nil {
		return nil, err
	}
	rw, skipped := reproWarnings(sc, scaled, o.Target != "") // repro.go
	res := &Result{Scenario: sc.Name, File: sc.File, Speed: o.Speed, Target: o.Target, Warnings: append(rw, warns...),
		Skipped: skipped, Expects: len(sc.Expects), Statuses: map[int]int{}, Results: map[string]int{}, Upstream: -1}
	start := sc.Start
	if start.IsZero() {
		start = sim.DefaultStart
	}
	// The in-process gateway and fault upstream read the scenario's virtual
	// epoch at the start, so a daily reset falls where the simulator has it;
	// their clock follows the schedule (clock.go).
	clk := &schedClock{epoch: start, next: -1, wallClk: o.WallClock, maxQ: maxQuantum}
	o.waiting, o.busy, o.bound = clk.waiting, clk.setBusy, clk.setBound
	var e *env
	if o.Target == "" {
		e, err = startLocal(ctx, scaled, &o, clk.now)
	} else {
		e, err = attachTarget(ctx, &o)
	}
	if err != nil {
		return nil, err
	}
	defer e.close()
	if o.Target != "" {
		if err := prepareTarget(ctx, e, scaled, &o, res); err != nil {
			return nil, err
		}
	}
	r := &runner{o: &o, orig: sc, sc: scaled, e: e, res: res, done: map[int]*sim.RequestObservation{}, clk: clk, idle: make(chan struct{}, 1)}
	if err := r.run(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// fillDefaults gives unset options their defaults; against a target the
// keys come from the environment.
func (o *Options) fillDefaults() {
	if o.Speed == 0 {
		o.Speed = 1
	}
	if o.Settle <= 0 {
		o.Settle = 100 * time.Millisecond
	}
	if o.Slack <= 0 {
		o.Slack = 50 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Target != "" {
		if o.ManagementKey == "" {
			o.ManagementKey = os.Getenv("BREAKWATER_ADMIN_KEY")
		}
		if o.ClientKey == "" {
			o.ClientKey = os.Getenv("BREAKWATER_CLIENT_KEY")
		}
	}
}

// run plays the schedule from now and checks the expects into r.res.
func (r *runner) run(ctx context.Context) error {
	evs := r.schedule()
	wall := time.Now()
	t0 := time.Now()
	r.t0 = t0
	next := time.Duration(-1)
	if len(evs) > 0 {
		next = evs[0].at
	}
	r.clk.start(t0, next)
	if err := r.e.installRules(ctx, r.sc.Rules); err != nil {
		return fmt.Errorf("installing the upstream rules: %w", err)
	}
	if err := r.play(ctx, evs); err != nil {
		return err
	}
	res := r.res
	res.Wall = time.Since(wall)
	if len(evs) > 0 {
		res.Simulated = max(res.Simulated, time.Duration(float64(evs[len(evs)-1].at)*r.o.Speed))
	}
	if st, err := r.e.upstreamStats(ctx); err == nil {
		res.Upstream = st.Total
		r.stats = st
	}
	r.fillAborted(ctx)
	r.finishExpects()
	res.Passed = len(res.Failures) == 0
	return nil
}

// prepareTarget checks the target has the scenario's topology, optionally
// cleans its state and applies the settings.
func prepareTarget(ctx context.Context, e *env, sc *sim.Scenario, o *Options, res *Result) error {
	st, err := e.readState(ctx, &sc.Topology)
	if err != nil {
		return fmt.Errorf("reading the target's health (is -management-key right?): %w", err)
	}
	for _, p := range sc.Topology.Providers {
		for _, c := range p.Connections {
			if !slices.ContainsFunc(st.Connections, func(v model.ConnectionView) bool { return v.Provider == p.ID && v.Connection == c.ID }) {
				return fmt.Errorf("the target gateway has no connection %s/%s, which the scenario uses", p.ID, c.ID)
			}
		}
	}
	if o.ApplySettings {
		if err := e.mgmt(ctx, http.MethodPatch, "/api/resilience", map[string]any(settings.Full(sc.Settings)), nil); err != nil {
			return fmt.Errorf("applying the scenario's settings: %w", err)
		}
	} else {
		warnOtherSettings(ctx, e, sc, res)
	}
	if o.Clean {
		if err := cleanTarget(ctx, e, sc, st); err != nil {
			return err
		}
	}
	return noteTargetHistory(ctx, e, sc, res)
}

// warnOtherSettings warns when the target runs other settings than the
// scenario.
func warnOtherSettings(ctx context.Context, e *env, sc *sim.Scenario, res *Result) {
	var v struct {
		Settings json.RawMessage `json:"settings"`
	}
	if e.mgmt(ctx, http.MethodGet, "/api/resilience", nil, &v) != nil {
		return
	}
	got := model.DefaultSettings()
	if json.Unmarshal(v.Settings, &got) != nil {
		return
	}
	a, b := flatten(settings.Full(sc.Settings)), flatten(settings.Full(got))
	var diff []string
	for _, k := range sortedKeys(a) {
		if fmt.Sprint(a[k]) != fmt.Sprint(b[k]) {
			diff = append(diff, fmt.Sprintf("%s=%v (target %v)", k, a[k], b[k]))
		}
	}
	if len(diff) > 0 {
		res.Warnings = append(res.Warnings, "the target runs other settings than the scenario (use -apply-settings): "+strings.Join(diff, ", "))
	}
}

// cleanTarget resets the target's breakers, cooldowns and lockouts, and
// every connection of the scenario (and any terminal one); st is the
// target's state before.
func cleanTarget(ctx context.Context, e *env, sc *sim.Scenario, st sim.StateObservation) error {
	for _, step := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/api/resilience/reset", map[string]any{}},
		{http.MethodPost, "/api/resilience/cooldowns", map[string]any{"all": true}},
		{http.MethodDelete, "/api/resilience/model-cooldowns", map[string]any{"all": true}},
	} {
		if err := e.mgmt(ctx, step.method, step.path, step.body, nil); err != nil {
			return fmt.Errorf("cleaning the target: %w", err)
		}
	}
	// A connection's reset clears its terminal state and every error
	// field: lastError / lastErrorType, error code, backoff, refusal
	// streaks, the provider-window entry (clearing cooldowns keeps
	// the last error, and health shows no time for it, so an error an
	// earlier run left could not be told from one this run produced).
	// Every connection of the scenario, and any terminal one.
	for _, c := range st.Connections {
		if c.Status.Terminal() || usesConn(&sc.Topology, c.Provider, c.Connection) {
			if err := e.mgmt(ctx, http.MethodPost, "/api/resilience/connections/"+c.Provider+"/"+c.Connection+"/reset", map[string]any{}, nil); err != nil {
				return fmt.Errorf("cleaning the target: %w", err)
			}
		}
	}
	return nil
}

// noteTargetHistory remembers where the target's use counters start and
// warns about what earlier traffic left that the run would read as its
// own.
func noteTargetHistory(ctx context.Context, e *env, sc *sim.Scenario, res *Result) error {
	// The use counters survive a clean (no API resets them): remember
	// where they start, so `uses` and -compare count this run only.
	st, err := e.readState(ctx, &sc.Topology)
	if err != nil {
		return fmt.Errorf("reading the target's health: %w", err)
	}
	e.uses0 = map[string]uint64{}
	used := false
	var stale []string
	for _, c := range st.Connections {
		e.uses0[c.Provider+"/"+c.Connection] = c.Uses
		used = used || c.Uses > 0
		if c.LastErrorType != model.ReasonNone && usesConn(&sc.Topology, c.Provider, c.Connection) {
			stale = append(stale, fmt.Sprintf("%s/%s %q", c.Provider, c.Connection, c.LastErrorType))
		}
	}
	if len(stale) > 0 {
		// Without -clean (or with traffic of its own): an old last error
		// reads as this run's until the connection's next success or failure.
		res.Warnings = append(res.Warnings, "connections carry a lastError from before the run (use -clean): "+strings.Join(stale, ", "))
	}
	leastUsed := slices.ContainsFunc(sc.Topology.Providers, func(p model.ProviderConfig) bool { return p.Strategy == model.LeastUsed }) ||
		slices.ContainsFunc(sc.Topology.Combos, func(c model.ComboConfig) bool { return c.Strategy == model.LeastUsed })
	if used && leastUsed {
		res.Warnings = append(res.Warnings, "the target has served traffic before: its least-used picks start from those use counts (restart it for the simulator's picks)")
	}
	if e.upstream == "" {
		res.Skipped = append(res.Skipped, "upstream rules not installed and upstreamCalls not counted: give -upstream URL of the `breakwater upstream` the target's providers point at")
	}
	return nil
}

// usesConn reports whether the scenario has connection p/c.
func usesConn(topo *model.Topology, p, c string) bool {
	return slices.ContainsFunc(topo.Providers, func(pc model.ProviderConfig) bool {
		return pc.ID == p && slices.ContainsFunc(pc.Connections, func(cc model.ConnectionConfig) bool { return cc.ID == c })
	})
}

type runner struct {
	o    *Options
	orig *sim.Scenario
	sc   *sim.Scenario // scaled
	e    *env
	res  *Result
	t0   time.Time
	clk  *schedClock

	mu     sync.Mutex
	done   map[int]*sim.RequestObservation
	sent   map[int]time.Duration // request number → its send offset in the file's time
	lagMax time.Duration
	stats  *faults.Stats
	wg     sync.WaitGroup

	inflight atomic.Int64  // client requests sent and not yet answered
	idle     chan struct{} // signalled when inflight drops to 0 (SkipIdle)
}

// schedule lists the run's events in the simulator's order: arrivals are
// numbered exactly as the simulator numbers them (time, then the order the
// simulator scheduled them, Poisson gaps from the same random stream).
func (r *runner) schedule() []event {
	var evs []event
	seq := 0
	push := func(ev event) {
		ev.seq = seq
		seq++
		evs = append(evs, ev)
	}
	for i, a := range r.sc.Actions {
		push(event{at: a.At, kind: evAction, idx: i})
	}
	for i, e := range r.sc.Expects {
		if e.Kind == sim.ExpectState {
			push(event{at: e.At, kind: evExpect, idx: i})
		}
	}
	// Arrivals: a small heap mirroring the simulator's (the relative order
	// of arrival events depends only on their own scheduling order).
	type arr struct {
		at       time.Duration
		item, sq int
	}
	rng := trafficStream(r.orig.Seed)
	left := make([]int, len(r.orig.Traffic))
	var q []arr
	asq := 0
	for i, t := range r.orig.Traffic {
		left[i] = max(t.Count, 1)
		q = append(q, arr{at: t.At, item: i, sq: asq})
		asq++
	}
	r.sent = map[int]time.Duration{}
	n := 0
	for len(q) > 0 {
		bi := 0
		for j := range q {
			if q[j].at < q[bi].at || (q[j].at == q[bi].at && q[j].sq < q[bi].sq) {
				bi = j
			}
		}
		a := q[bi]
		q = slices.Delete(q, bi, bi+1)
		t := &r.orig.Traffic[a.item]
		left[a.item]--
		if left[a.item] > 0 {
			gap := t.Every.Milliseconds()
			if t.Poisson && gap > 0 {
				gap = int64(rng.ExpFloat64() * float64(gap))
			}
			q = append(q, arr{at: a.at + time.Duration(gap)*time.Millisecond, item: a.item, sq: asq})
			asq++
		}
		n++
		r.sent[n] = a.at
		// the scaled instant of this arrival
		push(event{at: time.Duration(float64(a.at) / r.o.Speed), kind: evArrival, idx: n, item: a.item})
	}
	r.res.Requests = n
	slices.SortStableFunc(evs, func(a, b event) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.kind, b.kind), cmp.Compare(a.seq, b.seq))
	})
	return evs
}

// sameInstantStagger bounds the wait for one arrival to take its turn
// before the next arrival of its instant is sent; sameInstantGap is the
// pause after it is.
const (
	sameInstantStagger = 100 * time.Millisecond
	sameInstantGap     = 2 * time.Millisecond
)

// trafficStream is the simulator's "traffic" random stream (sim/seed.go).
func trafficStream(seed uint64) *rand.Rand {
	d := sim.DeriveSeed(seed, "traffic")
	return rand.New(rand.NewPCG(d, splitmix64(d)))
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// play runs the events on the wall clock, one instant at a time: actions,
// then arrivals, then the `at:` expects, which wait for the requests sent
// at their own instant (at most half the gap to the next instant; a
// zero-latency answer is part of the instant in the simulator).
func (r *runner) play(ctx context.Context, evs []event) error {
	var prev arrival
	for i := 0; i < len(evs); {
		at := evs[i].at
		j := i
		for j < len(evs) && evs[j].at == at {
			j++
		}
		in := instant{at: at, next: -1, gap: 2 * time.Second, events: j - i}
		for _, ev := range evs[i:j] {
			in.arrivals += b2i(ev.kind == evArrival)
		}
		if j < len(evs) {
			in.next, in.gap = evs[j].at, evs[j].at-at
		}
		if err := r.sleepUntil(ctx, at); err != nil {
			return err
		}
		if r.e.prog != nil && !r.o.WallClock {
			r.e.prog.awaitSettled(r.clk.epoch.Add(at))
		}
		r.clk.dispatch(at, in.next, in.gap)
		for _, ev := range evs[i:j] {
			switch ev.kind {
			case evAction:
				r.action(ctx, ev.idx)
			case evArrival:
				r.takenUp(prev)
				prev = r.arrive(ctx, ev, &in)
			case evExpect:
				r.readAt(ctx, ev.idx, &in)
			}
		}
		i = j
	}
	r.wg.Wait()
	return ctx.Err()
}

// instant is the scheduled instant play is running: when it is, the next
// one (-1 for none) and the gap to it, how many events it has, and the
// done channels of the arrivals sent so far.
type instant struct {
	at, next, gap time.Duration
	events        int
	arrivals      int
	sent          []chan struct{}
}

// arrive sends one arrival of instant in.
func (r *runner) arrive(ctx context.Context, ev event, in *instant) arrival {
	r.wg.Add(1)
	r.inflight.Add(1)
	done, wrote := make(chan struct{}), make(chan struct{})
	in.sent = append(in.sent, done)
	if r.e.prog != nil {
		r.e.prog.sentReq(ev.idx) // before its goroutine runs: the next instant waits for its first step
	}
	// Several arrivals of one instant: on the replay's own clock it stands
	// at the instant until the last one is sent, as the simulator has
	// them all arrive then; a wait the first one started does not move it
	// while a loaded machine is slow to send the next.
	together := in.arrivals > 1 && r.ownClock()
	if together && len(in.sent) == 1 {
		r.clk.freeze(true)
	}
	go r.send(ctx, ev.idx, ev.item, time.Now(), done, wrote)
	if in.events > 1 {
		r.staggerSameInstant(ev.idx, done, wrote)
		// The instant lasts while its arrivals are sent: the quantum
		// counts from the last one.
		r.clk.dispatch(in.at, in.next, in.gap)
	}
	if together && len(in.sent) == in.arrivals {
		r.clk.freeze(false) // time resumes from the instant
	}
	return arrival{n: ev.idx, done: done}
}

// staggerSameInstant makes arrivals of one instant reach the gateway in
// the simulator's order (a saturated gate, a pacer or a fill-first pick
// decides by arrival order): in-process the next is sent once this one
// was answered or waits on purpose (an upstream latency or stall, a
// gateway wait: its turn is taken, and its outcome so far recorded),
// bounded only by quietBound, since what it waits for is the gateway's
// own work; against a target once it is on the wire, plus a moment for
// the gateway to take it up. The gateway's work does not move the clock, so the instant lasts
// while they are sent.
func (r *runner) staggerSameInstant(n int, done, wrote chan struct{}) {
	if r.e.prog != nil {
		r.e.prog.awaitTurnTaken(n, done)
		return
	}
	t := time.NewTimer(sameInstantStagger)
	defer t.Stop()
	select {
	case <-wrote:
		time.Sleep(sameInstantGap)
	case <-t.C:
	}
}

// readAt reads `at:` expect i with the clock standing at its instant,
// once the requests sent at the instant answered and no attempt is in
// transit (both bounded by half the gap to the next instant), and the
// gateway took in every upstream answer that came before (quiet.go).
func (r *runner) readAt(ctx context.Context, i int, in *instant) {
	r.clk.freeze(true)
	defer r.clk.freeze(false)
	budget := max(r.o.Settle, in.gap/2)
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, budget)
	for _, d := range in.sent {
		select {
		case <-d:
		case <-wctx.Done():
		}
	}
	cancel()
	if len(in.sent) == 0 {
		time.Sleep(min(r.o.Settle, in.gap/2))
	}
	if r.e.prog != nil {
		// A deadline of the gateway's due within the slack after the
		// instant is the simulator's at the instant: the gateway took the
		// few milliseconds an upstream's answer spends in its hands (the
		// upstream's next wait running meanwhile) before arming it, from
		// a stream's headers to its first-content watchdog. The read
		// stands at the latest such deadline.
		inst := r.clk.now()
		if d := r.e.prog.lastDeadline(inst, inst.Add(r.o.Slack)); !d.IsZero() {
			r.clk.standAt(d.Sub(r.clk.epoch))
		}
		r.e.prog.awaitDue(r.clk.now())                     // the clock stands at the instant
		r.e.prog.awaitCaughtUp(budget - time.Since(start)) // in transit: what is left of the budget
	}
	r.expectState(ctx, i)
}

// arrival is a request play sent: its number and its done channel.
type arrival struct {
	n    int
	done chan struct{}
}

// takenUpBound bounds the wait for the gateway to take up the previous
// arrival. Taking it up is the gateway's own work (parse, select, the
// first decision; no timer of the gateway's or the upstream's runs
// first), so the bound is reached only by a stalled machine.
const takenUpBound = 10 * time.Second

// takenUp waits until the in-process gateway's model made its first
// decision for the previous arrival (or answered it), so requests reach
// the model in the simulator's arrival order however late a loaded
// machine runs a request's goroutine: a request sent 50 ms after another
// must not take the upstream's first answer, or a paced slot, before it.
func (r *runner) takenUp(prev arrival) {
	if prev.done == nil || r.e.requests == nil {
		return
	}
	t := time.NewTimer(takenUpBound)
	defer t.Stop()
	select {
	case <-prev.done:
	case <-r.e.requests.stepped(prev.n):
	case <-t.C:
	}
}

// skipIdleKeep is the real time an idle gap keeps when SkipIdle cuts it:
// room for the gateway to finish what an answer left behind (a store
// write, a released permit) before the next instant.
const skipIdleKeep = 30 * time.Millisecond

// skipIdle moves the run's start back by the idle part of the wait for
// instant at (SkipIdle), so the instant is dispatched after skipIdleKeep.
func (r *runner) skipIdle(at time.Duration) {
	if !r.skipping() || r.inflight.Load() > 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := time.Until(r.t0.Add(at)); d > skipIdleKeep {
		r.t0 = r.t0.Add(-(d - skipIdleKeep))
	}
}

func (r *runner) skipping() bool {
	return r.o.SkipIdle && !r.o.WallClock && r.o.Target == ""
}

// answered ends a client request; the last one in flight lets an idle gap
// be skipped.
func (r *runner) answered() {
	if r.inflight.Add(-1) == 0 && r.skipping() {
		select {
		case r.idle <- struct{}{}:
		default:
		}
	}
}

func (r *runner) sleepUntil(ctx context.Context, at time.Duration) error {
	for {
		r.skipIdle(at)
		r.mu.Lock()
		t0 := r.t0
		r.mu.Unlock()
		d := time.Until(t0.Add(at))
		if d <= 0 {
			r.lag(-d)
			return ctx.Err()
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
			return nil
		case <-r.idle:
			t.Stop() // the requests in flight answered: skip what is left
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

func (r *runner) lag(d time.Duration) {
	r.mu.Lock()
	r.lagMax = max(r.lagMax, d)
	r.res.MaxLag = r.lagMax
	r.mu.Unlock()
}

// offset is the file-time offset of a wall-clock instant.
func (r *runner) offset(t time.Time) time.Duration {
	r.mu.Lock()
	t0 := r.t0
	r.mu.Unlock()
	return time.Duration(float64(t.Sub(t0)) * r.o.Speed).Round(time.Millisecond)
}

// ownClock reports whether requests are timed on the replay's own clock
// (clock.go): in-process, unless WallClock. That clock is the gateway's:
// it stands while the gateway works and while a late timer or goroutine
// keeps a due instant waiting, so a request's `took` counts what the
// simulator counts (upstream latencies, cooldown waits, paced slots,
// deadlines) and not how late a loaded machine ran the rest.
func (r *runner) ownClock() bool { return r.e.prog != nil && !r.o.WallClock }

// sentOffset is when request n was sent, in the file's time: on the
// replay's own clock its scheduled instant (the gateway's clock has it
// arrive then, however late the client's goroutine ran), otherwise the
// wall clock's offset of sentAt.
func (r *runner) sentOffset(n int, sentAt time.Time) time.Duration {
	if r.ownClock() {
		return r.sent[n]
	}
	return r.offset(sentAt)
}

// doneOffset is when a request was answered, in the file's time: on the
// replay's own clock its reading now (ownClock), otherwise the wall
// clock's offset of doneAt.
func (r *runner) doneOffset(doneAt time.Time) time.Duration {
	if r.ownClock() {
		return time.Duration(float64(r.clk.now().Sub(r.clk.epoch)) * r.o.Speed).Round(time.Millisecond)
	}
	return r.offset(doneAt)
}

// action runs one operator action through the management API.
func (r *runner) action(ctx context.Context, i int) {
	a := &r.sc.Actions[i]
	var err error
	refs := func() []string {
		var s []string
		for _, c := range a.Connections {
			s = append(s, c.String())
		}
		return s
	}
	switch a.Kind {
	case sim.ActResetBreaker:
		err = r.e.mgmt(ctx, http.MethodPost, "/api/resilience/reset", map[string]any{"provider": a.Provider}, nil)
	case sim.ActClearCooldowns:
		body := map[string]any{"connectionIds": refs()}
		if a.All || len(a.Connections) == 0 {
			body = map[string]any{"all": true}
			if a.Provider != "" {
				body["provider"] = a.Provider
			}
		}
		err = r.e.mgmt(ctx, http.MethodPost, "/api/resilience/cooldowns", body, nil)
	case sim.ActResetConnection:
		for _, c := range a.Connections {
			err = cmp.Or(err, r.e.mgmt(ctx, http.MethodPost, "/api/resilience/connections/"+c.Provider+"/"+c.Connection+"/reset", map[string]any{}, nil))
		}
	case sim.ActClearLockout:
		if a.All {
			err = r.e.mgmt(ctx, http.MethodDelete, "/api/resilience/model-cooldowns", map[string]any{"all": true}, nil)
		}
		for _, c := range a.Connections {
			err = cmp.Or(err, r.e.mgmt(ctx, http.MethodDelete, "/api/resilience/model-cooldowns",
				map[string]any{"provider": c.Provider, "connection": c.Connection, "model": a.Model}, nil))
		}
	case sim.ActConnectionTest:
		// The gateway's test calls GET /models on every connection of the
		// provider; the simulator's action passes the named one only.
		seen := map[string]bool{}
		for _, c := range a.Connections {
			if !seen[c.Provider] {
				seen[c.Provider] = true
				err = cmp.Or(err, r.e.mgmt(ctx, http.MethodPost, "/api/providers/"+c.Provider+"/test", map[string]any{}, nil))
			}
		}
	case sim.ActSet:
		// A merge patch over the saved layer, as the simulator stacks the
		// action's layer over the scenario's (Scale made it the full
		// scaled tree when speed ≠ 1).
		err = r.e.mgmt(ctx, http.MethodPatch, "/api/resilience", map[string]any(a.Settings), nil)
	case sim.ActLeaseAcquire, sim.ActLeaseRelease, sim.ActLeaseRenew:
		err = r.leaseAction(ctx, a) // lease.go
	case sim.ActRateLimit:
		for _, c := range a.Connections {
			err = cmp.Or(err, r.e.mgmt(ctx, http.MethodPost, "/api/rate-limits", map[string]any{"connectionId": c.String(), "enabled": a.Enabled}, nil))
		}
	}
	if err != nil {
		r.fail(a.Line, a.At, "action "+a.Kind.String(), "the action to apply", err.Error())
	}
}

func (r *runner) fail(line int, scaledAt time.Duration, what, expected, found string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := time.Duration(float64(scaledAt) * r.o.Speed).Round(time.Millisecond)
	r.res.Failures = append(r.res.Failures, sim.Failure{Line: line, At: at, What: what, Expected: expected, Found: found})
}

// send makes one client request and records what the client saw.
func (r *runner) send(ctx context.Context, n, item int, sentAt time.Time, done, wrote chan struct{}) {
	defer r.wg.Done()
	defer r.answered()
	defer close(done)
	if r.e.prog != nil {
		defer r.e.prog.finished(n)
	}
	var wroteOnce sync.Once
	markWrote := func() { wroteOnce.Do(func() { close(wrote) }) }
	defer markWrote()
	t := &r.sc.Traffic[item]
	ob := sim.RequestObservation{N: n, SentAt: r.sentOffset(n, sentAt), Attempts: -1}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if t.Timeout > 0 {
		rctx, cancel = r.clientTimeout(ctx, n, sentAt, t.Timeout)
		defer cancel()
	}
	req, err := r.clientRequest(rctx, t, n, markWrote)
	if err != nil {
		ob.Status, ob.Result, ob.Code = 0, "error", err.Error()
		r.record(ob, time.Now())
		return
	}
	resp, err := r.e.cli.Do(req)
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			ob.Status, ob.Result, ob.Code = 499, sim.ResultClientAbort, "client_abort"
		} else {
			ob.Status, ob.Result, ob.Code = 0, "error", "transport: "+err.Error()
		}
		r.record(ob, time.Now())
		return
	}
	defer resp.Body.Close()
	waited := observeHeaders(&ob, t, resp)
	streamErr, readErr := readAnswer(&ob, t, resp)
	switch {
	case readErr != nil && rctx.Err() != nil && ctx.Err() == nil:
		ob.Status, ob.Result, ob.Code = 499, sim.ResultClientAbort, "client_abort"
	case resp.StatusCode/100 == 2 && (streamErr != "" || readErr != nil):
		ob.Result, ob.Code = sim.ResultStreamError, cmp.Or(streamErr, "stream_interrupted")
	case resp.StatusCode/100 == 2 && (ob.Attempts > 1 || waited):
		ob.Result = sim.ResultFallback
	case resp.StatusCode/100 == 2:
		ob.Result = sim.ResultServed
	case ob.Attempts == 0:
		ob.Result = sim.ResultRejected
	default:
		ob.Result = sim.ResultFailed
	}
	r.record(ob, time.Now())
}

// clientTimeout is the context of request n, whose client gives up
// timeout after it was sent. On the replay's own clock (ownClock) that is
// its scheduled instant plus timeout on that clock, reported to the
// progress tracker as a deadline of the request, so the clock does not
// pass it before the client gave up and a read of its instant waits for
// it, as the simulator's client abort is an event at that instant; a
// loaded machine that runs the gateway late cannot make the client give
// up on an answer the simulator has before then. Otherwise it is sentAt
// plus timeout on the wall clock.
func (r *runner) clientTimeout(ctx context.Context, n int, sentAt time.Time, timeout time.Duration) (context.Context, context.CancelFunc) {
	if !r.ownClock() {
		return context.WithDeadline(ctx, sentAt.Add(timeout))
	}
	due := r.clk.epoch.Add(time.Duration(float64(r.sent[n])/r.o.Speed) + timeout)
	p := r.e.prog
	p.deadline(n, due, proxy.DeadlineArmed)
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTimer(timeout)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			if left := due.Sub(r.clk.now()); left > 0 {
				t.Reset(max(left, time.Millisecond)) // the clock has not reached it yet
				continue
			}
			p.deadline(n, due, proxy.DeadlineDisarmed) // the client leaves: no step of the gateway's is owed
			cancel()
			return
		}
	}()
	return rctx, func() {
		p.deadline(n, due, proxy.DeadlineDisarmed) // a no-op once it ran out
		cancel()
	}
}

// clientRequest builds replay request n in its client's format
// (format.go), numbered by its X-Request-Id; wrote is called once it is on
// the wire.
func (r *runner) clientRequest(ctx context.Context, t *sim.Traffic, n int, wrote func()) (*http.Request, error) {
	path, body := requestFor(t, n)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.e.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote() }}))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", replayRequestID+strconv.Itoa(n))
	if r.e.clientKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.e.clientKey)
	}
	if t.Session != "" {
		req.Header.Set("X-Session-Id", t.Session)
	}
	if t.Lease != "" && r.e.leases != nil {
		r.e.leases.leaseHeaders(req.Header, t) // lease.go: a managed request
	}
	return req, nil
}

// observeHeaders records what the answer's headers say: status, who
// served it, the attempts, the Retry-After; and reports whether the
// gateway waited out a cooldown for it.
func observeHeaders(ob *sim.RequestObservation, t *sim.Traffic, resp *http.Response) (waited bool) {
	ob.Status = modelStatus(t.Format, resp.StatusCode)
	if p, c := resp.Header.Get("X-Breakwater-Provider"), resp.Header.Get("X-Breakwater-Connection"); p != "" && c != "" {
		ob.ServedBy = p + "/" + c
	}
	if v, err := strconv.Atoi(resp.Header.Get("X-Breakwater-Attempts")); err == nil {
		ob.Attempts = v
	}
	if v, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64); err == nil {
		ob.RetryAfterMs = v * 1000
	}
	return resp.Header.Get("X-Breakwater-Waits") != ""
}

// readAnswer reads the body: a stream's error event (and who resumed it),
// or an error answer's code.
func readAnswer(ob *sim.RequestObservation, t *sim.Traffic, resp *http.Response) (streamErr string, readErr error) {
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var resumedBy string
		var resumedAttempts int
		streamErr, resumedBy, resumedAttempts, readErr = readFormatSSE(t.Format, resp.Body)
		if resumedBy != "" { // a resumed stream names who continued it (proxy.ResumeComment)
			ob.ServedBy, ob.Attempts = resumedBy, resumedAttempts
		}
		return streamErr, readErr
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode/100 != 2 {
		ob.Code = formatErrorCode(t.Format, b)
	}
	return "", err
}

// readSSE reads a stream to its end; it returns the code of an error event
// (the gateway's answer when a committed stream breaks) and, for a resumed
// stream, who continued it last and the attempts made by then.
func readSSE(body io.Reader) (string, string, int, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	code, by, attempts := "", "", 0
	for sc.Scan() {
		line := sc.Bytes()
		if who, n, ok := resumedBy(line); ok {
			by, attempts = who, n
			continue
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if bytes.Contains(data, []byte(`"error"`)) {
			if c := errorCode(data); c != "" {
				code = c
			} else {
				code = "stream_error"
			}
		}
	}
	return code, by, attempts, sc.Err()
}

// resumedBy reads the comment a resumed stream carries (proxy.ResumeComment):
// who continued it, after how many attempts of the request.
func resumedBy(line []byte) (by string, attempts int, ok bool) {
	c, ok := bytes.CutPrefix(line, []byte(": "+proxy.ResumeComment+" "))
	if !ok {
		return "", 0, false
	}
	var p, conn string
	if _, err := fmt.Sscanf(string(c), "provider=%s connection=%s attempts=%d", &p, &conn, &attempts); err != nil {
		return "", 0, false
	}
	return p + "/" + conn, attempts, true
}

// errorCode reads the code of an OpenAI-shaped error body.
func errorCode(b []byte) string {
	var v struct {
		Error struct {
			Code any `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &v) != nil || v.Error.Code == nil {
		return ""
	}
	switch c := v.Error.Code.(type) {
	case string:
		return c
	case float64:
		return strconv.FormatFloat(c, 'f', -1, 64)
	}
	return fmt.Sprint(v.Error.Code)
}

// fillAborted completes, in-process, what a client that gave up before the
// answer's headers could not read: the attempts and the connection of the
// last one, from the gateway's own line on the request (gwlog.go).
func (r *runner) fillAborted(ctx context.Context) {
	if r.e.requests == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.res.RequestLog {
		ob := &r.res.RequestLog[i]
		if ob.Result != sim.ResultClientAbort || ob.Attempts >= 0 {
			continue
		}
		g, ok := r.e.requests.of(ctx, ob.N)
		if !ok {
			continue
		}
		ob.Attempts = g.attempts
		if g.connection != "" {
			ob.ServedBy = g.provider + "/" + g.connection
		}
		d := *ob
		r.done[ob.N] = &d
	}
}

func (r *runner) record(ob sim.RequestObservation, doneAt time.Time) {
	ob.DoneAt = r.doneOffset(doneAt)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done[ob.N] = &ob
	r.res.RequestLog = append(r.res.RequestLog, ob)
	r.res.Statuses[ob.Status]++
	r.res.Results[ob.Result]++
	if file := ob.DoneAt; file > r.res.Simulated {
		r.res.Simulated = file
	}
}
