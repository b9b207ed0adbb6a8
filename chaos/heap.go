package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/proxy"
)

// HeapOptions configure a heap run (RunHeap).
type HeapOptions struct {
	Config  *proxy.Config
	Environ []string
	// Streams is how many SSE streams are open at once (default 500).
	Streams int
	// Model to stream from (default: the first provider's first model).
	Model string
	// Hold is how long each stream lasts (default 8 s): the upstream sends a
	// chunk every ChunkInterval (default 100 ms) for that long.
	Hold          time.Duration
	ChunkInterval time.Duration
	// PerStreamBound bounds the gateway's live heap per open stream (default
	// 64 KiB). The gateway's share is measured against the same streams
	// opened straight at the fault upstream in the same process, so the
	// client's and the upstream's memory cancel out.
	PerStreamBound int64
	// ReturnBound bounds the live heap left after the streams ended and the
	// client closed its connections (default max(8 MiB, 10 % of the
	// baseline)).
	ReturnBound int64
	Timeout     time.Duration
	NoLeakCheck bool
	Logger      *slog.Logger
	Progress    io.Writer
}

// HeapReport is what the heap run measured (live heap after a forced GC).
type HeapReport struct {
	Streams int `json:"streams"`
	// Through the gateway.
	BaselineBytes uint64 `json:"baselineBytes"`
	PeakBytes     uint64 `json:"peakBytes"` // all streams open
	// AfterBytes: the streams ended and the client closed its connections;
	// the gateway still keeps its idle upstream connections for reuse.
	AfterBytes uint64 `json:"afterBytes"`
	// DrainedBytes: the upstream closed its idle keep-alive connections too.
	DrainedBytes uint64 `json:"drainedBytes"`
	// Straight at the upstream, same process, same streams.
	DirectBaselineBytes uint64 `json:"directBaselineBytes"`
	DirectPeakBytes     uint64 `json:"directPeakBytes"`
	// PerStreamBytes is the gateway's live heap per open stream:
	// ((peak − baseline) − (direct peak − direct baseline)) / streams.
	PerStreamBytes int64 `json:"perStreamBytes"`
	// TotalPerStreamBytes counts client, gateway and upstream together.
	TotalPerStreamBytes int64   `json:"totalPerStreamBytes"`
	StackPerStreamBytes int64   `json:"stackPerStreamBytes"` // goroutine stacks, gateway share
	GoroutinesPerStream float64 `json:"goroutinesPerStream"`
	PerStreamBound      int64   `json:"perStreamBound"`
	ReturnBound         int64   `json:"returnBound"`
	OpenMs              int64   `json:"openMs"` // time to get every stream's first content
	StreamsOK           int64   `json:"streamsOk"`
}

func (h *HeapReport) summary(w io.Writer) {
	fmt.Fprintf(w, "  heap: %d concurrent SSE streams (all open after %d ms, %d completed)\n", h.Streams, h.OpenMs, h.StreamsOK)
	fmt.Fprintf(w, "    gateway share %.1f KiB live heap per stream (bound %d KiB), %.1f KiB goroutine stack, %.1f goroutines\n",
		float64(h.PerStreamBytes)/1024, h.PerStreamBound>>10, float64(h.StackPerStreamBytes)/1024, h.GoroutinesPerStream)
	fmt.Fprintf(w, "    client + gateway + upstream %.1f KiB per stream; direct (no gateway) %.1f KiB per stream\n",
		float64(h.TotalPerStreamBytes)/1024, float64(int64(h.DirectPeakBytes)-int64(h.DirectBaselineBytes))/float64(max(h.Streams, 1))/1024)
	fmt.Fprintf(w, "    live heap: baseline %.1f MiB, %d streams open %.1f MiB, after they ended %.1f MiB (%.1f MiB in the gateway's idle upstream connections), once the upstream closed them %.1f MiB (bound +%.1f MiB)\n",
		mib(h.BaselineBytes), h.Streams, mib(h.PeakBytes), mib(h.AfterBytes), mib(h.AfterBytes)-mib(h.DrainedBytes), mib(h.DrainedBytes), float64(h.ReturnBound)/(1<<20))
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

type heapPoint struct {
	heap, stack uint64
	goroutines  int
}

// measureHeap forces two GCs and reads the live heap and stacks.
func measureHeap() heapPoint {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return heapPoint{heap: m.HeapAlloc, stack: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

// RunHeap opens Streams SSE streams at once straight at the fault upstream
// and then through the gateway, measures the live heap while they are all
// open and after they end, and checks the gateway's share per stream.
func RunHeap(ctx context.Context, o HeapOptions) (*Report, error) {
	started := time.Now()
	if o.Streams <= 0 {
		o.Streams = 500
	}
	if o.Streams > maxInFlightLimit {
		return nil, fmt.Errorf("heap: at most %d streams", maxInFlightLimit)
	}
	if o.ChunkInterval <= 0 {
		o.ChunkInterval = 100 * time.Millisecond
	}
	if o.PerStreamBound <= 0 {
		o.PerStreamBound = 64 << 10
	}
	var leak *Leak
	if !o.NoLeakCheck {
		leak = baseline()
	}
	co := &Options{Config: o.Config, Environ: o.Environ, Logger: o.Logger, Seed: 1}
	e, err := setupEnv(ctx, co)
	if err != nil {
		return nil, err
	}
	defer e.teardown(context.Background())
	m := o.Model
	if m == "" {
		for _, p := range e.topo.Providers {
			if len(p.Models) > 0 {
				m = p.ID + "/" + p.Models[0]
				break
			}
		}
	}
	if o.Hold <= 0 {
		// Long enough to open every stream, short of the gateway's own
		// attempt and request bounds (a stream cut by them proves nothing).
		o.Hold = min(8*time.Second, e.settings.UpstreamTimeouts.AttemptMs.Duration()-time.Second,
			e.settings.RequestBudget.DeadlineMs.Duration()-time.Second)
		o.Hold = max(o.Hold, 2*o.ChunkInterval)
	}
	if lim := min(e.settings.UpstreamTimeouts.AttemptMs.Duration(), e.settings.RequestBudget.DeadlineMs.Duration()); o.Hold >= lim {
		return nil, fmt.Errorf("heap: a stream held %v would be cut by the gateway's own bounds (upstreamTimeouts.attemptMs / requestBudget.deadlineMs: %v): hold less or raise them", o.Hold, lim)
	}
	chunks := max(int(o.Hold/o.ChunkInterval), 2)
	put := func(r faults.Response) error {
		for _, u := range e.ups {
			if err := u.put(ctx, []faults.Rule{{Respond: &r}}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := put(faults.Response{Stream: faults.Stream{Chunks: 2, Interval: 5 * time.Millisecond}}); err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = ClientDeadline(&e.settings) + o.Hold
	}
	d := e.directRequester(m, timeout, o.Streams)
	if d == nil {
		return nil, fmt.Errorf("heap: model %q is not provider/model on a fault upstream", m)
	}
	q := &requester{client: newClient(o.Streams + 8), base: e.base, key: e.clientKey, deadline: timeout}
	rec := newRecorder(time.Now(), time.Second, 600)
	rep := &HeapReport{Streams: o.Streams, PerStreamBound: o.PerStreamBound}

	// Warm both paths (pools, first connections) before the baselines.
	for range 4 {
		o1 := d.q.do(ctx, d.model, true, time.Now())
		o2 := q.do(ctx, m, true, time.Now())
		_, _ = o1, o2
	}
	closeIdle(d.q.client)
	closeIdle(q.client)
	if err := put(faults.Response{Stream: faults.Stream{Chunks: chunks, Interval: o.ChunkInterval}}); err != nil {
		return nil, err
	}

	burst := func(rq *requester, model string, r *recorder) (base, peak heapPoint, openMs int64) {
		base = measureHeap()
		var wg sync.WaitGroup
		var first sync.WaitGroup
		first.Add(o.Streams)
		var once []sync.Once = make([]sync.Once, o.Streams)
		var ok atomic.Int64
		t := time.Now()
		for i := range o.Streams {
			wg.Add(1)
			c := *rq
			c.onFirst = func() { once[i].Do(first.Done) }
			go func() {
				defer wg.Done()
				defer once[i].Do(first.Done) // a stream that fails still releases the barrier
				res := c.do(ctx, model, true, time.Now())
				if res.Kind == KindSuccess {
					ok.Add(1)
				}
				if r != nil {
					r.sentOne()
					r.add(&res)
				}
			}()
		}
		first.Wait()
		openMs = time.Since(t).Milliseconds()
		peak = measureHeap()
		wg.Wait()
		if r != nil {
			rep.StreamsOK = ok.Load()
		}
		return base, peak, openMs
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "heap: %d streams straight at the upstream\n", o.Streams)
	}
	db, dp, _ := burst(d.q, d.model, nil)
	closeIdle(d.q.client)
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "heap: %d streams through the gateway\n", o.Streams)
	}
	gb, gp, openMs := burst(q, m, rec)
	closeIdle(q.client)
	time.Sleep(200 * time.Millisecond) // let the gateway see the client connections close
	after := measureHeap()
	// What is left is mostly the gateway's idle keep-alive connections to
	// the upstream (its transport keeps them for reuse). Let the upstream
	// close its idle connections, as a real one does after its keep-alive
	// timeout, to see whether anything else stays.
	for _, u := range e.ups {
		u.closeIdle()
	}
	time.Sleep(300 * time.Millisecond)
	drained := measureHeap()

	rep.DirectBaselineBytes, rep.DirectPeakBytes = db.heap, dp.heap
	rep.BaselineBytes, rep.PeakBytes, rep.AfterBytes, rep.OpenMs = gb.heap, gp.heap, after.heap, openMs
	rep.DrainedBytes = drained.heap
	n := int64(o.Streams)
	directGrowth := int64(dp.heap) - int64(db.heap)
	gwGrowth := int64(gp.heap) - int64(gb.heap)
	rep.TotalPerStreamBytes = gwGrowth / n
	rep.PerStreamBytes = (gwGrowth - directGrowth) / n
	rep.StackPerStreamBytes = ((int64(gp.stack) - int64(gb.stack)) - (int64(dp.stack) - int64(db.stack))) / n
	rep.GoroutinesPerStream = float64((gp.goroutines-gb.goroutines)-(dp.goroutines-db.goroutines)) / float64(n)
	rep.ReturnBound = o.ReturnBound
	if rep.ReturnBound <= 0 {
		rep.ReturnBound = max(8<<20, int64(gb.heap)/10)
	}

	tr := Trace{Topo: &e.topo, Settings: &e.settings, GatewayCounted: -1, Liveness: Liveness{Skipped: "heap runs inject no faults"}}
	tr.Requests = rec.summary()
	tr.PerRequest = map[string][]Violation{}
	for _, inv := range []string{InvDeadline, InvTyped, InvTruncated, InvRetryAfter} {
		_, vs := rec.violations(inv)
		tr.PerRequest[inv] = vs
	}
	e.teardown(context.WithoutCancel(ctx))
	if leak != nil {
		leak.settle()
		tr.Leak = leak
	}
	var res []Result
	for _, r := range Check(&tr) {
		switch r.Name {
		case InvDeadline, InvTyped, InvTruncated, "no-goroutine-leak", "no-fd-leak":
			res = append(res, r)
		}
	}
	add := func(name string, ok bool, detail string) {
		st := Pass
		if !ok {
			st = Fail
		}
		res = append(res, Result{Name: name, Status: st, Detail: detail})
	}
	add("heap-streams-complete", rep.StreamsOK == n, fmt.Sprintf("%d of %d streams ended with [DONE]", rep.StreamsOK, n))
	add("heap-per-stream", rep.PerStreamBytes <= o.PerStreamBound,
		fmt.Sprintf("gateway share %.1f KiB per open stream (bound %d KiB); all %d together %.1f MiB", float64(rep.PerStreamBytes)/1024, o.PerStreamBound>>10, n, float64(gwGrowth-directGrowth)/(1<<20)))
	add("heap-total", gwGrowth-directGrowth <= o.PerStreamBound*n,
		fmt.Sprintf("%.1f MiB for %d streams (bound %.1f MiB)", float64(gwGrowth-directGrowth)/(1<<20), n, float64(o.PerStreamBound*n)/(1<<20)))
	add("heap-returns-to-baseline", int64(drained.heap)-int64(gb.heap) <= rep.ReturnBound,
		fmt.Sprintf("%.1f MiB after the streams ended and idle connections closed, baseline %.1f MiB (bound +%.1f MiB); %.1f MiB while the gateway kept its idle upstream connections",
			mib(drained.heap), mib(gb.heap), float64(rep.ReturnBound)/(1<<20), mib(after.heap)))
	all, js, sse, okl := rec.latency()
	out := &Report{Mode: "heap", Gateway: "in-process", StartedAt: started, WallMs: time.Since(started).Milliseconds(),
		Passed: Passed(res), Requests: tr.Requests, Latency: LatencyReport{all, js, sse, okl}, Invariants: res, Leak: tr.Leak, Heap: rep}
	markInterrupted(ctx, out)
	return out, nil
}
