package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// WindowClass says which fault-specific invariants a window exercises.
type WindowClass string

const (
	// ClassProviderTrip: every attempt on a whole provider fails with a
	// status or transport error the breaker counts → the breaker opens
	// within its threshold.
	ClassProviderTrip WindowClass = "provider-trip"
	// ClassStorm429: attempts answer 429 → no breaker moves.
	ClassStorm429 WindowClass = "429-storm"
	// ClassBadKey: one connection of a multi-connection provider fails →
	// its siblings never cool.
	ClassBadKey WindowClass = "bad-key"
	// ClassBadModel: one model of a provider is gone (404, or a per-model
	// quota 429) → its connections never cool.
	ClassBadModel WindowClass = "bad-model"
	// ClassOther: nothing fault-specific to check (latency, flapping,
	// probabilistic stream faults, actions).
	ClassOther WindowClass = "other"
)

// Window is one schedule item as the checks see it.
type Window struct {
	Index   int          `json:"index"`
	Label   string       `json:"label"`
	Line    int          `json:"line,omitempty"`
	Action  Action       `json:"action,omitempty"`
	StartMs int64        `json:"startMs"`
	EndMs   int64        `json:"endMs"`
	Match   faults.Match `json:"match,omitzero"`
	Class   WindowClass  `json:"class"`
	// Labels are the upstream outcome labels the fault answers with.
	Labels []string `json:"labels,omitempty"`
	// Failing: some answer of the fault is not a plain success.
	Failing bool `json:"failing"`
	// Trip: every answer counts against the breaker.
	Trip bool `json:"trip"`
	// Only429: every answer is a 429.
	Only429 bool `json:"only429"`
	// Deterministic: no probability and no flapping.
	Deterministic bool `json:"deterministic"`
	// MaxAttemptMs bounds how long one attempt under the fault takes before
	// the gateway records it.
	MaxAttemptMs int64 `json:"maxAttemptMs"`
	// Check is false when the schedule exempted the window.
	Check bool `json:"check"`
	// Hints are the recovery hints the fault states (ms; e.g. Retry-After).
	HintMs int64 `json:"hintMs,omitempty"`
	// Statuses the fault answers with.
	Statuses []int `json:"statuses,omitempty"`
	// Quota: a body speaks of quota (cools until the daily reset).
	Quota bool `json:"quota,omitempty"`
	// Terminal: the fault may make a connection terminal (401, 402, 403).
	Terminal bool `json:"terminal,omitempty"`
}

func tripStatus(s int) bool {
	switch s {
	case 408, 500, 502, 503, 504:
		return true
	}
	return false
}

func ruleItems(r *faults.Rule) []faults.Response {
	if r.Respond != nil {
		return []faults.Response{*r.Respond}
	}
	return r.Sequence
}

// windows resolves the schedule into windows for a fault phase of length
// d (ms offsets from the start of the run).
func windows(s *Schedule, d time.Duration, topo *model.Topology, st *model.Settings) []Window {
	out := make([]Window, 0, len(s.Faults))
	for i := range s.Faults {
		f := &s.Faults[i]
		w := Window{Index: i, Label: f.Label(), Line: f.Line, Action: f.Action, StartMs: f.At.Milliseconds(),
			EndMs: f.End(d).Milliseconds(), Match: f.Rule.Match, Check: !f.NoCheck, Class: ClassOther,
			Deterministic: f.Rule.Flap == nil && (f.Rule.Probability == 0 || f.Rule.Probability >= 1)}
		switch f.Action {
		case ActionDown:
			w.Failing, w.Trip, w.Labels = true, true, []string{"refused"}
			w.MaxAttemptMs = int64(st.UpstreamTimeouts.ConnectMs)
		case ActionRule:
			items := ruleItems(&f.Rule)
			w.Trip, w.Only429 = len(items) > 0, len(items) > 0
			for k := range items {
				it := &items[k]
				label := strconv.Itoa(it.StatusOrOK())
				if it.Fault != faults.None {
					label = it.Fault.String()
				}
				if !slices.Contains(w.Labels, label) {
					w.Labels = append(w.Labels, label)
				}
				if it.Fault == faults.None && !slices.Contains(w.Statuses, it.StatusOrOK()) {
					w.Statuses = append(w.Statuses, it.StatusOrOK())
				}
				failing := !it.OK() || it.Fault != faults.None
				w.Failing = w.Failing || failing
				trip := it.Fault == faults.Reset || it.Fault == faults.Timeout || (it.Fault == faults.None && tripStatus(it.StatusOrOK()))
				w.Trip = w.Trip && trip
				w.Only429 = w.Only429 && it.Fault == faults.None && it.StatusOrOK() == 429
				w.MaxAttemptMs = max(w.MaxAttemptMs, attemptMs(it, st))
				w.HintMs = max(w.HintMs, hintMs(it))
				body := strings.ToLower(it.ErrorBody())
				w.Quota = w.Quota || (!it.OK() && (strings.Contains(body, "quota") || strings.Contains(body, "额度")))
				w.Terminal = w.Terminal || (it.Fault == faults.None && (it.StatusOrOK() == 401 || it.StatusOrOK() == 402 || it.StatusOrOK() == 403))
			}
			w.Class = classify(&w, topo)
		}
		out = append(out, w)
	}
	return out
}

func classify(w *Window, topo *model.Topology) WindowClass {
	m := w.Match
	p := providerOf(topo, m.Provider)
	switch {
	case w.Trip && w.Deterministic && p != nil && m.Connection == "" && m.Model == "":
		return ClassProviderTrip
	case w.Failing && w.Deterministic && p != nil && m.Connection != "" && m.Model == "" && len(p.Connections) >= 2:
		return ClassBadKey // (a 429 on one key is checked as a storm too)
	case p != nil && m.Model != "" && m.Connection == "" && w.Deterministic && len(w.Statuses) > 0 && onlyModelScoped(w.Statuses, p):
		return ClassBadModel
	case w.Only429 && m.Model == "":
		return ClassStorm429
	}
	return ClassOther
}

// onlyModelScoped: 404 (model not found) never cools a connection; a 429
// on a per-model-quota provider locks the model family instead (docs/classification.md#verdicts).
func onlyModelScoped(statuses []int, p *model.ProviderConfig) bool {
	for _, s := range statuses {
		switch {
		case s == 404:
		case s == 429 && perModelQuota(p):
		default:
			return false
		}
	}
	return true
}

func perModelQuota(p *model.ProviderConfig) bool {
	if p.PerModelQuota != nil {
		return *p.PerModelQuota
	}
	return p.Type == "gemini" || p.Type == "local" || p.Profile == model.ProfileLocal
}

func providerOf(topo *model.Topology, id string) *model.ProviderConfig {
	for i := range topo.Providers {
		if topo.Providers[i].ID == id {
			return &topo.Providers[i]
		}
	}
	return nil
}

// attemptMs bounds how long one attempt answered by it takes before the
// gateway has a result to record.
func attemptMs(it *faults.Response, st *model.Settings) int64 {
	t := &st.UpstreamTimeouts
	lat := (it.Latency + it.Jitter).Milliseconds()
	stream := int64(it.Chunks()) * it.ChunkInterval().Milliseconds()
	var d int64
	switch it.Fault {
	case faults.Timeout:
		d = int64(t.ResponseHeaderMs)
	case faults.Stall, faults.SlowStream:
		d = lat + max(int64(t.ResponseHeaderMs), int64(t.FirstContentMs), int64(t.StreamIdleMs)) + stream
	default:
		d = lat + stream
		if lat > int64(t.ResponseHeaderMs) {
			d = int64(t.ResponseHeaderMs)
		}
	}
	return min(d, int64(t.AttemptMs))
}

// hintMs is the longest recovery time a response states in its headers.
func hintMs(it *faults.Response) int64 {
	var h int64
	for k, v := range it.Headers {
		switch strings.ToLower(k) {
		case "retry-after":
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				h = max(h, n*1000)
			} else if t, err := time.Parse(rfc1123, v); err == nil {
				h = max(h, time.Until(t).Milliseconds())
			}
		case "retry-after-ms":
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				h = max(h, n)
			}
		default:
			if strings.HasPrefix(strings.ToLower(k), "x-ratelimit-reset") {
				if d, err := time.ParseDuration(strings.TrimSpace(v)); err == nil {
					h = max(h, d.Milliseconds())
				} else if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					h = max(h, int64(n*1000))
				}
			}
		}
	}
	return h
}

const rfc1123 = "Mon, 02 Jan 2006 15:04:05 GMT"

// LivenessBound is how long after the faults end every breaker, cooldown
// and lockout must serve again, derived from the settings and the faults
// the run injected: the longest attempt still in flight when the faults
// ended, plus the longest timer the settings allow for what the faults
// could have caused (an OPEN breaker's longest hold and its probe, the
// longest connection cooldown — backoff cap, stated hints, ladders —, the
// longest lockout), plus slack for sampling and for a request to arrive.
func LivenessBound(st *model.Settings, topo *model.Topology, ws []Window, base []faults.Rule, sampleEvery time.Duration) (time.Duration, []string) {
	var why []string
	f := scanFaults(st, topo, ws)
	var baseMs int64
	for i := range base {
		for _, it := range ruleItems(&base[i]) {
			baseMs = max(baseMs, attemptMs(&it, st))
		}
	}
	why = append(why, fmt.Sprintf("longest attempt in flight at the end of the faults: %d ms", f.tail))
	breaker, cool := longestHolds(st, topo)
	why = append(why, fmt.Sprintf("longest breaker hold (resetTimeoutMs × maxBackoffMultiplier, cooldownByKind): %d ms, then a probe (%d ms)", breaker, baseMs))
	cool = max(cool, int64(st.ConnectionCooldown.ConcurrencyCooldownMs))
	if f.hints > 0 {
		cool = max(cool, min(f.hints, int64(st.ConnectionCooldown.MaxStatedResetMs)))
		why = append(why, fmt.Sprintf("longest stated hint: %d ms (capped by maxStatedResetMs)", f.hints))
	}
	if f.statuses[401] {
		cool = max(cool, 20*60*1000) // expired ladder 5, 10, 20 min
	}
	if f.statuses[403] {
		cool = max(cool, 15*60*1000) // request-rejected ladder 5, 15 min
	}
	if f.quota {
		// Quota without a stated reset cools until the daily reset, capped.
		cool = max(cool, int64(st.ConnectionCooldown.MaxCooldownMs))
		if anyPerModelQuota(topo) {
			f.lockouts = true
		}
	}
	why = append(why, fmt.Sprintf("longest connection cooldown: %d ms", cool))
	var lock int64
	if f.lockouts {
		lock = int64(st.ModelLockout.MaxCooldownMs)
		why = append(why, fmt.Sprintf("longest model lockout: %d ms", lock))
	}
	slack := 2000 + 3*sampleEvery.Milliseconds()
	total := f.tail + max(breaker+baseMs, cool, lock) + slack
	why = append(why, fmt.Sprintf("slack for sampling and a request to arrive: %d ms", slack))
	return time.Duration(total) * time.Millisecond, why
}

// faultReach is what the fault windows could leave behind.
type faultReach struct {
	tail     int64 // longest attempt (ms)
	hints    int64 // longest stated retry hint (ms)
	quota    bool
	lockouts bool // a model lockout is possible
	statuses map[int]bool
}

// scanFaults collects over the windows the longest attempt and hint, the
// statuses answered and whether a quota or a model lockout can follow.
func scanFaults(st *model.Settings, topo *model.Topology, ws []Window) faultReach {
	f := faultReach{statuses: map[int]bool{}, lockouts: st.ModelLockout.Enabled}
	for i := range ws {
		w := &ws[i]
		f.tail = max(f.tail, w.MaxAttemptMs)
		f.hints = max(f.hints, w.HintMs)
		f.quota = f.quota || w.Quota
		for _, s := range w.Statuses {
			f.statuses[s] = true
			if s == 404 {
				f.lockouts = true
			}
			if s == 429 {
				if p := providerOf(topo, w.Match.Provider); p != nil && perModelQuota(p) || w.Match.Provider == "" {
					f.lockouts = f.lockouts || anyPerModelQuota(topo)
				}
			}
		}
	}
	return f
}

// longestHolds is, over the profiles the providers use, the longest an
// OPEN breaker holds and the longest a connection's backoff cools.
func longestHolds(st *model.Settings, topo *model.Topology) (breaker, cool int64) {
	profiles := map[model.Profile]bool{}
	for _, p := range topo.Providers {
		profiles[p.Profile] = true
	}
	for p := range profiles {
		b := st.ProviderBreaker.For(p)
		hold := int64(b.ResetTimeoutMs) * int64(max(1, b.MaxBackoffMultiplier))
		for _, d := range b.CooldownByKind {
			hold = max(hold, int64(d))
		}
		breaker = max(breaker, hold)
		c := st.ConnectionCooldown.For(p)
		steps := min(c.MaxBackoffSteps, 30)
		cool = max(cool, min(int64(c.BaseCooldownMs)<<steps, int64(st.ConnectionCooldown.MaxCooldownMs)))
	}
	return breaker, cool
}

func anyPerModelQuota(topo *model.Topology) bool {
	for i := range topo.Providers {
		if perModelQuota(&topo.Providers[i]) {
			return true
		}
	}
	return false
}

// dedupDelayMs is how long the breaker's failure dedup needs before
// threshold failures can count on a provider with n connections.
func dedupDelayMs(st *model.Settings, threshold, n int, transport bool) int64 {
	d := st.ProviderBreaker.Dedup
	if transport && d.TransportMs > 0 {
		return int64(threshold-1) * int64(d.TransportMs)
	}
	if d.ConnectionMs > 0 && n > 0 {
		return int64((threshold+n-1)/n-1) * int64(d.ConnectionMs)
	}
	return 0
}
