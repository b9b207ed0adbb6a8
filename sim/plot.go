package sim

import (
	"fmt"
	"html"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Timeline records what a plot of one run shows: breaker state per
// provider over time, cooldown / terminal / lockout bars per connection,
// and request results per time bucket. Its memory is bounded: series stop
// growing at maxPoints (the plot says so), and buckets merge pairwise when
// there are too many.
type Timeline struct {
	breakers  map[string][]statePoint
	conns     map[string][]connPoint
	locks     map[string][]bar
	buckets   [][nResults]int
	bucketMs  int64
	end       int64
	truncated bool
}

type statePoint struct {
	t     int64
	state model.BreakerState
}

type connPoint struct {
	t       int64
	status  model.ConnStatus
	until   int64
	cooling bool
}

type bar struct {
	from, until int64
	label       string
}

const (
	maxPoints  = 20000
	maxBuckets = 600
	nResults   = 6
)

var resultOrder = [nResults]string{ResultServed, ResultFallback, ResultRejected, ResultFailed, ResultStreamError, ResultClientAbort}
var resultColor = [nResults]string{"#4caf50", "#26a69a", "#ff9800", "#e53935", "#ab47bc", "#9e9e9e"}

// NewTimeline returns an empty recorder.
func NewTimeline() *Timeline {
	return &Timeline{breakers: map[string][]statePoint{}, conns: map[string][]connPoint{}, locks: map[string][]bar{}, bucketMs: 1000}
}

// declare lists every provider and connection of the topology, so that
// quiet ones show as lanes too.
func (tl *Timeline) declare(t *model.Topology) {
	for _, p := range t.Providers {
		if _, ok := tl.breakers[p.ID]; !ok {
			tl.breakers[p.ID] = nil
		}
		for _, c := range p.Connections {
			if _, ok := tl.conns[p.ID+"/"+c.ID]; !ok {
				tl.conns[p.ID+"/"+c.ID] = nil
			}
		}
	}
}

func (tl *Timeline) breaker(p string, t int64, s model.BreakerState) {
	pts := tl.breakers[p]
	if n := len(pts); n > 0 && pts[n-1].state == s {
		return
	}
	if len(pts) >= maxPoints {
		tl.truncated = true
		return
	}
	tl.breakers[p] = append(pts, statePoint{t, s})
	tl.end = max(tl.end, t)
}

func (tl *Timeline) conn(c string, t int64, status model.ConnStatus, until int64, cooling bool) {
	pts := tl.conns[c]
	if len(pts) >= maxPoints {
		tl.truncated = true
		return
	}
	tl.conns[c] = append(pts, connPoint{t, status, until, cooling})
	tl.end = max(tl.end, t, until)
}

func (tl *Timeline) lockout(c, key string, from, until int64) {
	bs := tl.locks[c]
	if len(bs) >= maxPoints {
		tl.truncated = true
		return
	}
	// A removal ends the last open bar of the key.
	if from == until {
		for i := len(bs) - 1; i >= 0; i-- {
			if bs[i].label == key {
				if bs[i].until > from {
					bs[i].until = from
				}
				break
			}
		}
		return
	}
	tl.locks[c] = append(bs, bar{from, until, key})
	tl.end = max(tl.end, until)
}

func (tl *Timeline) request(t int64, i int) {
	b := int(t / tl.bucketMs)
	for b >= maxBuckets {
		// merge pairs, double the bucket
		n := (len(tl.buckets) + 1) / 2
		for j := 0; j < n; j++ {
			var m [nResults]int
			for k := 2 * j; k < min(2*j+2, len(tl.buckets)); k++ {
				for r := range m {
					m[r] += tl.buckets[k][r]
				}
			}
			tl.buckets[j] = m
		}
		tl.buckets = tl.buckets[:n]
		tl.bucketMs *= 2
		b = int(t / tl.bucketMs)
	}
	for len(tl.buckets) <= b {
		tl.buckets = append(tl.buckets, [nResults]int{})
	}
	tl.buckets[b][i]++
	tl.end = max(tl.end, t)
}

var stateColor = map[model.BreakerState]string{model.Closed: "#4caf50", model.Degraded: "#fdd835", model.Open: "#e53935", model.HalfOpen: "#ff9800"}

// WriteSVG renders the timeline as a standalone SVG.
func (tl *Timeline) WriteSVG(w io.Writer, res *Result) error {
	_, err := io.WriteString(w, tl.svg(res))
	return err
}

// WriteHTML renders the timeline inside a small HTML page with the run's
// summary.
func (tl *Timeline) WriteHTML(w io.Writer, res *Result) error {
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>")
	b.WriteString(html.EscapeString(res.Scenario))
	b.WriteString("</title><style>body{font-family:sans-serif;margin:16px}td{padding:2px 8px}</style></head><body>\n<h2>")
	b.WriteString(html.EscapeString(res.Scenario))
	b.WriteString("</h2>\n<table>")
	status := "PASS"
	if !res.Passed {
		status = "FAIL"
	}
	for _, kv := range [][2]string{{"result", status}, {"file", res.File}, {"seed", fmt.Sprint(res.Seed)},
		{"simulated", res.Simulated.String()}, {"requests", fmt.Sprint(res.Requests)},
		{"upstream calls", fmt.Sprint(res.Upstream)}, {"trace sha256", res.TraceSHA256}} {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td></tr>", kv[0], html.EscapeString(kv[1]))
	}
	b.WriteString("</table>\n")
	for _, f := range res.Failures {
		fmt.Fprintf(&b, "<p style=\"color:#c62828\">%s</p>\n", html.EscapeString(f.String()))
	}
	for _, v := range res.Violations {
		fmt.Fprintf(&b, "<p style=\"color:#c62828\">%s</p>\n", html.EscapeString(v.String()))
	}
	b.WriteString(tl.svg(res))
	b.WriteString("\n</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func (tl *Timeline) svg(res *Result) string {
	const (
		left   = 170
		width  = 1100
		laneH  = 18
		gap    = 6
		chartH = 120
	)
	end := max(tl.end, res.Simulated.Milliseconds(), int64(len(tl.buckets))*tl.bucketMs, 1)
	x := func(t int64) float64 { return left + float64(t)*float64(width)/float64(end) }
	provs := slices.Sorted(maps.Keys(tl.breakers))
	connSet := map[string]bool{}
	for c := range tl.conns {
		connSet[c] = true
	}
	for c := range tl.locks {
		connSet[c] = true
	}
	conns := slices.Sorted(maps.Keys(connSet))
	h := 60 + (len(provs)+1)*(laneH+gap) + (len(conns)+1)*(laneH+gap) + chartH + 90
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, left+width+30, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`)
	fmt.Fprintf(&b, `<text x="10" y="18" font-size="14" font-weight="bold">%s</text>`, html.EscapeString(res.Scenario))
	fmt.Fprintf(&b, `<text x="10" y="34">seed %d · simulated %v · %d requests · %d upstream calls%s</text>`,
		res.Seed, res.Simulated, res.Requests, res.Upstream, map[bool]string{true: " · (series truncated)", false: ""}[tl.truncated])
	y := 50
	section := func(title string) {
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`, y+12, title)
		y += laneH + gap
	}
	section("breaker")
	for _, p := range provs {
		fmt.Fprintf(&b, `<text x="20" y="%d">%s</text>`, y+13, html.EscapeString(p))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, left, y, width, laneH, stateColor[model.Closed])
		pts := tl.breakers[p]
		for i, pt := range pts {
			next := end
			if i+1 < len(pts) {
				next = pts[i+1].t
			}
			if pt.state == model.Closed {
				continue
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %s from %v</title></rect>`,
				x(pt.t), y, max(x(next)-x(pt.t), 3), laneH, stateColor[pt.state], html.EscapeString(p), pt.state, time.Duration(pt.t)*time.Millisecond)
		}
		y += laneH + gap
	}
	section("connections (cooldown, terminal, lockouts)")
	for _, c := range conns {
		fmt.Fprintf(&b, `<text x="20" y="%d">%s</text>`, y+13, html.EscapeString(c))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#eeeeee"/>`, left, y, width, laneH)
		pts := tl.conns[c]
		for i, pt := range pts {
			if pt.cooling {
				until := pt.until
				if i+1 < len(pts) && pts[i+1].t < until {
					until = pts[i+1].t // cleared or replaced
				}
				fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#1e88e5"><title>%s cooldown %v → %v</title></rect>`,
					x(pt.t), y, max(x(until)-x(pt.t), 1), laneH-6, html.EscapeString(c), time.Duration(pt.t)*time.Millisecond, time.Duration(until)*time.Millisecond)
			}
			if pt.status.Terminal() {
				next := end
				if i+1 < len(pts) {
					next = pts[i+1].t
				}
				fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#212121"><title>%s %s from %v</title></rect>`,
					x(pt.t), y, max(x(next)-x(pt.t), 1), laneH-6, html.EscapeString(c), pt.status, time.Duration(pt.t)*time.Millisecond)
			}
		}
		for _, l := range tl.locks[c] {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="5" fill="#8e24aa"><title>%s lockout %s %v → %v</title></rect>`,
				x(l.from), y+laneH-5, max(x(l.until)-x(l.from), 1), html.EscapeString(c), html.EscapeString(l.label),
				time.Duration(l.from)*time.Millisecond, time.Duration(l.until)*time.Millisecond)
		}
		y += laneH + gap
	}
	section(fmt.Sprintf("request results per %v", time.Duration(tl.bucketMs)*time.Millisecond))
	peak := 1
	for _, bk := range tl.buckets {
		n := 0
		for _, v := range bk {
			n += v
		}
		peak = max(peak, n)
	}
	base := y + chartH
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#666"/>`, left, base, left+width, base)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%d</text>`, left-4, y+8, peak)
	for i, bk := range tl.buckets {
		x0 := x(int64(i) * tl.bucketMs)
		x1 := x(int64(i+1) * tl.bucketMs)
		yy := float64(base)
		for r, v := range bk {
			if v == 0 {
				continue
			}
			hh := float64(v) * chartH / float64(peak)
			yy -= hh
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%v: %d %s</title></rect>`,
				x0, yy, max(x1-x0-0.5, 0.5), hh, resultColor[r], time.Duration(int64(i)*tl.bucketMs)*time.Millisecond, v, resultOrder[r])
		}
	}
	y = base + 4
	// time axis
	step := niceStep(end)
	for t := int64(0); t <= end; t += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/><text x="%.1f" y="%d" text-anchor="middle">%v</text>`,
			x(t), y, x(t), y+4, x(t), y+16, time.Duration(t)*time.Millisecond)
	}
	y += 34
	lx := 10
	legend := func(color, label string) {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`, lx, y, color, lx+16, y+10, label)
		lx += 26 + 7*len(label)
	}
	for _, s := range []model.BreakerState{model.Closed, model.Degraded, model.Open, model.HalfOpen} {
		legend(stateColor[s], s.String())
	}
	legend("#1e88e5", "cooldown")
	legend("#212121", "terminal")
	legend("#8e24aa", "lockout")
	for r := range resultOrder {
		legend(resultColor[r], resultOrder[r])
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func niceStep(end int64) int64 {
	target := end / 10
	for _, s := range []int64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000,
		120000, 300000, 600000, 900000, 1800000, 3600000, 7200000, 10800000, 21600000, 43200000, 86400000} {
		if s >= target {
			return s
		}
	}
	return 86400000 * (target/86400000 + 1)
}
