package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
)

// heapHeadroomEnv sets the heap headroom below in MiB; "0" turns it off.
const heapHeadroomEnv = "BREAKWATER_HEAP_HEADROOM_MB"

// defaultHeapHeadroomMB is how much the heap may grow past the live heap
// before the next GC cycle, at least.
//
// Why: with GOGC=100 the GC runs when the heap doubles, and never below
// 4 MiB. The gateway's live heap is small (a few MiB: config, model state,
// metrics, the memory store's request log), so under load it ran a cycle
// every few hundred requests, each marking the whole live heap again. A
// floor saves GC work per request (`make bench-instr`), but it lets that
// much more garbage wait between cycles, which raises RSS per held stream;
// 4 MiB saves most of the GC work while 500 held streams stay within the
// 64 KiB-per-stream budget, and 8 MiB does not (docs/performance.md). A big live heap (many held streams)
// is left to GOGC=100 as before: the headroom is a floor, never a ceiling.
// GOMEMLIMIT still bounds everything.
const defaultHeapHeadroomMB = 4

// runtimeHeapMinimum is the Go runtime's smallest GC goal at GOGC=100; the
// runtime scales it with GOGC, so a large percent on a small heap would
// put the goal far above live+headroom without the bound in gcPercentFor.
const runtimeHeapMinimum = 4 << 20

// gcPercentFor is the GOGC that puts the next GC goal near live+headroom,
// and never below base (the percent the process would use anyway). The
// runtime's goal is live + (live+stacks+globals)*GOGC/100, and at least
// 4 MiB*GOGC/100; scan is live+stacks+globals.
func gcPercentFor(live, scan, headroom uint64, base int) int {
	p := (live + headroom) * 100 / runtimeHeapMinimum
	if scan > 0 {
		p = min(p, (headroom*100+scan-1)/scan)
	}
	return max(int(p), base)
}

// heapFloor re-tunes GOGC after every GC cycle from the live heap that
// cycle marked. A finalizer on a throw-away object is the runtime's only
// per-cycle hook; it runs on the finalizer goroutine, off the request path.
type heapFloor struct {
	headroom uint64
	base     int
	sample   []metrics.Sample
	percent  atomic.Int64 // the last GOGC set
	cycles   atomic.Int64 // cycles seen, for tests
	stopped  atomic.Bool
}

// gcTick is allocated once per cycle; it is big enough to get a span slot
// of its own (the tiny allocator would batch a smaller one with other
// objects and delay its finalizer).
type gcTick struct{ _ [32]byte }

// startHeapFloor turns the heap floor on unless the operator set GOGC
// (their choice stands) or turned it off. It returns nil when off.
func startHeapFloor(getenv func(string) string) (*heapFloor, error) {
	if getenv("GOGC") != "" {
		return nil, nil
	}
	mb := defaultHeapHeadroomMB
	if v := getenv(heapHeadroomEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1<<16 {
			return nil, fmt.Errorf("%s=%q: want a whole number of MiB from 0 (off) to 65536", heapHeadroomEnv, v)
		}
		mb = n
	}
	if mb == 0 {
		return nil, nil
	}
	f := &heapFloor{
		headroom: uint64(mb) << 20,
		base:     100,
		sample: []metrics.Sample{
			{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"},
		},
	}
	f.tune()
	f.arm()
	return f, nil
}

func (f *heapFloor) arm() {
	runtime.SetFinalizer(new(gcTick), func(*gcTick) {
		if f.stopped.Load() {
			return
		}
		f.cycles.Add(1)
		f.tune()
		f.arm()
	})
}

func (f *heapFloor) tune() {
	metrics.Read(f.sample)
	var v [3]uint64
	for i, s := range f.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	p := gcPercentFor(v[0], v[0]+v[1]+v[2], f.headroom, f.base)
	// Re-set only on a real change: small drifts of the live heap are noise.
	if old := f.percent.Load(); old == 0 || p < int(old)*9/10 || p > int(old)*11/10 {
		debug.SetGCPercent(p)
		f.percent.Store(int64(p))
	}
}

// stop ends the re-tuning after the next cycle; the last GOGC set stays.
func (f *heapFloor) stop() { f.stopped.Store(true) }
