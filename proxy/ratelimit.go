package proxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Request pacing (SPEC §5): a per-connection sliding-window limiter from
// rateLimitOverrides.rpm (over 60 s) and .minTimeMs (spacing between
// dispatches). Limits are per connection (SPEC "does better" 16), never a
// process-wide counter. The rule is the pure function Pace; the pacer only
// keeps the reservations.

// paceWindowMs is the rpm window.
const paceWindowMs = 60_000

// PaceInput is a connection limiter's state at NowMs.
type PaceInput struct {
	NowMs int64
	// Hits are the dispatch times already taken (reservations included),
	// ascending; none is older than the window.
	Hits          []int64
	RPM           int   // 0 = no rpm limit
	MinTimeMs     int64 // 0 = no spacing
	Waiting       int   // reservations still in the future (queued jobs)
	MaxQueueDepth int   // 0 = unbounded
	QueueLeftMs   int64 // what is left of the request's queue budget
}

// PaceDecision says when the request may dispatch, or why it may not.
type PaceDecision struct {
	AtMs int64      // dispatch time (>= NowMs) when Code is ""
	Code model.Code // RATE_LIMIT_QUEUE_FULL or RATE_LIMIT_QUEUE_TIMEOUT
}

// Pace is the pure pacing rule: the earliest instant, not before the last
// reservation (FIFO), that leaves fewer than RPM dispatches in the trailing
// window and at least MinTimeMs after the previous one. A request that would
// have to wait while maxQueueDepth jobs already wait is refused
// (RATE_LIMIT_QUEUE_FULL); one whose queue budget ends before its slot is
// refused at once (RATE_LIMIT_QUEUE_TIMEOUT) instead of waiting in vain.
func Pace(in PaceInput) PaceDecision {
	at := in.NowMs
	n := len(in.Hits)
	if n > 0 {
		last := in.Hits[n-1]
		at = max(at, last)
		if in.MinTimeMs > 0 {
			at = max(at, last+in.MinTimeMs)
		}
	}
	if in.RPM > 0 && n >= in.RPM {
		// fewer than RPM hits in (at-W, at]: the RPM-th most recent one must
		// have left the window
		at = max(at, in.Hits[n-in.RPM]+paceWindowMs)
	}
	if at <= in.NowMs {
		return PaceDecision{AtMs: in.NowMs}
	}
	if in.MaxQueueDepth > 0 && in.Waiting >= in.MaxQueueDepth {
		return PaceDecision{Code: model.CodeRateLimitQueueFull}
	}
	if at-in.NowMs > in.QueueLeftMs {
		return PaceDecision{AtMs: at, Code: model.CodeRateLimitQueueTimeout}
	}
	return PaceDecision{AtMs: at}
}

// pacers holds one limiter per provider/connection.
type pacers struct {
	mu sync.Mutex
	by map[model.ConnRef]*pacer
}

type pacer struct {
	hits []int64
}

func newPacers() *pacers { return &pacers{by: map[model.ConnRef]*pacer{}} }

// paced reports whether pacing applies to a connection: a limit is set and
// protection is on (explicitly, or by the apikey safety net of SPEC §5).
func paced(p *provRuntime, c *connRuntime, s *model.Settings) bool {
	o := c.cfg.RateLimitOverrides
	if o.RPM <= 0 && o.MinTimeMs <= 0 {
		return false
	}
	return c.cfg.RateLimitProtection || (s.RequestQueue.AutoEnableAPIKeyProviders && p.cfg.Profile == "apikey")
}

// wait reserves a dispatch slot and sleeps until it. It returns how long it
// waited, or a typed refusal.
func (ps *pacers) wait(ctx context.Context, ref model.ConnRef, o RateLimitOverrides, depth int, queueLeft time.Duration) (time.Duration, *model.Error) {
	now := time.Now().UnixMilli()
	ps.mu.Lock()
	pc := ps.by[ref]
	if pc == nil {
		pc = &pacer{}
		ps.by[ref] = pc
	}
	i := 0
	for i < len(pc.hits) && pc.hits[i] <= now-paceWindowMs {
		i++
	}
	pc.hits = pc.hits[i:]
	waiting := 0
	for _, h := range pc.hits {
		if h > now {
			waiting++
		}
	}
	d := Pace(PaceInput{NowMs: now, Hits: pc.hits, RPM: o.RPM, MinTimeMs: int64(o.MinTimeMs), Waiting: waiting,
		MaxQueueDepth: depth, QueueLeftMs: queueLeft.Milliseconds()})
	if d.Code != "" {
		ps.mu.Unlock()
		e := &model.Error{Code: d.Code, Provider: ref.Provider}
		if d.Code == model.CodeRateLimitQueueFull {
			e.Message = fmt.Sprintf("pacing queue for %s is full (maxQueueDepth %d)", ref, depth)
		} else {
			e.RetryAfterMs = d.AtMs - now
			e.Message = fmt.Sprintf("%s is paced (rpm %d, minTimeMs %d): the next slot is in %d ms, after the queue budget", ref, o.RPM, o.MinTimeMs, d.AtMs-now)
		}
		return 0, e
	}
	pc.hits = append(pc.hits, d.AtMs)
	ps.mu.Unlock()
	w := time.Duration(d.AtMs-now) * time.Millisecond
	if w <= 0 {
		return 0, nil
	}
	if !sleepCtx(ctx, w) {
		ps.mu.Lock()
		for j := len(pc.hits) - 1; j >= 0; j-- {
			if pc.hits[j] == d.AtMs {
				pc.hits = append(pc.hits[:j], pc.hits[j+1:]...)
				break
			}
		}
		ps.mu.Unlock()
		return w, &model.Error{Code: model.CodeRateLimitQueueTimeout, Provider: ref.Provider, Message: "client went away while paced"}
	}
	return w, nil
}
