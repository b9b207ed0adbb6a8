package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime/metrics"
	"slices"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy"
)

// SoakOptions configure a soak run (RunSoak): a fixed open-loop request
// rate for a while, through the gateway, with no faults.
type SoakOptions struct {
	// Config, Environ, Target, ManagementKey and ClientKey are as in Options.
	Config        *proxy.Config
	Environ       []string
	Target        string
	ManagementKey string
	ClientKey     string
	// Rates are the open-loop rates (requests/s): one step each, in order.
	// With several (a ramp) the run stops at the first step that misses a
	// threshold and reports the highest rate that met them all. Default 200.
	Rates []float64
	// Duration is each step's measured time (default 30 s); Warmup runs
	// before it at the same rate and is not measured (default 2 s).
	Duration time.Duration
	Warmup   time.Duration
	// Calibrate is how long the same rate runs straight at the fault
	// upstream, without the gateway, to measure the added latency (default
	// min(5 s, Duration); 0 with NoCalibrate skips it).
	Calibrate   time.Duration
	NoCalibrate bool
	// Models to ask for (default: the first provider's first model).
	Models      []string
	StreamRatio float64
	MaxInFlight int // default 1024
	Timeout     time.Duration
	// P95AddedMs bounds the p95 latency the gateway adds (gateway − direct,
	// same rate, same machine); default 5. MaxErrorRate bounds the share of
	// requests that do not succeed (default 0.001). MaxHeapGrowth bounds the
	// live-heap growth from the first to the last quarter of a step, as a
	// fraction (default 0.25; at least 8 MiB are always allowed).
	P95AddedMs    float64
	MaxErrorRate  float64
	MaxHeapGrowth float64
	SampleEvery   time.Duration // default 1 s
	// UpstreamLatency is the fault upstream's answer time during the soak
	// (default 0: the gateway's own cost is what is measured; the config's
	// steady rules are replaced for the soak).
	UpstreamLatency time.Duration
	Seed            uint64
	NoLeakCheck     bool
	Logger          *slog.Logger
	Progress        io.Writer
}

// SoakReport is the soak's measurements per rate step.
type SoakReport struct {
	Steps         []SoakStep `json:"steps"`
	SustainedRate float64    `json:"sustainedRate"` // highest rate that met every threshold (0 = none)
	P95AddedMs    float64    `json:"p95AddedBoundMs"`
	MaxErrorRate  float64    `json:"maxErrorRate"`
	MaxHeapGrowth float64    `json:"maxHeapGrowth"`
}

// SoakStep is one rate.
type SoakStep struct {
	Rate       float64  `json:"rate"`
	Achieved   float64  `json:"achieved"` // finished requests/s over the measured time
	Requests   int64    `json:"requests"`
	Errors     int64    `json:"errors"`
	ErrorRate  float64  `json:"errorRate"`
	Skipped    int64    `json:"skipped"` // not sent: maxInFlight reached
	Gateway    Latency  `json:"gateway"`
	Direct     *Latency `json:"direct,omitempty"`
	AddedP50Ms float64  `json:"addedP50Ms"`
	AddedP95Ms float64  `json:"addedP95Ms"`
	AddedP99Ms float64  `json:"addedP99Ms"`
	// Heap: live heap (after the last GC) at the first and last quarter of
	// the step (medians), and the growth between them.
	HeapFirstBytes  uint64   `json:"heapFirstBytes"`
	HeapLastBytes   uint64   `json:"heapLastBytes"`
	HeapGrowth      float64  `json:"heapGrowth"`
	GoroutinesFirst int      `json:"goroutinesFirst"`
	GoroutinesLast  int      `json:"goroutinesLast"`
	Passed          bool     `json:"passed"`
	Why             []string `json:"why,omitempty"`
}

func (s *SoakReport) summary(w io.Writer) {
	fmt.Fprintf(w, "  soak steps (p95 added ≤ %.1f ms, error rate ≤ %.2f%%, heap growth ≤ %.0f%%):\n", s.P95AddedMs, s.MaxErrorRate*100, s.MaxHeapGrowth*100)
	for _, st := range s.Steps {
		mark := "ok  "
		if !st.Passed {
			mark = "FAIL"
		}
		direct := "n/a"
		if st.Direct != nil {
			direct = fmt.Sprintf("%.2f", st.Direct.P95)
		}
		fmt.Fprintf(w, "    %s %7.0f req/s (achieved %.0f): gateway p50 %.2f p95 %.2f p99 %.2f ms; direct p95 %s ms; added p95 %.2f ms; errors %.3f%%; live heap %.1f → %.1f MiB; goroutines %d → %d\n",
			mark, st.Rate, st.Achieved, st.Gateway.P50, st.Gateway.P95, st.Gateway.P99, direct, st.AddedP95Ms, st.ErrorRate*100,
			float64(st.HeapFirstBytes)/(1<<20), float64(st.HeapLastBytes)/(1<<20), st.GoroutinesFirst, st.GoroutinesLast)
		for _, why := range st.Why {
			fmt.Fprintf(w, "         %s\n", why)
		}
	}
	if s.SustainedRate > 0 {
		fmt.Fprintf(w, "  sustained: %.0f req/s with p95 added latency ≤ %.1f ms\n", s.SustainedRate, s.P95AddedMs)
	} else {
		fmt.Fprintf(w, "  sustained: no step met the thresholds\n")
	}
}

// liveHeap reads the live heap marked by the last GC (flat over time when
// nothing leaks, unlike the allocated heap that saws between GCs).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		return s[0].Value.Uint64()
	}
	return selfResources().HeapBytes
}

// RunSoak runs the soak: per rate, a calibration straight at the fault
// upstream, then the gateway at the same rate with thresholds on p95 added
// latency, error rate and memory growth.
func RunSoak(ctx context.Context, o SoakOptions) (*Report, error) {
	started := time.Now()
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	var leak *Leak
	if o.Target == "" && !o.NoLeakCheck {
		leak = baseline()
	}
	co := &Options{Config: o.Config, Environ: o.Environ, Target: o.Target, ManagementKey: o.ManagementKey, ClientKey: o.ClientKey,
		Seed: o.Seed, Logger: o.Logger}
	e, err := setupEnv(ctx, co)
	if err != nil {
		return nil, err
	}
	defer e.teardown(context.Background())
	s, err := newSoakRun(ctx, &o, e)
	if err != nil {
		return nil, err
	}
	sr, skipped := s.steps(ctx)
	closeIdle(s.q.client)
	return s.report(ctx, started, sr, skipped, leak), nil
}

// setDefaults fills in the options left zero and rejects rates and
// durations out of range.
func (o *SoakOptions) setDefaults() error {
	if len(o.Rates) == 0 {
		o.Rates = []float64{200}
	}
	for _, r := range o.Rates {
		if r <= 0 || r > maxRate {
			return fmt.Errorf("soak: rate must be in (0, %d], got %v", maxRate, r)
		}
	}
	if o.Duration == 0 {
		o.Duration = 30 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 2 * time.Second
	}
	if o.Calibrate == 0 && !o.NoCalibrate {
		o.Calibrate = min(5*time.Second, o.Duration)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 1024
	}
	if o.P95AddedMs == 0 {
		o.P95AddedMs = 5
	}
	if o.MaxErrorRate == 0 {
		o.MaxErrorRate = 0.001
	}
	if o.MaxHeapGrowth == 0 {
		o.MaxHeapGrowth = 0.25
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = time.Second
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Duration > maxDuration {
		return fmt.Errorf("soak: duration at most %v", maxDuration)
	}
	return nil
}

// soakRun holds one soak's state across its rate steps.
type soakRun struct {
	o      *SoakOptions
	e      *env
	l      load
	direct *direct
	q      *requester
	rec    *recorder
	mon    *monitor
}

// newSoakRun resolves the load, replaces the upstreams' rules with one
// steady answer and sets up the clients, recorder and monitor.
func newSoakRun(ctx context.Context, o *SoakOptions, e *env) (*soakRun, error) {
	models := o.Models
	if len(models) == 0 {
		if m := firstModel(&e.topo); m != "" {
			models = []string{m}
		}
	}
	l, err := resolveLoad(&LoadSpec{Workers: new(int), Rate: &o.Rates[0], MaxInFlight: &o.MaxInFlight, StreamRatio: &o.StreamRatio, Models: models, Timeout: o.Timeout}, nil, &e.topo, &e.settings)
	if err != nil {
		return nil, err
	}
	steady := faults.Response{Latency: o.UpstreamLatency, Stream: faults.Stream{Chunks: 4}}
	for _, u := range e.ups {
		u.baseRules = nil
		if err := u.put(ctx, []faults.Rule{{Respond: &steady}}); err != nil {
			return nil, err
		}
	}
	direct := e.directRequester(l.Models[0], l.Timeout, o.MaxInFlight)
	if direct == nil && !o.NoCalibrate {
		o.NoCalibrate = true
	}
	t0 := time.Now()
	return &soakRun{o: o, e: e, l: l, direct: direct,
		rec: newRecorder(t0, time.Second, int(time.Duration(len(o.Rates))*(o.Duration+o.Warmup+o.Calibrate+10*time.Second)/time.Second)+8),
		q:   &requester{client: newClient(o.MaxInFlight + 8), base: e.base, key: e.clientKey, deadline: l.Timeout},
		mon: &monitor{e: e, start: t0, every: o.SampleEvery, maxKeep: 1 << 16},
	}, nil
}

// steps runs the rate steps in order and returns them with the requests
// the client could not send.
func (s *soakRun) steps(ctx context.Context) (*SoakReport, int64) {
	o := s.o
	sr := &SoakReport{P95AddedMs: o.P95AddedMs, MaxErrorRate: o.MaxErrorRate, MaxHeapGrowth: o.MaxHeapGrowth}
	var skipped int64
	for i, rate := range o.Rates {
		st := SoakStep{Rate: rate}
		if !o.NoCalibrate {
			d := s.calibrate(ctx, rate)
			st.Direct = &d
		}
		samples := s.measure(ctx, i, &st)
		skipped += st.Skipped
		st.judge(o, len(samples))
		sr.Steps = append(sr.Steps, st)
		if st.Passed {
			sr.SustainedRate = max(sr.SustainedRate, rate)
		} else if len(o.Rates) > 1 && i > 0 {
			break // a ramp stops at the first rate it cannot sustain
		}
		if ctx.Err() != nil {
			break
		}
	}
	return sr, skipped
}

// calibrate runs the rate straight at the upstream and returns the
// latency measured after a short warm-up.
func (s *soakRun) calibrate(ctx context.Context, rate float64) Latency {
	drec := newRecorder(time.Now(), time.Second, 1)
	dl := s.l
	dl.Rate, dl.Models = rate, []string{s.direct.model}
	g := newLoadGen(s.direct.q, drec, &dl, s.o.Seed)
	g.start(ctx, 0)
	sleepCtx(ctx, min(time.Second, s.o.Calibrate/4))
	drec.setPhase("measure")
	sleepCtx(ctx, s.o.Calibrate)
	g.halt()
	d := drec.phaseLatency("measure")
	closeIdle(s.direct.q.client)
	return d
}

// measure runs step i's rate through the gateway, warm-up then measured,
// fills in what the step measured and returns the monitor's samples.
func (s *soakRun) measure(ctx context.Context, i int, st *SoakStep) []Sample {
	o, rec := s.o, s.rec
	sl := s.l
	sl.Rate = st.Rate
	g := newLoadGen(s.q, rec, &sl, o.Seed+uint64(i))
	rec.setPhase("")
	g.start(ctx, 0)
	sleepCtx(ctx, o.Warmup)
	phase := fmt.Sprintf("step%d", i)
	before := rec.summary()
	rec.setPhase(phase)
	mStart := time.Now()
	samples := s.sample(ctx, st.Rate, mStart, before)
	rec.setPhase("")
	measured := time.Since(mStart)
	after := rec.summary()
	g.halt()
	st.Skipped = g.skipped.Load()
	st.Gateway = rec.phaseLatency(phase)
	st.Requests = int64(st.Gateway.Count)
	st.Errors = failed(after) - failed(before)
	if st.Requests > 0 {
		st.ErrorRate = float64(st.Errors) / float64(st.Requests)
	}
	st.Achieved = float64(st.Requests) / measured.Seconds()
	st.HeapFirstBytes, st.HeapLastBytes, st.GoroutinesFirst, st.GoroutinesLast = quarters(samples)
	return samples
}

// failed counts the finished requests that did not succeed.
func failed(r Requests) int64 { return r.Finished - r.ByKind["success"] }

// sample reads the gateway's resources every SampleEvery for the step's
// measured time, with the live heap when the gateway runs in this process.
func (s *soakRun) sample(ctx context.Context, rate float64, mStart time.Time, before Requests) []Sample {
	o := s.o
	var samples []Sample
	tick := time.NewTicker(o.SampleEvery)
	defer tick.Stop()
	for time.Since(mStart) < o.Duration && ctx.Err() == nil {
		sm := s.mon.sampleOnce(ctx)
		if s.e.inProcess {
			sm.HeapBytes = liveHeap()
		}
		samples = append(samples, sm)
		if o.Progress != nil {
			cur := s.rec.summary()
			fmt.Fprintf(o.Progress, "soak %6.0f req/s  %5.1fs/%v  requests %d  errors %d\n", rate, time.Since(mStart).Seconds(), o.Duration, cur.Finished-before.Finished, failed(cur)-failed(before))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	return samples
}

// judge derives the added latency and heap growth of a measured step and
// checks them against the thresholds; samples is how many resource reads
// the heap quarters come from.
func (st *SoakStep) judge(o *SoakOptions, samples int) {
	if st.Direct != nil {
		st.AddedP50Ms = round2(st.Gateway.P50 - st.Direct.P50)
		st.AddedP95Ms = round2(st.Gateway.P95 - st.Direct.P95)
		st.AddedP99Ms = round2(st.Gateway.P99 - st.Direct.P99)
	} else {
		st.AddedP50Ms, st.AddedP95Ms, st.AddedP99Ms = st.Gateway.P50, st.Gateway.P95, st.Gateway.P99
		st.Why = append(st.Why, "no calibration: added latency is the whole gateway latency")
	}
	if st.HeapFirstBytes > 0 {
		st.HeapGrowth = round2(float64(int64(st.HeapLastBytes)-int64(st.HeapFirstBytes)) / float64(st.HeapFirstBytes))
	}
	st.Passed = true
	miss := func(why string) {
		st.Passed = false
		st.Why = append(st.Why, why)
	}
	if st.AddedP95Ms > o.P95AddedMs {
		miss(fmt.Sprintf("p95 added latency %.2f ms > %.2f ms", st.AddedP95Ms, o.P95AddedMs))
	}
	if st.ErrorRate > o.MaxErrorRate {
		miss(fmt.Sprintf("error rate %.3f%% > %.3f%%", st.ErrorRate*100, o.MaxErrorRate*100))
	}
	if st.Achieved < 0.95*st.Rate {
		miss(fmt.Sprintf("achieved %.0f req/s < 95%% of %.0f (the client could not keep the rate: %d not sent)", st.Achieved, st.Rate, st.Skipped))
	}
	if grow := int64(st.HeapLastBytes) - int64(st.HeapFirstBytes); samples >= 8 && grow > 8<<20 && st.HeapGrowth > o.MaxHeapGrowth {
		miss(fmt.Sprintf("live heap grew %.1f MiB (%.0f%%) from the first to the last quarter", float64(grow)/(1<<20), st.HeapGrowth*100))
	}
}

// report tears the run down, runs the checks that apply to a run without
// faults, adds the soak's thresholds and builds the report.
func (s *soakRun) report(ctx context.Context, started time.Time, sr *SoakReport, skipped int64, leak *Leak) *Report {
	o, e, rec := s.o, s.e, s.rec
	tr := Trace{SampleEveryMs: o.SampleEvery.Milliseconds(), Topo: &e.topo, Settings: &e.settings, GatewayCounted: -1,
		Liveness: Liveness{Skipped: "soak runs inject no faults"}}
	if e.inProcess {
		n, err := e.requestsCounted(ctx)
		if err == nil {
			tr.GatewayCounted = n
		}
	}
	tr.Samples = s.mon.all()
	tr.Requests = rec.summary()
	tr.PerRequest = rec.perRequest()
	e.teardown(context.WithoutCancel(ctx))
	tr.Leak = leak.settled()
	res := Check(&tr)
	res = slices.DeleteFunc(res, func(r Result) bool {
		switch r.Name {
		case "breaker-opens-within-threshold", "429-never-opens-breaker", "bad-key-spares-siblings", "bad-model-spares-connection", "liveness", "restart-restores-state":
			return true
		}
		return false
	})
	res = append(res, soakResults(sr, len(o.Rates) > 1)...)
	all, js, sse, ok := rec.latency()
	l := s.l
	rep := &Report{Mode: "soak", Seed: o.Seed, Gateway: "in-process", StartedAt: started, WallMs: time.Since(started).Milliseconds(),
		Passed: Passed(res), Load: &l, Requests: tr.Requests, Skipped: skipped, Latency: LatencyReport{all, js, sse, ok},
		Invariants: res, Leak: tr.Leak, Soak: sr}
	rep.Load.Rate = o.Rates[0]
	if o.Target != "" {
		rep.Gateway = o.Target
	}
	rep.Timeline = timeline(rec.timeline(), tr.Samples, time.Second, &tr)
	markInterrupted(ctx, rep)
	return rep
}

// soakResults turns the steps into invariant results. A single rate must
// meet every threshold; a ramp must meet them at its first rate (the
// report names the highest rate that met them).
func soakResults(sr *SoakReport, ramp bool) []Result {
	if len(sr.Steps) == 0 {
		return []Result{{Name: "soak-thresholds", Status: Fail, Detail: "no step ran"}}
	}
	first := sr.Steps[0]
	grow := int64(first.HeapLastBytes) - int64(first.HeapFirstBytes)
	out := []Result{
		passIf("soak-p95-added-latency", first.AddedP95Ms <= sr.P95AddedMs,
			fmt.Sprintf("%.0f req/s: p95 added %.2f ms (bound %.2f ms)", first.Rate, first.AddedP95Ms, sr.P95AddedMs)),
		passIf("soak-error-rate", first.ErrorRate <= sr.MaxErrorRate,
			fmt.Sprintf("%.0f req/s: %.3f%% (bound %.3f%%)", first.Rate, first.ErrorRate*100, sr.MaxErrorRate*100)),
		passIf("soak-rate-achieved", first.Achieved >= 0.95*first.Rate, fmt.Sprintf("%.0f of %.0f req/s", first.Achieved, first.Rate)),
		passIf("soak-flat-memory", !(grow > 8<<20 && first.HeapGrowth > sr.MaxHeapGrowth),
			fmt.Sprintf("live heap %.1f → %.1f MiB (%+.0f%%), goroutines %d → %d", float64(first.HeapFirstBytes)/(1<<20), float64(first.HeapLastBytes)/(1<<20), first.HeapGrowth*100, first.GoroutinesFirst, first.GoroutinesLast)),
	}
	if ramp {
		var parts []string
		for _, st := range sr.Steps {
			parts = append(parts, fmt.Sprintf("%.0f:%v", st.Rate, map[bool]string{true: "ok", false: "missed"}[st.Passed]))
		}
		out = append(out, Result{Name: "soak-ramp", Status: Pass, Detail: fmt.Sprintf("sustained %.0f req/s (%s)", sr.SustainedRate, strings.Join(parts, ", "))})
	}
	return out
}

// quarters returns the median heap and goroutines of the first and the
// last quarter of the samples.
func quarters(s []Sample) (heapFirst, heapLast uint64, gFirst, gLast int) {
	if len(s) == 0 {
		return
	}
	q := max(len(s)/4, 1)
	med := func(xs []Sample) (uint64, int) {
		h := make([]uint64, len(xs))
		g := make([]int, len(xs))
		for i := range xs {
			h[i], g[i] = xs[i].HeapBytes, xs[i].Goroutines
		}
		slices.Sort(h)
		slices.Sort(g)
		return h[len(h)/2], g[len(g)/2]
	}
	heapFirst, gFirst = med(s[:q])
	heapLast, gLast = med(s[len(s)-q:])
	return
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// firstModel names the first provider's first model as "provider/model",
// or "" when no provider lists one.
func firstModel(topo *model.Topology) string {
	for _, p := range topo.Providers {
		if len(p.Models) > 0 {
			return p.ID + "/" + p.Models[0]
		}
	}
	return ""
}

// directRequester sends the same requests straight to the fault upstream
// that serves model ("provider/model"), bypassing the gateway.
type direct struct {
	q     *requester
	model string
}

func (e *env) directRequester(m string, timeout time.Duration, maxConns int) *direct {
	pid, mod, ok := strings.Cut(m, "/")
	if !ok {
		return nil
	}
	for _, p := range e.cfg.Providers {
		if p.ID != pid || len(p.Connections) == 0 || !strings.HasSuffix(p.BaseURL, "/v1") {
			continue
		}
		base := strings.TrimSuffix(p.BaseURL, "/v1")
		if _, err := checkLoopbackURL("upstream", base); err != nil {
			return nil
		}
		return &direct{q: &requester{client: newClient(maxConns + 8), base: func() string { return base }, key: p.Connections[0].APIKey, deadline: timeout}, model: mod}
	}
	return nil
}
