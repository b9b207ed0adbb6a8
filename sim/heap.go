package sim

import "github.com/breakwater-gw/breakwater/model"

// Event classes fix the order at one instant (docs/scenarios.md): operator
// actions first, then request arrivals and upstream events, then expects.
const (
	classAction uint8 = iota
	classFlow
	classExpect
)

type evKind uint8

const (
	evAction evKind = iota
	evArrival
	evAttemptEnd
	evWake
	evExpect
	evPaced        // a queued attempt's limiter slot arrived (admission.go)
	evQueueTimeout // a gate wait's queue budget ran out
	evAdmitGo      // the gate granted a waiting attempt a slot
)

// event is one scheduled happening. Events are ordered by (at, class, seq):
// seq is the scheduling order, so equal instants are stable.
type event struct {
	at    model.Time
	seq   uint64
	class uint8
	kind  evKind
	idx   int32 // action, traffic item, attempt, request or expect index
	gen   uint32
}

func (a *event) less(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.class != b.class {
		return a.class < b.class
	}
	return a.seq < b.seq
}

// eventHeap is a binary min-heap of events by value (no interfaces, no
// allocation per event).
type eventHeap struct {
	ev  []event
	seq uint64
}

func (h *eventHeap) push(e event) {
	h.seq++
	e.seq = h.seq
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.ev[i].less(&h.ev[p]) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) len() int { return len(h.ev) }

func (h *eventHeap) pop() event {
	top := h.ev[0]
	n := len(h.ev) - 1
	h.ev[0] = h.ev[n]
	h.ev = h.ev[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.ev[r].less(&h.ev[l]) {
			m = r
		}
		if !h.ev[m].less(&h.ev[i]) {
			break
		}
		h.ev[i], h.ev[m] = h.ev[m], h.ev[i]
		i = m
	}
	return top
}
