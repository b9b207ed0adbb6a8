package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// Rule (heapfloor.go): the GC goal is at least live+headroom, and never
// below what GOGC=100 gives. The goal is computed the way the runtime does:
// live + scan*GOGC/100, at least 4 MiB*GOGC/100.
func TestGCPercentForPutsGoalAtLivePlusHeadroom(t *testing.T) {
	const mib = 1 << 20
	goal := func(live, scan uint64, p int) uint64 {
		return max(live+scan*uint64(p)/100, runtimeHeapMinimum*uint64(p)/100)
	}
	for _, c := range []struct{ live, scan uint64 }{
		{0, 0}, {100 << 10, 300 << 10}, {1 * mib, 2 * mib}, {3 * mib, 4 * mib}, {8 * mib, 9 * mib},
		{15 * mib, 16 * mib}, {40 * mib, 41 * mib}, {2000 * mib, 2001 * mib},
	} {
		const headroom = 16 * mib
		p := gcPercentFor(c.live, c.scan, headroom, 100)
		g := goal(c.live, c.scan, p)
		want := max(c.live+headroom, goal(c.live, c.scan, 100))
		if g+mib/4 < want { // rounding of the percent
			t.Errorf("live %d MiB scan %d MiB: GOGC=%d gives a goal of %.1f MiB, want at least %.1f", c.live/mib, c.scan/mib, p, float64(g)/mib, float64(want)/mib)
		}
		if g > want+want/20+mib/2 {
			t.Errorf("live %d MiB scan %d MiB: GOGC=%d gives a goal of %.1f MiB, far above %.1f", c.live/mib, c.scan/mib, p, float64(g)/mib, float64(want)/mib)
		}
		if p < 100 {
			t.Errorf("live %d MiB: GOGC=%d is below the base 100", c.live/mib, p)
		}
	}
}

// Rule: an operator's GOGC stands; BREAKWATER_HEAP_HEADROOM_MB=0 turns the
// floor off; a bad value is an error naming the variable.
func TestHeapFloorSettings(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	if f, err := startHeapFloor(env("GOGC", "200")); f != nil || err != nil {
		t.Errorf("GOGC set: got %v, %v; want the floor off", f, err)
	}
	if f, err := startHeapFloor(env(heapHeadroomEnv, "0")); f != nil || err != nil {
		t.Errorf("%s=0: got %v, %v; want the floor off", heapHeadroomEnv, f, err)
	}
	for _, bad := range []string{"-1", "lots", "16MB", "99999999"} {
		if _, err := startHeapFloor(env(heapHeadroomEnv, bad)); err == nil || !strings.Contains(err.Error(), heapHeadroomEnv) {
			t.Errorf("%s=%q: got %v, want an error naming the variable", heapHeadroomEnv, bad, err)
		}
	}
}

// Rule: the floor re-tunes GOGC after every GC cycle, from that cycle's
// live heap.
func TestHeapFloorFollowsEachCycle(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	f, err := startHeapFloor(func(k string) string {
		if k == heapHeadroomEnv {
			return "64"
		}
		return ""
	})
	if err != nil || f == nil {
		t.Fatalf("startHeapFloor: %v, %v", f, err)
	}
	defer f.stop()
	deadline := time.Now().Add(10 * time.Second)
	for f.cycles.Load() < 3 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if n := f.cycles.Load(); n < 3 {
		t.Fatalf("the floor saw %d GC cycles, want 3 or more", n)
	}
	got := debug.SetGCPercent(100)
	debug.SetGCPercent(got)
	if got <= 100 || int64(got) != f.percent.Load() {
		t.Errorf("GOGC is %d, the floor set %d; want the floor's value, above 100 for a 64 MiB headroom on a test heap", got, f.percent.Load())
	}
}
