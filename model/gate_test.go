package model

import "testing"

func gateReq(conn, model string) GateRequest {
	return GateRequest{Conn: ConnRef{Provider: "p", Connection: conn}, Model: model, QueueLeftMs: 1000}
}

// docs/admission.md#concurrency-gates: the composite gate takes every layer
// at once, queues a request when one is full, and hands freed slots to the
// waiters in FIFO order; a waiter blocked on its own connection does not
// hold back the ones behind it on another.
func TestGateWakesWaitersInFIFOOrder(t *testing.T) {
	g := NewGate()
	g.SetGlobalCap(2)
	g.SetConnectionCaps(ConnRef{Provider: "p", Connection: "a"}, 1, nil)
	g.SetConnectionCaps(ConnRef{Provider: "p", Connection: "b"}, 0, nil)
	d, ha := g.Enter(1, gateReq("a", "m"))
	if d.Action != AdmitGo || !ha.Held() {
		t.Fatalf("first request: %+v", d)
	}
	d, hb := g.Enter(2, gateReq("b", "m"))
	if d.Action != AdmitGo || !hb.Held() {
		t.Fatalf("second request: %+v", d)
	}
	if d, _ := g.Enter(3, gateReq("a", "m")); d.Action != AdmitWait || d.Blocking != LevelGlobal {
		t.Fatalf("third request should wait on the global cap: %+v", d)
	}
	if d, _ := g.Enter(4, gateReq("b", "m")); d.Action != AdmitWait {
		t.Fatalf("fourth request should wait: %+v", d)
	}
	// b's slot frees the global one, but 3 still waits for a's connection
	// slot: 4 goes first.
	gr := g.Release(hb)
	if len(gr) != 1 || gr[0].ID != 4 || !gr[0].Hold.Held() {
		t.Fatalf("release of b granted %+v, want waiter 4", gr)
	}
	if gr := g.Release(gr[0].Hold); len(gr) != 0 {
		t.Fatalf("3 is still blocked by a's cap, got %+v", gr)
	}
	gr = g.Release(ha)
	if len(gr) != 1 || gr[0].ID != 3 {
		t.Fatalf("release of a granted %+v, want waiter 3", gr)
	}
	var inUse, queued int
	g.Each(func(ref ConnRef, u, q int) { inUse += u; queued += q })
	if inUse != 1 || queued != 0 {
		t.Fatalf("in use %d queued %d, want 1 and 0", inUse, queued)
	}
}

// A wait that ends (queue budget, client gone) leaves the queue and frees
// its place in maxQueueDepth; a waiter the gate granted already keeps it.
func TestGateLeaveAndQueueDepth(t *testing.T) {
	g := NewGate()
	g.SetConnectionCaps(ConnRef{Provider: "p", Connection: "a"}, 1, nil)
	r := gateReq("a", "m")
	r.MaxQueueDepth = 1
	_, h := g.Enter(1, r)
	if d, _ := g.Enter(2, r); d.Action != AdmitWait {
		t.Fatalf("want wait, got %+v", d)
	}
	if d, _ := g.Enter(3, r); d.Action != AdmitReject || d.Code != CodeRateLimitQueueFull || d.RetryAfterMs() != 0 {
		t.Fatalf("a full connection queue refuses RATE_LIMIT_QUEUE_FULL: %+v", d)
	}
	if !g.Leave(2) {
		t.Fatal("waiter 2 was waiting")
	}
	if d, _ := g.Enter(4, r); d.Action != AdmitWait {
		t.Fatalf("the queue has room again: %+v", d)
	}
	gr := g.Release(h)
	if len(gr) != 1 || gr[0].ID != 4 {
		t.Fatalf("granted %+v, want 4", gr)
	}
	if g.Leave(4) {
		t.Fatal("a granted waiter is no longer waiting")
	}
	if d := GateWaitExpired(false); d.Code != CodeSemaphoreTimeout || d.RetryAfterMs() != 1000 {
		t.Fatalf("an expired wait is SEMAPHORE_TIMEOUT with a 1 s hint: %+v", d)
	}
	if d := GateWaitExpired(true); d.Action != AdmitBypass {
		t.Fatalf("quota-share fails open: %+v", d)
	}
}

// Per-model caps count only capped models, and a raised global cap lets
// waiters in at Grant.
func TestGateModelCapsAndRaisedCap(t *testing.T) {
	g := NewGate()
	ref := ConnRef{Provider: "p", Connection: "a"}
	g.SetConnectionCaps(ref, 0, map[string]int{"big": 1})
	_, h1 := g.Enter(1, gateReq("a", "big"))
	if d, _ := g.Enter(2, gateReq("a", "big")); d.Action != AdmitWait || d.Blocking != LevelModel {
		t.Fatalf("the model cap blocks: %+v", d)
	}
	if d, _ := g.Enter(3, gateReq("a", "small")); d.Action != AdmitGo {
		t.Fatalf("an uncapped model goes: %+v", d)
	}
	if gr := g.Release(h1); len(gr) != 1 || gr[0].ID != 2 {
		t.Fatalf("granted %+v, want 2", gr)
	}
	g2 := NewGate()
	g2.SetGlobalCap(1)
	g2.SetConnectionCaps(ref, 0, nil)
	g2.Enter(1, gateReq("a", "m"))
	g2.Enter(2, gateReq("a", "m"))
	if gr := g2.Grant(); len(gr) != 0 {
		t.Fatalf("nothing freed: %+v", gr)
	}
	g2.SetGlobalCap(2)
	if gr := g2.Grant(); len(gr) != 1 || gr[0].ID != 2 {
		t.Fatalf("a raised cap lets the waiter in: %+v", gr)
	}
	if d, h := g2.Enter(5, gateReq("zz", "m")); d.Action != AdmitGo || h.Held() {
		t.Fatalf("an unknown connection has no caps and holds nothing: %+v", d)
	}
}

// The gate sits on every capped attempt of both shells: taking and freeing
// a slot allocates nothing.
func BenchmarkGateEnterRelease(b *testing.B) {
	g := NewGate()
	g.SetGlobalCap(64)
	g.SetProviderCap("p", 32)
	g.SetConnectionCaps(ConnRef{Provider: "p", Connection: "a"}, 8, map[string]int{"m": 4})
	r := gateReq("a", "m")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, h := g.Enter(uint64(i), r)
		g.Release(h)
	}
}

func TestGateEnterReleaseDoesNotAllocate(t *testing.T) {
	g := NewGate()
	g.SetConnectionCaps(ConnRef{Provider: "p", Connection: "a"}, 8, map[string]int{"m": 4})
	r := gateReq("a", "m")
	if n := testing.AllocsPerRun(100, func() { _, h := g.Enter(1, r); g.Release(h) }); n != 0 {
		t.Fatalf("Enter+Release allocates %v times", n)
	}
}

// A reload that removes a connection drops its gate state once nothing
// holds or waits for it; a busy one stays until a later Prune.
func TestGatePrune(t *testing.T) {
	g := NewGate()
	a, b := ConnRef{Provider: "p", Connection: "a"}, ConnRef{Provider: "q", Connection: "b"}
	g.SetConnectionCaps(a, 1, nil)
	g.SetConnectionCaps(b, 1, nil)
	_, h := g.Enter(1, GateRequest{Conn: b, Model: "m"})
	g.Prune(map[string]bool{"p": true}, map[ConnRef]bool{a: true})
	seen := map[ConnRef]bool{}
	g.Each(func(ref ConnRef, _, _ int) { seen[ref] = true })
	if !seen[a] || !seen[b] {
		t.Fatalf("a busy connection must stay: %v", seen)
	}
	g.Release(h)
	g.Prune(map[string]bool{"p": true}, map[ConnRef]bool{a: true})
	seen = map[ConnRef]bool{}
	g.Each(func(ref ConnRef, _, _ int) { seen[ref] = true })
	if !seen[a] || seen[b] || g.provs["q"] != nil {
		t.Fatalf("an idle removed connection and its provider go: %v", seen)
	}
}
