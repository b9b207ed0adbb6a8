package model

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// mustNormalize fails the test when Normalize rejects s.
func mustNormalize(t *testing.T, s Settings) Settings {
	t.Helper()
	n, err := Normalize(s)
	if err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	return n
}

func wantSettingsError(t *testing.T, err error, field string, wants ...string) *SettingsError {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error for %q, got none", field)
	}
	var first *SettingsError
	if !errors.As(err, &first) {
		t.Fatalf("error %v (%T) is not a *SettingsError", err, err)
	}
	for _, se := range SettingsErrors(err) {
		if se.Field != field {
			continue
		}
		for _, w := range wants {
			if !strings.Contains(se.Error(), w) {
				t.Fatalf("error for %q = %q, want it to contain %q", field, se.Error(), w)
			}
		}
		return se
	}
	t.Fatalf("no error names %q; got %v", field, err)
	return nil
}

func TestSettingsDefaultsMatchSpec(t *testing.T) {
	d := DefaultSettings()
	cases := []struct {
		rule string
		got  any
		want any
	}{
		{"docs/breaker.md oauth breaker 5/8/60s", []any{d.ProviderBreaker.OAuth.DegradationThreshold, d.ProviderBreaker.OAuth.FailureThreshold, d.ProviderBreaker.OAuth.ResetTimeoutMs}, []any{5, 8, Millis(60000)}},
		{"docs/breaker.md apikey breaker 7/12/30s", []any{d.ProviderBreaker.APIKey.DegradationThreshold, d.ProviderBreaker.APIKey.FailureThreshold, d.ProviderBreaker.APIKey.ResetTimeoutMs}, []any{7, 12, Millis(30000)}},
		{"docs/breaker.md local breaker opens at 2 after 15s", []any{d.ProviderBreaker.Local.FailureThreshold, d.ProviderBreaker.Local.ResetTimeoutMs}, []any{2, Millis(15000)}},
		{"docs/lockouts.md model lockout off, 120s..30min, 10 steps", []any{d.ModelLockout.Enabled, d.ModelLockout.BaseCooldownMs, d.ModelLockout.MaxCooldownMs, d.ModelLockout.MaxBackoffSteps}, []any{false, Millis(120000), Millis(1800000), 10}},
		{"docs/lockouts.md lockout errorCodes", d.ModelLockout.ErrorCodes, []int{403, 404, 429, 502, 503, 504}},
		{"docs/admission.md queue budgets 30s / 600s, unbounded depth", []any{d.RequestQueue.MaxWaitMs, d.RequestQueue.ExecutionMaxWaitMs, d.RequestQueue.MaxQueueDepth}, []any{Millis(30000), Millis(600000), 0}},
		{"docs/selection.md#waiting-for-a-cooldown waitForCooldown 5 / 90s / 300s", []any{d.WaitForCooldown.Enabled, d.WaitForCooldown.MaxRetries, d.WaitForCooldown.MaxRetryWaitSec, d.WaitForCooldown.BudgetMs}, []any{true, 5, 90, Millis(300000)}},
		{"docs/streams.md throughput watchdog off, 30s/30s/4/1", []any{d.StreamRecovery.ThroughputWatchdog.Enabled, d.StreamRecovery.ThroughputWatchdog.WarmupMs, d.StreamRecovery.ThroughputWatchdog.WindowMs, d.StreamRecovery.ThroughputWatchdog.MinUsefulBytesPerSecond, d.StreamRecovery.ThroughputWatchdog.MinUsefulBytes}, []any{false, Millis(30000), Millis(30000), 4, 1}},
		{"docs/settings.md#defaults session affinity off", d.SessionAffinityTTLMs, Millis(0)},
		{"docs/settings.md#defaults probe timeout = attemptMs", d.ProbeTimeout(ProfileAPIKey), int64(600000)},
	}
	for _, c := range cases {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.rule, c.got, c.want)
		}
	}
}

func TestSettingsNormalizeClamps(t *testing.T) {
	cases := []struct {
		rule   string
		set    func(*Settings)
		get    func(*Settings) any
		expect any
	}{
		{"docs/settings.md#validation: failureThreshold clamped to [1,1000] (low)",
			func(s *Settings) { s.ProviderBreaker.APIKey.FailureThreshold = 0 },
			func(s *Settings) any { return s.ProviderBreaker.APIKey.FailureThreshold }, 1},
		{"docs/settings.md#validation: failureThreshold clamped to [1,1000] (high)",
			func(s *Settings) { s.ProviderBreaker.OAuth.FailureThreshold = 5000 },
			func(s *Settings) any { return s.ProviderBreaker.OAuth.FailureThreshold }, 1000},
		{"docs/settings.md#validation: degradation clamped below failure",
			func(s *Settings) {
				s.ProviderBreaker.APIKey.FailureThreshold = 5
				s.ProviderBreaker.APIKey.DegradationThreshold = 9
			},
			func(s *Settings) any { return s.ProviderBreaker.APIKey.DegradationThreshold }, 4},
		{"docs/settings.md#validation: degradation is 1 when failureThreshold <= 1",
			func(s *Settings) {
				s.ProviderBreaker.Local.FailureThreshold = 1
				s.ProviderBreaker.Local.DegradationThreshold = 7
			},
			func(s *Settings) any { return s.ProviderBreaker.Local.DegradationThreshold }, 1},
		{"docs/settings.md#validation: degradation at least 1",
			func(s *Settings) { s.ProviderBreaker.OAuth.DegradationThreshold = -3 },
			func(s *Settings) any { return s.ProviderBreaker.OAuth.DegradationThreshold }, 1},
		{"docs/settings.md#validation: resetTimeoutMs at least 1 s",
			func(s *Settings) { s.ProviderBreaker.APIKey.ResetTimeoutMs = 10 },
			func(s *Settings) any { return s.ProviderBreaker.APIKey.ResetTimeoutMs }, Millis(1000)},
		{"docs/settings.md#validation: resetTimeoutMs at most 24 h",
			func(s *Settings) { s.ProviderBreaker.APIKey.ResetTimeoutMs = 1 << 50 },
			func(s *Settings) any { return s.ProviderBreaker.APIKey.ResetTimeoutMs }, Millis(86_400_000)},
		{"docs/breaker.md#half-open: halfOpenRequests [1,100]",
			func(s *Settings) { s.ProviderBreaker.APIKey.HalfOpenRequests = 0 },
			func(s *Settings) any { return s.ProviderBreaker.APIKey.HalfOpenRequests }, 1},
		{"docs/breaker.md: maxBackoffMultiplier [1,1024]",
			func(s *Settings) { s.ProviderBreaker.APIKey.MaxBackoffMultiplier = 4096 },
			func(s *Settings) any { return s.ProviderBreaker.APIKey.MaxBackoffMultiplier }, 1024},
		{"docs/breaker.md: backoffEscalationCount [0,100]",
			func(s *Settings) { s.ProviderBreaker.APIKey.BackoffEscalationCount = -1 },
			func(s *Settings) any { return s.ProviderBreaker.APIKey.BackoffEscalationCount }, 0},
		{"docs/breaker.md: cooldownByKind values clamped to [0,24h]",
			func(s *Settings) {
				s.ProviderBreaker.APIKey.CooldownByKind = map[string]Millis{"timeout": -5, "transport": 1 << 40}
			},
			func(s *Settings) any { return s.ProviderBreaker.APIKey.CooldownByKind },
			map[string]Millis{"timeout": 0, "transport": 86_400_000}},
		{"docs/settings.md#defaults: probeTimeoutMs 0 means attemptMs and stays 0",
			func(s *Settings) { s.ProviderBreaker.APIKey.ProbeTimeoutMs = -1 },
			func(s *Settings) any { return s.ProviderBreaker.APIKey.ProbeTimeoutMs }, Millis(0)},
		{"docs/breaker.md#dedup: dedup [0,10min]",
			func(s *Settings) { s.ProviderBreaker.Dedup.TransportMs = 1 << 40 },
			func(s *Settings) any { return s.ProviderBreaker.Dedup.TransportMs }, Millis(600_000)},
		{"docs/breaker.md#provider-cooldown: providerFailureThreshold [1,1000]",
			func(s *Settings) { s.ProviderCooldown.APIKey.ProviderFailureThreshold = 0 },
			func(s *Settings) any { return s.ProviderCooldown.APIKey.ProviderFailureThreshold }, 1},
		{"docs/breaker.md#provider-cooldown: providerFailureWindowMs at least 1 s",
			func(s *Settings) { s.ProviderCooldown.OAuth.ProviderFailureWindowMs = 0 },
			func(s *Settings) any { return s.ProviderCooldown.OAuth.ProviderFailureWindowMs }, Millis(1000)},
		{"docs/breaker.md#provider-cooldown: providerCooldownMs at most 1 day",
			func(s *Settings) { s.ProviderCooldown.OAuth.ProviderCooldownMs = 2 * msDay24h },
			func(s *Settings) any { return s.ProviderCooldown.OAuth.ProviderCooldownMs }, Millis(msDay24h)},
		{"docs/settings.md#validation: providerCooldown max >= min",
			func(s *Settings) {
				s.ProviderCooldown.MinRetryCooldownMs = 60_000
				s.ProviderCooldown.MaxRetryCooldownMs = 1_000
			},
			func(s *Settings) any { return s.ProviderCooldown.MaxRetryCooldownMs }, Millis(60_000)},
		{"docs/settings.md#validation: providerCooldown min at most 1 h",
			func(s *Settings) { s.ProviderCooldown.MinRetryCooldownMs = 2 * hour },
			func(s *Settings) any { return s.ProviderCooldown.MinRetryCooldownMs }, Millis(hour)},
		{"docs/settings.md#validation: connection base cooldown [0,24h]",
			func(s *Settings) { s.ConnectionCooldown.OAuth.BaseCooldownMs = -1 },
			func(s *Settings) any { return s.ConnectionCooldown.OAuth.BaseCooldownMs }, Millis(0)},
		{"docs/settings.md#validation: connection maxBackoffSteps [0,32]",
			func(s *Settings) { s.ConnectionCooldown.APIKey.MaxBackoffSteps = 99 },
			func(s *Settings) any { return s.ConnectionCooldown.APIKey.MaxBackoffSteps }, 32},
		{"docs/cooldowns.md#hints: maxStatedResetMs never below maxCooldownMs",
			func(s *Settings) {
				s.ConnectionCooldown.MaxCooldownMs = 2 * hour
				s.ConnectionCooldown.MaxStatedResetMs = hour
			},
			func(s *Settings) any { return s.ConnectionCooldown.MaxStatedResetMs }, Millis(2 * hour)},
		{"docs/settings.md#defaults: maxCooldownMs at least 1 s",
			func(s *Settings) { s.ConnectionCooldown.MaxCooldownMs = 0 },
			func(s *Settings) any { return s.ConnectionCooldown.MaxCooldownMs }, Millis(1000)},
		{"docs/cooldowns.md#backoff: backoffDecayMs 0 (never decay) is kept",
			func(s *Settings) { s.ConnectionCooldown.BackoffDecayMs = 0 },
			func(s *Settings) any { return s.ConnectionCooldown.BackoffDecayMs }, Millis(0)},
		{"docs/cooldowns.md: concurrencyCooldownMs at most 10 min",
			func(s *Settings) { s.ConnectionCooldown.ConcurrencyCooldownMs = hour },
			func(s *Settings) any { return s.ConnectionCooldown.ConcurrencyCooldownMs }, Millis(600_000)},
		{"docs/lockouts.md: errorCodes filtered to 100..599, sorted",
			func(s *Settings) { s.ModelLockout.ErrorCodes = []int{503, 42, 429, 600, 503} },
			func(s *Settings) any { return s.ModelLockout.ErrorCodes }, []int{429, 503}},
		{"docs/lockouts.md: empty errorCodes → default list",
			func(s *Settings) { s.ModelLockout.ErrorCodes = []int{7} },
			func(s *Settings) any { return s.ModelLockout.ErrorCodes }, []int{403, 404, 429, 502, 503, 504}},
		{"docs/lockouts.md: lockout base at most 10 min (0 allowed for simulations)",
			func(s *Settings) { s.ModelLockout.BaseCooldownMs = hour },
			func(s *Settings) any { return s.ModelLockout.BaseCooldownMs }, Millis(600_000)},
		{"docs/lockouts.md: lockout base 0 is kept",
			func(s *Settings) { s.ModelLockout.BaseCooldownMs = 0 },
			func(s *Settings) any { return s.ModelLockout.BaseCooldownMs }, Millis(0)},
		{"docs/lockouts.md: lockout max [5s,1h]",
			func(s *Settings) {
				s.ModelLockout.BaseCooldownMs = 0
				s.ModelLockout.MaxCooldownMs = 10
			},
			func(s *Settings) any { return s.ModelLockout.MaxCooldownMs }, Millis(5000)},
		{"docs/lockouts.md: maxCooldownMs >= baseCooldownMs",
			func(s *Settings) {
				s.ModelLockout.BaseCooldownMs = 500_000
				s.ModelLockout.MaxCooldownMs = 100_000
			},
			func(s *Settings) any { return s.ModelLockout.MaxCooldownMs }, Millis(500_000)},
		{"docs/lockouts.md: lockout maxBackoffSteps [0,20]",
			func(s *Settings) { s.ModelLockout.MaxBackoffSteps = 21 },
			func(s *Settings) any { return s.ModelLockout.MaxBackoffSteps }, 20},
		{"docs/lockouts.md#escalation: escalationWindowMs at most 7 days",
			func(s *Settings) { s.ModelLockout.EscalationWindowMs = 8 * msDay24h },
			func(s *Settings) any { return s.ModelLockout.EscalationWindowMs }, Millis(msWeek)},
		{"docs/admission.md: maxWaitMs clamps to 1 ms",
			func(s *Settings) { s.RequestQueue.MaxWaitMs = -5 },
			func(s *Settings) any { return s.RequestQueue.MaxWaitMs }, Millis(1)},
		{"docs/admission.md: executionMaxWaitMs clamps to 24 h",
			func(s *Settings) { s.RequestQueue.ExecutionMaxWaitMs = 2 * msDay24h },
			func(s *Settings) any { return s.RequestQueue.ExecutionMaxWaitMs }, Millis(msDay24h)},
		{"docs/admission.md: maxQueueDepth [0,100000]",
			func(s *Settings) { s.RequestQueue.MaxQueueDepth = 1_000_000 },
			func(s *Settings) any { return s.RequestQueue.MaxQueueDepth }, 100_000},
		{"docs/admission.md#concurrency-gates: globalMaxConcurrent [0,100000]",
			func(s *Settings) { s.RequestQueue.GlobalMaxConcurrent = -1 },
			func(s *Settings) any { return s.RequestQueue.GlobalMaxConcurrent }, 0},
		{"docs/settings.md#validation: waitForCooldown maxRetryWaitSec [0,300]",
			func(s *Settings) { s.WaitForCooldown.MaxRetryWaitSec = 301 },
			func(s *Settings) any { return s.WaitForCooldown.MaxRetryWaitSec }, 300},
		{"docs/settings.md#validation: waitForCooldown maxRetries [0,10]",
			func(s *Settings) { s.WaitForCooldown.MaxRetries = 11 },
			func(s *Settings) any { return s.WaitForCooldown.MaxRetries }, 10},
		{"docs/settings.md#validation: waitForCooldown budget >= maxRetryWaitSec*1000",
			func(s *Settings) {
				s.WaitForCooldown.MaxRetryWaitSec = 120
				s.WaitForCooldown.BudgetMs = 1000
			},
			func(s *Settings) any { return s.WaitForCooldown.BudgetMs }, Millis(120_000)},
		{"docs/settings.md#validation: waitForCooldown budget at most 300 s",
			func(s *Settings) { s.WaitForCooldown.BudgetMs = hour },
			func(s *Settings) any { return s.WaitForCooldown.BudgetMs }, Millis(300_000)},
		{"docs/settings.md#validation: enabled is not rewritten when maxRetries is 0 (the decision treats 0 as no wait)",
			func(s *Settings) { s.WaitForCooldown.MaxRetries = 0 },
			func(s *Settings) any { return s.WaitForCooldown.Enabled }, true},
		{"docs/settings.md#validation / docs/cooldowns.md-14: comboCooldownWait maxWaitMs up to 300 s (the default 90 s re-submits)",
			func(s *Settings) { s.ComboCooldownWait.MaxWaitMs = hour },
			func(s *Settings) any { return s.ComboCooldownWait.MaxWaitMs }, Millis(300_000)},
		{"docs/settings.md#validation: comboCooldownWait budget >= maxWaitMs",
			func(s *Settings) {
				s.ComboCooldownWait.MaxWaitMs = 200_000
				s.ComboCooldownWait.BudgetMs = 0
			},
			func(s *Settings) any { return s.ComboCooldownWait.BudgetMs }, Millis(200_000)},
		{"docs/settings.md#validation: comboCooldownWait attempts [0,10]",
			func(s *Settings) { s.ComboCooldownWait.MaxAttempts = -2 },
			func(s *Settings) any { return s.ComboCooldownWait.MaxAttempts }, 0},
		{"docs/streams.md: watchdog warmup [0,10min]",
			func(s *Settings) { s.StreamRecovery.ThroughputWatchdog.WarmupMs = -1 },
			func(s *Settings) any { return s.StreamRecovery.ThroughputWatchdog.WarmupMs }, Millis(0)},
		{"docs/streams.md: watchdog window [1s,10min]",
			func(s *Settings) { s.StreamRecovery.ThroughputWatchdog.WindowMs = 1 },
			func(s *Settings) any { return s.StreamRecovery.ThroughputWatchdog.WindowMs }, Millis(1000)},
		{"docs/streams.md: watchdog min bytes/s [1,1e6]",
			func(s *Settings) { s.StreamRecovery.ThroughputWatchdog.MinUsefulBytesPerSecond = 0 },
			func(s *Settings) any { return s.StreamRecovery.ThroughputWatchdog.MinUsefulBytesPerSecond }, 1},
		{"docs/streams.md: watchdog min bytes [1,1e6]",
			func(s *Settings) { s.StreamRecovery.ThroughputWatchdog.MinUsefulBytes = 2_000_000 },
			func(s *Settings) any { return s.StreamRecovery.ThroughputWatchdog.MinUsefulBytes }, 1_000_000},
		{"docs/settings.md#defaults: upstream timeouts at least 1 ms",
			func(s *Settings) { s.UpstreamTimeouts.StreamIdleMs = 0 },
			func(s *Settings) any { return s.UpstreamTimeouts.StreamIdleMs }, Millis(1)},
		{"docs/settings.md#defaults: requestBudget maxAttempts [1,100]",
			func(s *Settings) { s.RequestBudget.MaxAttempts = 0 },
			func(s *Settings) any { return s.RequestBudget.MaxAttempts }, 1},
		{"docs/settings.md#defaults: requestBudget deadline at most 24 h",
			func(s *Settings) { s.RequestBudget.DeadlineMs = 1 << 62 },
			func(s *Settings) any { return s.RequestBudget.DeadlineMs }, Millis(msDay24h)},
		{"docs/selection.md#session-affinity: sessionAffinityTtlMs [0,30 days]",
			func(s *Settings) { s.SessionAffinityTTLMs = 31 * msDay24h },
			func(s *Settings) any { return s.SessionAffinityTTLMs }, Millis(ms30Days)},
		{"docs/api.md#operator-actions: emergency fallback target is trimmed",
			func(s *Settings) { s.EmergencyFallback = EmergencyFallback{Enabled: true, Target: "  openai/gpt-5 "} },
			func(s *Settings) any { return s.EmergencyFallback.Target }, "openai/gpt-5"},
		{"docs/classification.md: banned signals trimmed, lower-cased, empties and duplicates dropped",
			func(s *Settings) {
				s.BannedSignals = []string{" Account Suspended ", "", "  ", "account suspended", "BANNED"}
			},
			func(s *Settings) any { return s.BannedSignals }, []string{"account suspended", "banned"}},
		{"docs/settings.md#layers: empty maps and lists are canonically nil",
			func(s *Settings) {
				s.BannedSignals = []string{}
				s.ProviderErrorRules = map[string][]ProviderErrorRule{"glm": nil}
				s.ProviderBreaker.OAuth.CooldownByKind = map[string]Millis{}
			},
			func(s *Settings) any {
				return []bool{s.BannedSignals == nil, s.ProviderErrorRules == nil, s.ProviderBreaker.OAuth.CooldownByKind == nil}
			}, []bool{true, true, true}},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			s := DefaultSettings()
			c.set(&s)
			n := mustNormalize(t, s)
			if got := c.get(&n); !reflect.DeepEqual(got, c.expect) {
				t.Fatalf("got %v, want %v", got, c.expect)
			}
			again := mustNormalize(t, n)
			if !reflect.DeepEqual(again, n) {
				t.Fatalf("not idempotent:\n first %+v\nsecond %+v", n, again)
			}
		})
	}
}

func TestSettingsNormalizeRules(t *testing.T) {
	s := DefaultSettings()
	s.ProviderErrorRules = map[string][]ProviderErrorRule{
		"agentrouter": {{Status: 403, Match: "用户额度不足", Scope: ScopeConnection}},
		"glm":         {{Status: 400, Match: "Model Is Unavailable", Scope: ScopeModel, Reason: ReasonModelCapacity, CooldownMs: -1}},
	}
	s.StatusRestatements = map[string][]RestatementRule{
		"agentrouter": {{ID: " agentrouter-quota ", FromStatuses: []int{403, 400, 403}, ToStatus: 429,
			TextMarkers: []string{"额度不足", "", "Quota"}, ExcludeMarkers: []string{"无权访问", "无权访问"}, DefaultRetryAfterMs: 60_000}},
	}
	n := mustNormalize(t, s)
	r := n.ProviderErrorRules["agentrouter"][0]
	if r.Reason != ReasonQuotaExhausted {
		t.Errorf("docs/classification.md#provider-rules: a rule's reason defaults to quota_exhausted, got %v", r.Reason)
	}
	g := n.ProviderErrorRules["glm"][0]
	if g.Match != "model is unavailable" || g.CooldownMs != 0 {
		t.Errorf("docs/classification.md: match lower-cased and cooldown clamped, got %+v", g)
	}
	rr := n.StatusRestatements["agentrouter"][0]
	want := RestatementRule{ID: "agentrouter-quota", FromStatuses: []int{400, 403}, ToStatus: 429,
		TextMarkers: []string{"额度不足", "quota"}, ExcludeMarkers: []string{"无权访问"}, DefaultRetryAfterMs: 60_000}
	if !reflect.DeepEqual(rr, want) {
		t.Errorf("docs/classification.md#restatement: restatement normalised to %+v, want %+v", rr, want)
	}
	if s.StatusRestatements["agentrouter"][0].ID != " agentrouter-quota " || s.ProviderErrorRules["glm"][0].Match != "Model Is Unavailable" {
		t.Errorf("Normalize modified its input")
	}
}

func TestSettingsNormalizeErrors(t *testing.T) {
	rule := func(mut func(*ProviderErrorRule)) func(*Settings) {
		return func(s *Settings) {
			r := ProviderErrorRule{Status: 429, Match: "limit", Scope: ScopeConnection}
			mut(&r)
			s.ProviderErrorRules = map[string][]ProviderErrorRule{"glm": {r}}
		}
	}
	rest := func(mut func(*RestatementRule)) func(*Settings) {
		return func(s *Settings) {
			r := RestatementRule{ID: "r1", FromStatuses: []int{403}, ToStatus: 429, TextMarkers: []string{"quota"}}
			mut(&r)
			s.StatusRestatements = map[string][]RestatementRule{"ar": {r}}
		}
	}
	cases := []struct {
		rule  string
		set   func(*Settings)
		field string
		want  string
	}{
		{"docs/breaker.md#failure-kinds: cooldownByKind keys are failure kinds",
			func(s *Settings) { s.ProviderBreaker.APIKey.CooldownByKind = map[string]Millis{"rate_limit": 60_000} },
			"providerBreaker.apikey.cooldownByKind.rate_limit", "timeout, server_error or transport"},
		{"docs/api.md#operator-actions: emergency fallback needs a target",
			func(s *Settings) { s.EmergencyFallback.Enabled = true },
			"emergencyFallback.target", "required"},
		{"docs/classification.md#provider-rules: rule status 100..599", rule(func(r *ProviderErrorRule) { r.Status = 99 }),
			"providerErrorRules.glm[0].status", "100..599"},
		{"docs/classification.md#provider-rules: rule match required", rule(func(r *ProviderErrorRule) { r.Match = "  " }),
			"providerErrorRules.glm[0].match", "required"},
		{"docs/classification.md#provider-rules: rule scope required", rule(func(r *ProviderErrorRule) { r.Scope = ScopeNone }),
			"providerErrorRules.glm[0].scope", "model, provider or connection"},
		{"docs/classification.md#provider-rules: rule scope is model|provider|connection", rule(func(r *ProviderErrorRule) { r.Scope = ScopeExactModel }),
			"providerErrorRules.glm[0].scope", `"exact"`},
		{"docs/classification.md#provider-rules: rule reason must be an outcome", rule(func(r *ProviderErrorRule) { r.Reason = ReasonClientAbort }),
			"providerErrorRules.glm[0].reason", "client_abort"},
		{"docs/classification.md#provider-rules: at most 50 rules in all",
			func(s *Settings) {
				s.ProviderErrorRules = map[string][]ProviderErrorRule{}
				for _, p := range []string{"a", "b"} {
					for range 26 {
						s.ProviderErrorRules[p] = append(s.ProviderErrorRules[p], ProviderErrorRule{Status: 429, Match: "x", Scope: ScopeModel})
					}
				}
			},
			"providerErrorRules", "at most 50"},
		{"docs/classification.md: restatement id required", rest(func(r *RestatementRule) { r.ID = " " }),
			"statusRestatements.ar[0].id", "required"},
		{"docs/classification.md: restatement fromStatuses 100..599", rest(func(r *RestatementRule) { r.FromStatuses = []int{403, 1000} }),
			"statusRestatements.ar[0].fromStatuses", "1000"},
		{"docs/classification.md: restatement needs a fromStatus", rest(func(r *RestatementRule) { r.FromStatuses = nil }),
			"statusRestatements.ar[0].fromStatuses", "at least one"},
		{"docs/classification.md: restatement toStatus 100..599", rest(func(r *RestatementRule) { r.ToStatus = 0 }),
			"statusRestatements.ar[0].toStatus", "100..599"},
		{"docs/classification.md: restatement needs a text marker", rest(func(r *RestatementRule) { r.TextMarkers = []string{" "} }),
			"statusRestatements.ar[0].textMarkers", "at least one"},
		{"docs/classification.md: restatement ids unique per provider",
			func(s *Settings) {
				r := RestatementRule{ID: "r1", FromStatuses: []int{403}, ToStatus: 429, TextMarkers: []string{"q"}}
				s.StatusRestatements = map[string][]RestatementRule{"ar": {r, r}}
			},
			"statusRestatements.ar[1].id", "duplicate"},
		{"docs/classification.md: provider id must not be empty",
			func(s *Settings) {
				s.ProviderErrorRules = map[string][]ProviderErrorRule{"": {{Status: 429, Match: "x", Scope: ScopeModel}}}
			},
			"providerErrorRules.", "empty"},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			s := DefaultSettings()
			c.set(&s)
			n, err := Normalize(s)
			wantSettingsError(t, err, c.field, c.want)
			if !reflect.DeepEqual(n, Settings{}) {
				t.Fatalf("docs/settings.md#layers: never a partial update: Normalize returned %+v with its error", n)
			}
		})
	}

	t.Run("docs/settings.md#layers: several problems each name their field", func(t *testing.T) {
		s := DefaultSettings()
		s.EmergencyFallback.Enabled = true
		s.ProviderBreaker.OAuth.CooldownByKind = map[string]Millis{"bogus": 1}
		_, err := Normalize(s)
		errs := SettingsErrors(err)
		if len(errs) != 2 {
			t.Fatalf("want 2 problems, got %v", err)
		}
		wantSettingsError(t, err, "emergencyFallback.target")
		wantSettingsError(t, err, "providerBreaker.oauth.cooldownByKind.bogus")
	})
}

func TestSettingsMillisJSON(t *testing.T) {
	cases := []struct {
		rule, in string
		want     Millis
		err      string
	}{
		{"docs/settings.md#layers: integer ms", `30000`, 30000, ""},
		{"docs/settings.md#layers: duration string", `"30s"`, 30000, ""},
		{"docs/settings.md#layers: compound duration", `"1m30s"`, 90000, ""},
		{"docs/settings.md#layers: ms duration", `"250ms"`, 250, ""},
		{"docs/settings.md#layers: a string holding ms", `"1500"`, 1500, ""},
		{"docs/settings.md#layers: integral float", `1.5e3`, 1500, ""},
		{"negatives are left for Normalize to clamp", `-5`, -5, ""},
		{"negative durations too", `"-2s"`, -2000, ""},
		{"huge integers saturate (then clamp)", `123456789012345678901234567890`, Millis(1<<63 - 1), ""},
		{"not a duration", `"soon"`, 0, "Go duration"},
		{"sub-millisecond durations are rejected", `"1500us"`, 0, "whole number of milliseconds"},
		{"fractions of a ms are rejected", `1.5`, 0, "milliseconds"},
		{"booleans are rejected", `true`, 0, "milliseconds"},
		{"objects are rejected", `{}`, 0, "milliseconds"},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			var m Millis
			err := json.Unmarshal([]byte(c.in), &m)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Unmarshal(%s) = %v, %v; want error containing %q", c.in, m, err, c.err)
				}
				return
			}
			if err != nil || m != c.want {
				t.Fatalf("Unmarshal(%s) = %v, %v; want %v", c.in, m, err, c.want)
			}
		})
	}
	b, err := json.Marshal(struct {
		A Millis `json:"a"`
	}{A: 90000})
	if err != nil || string(b) != `{"a":90000}` {
		t.Fatalf("docs/settings.md#layers: Millis marshals as integer ms, got %s %v", b, err)
	}
	var m Millis = 7
	if err := json.Unmarshal([]byte(`null`), &m); err != nil || m != 7 {
		t.Fatalf("null leaves a Millis unchanged, got %v %v", m, err)
	}
	if Millis(1500).Duration() != 1500*time.Millisecond {
		t.Fatalf("Duration")
	}
}

func TestSettingsQueueBudgets(t *testing.T) {
	s := DefaultSettings()
	cases := []struct {
		rule       string
		o          ConnOverrides
		wait, exec int64
	}{
		{"docs/admission.md: no override → global budgets", ConnOverrides{}, 30000, 600000},
		{"docs/settings.md#layers: per-connection maxWaitMs beats the global value", ConnOverrides{MaxWaitMs: 5000}, 5000, 600000},
		{"docs/settings.md#layers: per-connection executionMaxWaitMs beats the global value", ConnOverrides{ExecutionMaxWaitMs: 90000}, 30000, 90000},
		{"docs/admission.md: override clamps to 24 h", ConnOverrides{MaxWaitMs: 1 << 40}, 86_400_000, 600000},
		{"docs/settings.md#layers: 0 or negative falls through", ConnOverrides{MaxWaitMs: -1}, 30000, 600000},
	}
	for _, c := range cases {
		w, e := s.QueueBudgets(c.o)
		if w != c.wait || e != c.exec {
			t.Errorf("%s: got %d/%d, want %d/%d", c.rule, w, e, c.wait, c.exec)
		}
	}
	var o ConnOverrides
	if err := json.Unmarshal([]byte(`{"maxWaitMs":"10s","executionMaxWaitMs":120000}`), &o); err != nil || o.MaxWaitMs != 10000 || o.ExecutionMaxWaitMs != 120000 {
		t.Fatalf("ConnOverrides JSON: %+v %v", o, err)
	}
}

func TestSettingsErrorFormat(t *testing.T) {
	cases := []struct {
		e    SettingsError
		want string
	}{
		{SettingsError{Field: "providerBreaker.apikey.failureTreshold", Problem: ProblemUnknownKey, Suggestion: "failureThreshold"},
			`unknown key "providerBreaker.apikey.failureTreshold" (did you mean "failureThreshold"?)`},
		{SettingsError{Field: "a.b", Problem: "want an integer", Source: "file"}, `file: a.b: want an integer`},
		{SettingsError{Problem: "invalid JSON"}, `invalid JSON`},
		{SettingsError{Field: "BREAKWATER_X", Problem: ProblemUnknownVariable, Source: "env"}, `env: unknown variable "BREAKWATER_X"`},
	}
	for _, c := range cases {
		if got := c.e.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
	wrapped := errors.Join(errors.New("other"), &SettingsError{Field: "x", Problem: "y"})
	var se *SettingsError
	if !errors.As(wrapped, &se) || se.Field != "x" || len(SettingsErrors(wrapped)) != 1 {
		t.Fatalf("errors.As / SettingsErrors on a joined error")
	}
}

func FuzzMillisJSON(f *testing.F) {
	for _, s := range []string{`30000`, `"30s"`, `"1m30s"`, `-5`, `1.5e3`, `"1500us"`, `1e400`, `"9999999999h"`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Millis
		if err := json.Unmarshal(data, &m); err != nil {
			return
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back Millis
		if err := json.Unmarshal(b, &back); err != nil || back != m {
			t.Fatalf("round trip %d → %s → %d (%v)", m, b, back, err)
		}
	})
}
