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
// process-wide counter. The rule is model.Pace; the pacer only keeps the
// reservations.

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
	prof, _ := model.ParseProfile(p.cfg.Profile)
	return s.PacingApplies(prof, c.cfg.RateLimitProtection, o.RPM, int64(o.MinTimeMs))
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
	for i < len(pc.hits) && pc.hits[i] <= now-model.PaceWindowMs {
		i++
	}
	pc.hits = pc.hits[i:]
	waiting := 0
	for _, h := range pc.hits {
		if h > now {
			waiting++
		}
	}
	d := model.Pace(model.PaceInput{NowMs: now, Hits: pc.hits, RPM: o.RPM, MinTimeMs: int64(o.MinTimeMs), Waiting: waiting,
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
