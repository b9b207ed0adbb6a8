package chaos

import (
	"fmt"
	"html"
	"os"
	"strings"
)

// Picture of a run: fault windows, breaker state per provider, connections
// that did not serve, request outcomes and error rate per time bucket, and
// heap / goroutines over time. SVG, or HTML with the SVG and the invariant
// table (chosen by the file's extension).

const (
	plotW     = 1100
	plotLeft  = 170
	plotRight = 20
	laneH     = 14
	laneGap   = 3
)

var stateColor = map[string]string{"CLOSED": "#cfe8cf", "DEGRADED": "#f3d36b", "OPEN": "#d9534f", "HALF_OPEN": "#f0a04b"}
var connColor = map[string]string{"cooldown": "#5b8def", "lockout": "#9b59b6", "banned": "#222", "expired": "#555", "credits_exhausted": "#777"}
var classColor = map[WindowClass]string{ClassProviderTrip: "#d9534f", ClassStorm429: "#f0a04b", ClassBadKey: "#5b8def", ClassBadModel: "#9b59b6", ClassOther: "#999"}

// WritePicture writes the run's picture to path (.svg, else HTML).
func (r *Report) WritePicture(path string) error {
	svg := r.SVG()
	if strings.HasSuffix(strings.ToLower(path), ".svg") {
		return os.WriteFile(path, []byte(svg), 0o644)
	}
	var b strings.Builder
	verdict := r.Verdict()
	fmt.Fprintf(&b, "<!doctype html><html><head><meta charset=\"utf-8\"><title>breakwater %s: %s</title>", r.Mode, verdict)
	b.WriteString(`<style>body{font:13px system-ui,sans-serif;margin:20px;color:#222}table{border-collapse:collapse}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}.pass{color:#2a7a2a}.fail,.interrupted{color:#c0392b;font-weight:bold}.skip{color:#888}pre{background:#f6f6f6;padding:8px}</style></head><body>`)
	fmt.Fprintf(&b, "<h2>breakwater %s: <span class=%q>%s</span></h2>", r.Mode, strings.ToLower(verdict), verdict)
	var sum strings.Builder
	r.Summary(&sum)
	fmt.Fprintf(&b, "<pre>%s</pre>", html.EscapeString(sum.String()))
	b.WriteString(svg)
	b.WriteString("<h3>Invariants</h3><table><tr><th>invariant</th><th>result</th><th>detail</th></tr>")
	for _, res := range r.Invariants {
		fmt.Fprintf(&b, "<tr><td>%s</td><td class=%q>%s</td><td>%s", html.EscapeString(res.Name), res.Status, res.Status, html.EscapeString(res.Detail))
		for i, v := range res.Violations {
			if i == 10 {
				break
			}
			fmt.Fprintf(&b, "<br>at %.1fs: %s", float64(v.AtMs)/1000, html.EscapeString(v.What))
		}
		b.WriteString("</td></tr>")
	}
	b.WriteString("</table></body></html>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// SVG draws the run.
func (r *Report) SVG() string {
	t := &r.Timeline
	var endMs int64 = 1
	for _, p := range t.Points {
		endMs = max(endMs, p.AtMs)
	}
	if n := len(t.Buckets); n > 0 {
		endMs = max(endMs, t.Buckets[n-1].AtMs+t.BucketMs)
	}
	pl := &plot{iw: float64(plotW - plotLeft - plotRight), endMs: endMs, y: 10}
	pl.faults(r.Windows)
	pl.states(t)
	pl.requests(t)
	pl.resources(t)
	pl.axis(r.FaultPhaseMs)
	return fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" font-family="system-ui,sans-serif" font-size="12">`, plotW, pl.y) +
		pl.b.String() + "</svg>\n"
}

// plot is a picture being drawn: sections top to bottom, time from left
// to right over endMs.
type plot struct {
	b     strings.Builder
	y     float64 // where the next section starts
	iw    float64 // width of the time area
	endMs int64
}

func (pl *plot) x(ms int64) float64 { return plotLeft + pl.iw*float64(ms)/float64(pl.endMs) }

func (pl *plot) section(title string) {
	pl.y += 8
	fmt.Fprintf(&pl.b, `<text x="4" y="%.0f" font-weight="bold">%s</text>`, pl.y+10, html.EscapeString(title))
	pl.y += 16
}

// lane draws a labelled empty lane and returns its top.
func (pl *plot) lane(label string) float64 {
	fmt.Fprintf(&pl.b, `<text x="8" y="%.0f" font-size="11">%s</text>`, pl.y+11, html.EscapeString(label))
	fmt.Fprintf(&pl.b, `<rect x="%d" y="%.0f" width="%.0f" height="%d" fill="#f7f7f7"/>`, plotLeft, pl.y, pl.iw, laneH)
	ly := pl.y
	pl.y += laneH + laneGap
	return ly
}

func (pl *plot) rect(x0, x1, ly float64, color, title string) {
	fmt.Fprintf(&pl.b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`, x0, ly, max(x1-x0, 1), laneH, color, html.EscapeString(title))
}

// faults draws one lane per fault window.
func (pl *plot) faults(ws []Window) {
	if len(ws) == 0 {
		return
	}
	pl.section("faults")
	for _, w := range ws {
		ly := pl.lane(truncate(w.Label, 26))
		pl.rect(pl.x(w.StartMs), pl.x(max(w.EndMs, w.StartMs+100)), ly, classColor[w.Class], fmt.Sprintf("%s (%s) %.1fs–%.1fs", w.Label, w.Class, float64(w.StartMs)/1000, float64(w.EndMs)/1000))
	}
}

// states draws breakers and connections: runs of equal state between
// samples.
func (pl *plot) states(t *Timeline) {
	if len(t.Provs) == 0 || len(t.Points) == 0 {
		return
	}
	pl.section("breakers")
	for _, p := range t.Provs {
		ly := pl.lane(p)
		runs(t.Points, func(tp *TimePoint) string { return tp.Breakers[p] }, func(s string, a, z int64) {
			if s != "" && s != "CLOSED" {
				pl.rect(pl.x(a), pl.x(z), ly, stateColor[s], fmt.Sprintf("%s %s %.1fs–%.1fs", p, s, float64(a)/1000, float64(z)/1000))
			}
		})
	}
	pl.section("connections not serving")
	for _, c := range t.Conns {
		ly := pl.lane(c)
		runs(t.Points, func(tp *TimePoint) string {
			for _, ns := range tp.NotServing {
				if k, v, _ := strings.Cut(ns, "="); k == c {
					return v
				}
			}
			return ""
		}, func(s string, a, z int64) {
			if s != "" {
				pl.rect(pl.x(a), pl.x(z), ly, connColor[s], fmt.Sprintf("%s %s %.1fs–%.1fs", c, s, float64(a)/1000, float64(z)/1000))
			}
		})
	}
}

// requests draws the outcomes per bucket as stacked bars, with the error
// rate as a line over them.
func (pl *plot) requests(t *Timeline) {
	if len(t.Buckets) == 0 {
		return
	}
	b := &pl.b
	pl.section(fmt.Sprintf("requests per %d ms: success / typed error / stream error / violation; line = error rate", t.BucketMs))
	h := 110.0
	top := pl.y
	maxN := 1
	for _, bk := range t.Buckets {
		maxN = max(maxN, bk.Requests)
	}
	fmt.Fprintf(b, `<rect x="%d" y="%.0f" width="%.0f" height="%.0f" fill="#fafafa" stroke="#ddd"/>`, plotLeft, top, pl.iw, h)
	fmt.Fprintf(b, `<text x="8" y="%.0f" font-size="11">%d req</text><text x="8" y="%.0f" font-size="11">0</text>`, top+10, maxN, top+h)
	bw := max(pl.iw*float64(t.BucketMs)/float64(pl.endMs)-0.5, 0.8)
	var pts []string
	for _, bk := range t.Buckets {
		x0 := pl.x(bk.AtMs)
		yy := top + h
		for _, part := range []struct {
			n     int
			color string
		}{{bk.Success, "#6bbf6b"}, {bk.Typed, "#f0c04b"}, {bk.StreamErr, "#f08a4b"}, {bk.Violations, "#d9534f"}} {
			if part.n == 0 {
				continue
			}
			hh := h * float64(part.n) / float64(maxN)
			yy -= hh
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x0, yy, bw, hh, part.color)
		}
		if bk.Requests > 0 {
			er := float64(bk.Requests-bk.Success) / float64(bk.Requests)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x0+bw/2, top+h-h*er))
		}
	}
	if len(pts) > 1 {
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="#333" stroke-width="1.2"><title>error rate (0–100%%)</title></polyline>`, strings.Join(pts, " "))
	}
	pl.y = top + h + 6
}

// resources draws the heap and the goroutines over time.
func (pl *plot) resources(t *Timeline) {
	if len(t.Points) <= 1 {
		return
	}
	pl.series(t.Points, "heap (MB)", "MB", func(p *TimePoint) float64 { return float64(p.HeapBytes) / (1 << 20) })
	pl.series(t.Points, "goroutines", "", func(p *TimePoint) float64 { return float64(p.Goroutines) })
}

// series draws one value over time as a line scaled to its maximum;
// points where it is 0 (not read) are left out.
func (pl *plot) series(points []TimePoint, title, unit string, get func(*TimePoint) float64) {
	b := &pl.b
	pl.section(title)
	h := 60.0
	top := pl.y
	var lo, hi float64 = 0, 1
	for i := range points {
		hi = max(hi, get(&points[i]))
	}
	fmt.Fprintf(b, `<rect x="%d" y="%.0f" width="%.0f" height="%.0f" fill="#fafafa" stroke="#ddd"/>`, plotLeft, top, pl.iw, h)
	fmt.Fprintf(b, `<text x="8" y="%.0f" font-size="11">%.0f %s</text>`, top+10, hi, unit)
	var pts []string
	for i := range points {
		p := &points[i]
		v := get(p)
		if v == 0 {
			continue
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", pl.x(p.AtMs), top+h-h*(v-lo)/(hi-lo)))
	}
	if len(pts) > 1 {
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="#3366aa" stroke-width="1.2"/>`, strings.Join(pts, " "))
	}
	pl.y = top + h + 6
}

// axis draws the time axis and marks the end of the fault phase.
func (pl *plot) axis(faultPhaseMs int64) {
	pl.y += 4
	for i := 0; i <= 10; i++ {
		ms := pl.endMs * int64(i) / 10
		x := pl.x(ms)
		fmt.Fprintf(&pl.b, `<line x1="%.1f" y1="10" x2="%.1f" y2="%.0f" stroke="#eee"/><text x="%.1f" y="%.0f" font-size="10" text-anchor="middle">%.1fs</text>`, x, x, pl.y, x, pl.y+12, float64(ms)/1000)
	}
	if faultPhaseMs > 0 {
		x := pl.x(faultPhaseMs)
		fmt.Fprintf(&pl.b, `<line x1="%.1f" y1="10" x2="%.1f" y2="%.0f" stroke="#333" stroke-dasharray="4 3"><title>end of the fault phase</title></line>`, x, x, pl.y)
	}
	pl.y += 20
}

// runs calls fn for every run of equal values of get over the points.
func runs(pts []TimePoint, get func(*TimePoint) string, fn func(v string, from, to int64)) {
	if len(pts) == 0 {
		return
	}
	cur, from := get(&pts[0]), pts[0].AtMs
	for i := 1; i < len(pts); i++ {
		v := get(&pts[i])
		if v != cur {
			fn(cur, from, pts[i].AtMs)
			cur, from = v, pts[i].AtMs
		}
	}
	fn(cur, from, pts[len(pts)-1].AtMs)
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
