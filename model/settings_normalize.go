package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/internal/lenient"
	"github.com/breakwater-gw/breakwater/internal/suggest"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// This file holds the one normalisation of the settings tree (docs/settings.md#layers,
// docs/settings.md#validation): every source — config file, env, saved settings, PATCH,
// scenario `settings:`, `sim -set` — ends in Normalize.
//
// The policy:
//   - numbers out of their range are CLAMPED (docs/settings.md#validation / docs/lockouts.md), silently:
//     a clamped value is a valid value, and the API returns what it applied;
//   - what cannot be clamped is REJECTED with a *SettingsError naming the
//     field: wrong types, bad enum values, unknown keys (including unknown
//     cooldownByKind kinds), missing required values, inconsistent rule
//     objects, more rules than allowed;
//   - Normalize is idempotent and DefaultSettings() is a fixed point;
//   - empty maps and slices are canonically nil, sets of statuses are sorted
//     and de-duplicated, markers and signals are lower-cased.

// Limits used by Normalize.
const (
	msDay24h = 24 * hour
	msWeek   = 7 * msDay24h
	ms8Days  = 8 * msDay24h
	ms30Days = 30 * msDay24h
	ms10Min  = 10 * minute

	// MaxProviderErrorRules bounds the operator classification rules (all
	// providers together), as the reference schema does.
	MaxProviderErrorRules = 50
	// MaxStatusRestatements bounds the operator restatement rules (all
	// providers together).
	MaxStatusRestatements = 50
)

// defaultLockoutErrorCodes is modelLockout.errorCodes when none is configured
// (docs/lockouts.md). Callers must not modify it.
func defaultLockoutErrorCodes() []int { return []int{403, 404, 429, 502, 503, 504} }

// ---------------------------------------------------------------------------
// Errors

// ProblemUnknownKey is the Problem of a SettingsError for a key that is not in
// the settings tree.
const ProblemUnknownKey = "unknown key"

// ProblemUnknownVariable is the Problem of a SettingsError for an unknown
// BREAKWATER_* settings variable; Field holds the variable's name.
const ProblemUnknownVariable = "unknown variable"

// SettingsError is one problem with one settings value. Invalid settings are
// never partially applied: Normalize and the settings codec (model/settings:
// Resolve, MergePatch, SetPath, EnvLayer) return every problem they found, each as a *SettingsError joined with
// errors.Join (errors.As finds the first; SettingsErrors lists them all).
type SettingsError struct {
	// Field is the dotted JSON path of the value, e.g.
	// "providerBreaker.apikey.failureThreshold"; list elements are written
	// "providerErrorRules.glm[0].status". Empty only for a problem with the
	// whole document (e.g. malformed JSON).
	Field string `json:"field"`
	// Problem says what is wrong, e.g. "want an integer, got \"abc\"".
	Problem string `json:"problem"`
	// Suggestion is the nearest known key for an unknown key (or variable),
	// if one is close enough to be a likely typo.
	Suggestion string `json:"suggestion,omitempty"`
	// Known lists the keys allowed where an unknown key was found.
	Known []string `json:"known,omitempty"`
	// Source says where the bad value came from when known: a layer name
	// ("file", "env", "saved", "patch", "set") or an env variable
	// ("env BREAKWATER_RATE_LIMIT_MAX_WAIT_MS").
	Source string `json:"source,omitempty"`
}

func (e *SettingsError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		b.WriteString(": ")
	}
	switch {
	case e.Problem == ProblemUnknownKey || e.Problem == ProblemUnknownVariable:
		fmt.Fprintf(&b, "%s %q", e.Problem, e.Field)
		switch {
		case e.Suggestion != "":
			fmt.Fprintf(&b, " (did you mean %q?)", e.Suggestion)
		case len(e.Known) > 0:
			fmt.Fprintf(&b, " (known keys: %s)", strings.Join(e.Known, ", "))
		}
	case e.Field == "":
		b.WriteString(e.Problem)
	default:
		b.WriteString(e.Field)
		b.WriteString(": ")
		b.WriteString(e.Problem)
	}
	return b.String()
}

// SettingsErrors returns every *SettingsError in err (joined or wrapped), in
// order; nil when there is none.
func SettingsErrors(err error) []*SettingsError { return suggest.ErrorsOf[*SettingsError](err) }

// SettingsProblems collects SettingsErrors; Err reports them sorted by
// field, so Normalize and the settings layers report in one order.
type SettingsProblems []*SettingsError

// Add records a problem with field.
func (p *SettingsProblems) Add(field, format string, args ...any) {
	*p = append(*p, &SettingsError{Field: field, Problem: fmt.Sprintf(format, args...)})
}

// Err is nil without problems, the one problem, or every problem joined.
func (p SettingsProblems) Err() error {
	if len(p) == 0 {
		return nil
	}
	sorted := slices.Clone(p)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Field < sorted[j].Field })
	errs := make([]error, len(sorted))
	for i, e := range sorted {
		errs[i] = e
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// ---------------------------------------------------------------------------
// Millis

// MarshalJSON writes the duration as an integer number of milliseconds.
func (m Millis) MarshalJSON() ([]byte, error) {
	return strconv.AppendInt(nil, int64(m), 10), nil
}

// UnmarshalJSON accepts an integer number of milliseconds (30000), a string
// holding one ("30000"), or a Go duration string ("30s", "1m30s", "250ms")
// that is a whole number of milliseconds. Negative values are accepted here and
// clamped by Normalize. null leaves the value unchanged.
func (m *Millis) UnmarshalJSON(b []byte) error {
	b = []byte(strings.TrimSpace(string(b)))
	if string(b) == "null" {
		return nil
	}
	var v any
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("invalid duration %s: %v", b, err)
		}
		v = s
	} else {
		v = json.Number(b)
	}
	ms, err := lenient.Millis(v)
	if err != nil {
		return err
	}
	*m = Millis(ms)
	return nil
}

// Duration returns m as a time.Duration (saturating).
func (m Millis) Duration() time.Duration {
	if int64(m) > math.MaxInt64/int64(time.Millisecond) {
		return time.Duration(math.MaxInt64)
	}
	if int64(m) < math.MinInt64/int64(time.Millisecond) {
		return time.Duration(math.MinInt64)
	}
	return time.Duration(m) * time.Millisecond
}

// ---------------------------------------------------------------------------
// Normalize

// Normalize clamps every numeric setting into its range and validates what
// cannot be clamped. It is the one normalisation for every source. On error
// it returns the zero Settings and every problem found (never a partial
// result). Normalize never modifies s (maps and slices are copied) and is
// idempotent: Normalize(Normalize(x)) == Normalize(x).
func Normalize(s Settings) (Settings, error) {
	var p SettingsProblems
	out := s
	normProviderBreaker(&p, &out.ProviderBreaker)
	normProviderCooldown(&out.ProviderCooldown)
	normConnectionCooldown(&out.ConnectionCooldown)
	normModelLockout(&out.ModelLockout)
	normWaits(&out)
	normStreamRecovery(&out)
	normBudgets(&out)

	out.EmergencyFallback.Target = strings.TrimSpace(out.EmergencyFallback.Target)
	if out.EmergencyFallback.Enabled && out.EmergencyFallback.Target == "" {
		p.Add("emergencyFallback.target", "required when emergencyFallback.enabled is true")
	}

	out.ProviderErrorRules = normSettingsErrorRules(&p, out.ProviderErrorRules)
	out.StatusRestatements = normSettingsRestatements(&p, out.StatusRestatements)
	out.BannedSignals = normSettingsSignals(out.BannedSignals)

	if err := p.Err(); err != nil {
		return Settings{}, err
	}
	return out, nil
}

func normProviderBreaker(p *SettingsProblems, pb *ProviderBreakerSettings) {
	for _, prof := range []struct {
		name string
		b    *BreakerProfile
	}{{"oauth", &pb.OAuth}, {"apikey", &pb.APIKey}, {"local", &pb.Local}} {
		normSettingsBreaker(p, "providerBreaker."+prof.name, prof.b)
	}
	pb.Dedup.ConnectionMs = clampSettingMs(pb.Dedup.ConnectionMs, 0, ms10Min)
	pb.Dedup.TransportMs = clampSettingMs(pb.Dedup.TransportMs, 0, ms10Min)
}

func normProviderCooldown(pc *ProviderCooldownSettings) {
	for _, w := range []*WindowProfile{&pc.OAuth, &pc.APIKey, &pc.Local} {
		w.ProviderFailureThreshold = clampSettingInt(w.ProviderFailureThreshold, 1, 1000)
		w.ProviderFailureWindowMs = clampSettingMs(w.ProviderFailureWindowMs, 1000, msWeek)
		w.ProviderCooldownMs = clampSettingMs(w.ProviderCooldownMs, 0, msDay24h)
	}
	pc.MinRetryCooldownMs = clampSettingMs(pc.MinRetryCooldownMs, 0, hour)
	pc.MaxRetryCooldownMs = clampSettingMs(pc.MaxRetryCooldownMs, pc.MinRetryCooldownMs, msDay24h)
}

func normConnectionCooldown(cc *ConnectionCooldownSettings) {
	for _, c := range []*CooldownProfile{&cc.OAuth, &cc.APIKey, &cc.Local} {
		c.BaseCooldownMs = clampSettingMs(c.BaseCooldownMs, 0, msDay24h)
		c.MaxBackoffSteps = clampSettingInt(c.MaxBackoffSteps, 0, 32)
	}
	cc.MaxCooldownMs = clampSettingMs(cc.MaxCooldownMs, 1000, msWeek)
	cc.MaxStatedResetMs = clampSettingMs(cc.MaxStatedResetMs, cc.MaxCooldownMs, ms8Days)
	cc.BackoffDecayMs = clampSettingMs(cc.BackoffDecayMs, 0, msWeek)
	cc.ConcurrencyCooldownMs = clampSettingMs(cc.ConcurrencyCooldownMs, 0, ms10Min)
	cc.TransientMaxCooldownMs = clampSettingMs(cc.TransientMaxCooldownMs, 1000, cc.MaxCooldownMs)
}

func normModelLockout(ml *ModelLockoutSettings) {
	ml.ErrorCodes = normSettingsStatusSet(ml.ErrorCodes)
	if len(ml.ErrorCodes) == 0 {
		ml.ErrorCodes = defaultLockoutErrorCodes()
	}
	// The reference clamps the base to [5000, 600000] in production and to
	// [0, 600000] in tests; breakwater takes the wider range everywhere so
	// that simulations can use short lockouts.
	ml.BaseCooldownMs = clampSettingMs(ml.BaseCooldownMs, 0, ms10Min)
	ml.MaxCooldownMs = max(clampSettingMs(ml.MaxCooldownMs, 5000, hour), ml.BaseCooldownMs)
	ml.MaxBackoffSteps = clampSettingInt(ml.MaxBackoffSteps, 0, 20)
	ml.EscalationWindowMs = clampSettingMs(ml.EscalationWindowMs, 0, msWeek)
}

// normWaits clamps the request queue and the three waits: for a cooldown,
// for a combo cooldown and for priority.
func normWaits(s *Settings) {
	rq := &s.RequestQueue
	rq.MaxWaitMs = clampSettingMs(rq.MaxWaitMs, 1, msDay24h)
	rq.ExecutionMaxWaitMs = clampSettingMs(rq.ExecutionMaxWaitMs, 1, msDay24h)
	rq.MaxQueueDepth = clampSettingInt(rq.MaxQueueDepth, 0, 100_000)
	rq.GlobalMaxConcurrent = clampSettingInt(rq.GlobalMaxConcurrent, 0, 100_000)

	wc := &s.WaitForCooldown
	wc.MaxRetryWaitSec = clampSettingInt(wc.MaxRetryWaitSec, 0, 300)
	wc.MaxRetries = clampSettingInt(wc.MaxRetries, 0, 10)
	wc.BudgetMs = clampSettingMs(wc.BudgetMs, Millis(wc.MaxRetryWaitSec)*second, 300*second)

	cw := &s.ComboCooldownWait
	cw.MaxWaitMs = clampSettingMs(cw.MaxWaitMs, 0, 300*second)
	cw.MaxAttempts = clampSettingInt(cw.MaxAttempts, 0, 10)
	cw.BudgetMs = clampSettingMs(cw.BudgetMs, cw.MaxWaitMs, 300*second)

	s.PriorityWait.MaxWaitMs = clampSettingMs(s.PriorityWait.MaxWaitMs, 0, 60*second)
}

func normStreamRecovery(s *Settings) {
	tw := &s.StreamRecovery.ThroughputWatchdog
	tw.WarmupMs = clampSettingMs(tw.WarmupMs, 0, ms10Min)
	tw.WindowMs = clampSettingMs(tw.WindowMs, 1000, ms10Min)
	tw.MinUsefulBytesPerSecond = clampSettingInt(tw.MinUsefulBytesPerSecond, 1, 1_000_000)
	tw.MinUsefulBytes = clampSettingInt(tw.MinUsefulBytes, 1, 1_000_000)
	normStreamResume(&s.StreamRecovery.MalformedEvents, &s.StreamResume)
}

// normBudgets clamps the upstream timeouts, the request budget and the
// session affinity TTL.
func normBudgets(s *Settings) {
	ut := &s.UpstreamTimeouts
	for _, t := range []*Millis{&ut.ConnectMs, &ut.ResponseHeaderMs, &ut.FirstContentMs, &ut.StreamIdleMs, &ut.AttemptMs} {
		*t = clampSettingMs(*t, 1, msDay24h)
	}
	s.RequestBudget.MaxAttempts = clampSettingInt(s.RequestBudget.MaxAttempts, 1, 100)
	s.RequestBudget.DeadlineMs = clampSettingMs(s.RequestBudget.DeadlineMs, 1, msDay24h)

	s.SessionAffinityTTLMs = clampSettingMs(s.SessionAffinityTTLMs, 0, ms30Days)
}

func normSettingsBreaker(p *SettingsProblems, path string, b *BreakerProfile) {
	b.FailureThreshold = clampSettingInt(b.FailureThreshold, 1, 1000)
	limit := 1
	if b.FailureThreshold > 1 {
		limit = b.FailureThreshold - 1
	}
	b.DegradationThreshold = min(clampSettingInt(b.DegradationThreshold, 1, 1000), limit)
	b.ResetTimeoutMs = clampSettingMs(b.ResetTimeoutMs, 1000, msDay24h)
	b.HalfOpenRequests = clampSettingInt(b.HalfOpenRequests, 1, 100)
	b.MaxBackoffMultiplier = clampSettingInt(b.MaxBackoffMultiplier, 1, 1024)
	b.BackoffEscalationCount = clampSettingInt(b.BackoffEscalationCount, 0, 100)
	b.ProbeTimeoutMs = clampSettingMs(b.ProbeTimeoutMs, 0, msDay24h)
	if len(b.CooldownByKind) == 0 {
		b.CooldownByKind = nil
		return
	}
	m := make(map[string]Millis, len(b.CooldownByKind))
	for _, k := range sortedSettingKeys(b.CooldownByKind) {
		if _, err := parseFailureKind(k); err != nil {
			p.Add(path+".cooldownByKind."+k, "unknown failure kind (want timeout, server_error or transport)")
			continue
		}
		m[k] = clampSettingMs(b.CooldownByKind[k], 0, msDay24h)
	}
	b.CooldownByKind = m
}

// normSettingsStatusSet keeps the HTTP statuses 100..599, sorted and de-duplicated;
// nil when none is left.
func normSettingsStatusSet(in []int) []int {
	var out []int
	for _, c := range in {
		if c >= 100 && c <= 599 {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ruleReasons are the reasons an operator rule may state.
func settingsRuleReasonAllowed(r Reason) bool {
	switch r {
	case ReasonRateLimitExceeded, ReasonQuotaExhausted, ReasonConcurrencyLimited, ReasonModelCapacity,
		ReasonServerError, ReasonAuthError, ReasonNotFound, ReasonForbidden, ReasonQualityFailure,
		ReasonRequestScoped, ReasonCreditsExhausted, ReasonBanned, ReasonRequestRejected:
		return true
	}
	return false
}

func normSettingsErrorRules(p *SettingsProblems, in map[string][]ProviderErrorRule) map[string][]ProviderErrorRule {
	total := 0
	var out map[string][]ProviderErrorRule
	for _, prov := range sortedSettingKeys(in) {
		rules := in[prov]
		if len(rules) == 0 {
			continue
		}
		path := "providerErrorRules." + prov
		if strings.TrimSpace(prov) == "" {
			p.Add(path, "provider id must not be empty")
			continue
		}
		total += len(rules)
		norm := make([]ProviderErrorRule, len(rules))
		for i, r := range rules {
			rp := fmt.Sprintf("%s[%d]", path, i)
			if r.Status < 100 || r.Status > 599 {
				p.Add(rp+".status", "want an HTTP status 100..599, got %d", r.Status)
			}
			r.Match = strings.ToLower(r.Match)
			if strings.TrimSpace(r.Match) == "" {
				p.Add(rp+".match", "required (a case-insensitive substring of the error text)")
			}
			switch r.Scope {
			case ScopeModel, ScopeProvider, ScopeConnection:
			case ScopeNone:
				p.Add(rp+".scope", "required: model, provider or connection")
			default:
				p.Add(rp+".scope", "want model, provider or connection, got %q", r.Scope.String())
			}
			if r.Reason == ReasonNone {
				r.Reason = ReasonQuotaExhausted
			} else if !settingsRuleReasonAllowed(r.Reason) {
				p.Add(rp+".reason", "%q is not an outcome a rule can state", r.Reason.String())
			}
			r.CooldownMs = clampSettingMs(r.CooldownMs, 0, msWeek)
			norm[i] = r
		}
		if out == nil {
			out = map[string][]ProviderErrorRule{}
		}
		out[prov] = norm
	}
	if total > MaxProviderErrorRules {
		p.Add("providerErrorRules", "at most %d rules in all, got %d", MaxProviderErrorRules, total)
	}
	return out
}

func normSettingsRestatements(p *SettingsProblems, in map[string][]RestatementRule) map[string][]RestatementRule {
	total := 0
	var out map[string][]RestatementRule
	for _, prov := range sortedSettingKeys(in) {
		rules := in[prov]
		if len(rules) == 0 {
			continue
		}
		path := "statusRestatements." + prov
		if strings.TrimSpace(prov) == "" {
			p.Add(path, "provider id must not be empty")
			continue
		}
		total += len(rules)
		ids := map[string]bool{}
		norm := make([]RestatementRule, len(rules))
		for i, r := range rules {
			rp := fmt.Sprintf("%s[%d]", path, i)
			r.ID = strings.TrimSpace(r.ID)
			switch {
			case r.ID == "":
				p.Add(rp+".id", "required")
			case ids[r.ID]:
				p.Add(rp+".id", "duplicate rule id %q", r.ID)
			}
			ids[r.ID] = true
			for _, st := range r.FromStatuses {
				if st < 100 || st > 599 {
					p.Add(rp+".fromStatuses", "want HTTP statuses 100..599, got %d", st)
					break
				}
			}
			r.FromStatuses = normSettingsStatusSet(r.FromStatuses)
			if len(r.FromStatuses) == 0 {
				p.Add(rp+".fromStatuses", "at least one status is required")
			}
			if r.ToStatus < 100 || r.ToStatus > 599 {
				p.Add(rp+".toStatus", "want an HTTP status 100..599, got %d", r.ToStatus)
			}
			r.TextMarkers = normSettingsMarkers(r.TextMarkers)
			if len(r.TextMarkers) == 0 {
				p.Add(rp+".textMarkers", "at least one non-empty marker is required")
			}
			r.ExcludeMarkers = normSettingsMarkers(r.ExcludeMarkers)
			r.DefaultRetryAfterMs = clampSettingMs(r.DefaultRetryAfterMs, 0, msDay24h)
			norm[i] = r
		}
		if out == nil {
			out = map[string][]RestatementRule{}
		}
		out[prov] = norm
	}
	if total > MaxStatusRestatements {
		p.Add("statusRestatements", "at most %d rules in all, got %d", MaxStatusRestatements, total)
	}
	return out
}

// normSettingsMarkers lower-cases markers and drops blank ones and duplicates (order
// kept). Markers are substrings, so surrounding spaces are kept.
func normSettingsMarkers(in []string) []string {
	var out []string
	for _, m := range in {
		m = strings.ToLower(m)
		if strings.TrimSpace(m) == "" || slices.Contains(out, m) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// normSettingsSignals trims and lower-cases ban phrases, dropping empties and
// duplicates (order kept).
func normSettingsSignals(in []string) []string {
	var out []string
	for _, s := range in {
		s = strings.TrimSpace(strings.ToLower(s))
		if s == "" || slices.Contains(out, s) {
			continue
		}
		out = append(out, s)
	}
	return out
}

func clampSettingInt(v, lo, hi int) int      { return min(max(v, lo), hi) }
func clampSettingMs(v, lo, hi Millis) Millis { return min(max(v, lo), hi) }

func sortedSettingKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ---------------------------------------------------------------------------
// Per-connection overrides

// ConnOverrides are a connection's `rateLimitOverrides` queue budgets (docs/admission.md,
// docs/settings.md#layers): they beat the global requestQueue values. 0 (or a negative value)
// falls through to the global value.
type ConnOverrides struct {
	MaxWaitMs          Millis `json:"maxWaitMs"`
	ExecutionMaxWaitMs Millis `json:"executionMaxWaitMs"`
}

// QueueBudgets returns the effective queue-wait and execution budgets of a
// connection: its override when positive (clamped to 1 ms–24 h like the
// global values), else requestQueue's.
func (s *Settings) QueueBudgets(o ConnOverrides) (maxWaitMs, executionMaxWaitMs int64) {
	maxWaitMs = int64(clampSettingMs(s.RequestQueue.MaxWaitMs, 1, msDay24h))
	executionMaxWaitMs = int64(clampSettingMs(s.RequestQueue.ExecutionMaxWaitMs, 1, msDay24h))
	if o.MaxWaitMs > 0 {
		maxWaitMs = int64(min(o.MaxWaitMs, msDay24h))
	}
	if o.ExecutionMaxWaitMs > 0 {
		executionMaxWaitMs = int64(min(o.ExecutionMaxWaitMs, msDay24h))
	}
	return maxWaitMs, executionMaxWaitMs
}

// ---------------------------------------------------------------------------
// JSON form

// plainSettings has Settings' fields without its methods, for encoding/json.
type plainSettings Settings

// MarshalJSON writes the full settings tree (the form of settings.Full):
// every key in sorted order, empty maps as {} and empty lists as [], never
// null, which PATCH would read as "delete".
func (s Settings) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(plainSettings(s.withEmpties()))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// withEmpties returns s with every nil map and list of the tree replaced by
// an empty one, sharing nothing it changes with s.
func (s Settings) withEmpties() Settings {
	for _, b := range []*BreakerProfile{&s.ProviderBreaker.OAuth, &s.ProviderBreaker.APIKey, &s.ProviderBreaker.Local} {
		b.CooldownByKind = nonNilMap(b.CooldownByKind)
	}
	s.ModelLockout.ErrorCodes = nonNilList(s.ModelLockout.ErrorCodes)
	s.BannedSignals = nonNilList(s.BannedSignals)
	rules := make(map[string][]ProviderErrorRule, len(s.ProviderErrorRules))
	for k, v := range s.ProviderErrorRules {
		rules[k] = nonNilList(v)
	}
	s.ProviderErrorRules = rules
	restated := make(map[string][]RestatementRule, len(s.StatusRestatements))
	for k, v := range s.StatusRestatements {
		list := make([]RestatementRule, len(v))
		for i, r := range v {
			r.FromStatuses = nonNilList(r.FromStatuses)
			r.TextMarkers = nonNilList(r.TextMarkers)
			r.ExcludeMarkers = nonNilList(r.ExcludeMarkers)
			list[i] = r
		}
		restated[k] = list
	}
	s.StatusRestatements = restated
	return s
}

func nonNilMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

func nonNilList[V any](l []V) []V {
	if l == nil {
		return []V{}
	}
	return l
}
