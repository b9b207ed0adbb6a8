package chaos

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// loadGen drives closed-loop workers and an open-loop rate. Every loop
// stops by itself: on stop, or when its context ends; no request outlives
// the client deadline.
type loadGen struct {
	q      *requester
	rec    *recorder
	models []string
	ratio  float64
	seed   uint64

	gate     sync.RWMutex // requests hold it shared; a restart takes it
	inflight atomic.Int64
	maxIn    int64
	skipped  atomic.Int64 // open-loop requests not sent: maxInFlight reached
	rate     atomic.Uint64
	rateGen  atomic.Uint64 // bumped on every rate change

	wg   sync.WaitGroup
	stop chan struct{}
	once sync.Once
}

func newLoadGen(q *requester, rec *recorder, l *load, seed uint64) *loadGen {
	g := &loadGen{q: q, rec: rec, models: l.Models, ratio: l.StreamRatio, seed: seed, maxIn: int64(l.MaxInFlight), stop: make(chan struct{})}
	g.setRate(l.Rate)
	return g
}

func (g *loadGen) setRate(r float64) {
	g.rate.Store(math.Float64bits(r))
	g.rateGen.Add(1)
}

// start launches the workers and the open-loop dispatcher.
func (g *loadGen) start(ctx context.Context, workers int) {
	for i := range workers {
		g.wg.Add(1)
		go g.worker(ctx, uint64(i))
	}
	g.wg.Add(1)
	go g.dispatch(ctx)
}

// halt stops sending and waits for every request in flight (each bounded
// by the client deadline).
func (g *loadGen) halt() {
	g.once.Do(func() { close(g.stop) })
	g.wg.Wait()
}

func (g *loadGen) stopped() bool {
	select {
	case <-g.stop:
		return true
	default:
		return false
	}
}

// pause blocks new requests and waits for those in flight; resume lets
// them go again.
func (g *loadGen) pause()  { g.gate.Lock() }
func (g *loadGen) resume() { g.gate.Unlock() }

type chooser struct{ rng *rand.Rand }

func (g *loadGen) chooser(stream uint64) chooser {
	return chooser{rand.New(rand.NewPCG(g.seed, 0x6c6f6164^stream))} // "load"
}

func (c chooser) next(models []string, ratio float64) (string, bool) {
	return models[c.rng.IntN(len(models))], ratio > 0 && c.rng.Float64() < ratio
}

// one sends one request; the caller counted it in inflight (a request
// waiting for a paused gate counts, so a pause cannot pile up goroutines).
func (g *loadGen) one(ctx context.Context, model string, stream bool, due time.Time) {
	defer g.inflight.Add(-1)
	g.gate.RLock()
	g.rec.sentOne()
	res := g.q.do(ctx, model, stream, due)
	g.gate.RUnlock()
	g.rec.add(&res)
}

func (g *loadGen) worker(ctx context.Context, id uint64) {
	defer g.wg.Done()
	ch := g.chooser(id + 1)
	for !g.stopped() && ctx.Err() == nil {
		m, s := ch.next(g.models, g.ratio)
		g.inflight.Add(1)
		g.one(ctx, m, s, time.Now())
	}
}

// dispatch sends open-loop requests at the current rate: each request is
// due at its scheduled instant and its latency counts from there, so a slow
// gateway cannot hide behind a slow client (no coordinated omission).
func (g *loadGen) dispatch(ctx context.Context) {
	defer g.wg.Done()
	ch := g.chooser(0)
	var next time.Time
	var gen uint64
	for !g.stopped() && ctx.Err() == nil {
		rate := math.Float64frombits(g.rate.Load())
		if gv := g.rateGen.Load(); gv != gen || next.IsZero() {
			gen, next = gv, time.Now()
		}
		if rate <= 0 {
			if !g.sleep(ctx, 50*time.Millisecond) {
				return
			}
			next = time.Time{}
			continue
		}
		every := time.Duration(float64(time.Second) / rate)
		now := time.Now()
		for n := 0; !next.After(now) && n < 10_000; n++ {
			due := next
			next = next.Add(every)
			if g.inflight.Load() >= g.maxIn {
				g.skipped.Add(1)
				continue
			}
			m, s := ch.next(g.models, g.ratio)
			g.inflight.Add(1)
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				g.one(ctx, m, s, due)
			}()
		}
		if !next.After(now) {
			next = now // far behind (the machine stalled): do not burst to catch up
		}
		if !g.sleep(ctx, min(time.Until(next), 50*time.Millisecond)) {
			return
		}
	}
}

func (g *loadGen) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-g.stop:
		return false
	case <-ctx.Done():
		return false
	}
}
