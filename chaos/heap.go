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
	"github.com/breakwater-gw/breakwater/model"
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
	if err := o.setDefaults(); err != nil {
		return nil, err
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
	h, err := newHeapRun(ctx, &o, e)
	if err != nil {
		return nil, err
	}
	growth := h.measure(ctx)
	return h.report(ctx, started, growth, leak), nil
}

// setDefaults fills in the options left zero and bounds the streams.
func (o *HeapOptions) setDefaults() error {
	if o.Streams <= 0 {
		o.Streams = 500
	}
	if o.Streams > maxInFlightLimit {
		return fmt.Errorf("heap: at most %d streams", maxInFlightLimit)
	}
	if o.ChunkInterval <= 0 {
		o.ChunkInterval = 100 * time.Millisecond
	}
	if o.PerStreamBound <= 0 {
		o.PerStreamBound = 64 << 10
	}
	return nil
}

// setHold picks how long each stream lasts when the options leave it
// open and rejects a hold the gateway's own bounds would cut.
func (o *HeapOptions) setHold(st *model.Settings) error {
	attempt, deadline := st.UpstreamTimeouts.AttemptMs.Duration(), st.RequestBudget.DeadlineMs.Duration()
	if o.Hold <= 0 {
		// Long enough to open every stream, short of the gateway's own
		// attempt and request bounds (a stream cut by them proves nothing).
		o.Hold = min(8*time.Second, attempt-time.Second, deadline-time.Second)
		o.Hold = max(o.Hold, 2*o.ChunkInterval)
	}
	if lim := min(attempt, deadline); o.Hold >= lim {
		return fmt.Errorf("heap: a stream held %v would be cut by the gateway's own bounds (upstreamTimeouts.attemptMs / requestBudget.deadlineMs: %v): hold less or raise them", o.Hold, lim)
	}
	return nil
}

// heapRun holds one heap run's state.
type heapRun struct {
	o     *HeapOptions
	e     *env
	model string
	d     *direct
	q     *requester
	rec   *recorder
	rep   *HeapReport
}

// newHeapRun picks the model and the hold, sets up both paths, warms them
// with short streams and then sets the upstreams to the long ones.
func newHeapRun(ctx context.Context, o *HeapOptions, e *env) (*heapRun, error) {
	m := o.Model
	if m == "" {
		m = firstModel(&e.topo)
	}
	if err := o.setHold(&e.settings); err != nil {
		return nil, err
	}
	if err := e.putResponse(ctx, faults.Response{Stream: faults.Stream{Chunks: 2, Interval: 5 * time.Millisecond}}); err != nil {
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
	h := &heapRun{o: o, e: e, model: m, d: d,
		q:   &requester{client: newClient(o.Streams + 8), base: e.base, key: e.clientKey, deadline: timeout},
		rec: newRecorder(time.Now(), time.Second, 600),
		rep: &HeapReport{Streams: o.Streams, PerStreamBound: o.PerStreamBound},
	}
	// Warm both paths (pools, first connections) before the baselines.
	for range 4 {
		o1 := d.q.do(ctx, d.model, true, time.Now())
		o2 := h.q.do(ctx, m, true, time.Now())
		_, _ = o1, o2
	}
	closeIdle(d.q.client)
	closeIdle(h.q.client)
	chunks := max(int(o.Hold/o.ChunkInterval), 2)
	if err := e.putResponse(ctx, faults.Response{Stream: faults.Stream{Chunks: chunks, Interval: o.ChunkInterval}}); err != nil {
		return nil, err
	}
	return h, nil
}

// putResponse makes every fault upstream answer with r.
func (e *env) putResponse(ctx context.Context, r faults.Response) error {
	for _, u := range e.ups {
		if err := u.put(ctx, []faults.Rule{{Respond: &r}}); err != nil {
			return err
		}
	}
	return nil
}

// burst opens every stream at once through rq and measures the live heap
// before and once each stream has its first content; with a recorder the
// streams are recorded and counted as the run's.
func (h *heapRun) burst(ctx context.Context, rq *requester, model string, r *recorder) (base, peak heapPoint, openMs int64) {
	n := h.o.Streams
	base = measureHeap()
	var wg sync.WaitGroup
	var first sync.WaitGroup
	first.Add(n)
	var once []sync.Once = make([]sync.Once, n)
	var ok atomic.Int64
	t := time.Now()
	for i := range n {
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
		h.rep.StreamsOK = ok.Load()
	}
	return base, peak, openMs
}

// heapGrowth is what the two bursts grew the live heap by, and what was
// left after the gateway's streams ended.
type heapGrowth struct {
	gwBase, after, drained heapPoint
	direct, gateway        int64 // live heap growth with all streams open
}

// measure runs the burst straight at the upstream, then through the
// gateway, reads what is left once they ended and fills in the report.
func (h *heapRun) measure(ctx context.Context) heapGrowth {
	o, rep := h.o, h.rep
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "heap: %d streams straight at the upstream\n", o.Streams)
	}
	db, dp, _ := h.burst(ctx, h.d.q, h.d.model, nil)
	closeIdle(h.d.q.client)
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "heap: %d streams through the gateway\n", o.Streams)
	}
	gb, gp, openMs := h.burst(ctx, h.q, h.model, h.rec)
	closeIdle(h.q.client)
	time.Sleep(200 * time.Millisecond) // let the gateway see the client connections close
	after := measureHeap()
	// What is left is mostly the gateway's idle keep-alive connections to
	// the upstream (its transport keeps them for reuse). Let the upstream
	// close its idle connections, as a real one does after its keep-alive
	// timeout, to see whether anything else stays.
	for _, u := range h.e.ups {
		u.closeIdle()
	}
	time.Sleep(300 * time.Millisecond)
	drained := measureHeap()

	rep.DirectBaselineBytes, rep.DirectPeakBytes = db.heap, dp.heap
	rep.BaselineBytes, rep.PeakBytes, rep.AfterBytes, rep.OpenMs = gb.heap, gp.heap, after.heap, openMs
	rep.DrainedBytes = drained.heap
	n := int64(o.Streams)
	g := heapGrowth{gwBase: gb, after: after, drained: drained,
		direct: int64(dp.heap) - int64(db.heap), gateway: int64(gp.heap) - int64(gb.heap)}
	rep.TotalPerStreamBytes = g.gateway / n
	rep.PerStreamBytes = (g.gateway - g.direct) / n
	rep.StackPerStreamBytes = ((int64(gp.stack) - int64(gb.stack)) - (int64(dp.stack) - int64(db.stack))) / n
	rep.GoroutinesPerStream = float64((gp.goroutines-gb.goroutines)-(dp.goroutines-db.goroutines)) / float64(n)
	rep.ReturnBound = o.ReturnBound
	if rep.ReturnBound <= 0 {
		rep.ReturnBound = max(8<<20, int64(gb.heap)/10)
	}
	return g
}

// report tears the run down, keeps the checks that apply to streams
// without faults, adds the heap bounds and builds the report.
func (h *heapRun) report(ctx context.Context, started time.Time, g heapGrowth, leak *Leak) *Report {
	e, rec := h.e, h.rec
	tr := Trace{Topo: &e.topo, Settings: &e.settings, GatewayCounted: -1, Liveness: Liveness{Skipped: "heap runs inject no faults"}}
	tr.Requests = rec.summary()
	tr.PerRequest = rec.perRequest()
	e.teardown(context.WithoutCancel(ctx))
	tr.Leak = leak.settled()
	var res []Result
	for _, r := range Check(&tr) {
		switch r.Name {
		case InvDeadline, InvTyped, InvTruncated, "no-goroutine-leak", "no-fd-leak":
			res = append(res, r)
		}
	}
	res = append(res, h.bounds(g)...)
	all, js, sse, okl := rec.latency()
	out := &Report{Mode: "heap", Gateway: "in-process", StartedAt: started, WallMs: time.Since(started).Milliseconds(),
		Passed: Passed(res), Requests: tr.Requests, Latency: LatencyReport{all, js, sse, okl}, Invariants: res, Leak: tr.Leak, Heap: h.rep}
	markInterrupted(ctx, out)
	return out
}

// bounds checks the heap run's measurements against its bounds.
func (h *heapRun) bounds(g heapGrowth) []Result {
	o, rep := h.o, h.rep
	n := int64(o.Streams)
	share := g.gateway - g.direct
	return []Result{
		passIf("heap-streams-complete", rep.StreamsOK == n, fmt.Sprintf("%d of %d streams ended with [DONE]", rep.StreamsOK, n)),
		passIf("heap-per-stream", rep.PerStreamBytes <= o.PerStreamBound,
			fmt.Sprintf("gateway share %.1f KiB per open stream (bound %d KiB); all %d together %.1f MiB", float64(rep.PerStreamBytes)/1024, o.PerStreamBound>>10, n, float64(share)/(1<<20))),
		passIf("heap-total", share <= o.PerStreamBound*n,
			fmt.Sprintf("%.1f MiB for %d streams (bound %.1f MiB)", float64(share)/(1<<20), n, float64(o.PerStreamBound*n)/(1<<20))),
		passIf("heap-returns-to-baseline", int64(g.drained.heap)-int64(g.gwBase.heap) <= rep.ReturnBound,
			fmt.Sprintf("%.1f MiB after the streams ended and idle connections closed, baseline %.1f MiB (bound +%.1f MiB); %.1f MiB while the gateway kept its idle upstream connections",
				mib(g.drained.heap), mib(g.gwBase.heap), float64(rep.ReturnBound)/(1<<20), mib(g.after.heap))),
	}
}

// passIf is a result that passes when ok holds.
func passIf(name string, ok bool, detail string) Result {
	st := Pass
	if !ok {
		st = Fail
	}
	return Result{Name: name, Status: st, Detail: detail}
}
