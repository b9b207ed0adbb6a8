package replay

import (
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/sim"
)

// Scale returns a copy of sc with every duration of the file and of its
// settings divided by speed (docs/scenarios.md: `replay -speed N`), and the
// things it could not scale exactly, as warnings:
//
//   - offsets (traffic, actions, rules, expects), gaps, client timeouts,
//     latencies, jitter, stream intervals and stalls; stream throughput is
//     multiplied;
//   - every `*Ms` setting (and `maxRetryWaitSec`), also in `set` actions;
//     the scaled settings become the scenario's only layer, and a `set`
//     action carries its full resolved, scaled tree;
//   - upstream hints in headers: `Retry-After` in seconds (rounded up to a
//     whole second when speed does not divide it) and headers whose value is
//     a Go duration (`x-ratelimit-reset-requests: 12s`);
//   - `cooldown:` and `remaining:` of state expects.
//
// What it cannot scale: hints written in response bodies ("retry after
// 20s", Gemini retryDelay), the model's built-in constants that are not
// settings (the expired and request-rejected ladders, their 24 h windows),
// the daily quota reset, and `retryAfter:` request expects (whole seconds;
// they are dropped with a warning). Settings the normalisation clamps after
// scaling are reported too. speed 1 returns sc itself.
func Scale(sc *sim.Scenario, speed float64) (*sim.Scenario, []string, error) {
	if speed <= 0 || math.IsNaN(speed) || math.IsInf(speed, 0) {
		return nil, nil, fmt.Errorf("speed must be a positive number, got %v", speed)
	}
	if speed == 1 {
		return sc, nil, nil
	}
	s := &scaler{speed: speed, epoch: cmpTime(sc.Start, sim.DefaultStart)}
	out := *sc
	d := s.d
	out.Topology = s.topology(sc.Topology)
	if len(sc.LimitResets) > 0 {
		out.LimitResets = make(map[string]sim.LimitResetAnswer, len(sc.LimitResets))
		for k, a := range sc.LimitResets {
			a.NextAvailableIn = d(a.NextAvailableIn)
			out.LimitResets[k] = a
		}
	}
	out.Traffic = slices.Clone(sc.Traffic)
	for i := range out.Traffic {
		t := &out.Traffic[i]
		t.At, t.Every, t.Timeout = d(t.At), d(t.Every), d(t.Timeout)
	}
	set, err := s.settings(sc.Settings)
	if err != nil {
		return nil, nil, err
	}
	out.Settings = set
	out.Layers = []settings.NamedLayer{{Name: fmt.Sprintf("scenario ÷%v", speed), Tree: settings.Full(set)}}
	if out.Actions, err = s.actions(sc); err != nil {
		return nil, nil, err
	}
	out.Rules = make([]faults.Rule, len(sc.Rules))
	for i, r := range sc.Rules {
		out.Rules[i] = s.rule(r)
	}
	if s.spend || anySpendWall(sc) {
		s.warn("the spend wall's timers are model constants, not scaled (model/spendwall.go: lane grace 60 s, slow retry-after clamp 5–600 s ±30 %% jitter, max wait ≥ 1 min, re-accept block 10 min): decisions that depend on them differ from the simulator at speed %v", speed)
	}
	out.Expects = slices.Clone(sc.Expects)
	for i := range out.Expects {
		s.expect(&out.Expects[i])
	}
	return &out, s.warnings, nil
}

// actions scales the actions' instants; a settings action becomes the
// full scaled tree of the settings stacked up to it, since scaling is not
// a merge patch.
func (s *scaler) actions(sc *sim.Scenario) ([]sim.Action, error) {
	out := slices.Clone(sc.Actions)
	var stack []settings.NamedLayer
	for i := range out {
		a := &out[i]
		a.At = s.d(a.At)
		if a.Kind == sim.ActLeaseAcquire || a.Kind == sim.ActLeaseRenew {
			a.TTL = s.leaseTTL(a)
		}
		if a.Kind != sim.ActSet {
			continue
		}
		stack = append(stack, settings.NamedLayer{Name: fmt.Sprintf("action line %d", a.Line), Tree: a.Settings})
		full, _, err := settings.Resolve(append(slices.Clone(sc.Layers), stack...)...)
		if err != nil {
			return nil, fmt.Errorf("action line %d: %w", a.Line, err)
		}
		fs, err := s.settings(full)
		if err != nil {
			return nil, err
		}
		a.Settings = settings.Full(fs)
	}
	return out, nil
}

// leaseTTL scales a lease-acquire's TTL (the 30 min default included); the
// gateway clamps what falls outside [1 s, 30 min], the simulator does not.
func (s *scaler) leaseTTL(a *sim.Action) time.Duration {
	ttl := time.Duration(a.LeaseTTLMs()) * time.Millisecond
	scaled := s.d(ttl)
	if ms := scaled.Milliseconds(); ms < model.MinLeaseTTLMs || ms > model.MaxLeaseTTLMs {
		s.warn("line %d: a lease ttl of %v is %v at speed %v, outside the gateway's [1s, 30m]: it clamps it", a.Line, ttl, scaled, s.speed)
	}
	return scaled
}

// rule scales an upstream rule's window, flap and answers.
func (s *scaler) rule(r faults.Rule) faults.Rule {
	d := s.d
	r.From, r.Until = d(r.From), d(r.Until)
	if r.Flap != nil {
		f := *r.Flap
		f.Down, f.Up = d(f.Down), d(f.Up)
		r.Flap = &f
	}
	if r.Respond != nil {
		x := s.response(*r.Respond, r.Line)
		r.Respond = &x
	}
	if r.Sequence != nil {
		seq := make([]faults.Response, len(r.Sequence))
		for j := range r.Sequence {
			seq[j] = s.response(r.Sequence[j], r.Line)
		}
		r.Sequence = seq
	}
	return r
}

// expect scales an expect's instants and remaining times in place.
func (s *scaler) expect(e *sim.Expect) {
	d := s.d
	e.At, e.From, e.Until = d(e.At), d(e.From), d(e.Until)
	// took: stays in the file's time, as the observations it is checked
	// against are (offset).
	if e.RetryAfter != nil {
		s.warn("line %d: retryAfter (whole seconds) cannot be scaled; not checked at speed %v", e.Line, s.speed)
		e.RetryAfter = nil
	}
	if len(e.Connections) > 0 {
		m := make(map[string]sim.ConnExpect, len(e.Connections))
		for k, c := range e.Connections {
			c.Cooldown = d(c.Cooldown)
			m[k] = c
		}
		e.Connections = m
	}
	if len(e.Lockouts) > 0 {
		e.Lockouts = slices.Clone(e.Lockouts)
		for j := range e.Lockouts {
			e.Lockouts[j].Remaining = d(e.Lockouts[j].Remaining)
		}
	}
}

func anySpendWall(sc *sim.Scenario) bool {
	for _, p := range sc.Topology.Providers {
		for _, c := range p.Connections {
			if c.SpendWall.Enabled() {
				return true
			}
		}
	}
	return false
}

type scaler struct {
	speed    float64
	epoch    time.Time // the scenario's virtual start: Unix-time hints are scaled from it
	warnings []string
	spend    bool // a spend-wall header was seen (its timers are model constants)
}

func cmpTime(a, b time.Time) time.Time {
	if a.IsZero() {
		return b
	}
	return a
}

// topology scales the connections' admission durations (rateLimitOverrides
// maxWaitMs and minTimeMs). The rpm window (model.PaceWindowMs, 60 s) is a
// model constant: rpm is kept, with a warning.
func (s *scaler) topology(t model.Topology) model.Topology {
	out := t
	out.Providers = slices.Clone(t.Providers)
	for i := range out.Providers {
		p := &out.Providers[i]
		p.Connections = slices.Clone(p.Connections)
		for j := range p.Connections {
			c := &p.Connections[j]
			c.MaxWaitMs = int64(s.ms(model.Millis(c.MaxWaitMs)))
			c.Limits.MinTimeMs = int64(s.ms(model.Millis(c.Limits.MinTimeMs)))
			if c.Limits.RPM > 0 {
				s.warn("connection %s/%s: rpm %d is per 60 s of wall time (a model constant), i.e. per %v of the file's time at speed %v",
					p.ID, c.ID, c.Limits.RPM, time.Duration(float64(time.Minute)*s.speed), s.speed)
			}
		}
	}
	return out
}

func (s *scaler) warn(format string, args ...any) {
	s.warnings = append(s.warnings, fmt.Sprintf(format, args...))
}

// d scales a duration, to whole milliseconds (the model's unit).
func (s *scaler) d(v time.Duration) time.Duration {
	if v == 0 {
		return 0
	}
	ms := math.Round(float64(v) / s.speed / float64(time.Millisecond))
	return max(time.Duration(ms)*time.Millisecond, time.Millisecond)
}

func (s *scaler) response(r faults.Response, line int) faults.Response {
	r.Latency, r.Jitter = s.d(r.Latency), s.d(r.Jitter)
	r.Stream.Interval, r.Stream.StallFor = s.d(r.Stream.Interval), s.d(r.Stream.StallFor)
	if r.Stream.BytesPerSecond > 0 {
		r.Stream.BytesPerSecond = max(1, int(math.Round(float64(r.Stream.BytesPerSecond)*s.speed)))
	}
	if len(r.Headers) > 0 {
		h := make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			h[k] = s.header(k, v, line)
		}
		r.Headers = h
	}
	if r.Body != "" && hintInBody(r.Body) {
		s.warn("line %d: a retry hint in a response body is not scaled", line)
	}
	return r
}

func hintInBody(b string) bool {
	l := strings.ToLower(b)
	return strings.Contains(l, "retry") || strings.Contains(l, "reset")
}

// header scales a retry hint header: seconds (Retry-After, the spend
// wall's slow retry-after / max-wait, reset headers given as a delay),
// Unix times (reset instants, scaled from the scenario's start: the
// gateway's clock starts there too) and Go durations.
func (s *scaler) header(name, v string, line int) string {
	ln := strings.ToLower(name)
	if strings.HasPrefix(ln, "anthropic-ratelimit-unified-slow-") {
		s.spend = true
	}
	tv := strings.TrimSpace(v)
	if n, err := strconv.ParseInt(tv, 10, 64); err == nil && n >= 1e9 && strings.Contains(ln, "reset") {
		// A Unix time in seconds (model/hints.go parseResetValue: ≥ 1e9;
		// above 1e10, milliseconds).
		unit := time.Second
		if n > 1e10 {
			unit = time.Millisecond
		}
		at := time.Unix(0, 0).Add(time.Duration(n) * unit)
		off := at.Sub(s.epoch)
		scaled := s.epoch.Add(time.Duration(float64(off) / s.speed))
		q := scaled.Truncate(unit)
		if !q.Equal(scaled) {
			s.warn("line %d: %s %s (a Unix time) scaled from the start is not a whole %v; rounded down", line, name, v, unit)
		}
		return strconv.FormatInt(q.UnixNano()/int64(unit), 10)
	}
	seconds := strings.EqualFold(name, "Retry-After") || ln == "anthropic-ratelimit-unified-slow-retry-after" ||
		ln == "anthropic-ratelimit-unified-slow-max-wait" || strings.Contains(ln, "reset")
	if ln == "retry-after-ms" {
		if n, err := strconv.ParseFloat(tv, 64); err == nil {
			return strconv.FormatInt(int64(math.Ceil(n/s.speed)), 10)
		}
	}
	if seconds {
		n, err := strconv.ParseFloat(tv, 64)
		if err == nil {
			x := n / s.speed
			c := math.Ceil(x)
			if c != x {
				s.warn("line %d: %s %s ÷ %v is not a whole second; rounded up to %v", line, name, v, s.speed, c)
			}
			return strconv.FormatInt(int64(c), 10)
		}
		if strings.EqualFold(name, "Retry-After") {
			s.warn("line %d: Retry-After %q is not in seconds; not scaled", line, v)
			return v
		}
	}
	if dv, err := time.ParseDuration(tv); err == nil && dv > 0 {
		return s.d(dv).String()
	}
	return v
}

// settings scales every *Ms field (model.Millis, also as map values) and
// maxRetryWaitSec, then normalises; a value the clamps move is reported.
func (s *scaler) settings(in model.Settings) (model.Settings, error) {
	out := in // walk replaces every map and slice it changes: in is not modified
	v := reflect.ValueOf(&out).Elem()
	s.walk(v, "")
	resolved, _, err := settings.Resolve(settings.NamedLayer{Name: "replay", Tree: settings.Full(out)})
	if err != nil {
		return out, fmt.Errorf("scaled settings: %w", err)
	}
	a, b := flatten(settings.Full(out)), flatten(settings.Full(resolved))
	for _, k := range sortedKeys(a) {
		if fmt.Sprint(a[k]) != fmt.Sprint(b[k]) {
			s.warn("setting %s scaled to %v is clamped to %v by the normalisation", k, a[k], b[k])
		}
	}
	return resolved, nil
}

var millisType = reflect.TypeOf(model.Millis(0))

func (s *scaler) walk(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < v.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			s.walk(v.Field(i), path+"."+f.Name)
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len())
		it := v.MapRange()
		for it.Next() {
			x := reflect.New(v.Type().Elem()).Elem()
			x.Set(it.Value())
			s.walk(x, path+"."+it.Key().String())
			m.SetMapIndex(it.Key(), x)
		}
		v.Set(m)
	case reflect.Slice:
		if v.IsNil() {
			return
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		for i := 0; i < c.Len(); i++ {
			s.walk(c.Index(i), path)
		}
		v.Set(c)
	case reflect.Int64:
		if v.Type() == millisType {
			v.SetInt(int64(s.ms(model.Millis(v.Int()))))
		}
	case reflect.Int:
		if strings.HasSuffix(path, "Sec") && v.Int() > 0 {
			v.SetInt(int64(math.Max(1, math.Ceil(float64(v.Int())/s.speed))))
		}
	}
}

func (s *scaler) ms(m model.Millis) model.Millis {
	if m <= 0 {
		return m
	}
	return model.Millis(max(1, math.Round(float64(m)/s.speed)))
}

// flatten turns a settings tree into path → leaf value.
func flatten(l settings.Layer) map[string]any {
	out := map[string]any{}
	var rec func(prefix string, v any)
	rec = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, x := range m {
				rec(strings.TrimPrefix(prefix+"."+k, "."), x)
			}
			return
		}
		if m, ok := v.(settings.Layer); ok {
			rec(prefix, map[string]any(m))
			return
		}
		out[prefix] = v
	}
	rec("", map[string]any(l))
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
