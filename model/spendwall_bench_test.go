package model

import "testing"

// BenchmarkSpendWallLaneRequest: one whole request on an active lane
// (Next → Begin with SlowLane → Record of a 200 `slow-status: active`), the
// spend wall's hot path (docs/spendwall.md). Reported, never asserted.
func BenchmarkSpendWallLaneRequest(b *testing.B) {
	e := mustEngine(b, topo(swProvider(laneOnly, 2)), nil)
	now := at(0)
	r := route(b, e, "an/m1")
	e.provs[0].conns[0].lane.accept(now, &SpendSignal{Reset: at(hour)})
	ok := lane(200, headerSlowStatus, "active")
	var f Flow
	var sel Selection
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f.Reset(e, now, r, "", nil)
		st := f.Next(now, e, &sel)
		if !st.Attempt.SlowLane {
			b.Fatal("not on the lane")
		}
		f.Record(now, e, &st.Attempt, Report{Outcome: ok})
		e.changes = e.changes[:0]
	}
}

// BenchmarkSpendWallInterceptAndRetry: the wall 429 absorbed by an active
// lane and the same-connection retry served.
func BenchmarkSpendWallInterceptAndRetry(b *testing.B) {
	e := mustEngine(b, topo(swProvider(laneOnly, 2)), nil)
	now := at(0)
	r := route(b, e, "an/m1")
	wallOut, ok := wall(true, at(hour)), lane(200, headerSlowStatus, "active")
	var f Flow
	var sel Selection
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e.provs[0].conns[0].lane = LaneState{}
		f.Reset(e, now, r, "", nil)
		st := f.Next(now, e, &sel)
		f.Record(now, e, &st.Attempt, Report{Outcome: wallOut})
		st = f.Next(now, e, &sel)
		f.Record(now, e, &st.Attempt, Report{Outcome: ok})
		e.changes = e.changes[:0]
	}
}
