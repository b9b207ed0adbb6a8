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
}

// timers are the shell's per-attempt timers (SPEC §11.6, §6), in ms.
type timers struct {
	header, firstContent, idle, attempt int64
	throughput                          model.ThroughputWatchdog
}

func timersOf(s *model.Settings) timers {
	u := &s.UpstreamTimeouts
	return timers{header: int64(u.ResponseHeaderMs), firstContent: int64(u.FirstContentMs),
		idle: int64(u.StreamIdleMs), attempt: int64(u.AttemptMs), throughput: s.StreamRecovery.ThroughputWatchdog}
}

func durMs(d interface{ Milliseconds() int64 }) int64 { return d.Milliseconds() }

// attemptTimeline turns an upstream behaviour into the gateway's view of
// it: which timer fires first, or how the body ends. This is the shell's
// side of SPEC §6 (the watchdogs are the shell's timers); what the outcome
// means is decided by the model.
func attemptTimeline(r *faults.Response, latencyMs int64, tm *timers) timeline {
	tl := timeline{firstByte: -1}
	hdr := tm.header
	switch {
	case r.Fault == faults.Timeout:
		tl.endMs, tl.kind, tl.transport = hdr, model.OutcomeTransport, model.TransportHeaderTimeout
		return tl
	case !r.OK() || r.Fault == faults.Reset:
		if latencyMs >= hdr {
			tl.endMs, tl.kind, tl.transport = hdr, model.OutcomeTransport, model.TransportHeaderTimeout
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
	// A 2xx answer: headers and the first content byte arrive at latency.
	first := min(hdr, tm.firstContent)
	if latencyMs >= first {
		tl.endMs, tl.kind, tl.transport = first, model.OutcomeTransport, model.TransportHeaderTimeout
		return tl
	}
	n := int64(r.Chunks())
	iv := durMs(r.ChunkInterval())
	k := int64(r.Stream.StallAfter)
	stall := func(at int64, budget int64, content bool) timeline {
		tl.endMs, tl.kind = at+budget, model.OutcomeStall
		if content {
			tl.firstByte = latencyMs
		}
		return tl
	}
	switch r.Fault {
	case faults.Stall:
		stallFor := durMs(r.Stream.StallFor)
		if k == 0 {
			// Headers, then silence before any content.
			if stallFor == 0 || stallFor >= tm.firstContent {
				return stall(latencyMs, tm.firstContent, false)
			}
			if n > 1 && iv >= tm.idle {
				return stall(latencyMs+stallFor, tm.idle, true)
			}
			tl.firstByte, tl.success = latencyMs+stallFor, true
			tl.endMs, tl.kind = latencyMs+stallFor+(n-1)*iv, model.OutcomeResponse
			return tl
		}
		if stallFor == 0 || stallFor >= tm.idle {
			return stall(latencyMs+(k-1)*iv, tm.idle, true)
		}
		if n > 1 && iv >= tm.idle {
			return stall(latencyMs, tm.idle, true)
		}
		tl.firstByte, tl.success = latencyMs, true
		tl.endMs, tl.kind = latencyMs+(n-1)*iv+stallFor, model.OutcomeResponse
		return tl
	case faults.Cut:
		tl.kind, tl.transport = model.OutcomeTransport, model.TransportEarlyEOF
		tl.endMs = latencyMs
		if k > 0 {
			tl.firstByte = latencyMs
			tl.endMs = latencyMs + (k-1)*iv
		}
		return tl
	case faults.MalformedChunk:
		tl.kind = model.OutcomeQuality
		tl.endMs = latencyMs + k*iv
		if k > 0 {
			tl.firstByte = latencyMs
		}
		return tl
	}
	if n > 1 && iv >= tm.idle {
		return stall(latencyMs, tm.idle, true)
	}
	total := (n - 1) * iv
	if r.Fault == faults.SlowStream && r.Stream.BytesPerSecond > 0 {
		if at, ok := throughputAbort(&tm.throughput, int64(r.Stream.BytesPerSecond)); ok && at < total {
			tl.endMs, tl.kind, tl.firstByte = latencyMs+at, model.OutcomeThroughput, latencyMs
			return tl
		}
	}
	tl.firstByte, tl.success = latencyMs, true
	tl.endMs, tl.kind = latencyMs+total, model.OutcomeResponse
	return tl
}

// throughputAbort says when the throughput watchdog (SPEC §6) aborts a
// stream that sends useful content at a constant bytesPerSecond: after the
// warm-up and one full window, if the window held at least minUsefulBytes
// and the rate is below the minimum. The simulated stream's rate is
// constant, so one judgement at warm-up + window decides.
//
// TODO(model): this judgement is a rule and belongs in model (a pure
// watchdog the proxy ticks); sim should call it. See the report.
func throughputAbort(w *model.ThroughputWatchdog, bytesPerSecond int64) (int64, bool) {
	if !w.Enabled {
		return 0, false
	}
	win := int64(w.WindowMs)
	inWindow := bytesPerSecond * win / 1000
	if inWindow < int64(w.MinUsefulBytes) || bytesPerSecond >= int64(w.MinUsefulBytesPerSecond) {
		return 0, false
	}
	return int64(w.WarmupMs) + win, true
}
