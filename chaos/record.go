package chaos

import (
	"math"
	"math/bits"
	"sort"
	"sync"
	"time"
)

// Histogram is a log-linear latency histogram (0.8 % resolution from
// 128 µs, 1 µs below; up to days) of fixed size: recording never allocates.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    time.Duration
	sum    time.Duration
}

const (
	histSub     = 128 // sub-buckets per power of two
	histShift   = 7   // log2(histSub)
	histBuckets = 36 * histSub
)

func histIndex(us uint64) int {
	if us < histSub {
		return int(us)
	}
	e := bits.Len64(us) - histShift - 1 // the bits after the leading one select the sub-bucket
	i := (e+1)*histSub + int((us>>uint(e))&(histSub-1))
	return min(i, histBuckets-1)
}

func histValue(i int) time.Duration {
	if i < histSub {
		return time.Duration(i) * time.Microsecond
	}
	e := i/histSub - 1
	sub := uint64(i % histSub)
	lo := (histSub + sub) << uint(e)
	hi := (histSub + sub + 1) << uint(e)
	return time.Duration((lo+hi)/2) * time.Microsecond
}

// Add records one duration.
func (h *Histogram) Add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d/time.Microsecond))]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

// Quantile returns the q-quantile (0..1).
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(histValue(i), h.max)
		}
	}
	return h.max
}

// Latency is a latency summary in milliseconds.
type Latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"meanMs"`
	P50   float64 `json:"p50Ms"`
	P90   float64 `json:"p90Ms"`
	P95   float64 `json:"p95Ms"`
	P99   float64 `json:"p99Ms"`
	Max   float64 `json:"maxMs"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// Summary summarises the histogram.
func (h *Histogram) Summary() Latency {
	l := Latency{Count: h.n, P50: ms(h.Quantile(.5)), P90: ms(h.Quantile(.9)), P95: ms(h.Quantile(.95)),
		P99: ms(h.Quantile(.99)), Max: ms(h.max)}
	if h.n > 0 {
		l.Mean = ms(h.sum / time.Duration(h.n))
	}
	return l
}

// Violation is one broken invariant, with when and what.
type Violation struct {
	AtMs   int64  `json:"atMs"`
	What   string `json:"what"`
	Model  string `json:"model,omitempty"`
	Stream bool   `json:"stream,omitempty"`
}

// maxKept bounds the violations kept per invariant (all are counted).
const maxKept = 20

// Bucket is one time slot of the run's request timeline.
type Bucket struct {
	AtMs       int64 `json:"atMs"`
	Requests   int   `json:"requests"`
	Success    int   `json:"success"`
	Typed      int   `json:"typedError"`
	StreamErr  int   `json:"streamError"`
	Violations int   `json:"violations"`
}

// recorder aggregates request results; memory does not grow with the
// number of requests (bounded buckets, fixed histograms, capped lists).
type recorder struct {
	mu       sync.Mutex
	start    time.Time
	bucket   time.Duration
	sent     int64
	finished int64
	classes  map[string]int64
	kinds    [5]int64
	lat      Histogram
	latJSON  Histogram
	latSSE   Histogram
	latOK    Histogram
	viol     map[string]int64
	kept     map[string][]Violation
	buckets  []Bucket
	maxBkt   int
	phaseLat map[string]*Histogram // per phase (soak steps)
	phase    string
}

func newRecorder(start time.Time, bucket time.Duration, maxBuckets int) *recorder {
	return &recorder{start: start, bucket: bucket, classes: map[string]int64{}, viol: map[string]int64{},
		kept: map[string][]Violation{}, maxBkt: maxBuckets, phaseLat: map[string]*Histogram{}}
}

func (r *recorder) sentOne() {
	r.mu.Lock()
	r.sent++
	r.mu.Unlock()
}

func (r *recorder) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

func (r *recorder) add(res *Outcome) {
	lat := res.Latency()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished++
	r.classes[res.Class]++
	r.kinds[res.Kind]++
	r.lat.Add(lat)
	if res.Stream {
		r.latSSE.Add(lat)
	} else {
		r.latJSON.Add(lat)
	}
	if res.Kind == KindSuccess && !res.Stream {
		r.latOK.Add(lat)
	}
	if r.phase != "" {
		h := r.phaseLat[r.phase]
		if h == nil {
			h = &Histogram{}
			r.phaseLat[r.phase] = h
		}
		h.Add(lat)
	}
	at := res.End.Sub(r.start)
	if res.Violation != "" {
		r.viol[res.Violation]++
		if k := r.kept[res.Violation]; len(k) < maxKept {
			r.kept[res.Violation] = append(k, Violation{AtMs: at.Milliseconds(), What: res.Detail, Model: res.Model, Stream: res.Stream})
		}
	}
	i := int(at / r.bucket)
	if i < 0 || i >= r.maxBkt {
		return
	}
	for len(r.buckets) <= i {
		r.buckets = append(r.buckets, Bucket{AtMs: (time.Duration(len(r.buckets)) * r.bucket).Milliseconds()})
	}
	b := &r.buckets[i]
	b.Requests++
	switch res.Kind {
	case KindSuccess:
		b.Success++
	case KindTypedError:
		b.Typed++
	case KindStreamError:
		b.StreamErr++
	}
	if res.Violation != "" {
		b.Violations++
	}
}

// Requests is the request summary of a run.
type Requests struct {
	Sent     int64            `json:"sent"`
	Finished int64            `json:"finished"`
	ByKind   map[string]int64 `json:"byKind"`
	ByClass  map[string]int64 `json:"byClass"`
	// ErrorRate is the share of requests that did not succeed.
	ErrorRate float64 `json:"errorRate"`
	// Violations counts per-request invariant violations by invariant.
	Violations map[string]int64 `json:"violations"`
}

func (r *recorder) summary() Requests {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := Requests{Sent: r.sent, Finished: r.finished, ByKind: map[string]int64{}, ByClass: map[string]int64{}, Violations: map[string]int64{}}
	for k, n := range r.kinds {
		if Kind(k) != KindAborted || n > 0 {
			out.ByKind[Kind(k).String()] = n
		}
	}
	for c, n := range r.classes {
		out.ByClass[c] = n
	}
	for v, n := range r.viol {
		out.Violations[v] = n
	}
	if judged := r.finished - r.kinds[KindAborted]; judged > 0 {
		out.ErrorRate = float64(judged-r.kinds[KindSuccess]) / float64(judged)
	}
	return out
}

func (r *recorder) violations(inv string) (int64, []Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.viol[inv], append([]Violation(nil), r.kept[inv]...)
}

// perRequest collects the kept violations of every per-request invariant.
func (r *recorder) perRequest() map[string][]Violation {
	out := map[string][]Violation{}
	for _, inv := range []string{InvDeadline, InvTyped, InvTruncated, InvRetryAfter} {
		_, vs := r.violations(inv)
		out[inv] = vs
	}
	return out
}

func (r *recorder) timeline() []Bucket {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Bucket(nil), r.buckets...)
}

func (r *recorder) latency() (all, json, sse, ok Latency) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lat.Summary(), r.latJSON.Summary(), r.latSSE.Summary(), r.latOK.Summary()
}

func (r *recorder) phaseLatency(p string) Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.phaseLat[p]; h != nil {
		return h.Summary()
	}
	return Latency{}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
