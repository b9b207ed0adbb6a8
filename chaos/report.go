package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Report is everything a run measured and concluded. It is written as JSON
// (-json) and drawn (-report); Summary prints it for people.
type Report struct {
	Mode         string    `json:"mode"` // chaos, soak, heap
	Name         string    `json:"name,omitempty"`
	Seed         uint64    `json:"seed,omitempty"`
	Gateway      string    `json:"gateway"` // "in-process" or the target URL
	StartedAt    time.Time `json:"startedAt"`
	WallMs       int64     `json:"wallMs"`
	FaultPhaseMs int64     `json:"faultPhaseMs,omitempty"`
	Passed       bool      `json:"passed"`
	// Interrupted says why the run stopped early (Ctrl-C, SIGTERM): the
	// report covers what ran, and a run cut short never passes.
	Interrupted string   `json:"interrupted,omitempty"`
	Load        *load    `json:"load,omitempty"`
	Windows     []Window `json:"windows,omitempty"`
	Requests    Requests `json:"requests"`
	// Skipped counts open-loop requests not sent because maxInFlight were
	// already in flight.
	Skipped    int64          `json:"skipped,omitempty"`
	Latency    LatencyReport  `json:"latency"`
	Invariants []Result       `json:"invariants"`
	Liveness   *Liveness      `json:"liveness,omitempty"`
	Restarts   []RestartCheck `json:"restarts,omitempty"`
	Persist    *RestartCheck  `json:"persist,omitempty"`
	Leak       *Leak          `json:"leak,omitempty"`
	Timeline   Timeline       `json:"timeline"`
	Soak       *SoakReport    `json:"soak,omitempty"`
	Heap       *HeapReport    `json:"heap,omitempty"`
	Notes      []string       `json:"notes,omitempty"`
}

// LatencyReport holds the latency summaries of a run.
type LatencyReport struct {
	All         Latency `json:"all"`
	JSON        Latency `json:"json"`
	Stream      Latency `json:"stream"`
	SuccessJSON Latency `json:"successJson"`
}

// Timeline is the run over time: request outcomes per bucket, and per
// sample the breaker states, the connections that did not serve and the
// process resources (heap, goroutines, open files).
type Timeline struct {
	BucketMs int64       `json:"bucketMs"`
	Buckets  []Bucket    `json:"buckets"`
	Points   []TimePoint `json:"points"`
	Conns    []string    `json:"conns,omitempty"`
	Provs    []string    `json:"providers,omitempty"`
}

// TimePoint is one sample, compact.
type TimePoint struct {
	AtMs       int64             `json:"atMs"`
	Breakers   map[string]string `json:"breakers,omitempty"`
	NotServing []string          `json:"notServing,omitempty"`
	Resources
}

func (r *runner) report() *Report {
	res := Check(&r.tr)
	all, js, sse, ok := r.rec.latency()
	rep := &Report{Mode: "chaos", Name: r.sched.Name, Seed: r.seed, Gateway: "in-process", StartedAt: r.started,
		WallMs: time.Since(r.started).Milliseconds(), FaultPhaseMs: r.dur.Milliseconds(), Passed: Passed(res),
		Load: &r.load, Windows: r.tr.Windows, Requests: r.tr.Requests, Skipped: r.gen.skipped.Load(),
		Latency: LatencyReport{All: all, JSON: js, Stream: sse, SuccessJSON: ok}, Invariants: res,
		Liveness: &r.tr.Liveness, Restarts: r.tr.Restarts, Persist: r.tr.Persist, Leak: r.tr.Leak, Notes: r.notes}
	if !r.e.inProcess {
		rep.Gateway = r.o.Target
	}
	if r.countErr != nil {
		rep.Notes = append(rep.Notes, "the gateway's request count was not readable: "+r.countErr.Error())
	}
	rep.Timeline = timeline(r.rec.timeline(), r.tr.Samples, r.rec.bucket, &r.tr)
	return rep
}

func timeline(b []Bucket, samples []Sample, bucket time.Duration, tr *Trace) Timeline {
	t := Timeline{BucketMs: bucket.Milliseconds(), Buckets: b}
	seenC := map[string]bool{}
	for i := range samples {
		s := &samples[i]
		p := TimePoint{AtMs: s.AtMs, Resources: s.Resources}
		if s.Providers != nil {
			p.Breakers = map[string]string{}
			for id, ps := range s.Providers {
				p.Breakers[id] = ps.State
			}
			for c, cs := range s.Conns {
				if !cs.Serving() {
					p.NotServing = append(p.NotServing, c+"="+connState(cs))
					seenC[c] = true
				}
			}
		}
		t.Points = append(t.Points, p)
	}
	if tr != nil && tr.Topo != nil {
		for _, p := range tr.Topo.Providers {
			t.Provs = append(t.Provs, p.ID)
			for _, c := range p.Connections {
				t.Conns = append(t.Conns, p.ID+"/"+c.ID)
			}
		}
	}
	return t
}

func connState(c ConnSample) string {
	switch {
	case c.Status != "active" && c.Status != "cooldown":
		return c.Status
	case c.CooldownMs > 0 || c.Status == "cooldown":
		return "cooldown"
	case c.Lockouts > 0:
		return "lockout"
	}
	return "active"
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// markInterrupted marks a soak or heap report whose run the caller
// cancelled: its numbers cover a cut-short run and it never passes.
func markInterrupted(ctx context.Context, rep *Report) {
	if ctx.Err() != nil {
		rep.Passed = false
		rep.Interrupted = fmt.Sprintf("stopped %.1fs into the run; the numbers below cover a cut-short run", float64(rep.WallMs)/1000)
	}
}

// Verdict is PASS, FAIL or INTERRUPTED.
func (r *Report) Verdict() string {
	switch {
	case r.Interrupted != "":
		return "INTERRUPTED"
	case r.Passed:
		return "PASS"
	}
	return "FAIL"
}

// Summary prints the report for people.
func (r *Report) Summary(w io.Writer) {
	r.summaryHeader(w)
	r.summaryRequests(w)
	if r.Liveness != nil && r.Liveness.Skipped == "" && r.Mode == "chaos" {
		fmt.Fprintf(w, "  liveness bound %.1fs (from the settings)\n", float64(r.Liveness.BoundMs)/1000)
	}
	if r.Soak != nil {
		r.Soak.summary(w)
	}
	if r.Heap != nil {
		r.Heap.summary(w)
	}
	r.summaryInvariants(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// summaryHeader writes the verdict, the run's setting, its load and its
// fault windows.
func (r *Report) summaryHeader(w io.Writer) {
	fmt.Fprintf(w, "breakwater %s: %s", r.Mode, r.Verdict())
	if r.Name != "" {
		fmt.Fprintf(w, " — %s", r.Name)
	}
	fmt.Fprintln(w)
	if r.Interrupted != "" {
		fmt.Fprintf(w, "  interrupted: %s\n", r.Interrupted)
	}
	fmt.Fprintf(w, "  gateway %s, seed %d, wall %.1fs", r.Gateway, r.Seed, float64(r.WallMs)/1000)
	if r.FaultPhaseMs > 0 {
		fmt.Fprintf(w, ", fault phase %.1fs", float64(r.FaultPhaseMs)/1000)
	}
	fmt.Fprintln(w)
	if r.Load != nil {
		fmt.Fprintf(w, "  load: %d workers + %.0f req/s open loop (max %d in flight), %.0f%% streams, %d models, client deadline %v\n",
			r.Load.Workers, r.Load.Rate, r.Load.MaxInFlight, r.Load.StreamRatio*100, len(r.Load.Models), time.Duration(r.Load.TimeoutMs)*time.Millisecond)
	}
	if len(r.Windows) > 0 {
		fmt.Fprintln(w, "  faults:")
		for _, wd := range r.Windows {
			span := fmt.Sprintf("%.1fs–%.1fs", float64(wd.StartMs)/1000, float64(wd.EndMs)/1000)
			if wd.Action == ActionRestart {
				span = fmt.Sprintf("%.1fs", float64(wd.StartMs)/1000)
			}
			fmt.Fprintf(w, "    %-13s %-13s %s\n", span, wd.Class, wd.Label)
		}
	}
}

// summaryRequests writes the request counts, outcomes and latency, when
// any request ran.
func (r *Report) summaryRequests(w io.Writer) {
	q := &r.Requests
	if q.Finished == 0 && q.Sent == 0 {
		return
	}
	fmt.Fprintf(w, "  requests: %d sent, %d finished: %d success, %d typed error, %d stream error, %d violation (error rate %.2f%%)",
		q.Sent, q.Finished, q.ByKind["success"], q.ByKind["typed_error"], q.ByKind["stream_error"], q.ByKind["violation"], q.ErrorRate*100)
	if r.Skipped > 0 {
		fmt.Fprintf(w, "; %d open-loop requests not sent (max in flight)", r.Skipped)
	}
	fmt.Fprintln(w)
	var parts []string
	for _, c := range sortedKeys(q.ByClass) {
		parts = append(parts, fmt.Sprintf("%s ×%d", c, q.ByClass[c]))
	}
	fmt.Fprintf(w, "  outcomes: %s\n", wrap(strings.Join(parts, ", "), 100, "            "))
	l := r.Latency.All
	fmt.Fprintf(w, "  latency (all): p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms; successful JSON p95 %.1f ms\n", l.P50, l.P95, l.P99, l.Max, r.Latency.SuccessJSON.P95)
}

// summaryInvariants writes one line per invariant and the first
// violations of those that failed.
func (r *Report) summaryInvariants(w io.Writer) {
	fmt.Fprintln(w, "  invariants:")
	for _, res := range r.Invariants {
		mark := map[string]string{Pass: "ok  ", Fail: "FAIL", Skip: "skip"}[res.Status]
		fmt.Fprintf(w, "    %s %-32s %s\n", mark, res.Name, wrap(res.Detail, 110, strings.Repeat(" ", 42)))
		if res.Status == Fail {
			for i, v := range res.Violations {
				if i == 5 {
					fmt.Fprintf(w, "         … %d more in the JSON report\n", len(res.Violations)-5)
					break
				}
				fmt.Fprintf(w, "         at %.1fs: %s\n", float64(v.AtMs)/1000, v.What)
			}
		}
	}
}

func wrap(s string, width int, indent string) string {
	if len(s) <= width {
		return s
	}
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if line+len(word)+1 > width {
				b.WriteString("\n" + indent)
				line = 0
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}
