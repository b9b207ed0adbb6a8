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

// Plot geometry, in pixels.
const (
	plotLeft   = 170
	plotWidth  = 1100
	plotLaneH  = 18
	plotGap    = 6
	plotChartH = 120
)

// plot is one rendering of a Timeline: the SVG being written, the run's
// end on the time axis and the current y position. Each section is one
// method, written top to bottom.
type plot struct {
	tl  *Timeline
	b   strings.Builder
	end int64
	y   int
}

func (tl *Timeline) svg(res *Result) string {
	p := &plot{tl: tl, end: max(tl.end, res.Simulated.Milliseconds(), int64(len(tl.buckets))*tl.bucketMs, 1)}
	provs := slices.Sorted(maps.Keys(tl.breakers))
	conns := tl.connLanes()
	p.header(res, len(provs), len(conns))
	p.breakers(provs)
	p.conns(conns)
	p.results()
	p.timeAxis()
	p.legend()
	p.b.WriteString("</svg>\n")
	return p.b.String()
}

// connLanes is every connection with a status point or a lockout bar.
func (tl *Timeline) connLanes() []string {
	set := map[string]bool{}
	for c := range tl.conns {
		set[c] = true
	}
	for c := range tl.locks {
		set[c] = true
	}
	return slices.Sorted(maps.Keys(set))
}

func (p *plot) x(t int64) float64 { return plotLeft + float64(t)*float64(plotWidth)/float64(p.end) }

func (p *plot) header(res *Result, provs, conns int) {
	h := 60 + (provs+1)*(plotLaneH+plotGap) + (conns+1)*(plotLaneH+plotGap) + plotChartH + 90
	fmt.Fprintf(&p.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, plotLeft+plotWidth+30, h)
	fmt.Fprintf(&p.b, `<rect width="100%%" height="100%%" fill="white"/>`)
	fmt.Fprintf(&p.b, `<text x="10" y="18" font-size="14" font-weight="bold">%s</text>`, html.EscapeString(res.Scenario))
	fmt.Fprintf(&p.b, `<text x="10" y="34">seed %d · simulated %v · %d requests · %d upstream calls%s</text>`,
		res.Seed, res.Simulated, res.Requests, res.Upstream, map[bool]string{true: " · (series truncated)", false: ""}[p.tl.truncated])
	p.y = 50
}

func (p *plot) section(title string) {
	fmt.Fprintf(&p.b, `<text x="10" y="%d" font-weight="bold">%s</text>`, p.y+12, title)
	p.y += plotLaneH + plotGap
}

// lane writes a lane's label and background.
func (p *plot) lane(label, fill string) {
	fmt.Fprintf(&p.b, `<text x="20" y="%d">%s</text>`, p.y+13, html.EscapeString(label))
	fmt.Fprintf(&p.b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, plotLeft, p.y, plotWidth, plotLaneH, fill)
}

// breakers draws one lane per provider: closed is the background, every
// other state a bar until the next change.
func (p *plot) breakers(provs []string) {
	p.section("breaker")
	for _, prov := range provs {
		p.lane(prov, stateColor[model.Closed])
		pts := p.tl.breakers[prov]
		for i, pt := range pts {
			next := p.end
			if i+1 < len(pts) {
				next = pts[i+1].t
			}
			if pt.state == model.Closed {
				continue
			}
			fmt.Fprintf(&p.b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %s from %v</title></rect>`,
				p.x(pt.t), p.y, max(p.x(next)-p.x(pt.t), 3), plotLaneH, stateColor[pt.state], html.EscapeString(prov), pt.state, ms(pt.t))
		}
		p.y += plotLaneH + plotGap
	}
}

// conns draws one lane per connection: cooldown and terminal bars, and
// lockouts as a thin strip at the bottom.
func (p *plot) conns(conns []string) {
	p.section("connections (cooldown, terminal, lockouts)")
	for _, c := range conns {
		p.lane(c, "#eeeeee")
		pts := p.tl.conns[c]
		for i := range pts {
			p.connPoint(c, pts, i)
		}
		for _, l := range p.tl.locks[c] {
			fmt.Fprintf(&p.b, `<rect x="%.1f" y="%d" width="%.1f" height="5" fill="#8e24aa"><title>%s lockout %s %v → %v</title></rect>`,
				p.x(l.from), p.y+plotLaneH-5, max(p.x(l.until)-p.x(l.from), 1), html.EscapeString(c), html.EscapeString(l.label),
				ms(l.from), ms(l.until))
		}
		p.y += plotLaneH + plotGap
	}
}

func (p *plot) connPoint(c string, pts []connPoint, i int) {
	pt := pts[i]
	if pt.cooling {
		until := pt.until
		if i+1 < len(pts) && pts[i+1].t < until {
			until = pts[i+1].t // cleared or replaced
		}
		fmt.Fprintf(&p.b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#1e88e5"><title>%s cooldown %v → %v</title></rect>`,
			p.x(pt.t), p.y, max(p.x(until)-p.x(pt.t), 1), plotLaneH-6, html.EscapeString(c), ms(pt.t), ms(until))
	}
	if pt.status.Terminal() {
		next := p.end
		if i+1 < len(pts) {
			next = pts[i+1].t
		}
		fmt.Fprintf(&p.b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#212121"><title>%s %s from %v</title></rect>`,
			p.x(pt.t), p.y, max(p.x(next)-p.x(pt.t), 1), plotLaneH-6, html.EscapeString(c), pt.status, ms(pt.t))
	}
}

// results draws the stacked request results per time bucket.
func (p *plot) results() {
	tl := p.tl
	p.section(fmt.Sprintf("request results per %v", ms(tl.bucketMs)))
	peak := 1
	for _, bk := range tl.buckets {
		n := 0
		for _, v := range bk {
			n += v
		}
		peak = max(peak, n)
	}
	base := p.y + plotChartH
	fmt.Fprintf(&p.b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#666"/>`, plotLeft, base, plotLeft+plotWidth, base)
	fmt.Fprintf(&p.b, `<text x="%d" y="%d" text-anchor="end">%d</text>`, plotLeft-4, p.y+8, peak)
	for i, bk := range tl.buckets {
		x0 := p.x(int64(i) * tl.bucketMs)
		x1 := p.x(int64(i+1) * tl.bucketMs)
		yy := float64(base)
		for r, v := range bk {
			if v == 0 {
				continue
			}
			hh := float64(v) * plotChartH / float64(peak)
			yy -= hh
			fmt.Fprintf(&p.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%v: %d %s</title></rect>`,
				x0, yy, max(x1-x0-0.5, 0.5), hh, resultColor[r], ms(int64(i)*tl.bucketMs), v, resultOrder[r])
		}
	}
	p.y = base + 4
}

func (p *plot) timeAxis() {
	step := niceStep(p.end)
	for t := int64(0); t <= p.end; t += step {
		fmt.Fprintf(&p.b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/><text x="%.1f" y="%d" text-anchor="middle">%v</text>`,
			p.x(t), p.y, p.x(t), p.y+4, p.x(t), p.y+16, ms(t))
	}
	p.y += 34
}

func (p *plot) legend() {
	lx := 10
	item := func(color, label string) {
		fmt.Fprintf(&p.b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`, lx, p.y, color, lx+16, p.y+10, label)
		lx += 26 + 7*len(label)
	}
	for _, s := range []model.BreakerState{model.Closed, model.Degraded, model.Open, model.HalfOpen} {
		item(stateColor[s], s.String())
	}
	item("#1e88e5", "cooldown")
	item("#212121", "terminal")
	item("#8e24aa", "lockout")
	for r := range resultOrder {
		item(resultColor[r], resultOrder[r])
	}
}

func ms(t int64) time.Duration { return time.Duration(t) * time.Millisecond }

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
