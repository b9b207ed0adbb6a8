package sim

import (
	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// timeline is what one simulated attempt looks like from the gateway: when
// it ends, what the gateway observed (the Outcome handed to the model), and
// whether a streaming client had already been sent content by then.
type timeline struct {
	endMs     int64 // from the attempt's start
	kind      model.OutcomeKind
	transport model.Transport
	firstByte int64 // when the first content byte reached the gateway; -1 = never
	success   bool
	chunks    int64 // content chunks that reached the gateway (a resume's prefill)
}

// timers are the shell's per-attempt timers (docs/settings.md#defaults), taken once per
// settings change.
type timers struct {
	// header is the response-header phase (model.TimerPlan), bound the
	// whole attempt's (model.AttemptBound without the deadline, which the
	// flow's deadline event cuts): the gateway arms one timer for both,
	// the simulator asks each where the upstream's events fall.
	header model.TimerPlan
	bound  model.TimerPlan
	set    *model.Settings // for the model's stream watchdogs
}

func timersOf(s *model.Settings) timers {
	_, execMax := s.QueueBudgets(model.ConnOverrides{})
	bound, cut := model.AttemptBound(s, execMax, never)
	return timers{header: model.HeaderPlan(never, model.CutAttempt, int64(s.UpstreamTimeouts.ResponseHeaderMs)),
		bound: model.TimerPlan{End: bound, Cut: cut}, set: s}
}

// headerTimeout: the response-header timer ends the attempt before the
// upstream's answer at t (model.TimerPlan.Before); at is when.
func (tm *timers) headerTimeout(t int64) (at int64, cut bool) {
	x, at := tm.header.Before(t)
	return at, x == model.TimerHeader
}

func durMs(d interface{ Milliseconds() int64 }) int64 { return d.Milliseconds() }

// never is "no such instant" on an attempt's relative clock.
const never = int64(1) << 60

// attemptTimeline turns an upstream behaviour into the gateway's view of
// it. Errors and resets end at their latency unless responseHeaderMs fires
// first. A 2xx answer streams (the gateway always reads the upstream as a
// stream; a non-streaming client is buffered): its headers arrive at once,
// content chunks from `latency` on, and the model's stream watchdogs
// (model.Watchdog: content stall and throughput) are fed every chunk and
// ticked at their deadline, exactly as the proxy's timer does — sim decides
// nothing about stalls itself.
func attemptTimeline(r *faults.Response, latencyMs int64, tm *timers, stream bool) timeline {
	tl := timeline{firstByte: -1}
	switch {
	case r.Fault == faults.Timeout:
		tl.endMs, _ = tm.headerTimeout(never)
		tl.kind, tl.transport = model.OutcomeTransport, model.TransportHeaderTimeout
		return tl
	case !stream && r.OK() && r.Fault != faults.Reset:
		return jsonTimeline(r, latencyMs, tm)
	case !r.OK() || r.Fault == faults.Reset:
		if at, cut := tm.headerTimeout(latencyMs); cut {
			tl.endMs, tl.kind, tl.transport = at, model.OutcomeTransport, model.TransportHeaderTimeout
			return tl
		}
		tl.endMs = latencyMs
		if r.Fault == faults.Reset {
			tl.kind, tl.transport = model.OutcomeTransport, model.TransportReset
		} else {
			tl.kind = model.OutcomeResponse
		}
		return tl
	}
	return streamTimeline(r, latencyMs, tm)
}

// chunkTimes: chunk i arrives at latency + i·interval (+ the stall gap for
// i ≥ k).
type chunkTimes struct {
	latencyMs, iv int64
	k             int64 // the chunk a stall or a cut comes before
	stall         bool
	gap           int64 // the stall's extra silence after chunk k
}

func chunkTimesOf(r *faults.Response, latencyMs int64) chunkTimes {
	ct := chunkTimes{latencyMs: latencyMs, iv: durMs(r.ChunkInterval()), k: int64(r.Stream.StallAfter), stall: r.Fault == faults.Stall}
	if ct.stall {
		ct.gap = durMs(r.Stream.StallFor)
		if ct.gap == 0 {
			ct.gap = never
		}
	}
	return ct
}

func (ct chunkTimes) at(i int64) int64 {
	t := ct.latencyMs + i*ct.iv
	if ct.stall && i >= ct.k {
		if ct.gap >= never {
			return never
		}
		t += ct.gap
	}
	return t
}

// streamTimeline is a 2xx streamed answer: the chunks under the model's
// watchdogs, then how the stream ends.
func streamTimeline(r *faults.Response, latencyMs int64, tm *timers) timeline {
	tl := timeline{firstByte: -1}
	n := int64(r.Chunks())
	ct := chunkTimesOf(r, latencyMs)
	last := n // chunks the upstream sends before ending or breaking
	if r.Fault == faults.Cut {
		last = min(ct.k, n)
	}
	if watchChunks(&tl, ct, last, tm) {
		return tl
	}
	end := ct.at(max(last-1, 0))
	if last == 0 {
		end = latencyMs
	}
	switch r.Fault {
	case faults.Cut:
		tl.endMs, tl.kind, tl.transport = end, model.OutcomeTransport, model.TransportEarlyEOF
		return tl
	case faults.MalformedChunk:
		// One event that is not JSON, before chunk k: skipped, unless the
		// model's bound on malformed events says the stream is broken.
		if malformedBreaks(r, tm) {
			tl.endMs, tl.kind = ct.at(min(ct.k, max(n-1, 0))), model.OutcomeQuality
			return tl
		}
	}
	tl.endMs, tl.kind, tl.success = end, model.OutcomeResponse, true
	return tl
}

// malformedBreaks: the stream's malformed events (at least one) pass the
// model's bound on them.
func malformedBreaks(r *faults.Response, tm *timers) bool {
	var m model.MalformedEvents
	for range max(r.Stream.Malformed, 1) {
		if !m.Bad(tm.set) {
			return true
		}
	}
	return false
}

// watchChunks feeds the first last chunks to the model's stream watchdog,
// ticking it at its deadlines, and records them in tl. It is true when the
// watchdog ended the attempt (tl then says when and why).
//
// Chunks arriving at one instant are fed as one event (same progress time,
// same window sum); the last instant is not fed at all, as nothing reads
// the watchdog after the stream ends. A plain answer (all chunks at once)
// therefore costs one deadline check.
func watchChunks(tl *timeline, ct chunkTimes, last int64, tm *timers) bool {
	wt := watchdogTicker{w: model.NewWatchdog(tm.set, 0), checked: -1}
	for i := int64(0); i < last; {
		t := ct.at(i)
		j := i + 1
		for j < last && ct.at(j) == t {
			j++
		}
		if end, kind, abort := wt.tick(min(t, never-1)); abort {
			tl.endMs, tl.kind = end, kind
			return true
		}
		if t >= never {
			break
		}
		if t > wt.checked {
			if kind, abort := wt.w.Check(model.Time(t)); abort {
				tl.endMs, tl.kind = t, kind
				return true
			}
		}
		if tl.firstByte < 0 {
			tl.firstByte = t
		}
		if j < last {
			wt.w.Observe(model.Time(t), model.StreamEvent{UsefulBytes: int(j-i) * faults.ChunkBytes})
		}
		tl.chunks = j
		i = j
	}
	return false
}

// watchdogTicker runs a watchdog's timer: checked is the last deadline it
// checked.
type watchdogTicker struct {
	w       model.Watchdog
	checked int64
}

// tick runs the watchdog timer up to (not including) instant t.
func (wt *watchdogTicker) tick(t int64) (int64, model.OutcomeKind, bool) {
	for {
		d := int64(wt.w.Deadline())
		if d >= t || d <= wt.checked {
			return 0, 0, false
		}
		wt.checked = d
		if kind, abort := wt.w.Check(model.Time(d)); abort {
			return d, kind, true
		}
	}
}

// jsonTimeline is a 2xx answer to a non-streaming request: the gateway
// forwards stream:false, and the upstream (breakwater upstream, like a real
// one) generates the whole answer before its headers — latency, any stall,
// then the chunks' generation time — and sends the body at once, so only
// responseHeaderMs judges the wait. A cut body is a reset mid-body, a
// malformed one the output validation case.
func jsonTimeline(r *faults.Response, latencyMs int64, tm *timers) timeline {
	tl := timeline{firstByte: -1}
	ready := latencyMs + int64(r.Chunks()-1)*durMs(r.ChunkInterval())
	if r.Fault == faults.Stall {
		if r.Stream.StallFor == 0 {
			ready = never
		} else {
			ready += durMs(r.Stream.StallFor)
		}
	}
	if at, cut := tm.headerTimeout(ready); cut {
		tl.endMs, tl.kind, tl.transport = at, model.OutcomeTransport, model.TransportHeaderTimeout
		return tl
	}
	tl.endMs, tl.firstByte = ready, ready
	switch r.Fault {
	case faults.Cut:
		tl.kind, tl.transport = model.OutcomeTransport, model.TransportReset
	case faults.MalformedChunk:
		tl.kind = model.OutcomeQuality
	default:
		tl.kind, tl.success = model.OutcomeResponse, true
	}
	return tl
}
