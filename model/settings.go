package model

// Settings is the one resilience settings tree (docs/settings.md#layers): the config file's
// `resilience:` section, PATCH /api/resilience, a scenario's `settings:` and
// `sim -set a.b.c=value` all address these keys. JSON names are the public
// names. Every value passes through Normalize before the model uses it.
//
// Fields named *Ms hold milliseconds and accept an integer or a Go duration
// string ("30s") when decoded.
type Settings struct {
	ProviderBreaker            ProviderBreakerSettings    `json:"providerBreaker"`
	ProviderCooldown           ProviderCooldownSettings   `json:"providerCooldown"`
	ConnectionCooldown         ConnectionCooldownSettings `json:"connectionCooldown"`
	ModelLockout               ModelLockoutSettings       `json:"modelLockout"`
	RequestQueue               RequestQueueSettings       `json:"requestQueue"`
	WaitForCooldown            WaitForCooldownSettings    `json:"waitForCooldown"`
	ComboCooldownWait          ComboCooldownWaitSettings  `json:"comboCooldownWait"`
	PriorityWait               PriorityWaitSettings       `json:"priorityWait"`
	QuotaShareConcurrencyLimit Switch                     `json:"quotaShareConcurrencyLimit"`
	StreamStallCooldown        Switch                     `json:"streamStallCooldown"`
	StreamRecovery             StreamRecoverySettings     `json:"streamRecovery"`
	StreamResume               StreamResumeSettings       `json:"streamResume"`
	UpstreamTimeouts           UpstreamTimeouts           `json:"upstreamTimeouts"`
	RequestBudget              RequestBudget              `json:"requestBudget"`
	SessionAffinityTTLMs       Millis                     `json:"sessionAffinityTtlMs"`
	EmergencyFallback          EmergencyFallback          `json:"emergencyFallback"`
	// ProviderErrorRules are operator classification rules keyed by provider
	// id (docs/classification.md); at most 50 in all.
	ProviderErrorRules map[string][]ProviderErrorRule `json:"providerErrorRules"`
	// StatusRestatements are operator restatement rules keyed by provider id,
	// consulted before the built-in ones of the provider's type.
	StatusRestatements map[string][]RestatementRule `json:"statusRestatements"`
	// BannedSignals are extra case-insensitive ban / deactivation phrases.
	BannedSignals []string `json:"bannedSignals"`
}

// Millis is a duration in milliseconds.
type Millis int64

// Switch is a settings section that only turns something on or off.
type Switch struct {
	Enabled bool `json:"enabled"`
}

// BreakerProfile holds one profile's provider-breaker options (docs/breaker.md).
type BreakerProfile struct {
	DegradationThreshold   int    `json:"degradationThreshold"`
	FailureThreshold       int    `json:"failureThreshold"`
	ResetTimeoutMs         Millis `json:"resetTimeoutMs"`
	HalfOpenRequests       int    `json:"halfOpenRequests"`
	MaxBackoffMultiplier   int    `json:"maxBackoffMultiplier"`
	BackoffEscalationCount int    `json:"backoffEscalationCount"`
	// CooldownByKind overrides the open duration per failure kind
	// ("timeout", "server_error", "transport"); used as is, not escalated.
	CooldownByKind map[string]Millis `json:"cooldownByKind"`
	// ProbeTimeoutMs frees a half-open probe permit whose result never came;
	// 0 means upstreamTimeouts.attemptMs.
	ProbeTimeoutMs Millis `json:"probeTimeoutMs"`
}

// ProviderBreakerSettings are the breaker profiles and failure dedup.
type ProviderBreakerSettings struct {
	OAuth  BreakerProfile `json:"oauth"`
	APIKey BreakerProfile `json:"apikey"`
	Local  BreakerProfile `json:"local"`
	// Dedup: a failure on the same connection within ConnectionMs of the last
	// counted one, or a transport failure on the same provider within
	// TransportMs, does not count again (docs/breaker.md#dedup).
	Dedup BreakerDedup `json:"dedup"`
}

// BreakerDedup is the failure-burst dedup of the breaker.
type BreakerDedup struct {
	ConnectionMs Millis `json:"connectionMs"`
	TransportMs  Millis `json:"transportMs"`
}

// byProfile picks the profile's settings; a profile other than OAuth or
// Local reads the API-key settings.
func byProfile[T any](p Profile, oauth, apikey, local *T) *T {
	switch p {
	case ProfileOAuth:
		return oauth
	case ProfileLocal:
		return local
	}
	return apikey
}

// For returns the profile's breaker options.
func (s *ProviderBreakerSettings) For(p Profile) *BreakerProfile {
	return byProfile(p, &s.OAuth, &s.APIKey, &s.Local)
}

// WindowProfile is one profile's provider cooldown window gate (docs/breaker.md#provider-cooldown).
type WindowProfile struct {
	ProviderFailureThreshold int    `json:"providerFailureThreshold"`
	ProviderFailureWindowMs  Millis `json:"providerFailureWindowMs"`
	ProviderCooldownMs       Millis `json:"providerCooldownMs"`
}

// ProviderCooldownSettings is the optional provider window gate; off by default.
type ProviderCooldownSettings struct {
	Enabled bool          `json:"enabled"`
	OAuth   WindowProfile `json:"oauth"`
	APIKey  WindowProfile `json:"apikey"`
	Local   WindowProfile `json:"local"`
	// Entries keyed by provider:connection back off from min to max.
	MinRetryCooldownMs Millis `json:"minRetryCooldownMs"`
	MaxRetryCooldownMs Millis `json:"maxRetryCooldownMs"`
}

// For returns the profile's window gate.
func (s *ProviderCooldownSettings) For(p Profile) *WindowProfile {
	return byProfile(p, &s.OAuth, &s.APIKey, &s.Local)
}

// CooldownProfile is one profile's connection cooldown (docs/cooldowns.md).
type CooldownProfile struct {
	BaseCooldownMs  Millis `json:"baseCooldownMs"`
	MaxBackoffSteps int    `json:"maxBackoffSteps"`
}

// ConnectionCooldownSettings govern per-connection cooldowns.
type ConnectionCooldownSettings struct {
	OAuth  CooldownProfile `json:"oauth"`
	APIKey CooldownProfile `json:"apikey"`
	Local  CooldownProfile `json:"local"`
	// MaxCooldownMs caps a cooldown without an upstream-stated reset.
	MaxCooldownMs Millis `json:"maxCooldownMs"`
	// MaxStatedResetMs caps an upstream-stated reset (the operator ceiling).
	MaxStatedResetMs Millis `json:"maxStatedResetMs"`
	// BackoffDecayMs: a quiet period this long with no failure lowers
	// backoffLevel by one.
	BackoffDecayMs Millis `json:"backoffDecayMs"`
	// ConcurrencyCooldownMs is the fixed cooldown of a concurrency-limit 429.
	ConcurrencyCooldownMs Millis `json:"concurrencyCooldownMs"`
	// TransientMaxCooldownMs caps the escalated cooldown of a transient
	// failure (5xx, transport, timeout) without an upstream-stated hint: the
	// backoff still escalates across requests, but a recovered connection is
	// tried again within this long (plus the next request's arrival).
	TransientMaxCooldownMs Millis `json:"transientMaxCooldownMs"`
}

// For returns the profile's connection cooldown.
func (s *ConnectionCooldownSettings) For(p Profile) *CooldownProfile {
	return byProfile(p, &s.OAuth, &s.APIKey, &s.Local)
}

// ModelLockoutSettings are DEFAULT_MODEL_LOCKOUT_SETTINGS plus the escalation
// window (docs/lockouts.md).
type ModelLockoutSettings struct {
	Enabled               bool   `json:"enabled"`
	ErrorCodes            []int  `json:"errorCodes"`
	BaseCooldownMs        Millis `json:"baseCooldownMs"`
	MaxCooldownMs         Millis `json:"maxCooldownMs"`
	MaxBackoffSteps       int    `json:"maxBackoffSteps"`
	UseExponentialBackoff bool   `json:"useExponentialBackoff"`
	EscalationWindowMs    Millis `json:"escalationWindowMs"`
}

// RequestQueueSettings are the admission budgets (docs/admission.md).
type RequestQueueSettings struct {
	MaxWaitMs                 Millis `json:"maxWaitMs"`
	ExecutionMaxWaitMs        Millis `json:"executionMaxWaitMs"`
	MaxQueueDepth             int    `json:"maxQueueDepth"`
	GlobalMaxConcurrent       int    `json:"globalMaxConcurrent"`
	AutoEnableAPIKeyProviders bool   `json:"autoEnableApiKeyProviders"`
}

// WaitForCooldownSettings: single-model cooldown-aware retry (docs/selection.md#waiting-for-a-cooldown).
type WaitForCooldownSettings struct {
	Enabled         bool   `json:"enabled"`
	MaxRetries      int    `json:"maxRetries"`
	MaxRetryWaitSec int    `json:"maxRetryWaitSec"`
	BudgetMs        Millis `json:"budgetMs"`
}

// ComboCooldownWaitSettings: combo cooldown wait (docs/selection.md#waiting-for-a-cooldown).
type ComboCooldownWaitSettings struct {
	Enabled     bool   `json:"enabled"`
	MaxWaitMs   Millis `json:"maxWaitMs"`
	MaxAttempts int    `json:"maxAttempts"`
	BudgetMs    Millis `json:"budgetMs"`
}

// PriorityWaitSettings: a priority combo waits for its first target's short
// cooldown or stated Retry-After instead of downgrading to a lower target,
// once per request, within the request's budget and deadline.
type PriorityWaitSettings struct {
	Enabled   bool   `json:"enabled"`
	MaxWaitMs Millis `json:"maxWaitMs"`
}

// StreamRecoverySettings hold the stream watchdogs' options.
type StreamRecoverySettings struct {
	ThroughputWatchdog ThroughputWatchdog `json:"throughputWatchdog"`
	// MalformedEvents bounds the stream events whose data is not JSON:
	// each is skipped, and only a run of them ends the stream.
	MalformedEvents MalformedEventBound `json:"malformedEvents"`
}

// ThroughputWatchdog is the opt-in slow-stream detector (docs/streams.md).
type ThroughputWatchdog struct {
	Enabled                 bool   `json:"enabled"`
	WarmupMs                Millis `json:"warmupMs"`
	WindowMs                Millis `json:"windowMs"`
	MinUsefulBytesPerSecond int    `json:"minUsefulBytesPerSecond"`
	MinUsefulBytes          int    `json:"minUsefulBytes"`
}

// UpstreamTimeouts are the executor's per-phase timeouts (docs/settings.md#defaults).
type UpstreamTimeouts struct {
	ConnectMs        Millis `json:"connectMs"`
	ResponseHeaderMs Millis `json:"responseHeaderMs"`
	FirstContentMs   Millis `json:"firstContentMs"`
	StreamIdleMs     Millis `json:"streamIdleMs"`
	AttemptMs        Millis `json:"attemptMs"`
}

// RequestBudget bounds one client request across all attempts.
type RequestBudget struct {
	MaxAttempts int    `json:"maxAttempts"`
	DeadlineMs  Millis `json:"deadlineMs"`
}

// EmergencyFallback routes to Target when every target is excluded.
type EmergencyFallback struct {
	Enabled bool   `json:"enabled"`
	Target  string `json:"target"`
}

// ProviderErrorRule is an operator classification rule (docs/classification.md#provider-rules).
type ProviderErrorRule struct {
	Status     int    `json:"status"`
	Match      string `json:"match"`  // case-insensitive substring of the error text
	Scope      Scope  `json:"scope"`  // model | provider | connection
	Reason     Reason `json:"reason"` // default quota_exhausted
	CooldownMs Millis `json:"cooldownMs"`
}

// RestatementRule rewrites a misstated upstream status (docs/classification.md#restatement).
type RestatementRule struct {
	ID                  string   `json:"id"`
	FromStatuses        []int    `json:"fromStatuses"`
	ToStatus            int      `json:"toStatus"`
	TextMarkers         []string `json:"textMarkers"`
	ExcludeMarkers      []string `json:"excludeMarkers"`
	DefaultRetryAfterMs Millis   `json:"defaultRetryAfterMs"`
}

const (
	second = 1000
	minute = 60 * second
	hour   = 60 * minute
)

// DefaultSettings returns the built-in defaults (docs/breaker.md–docs/streams.md, docs/settings.md#defaults,
// docs/breaker.md#profiles, docs/lockouts.md, docs/settings.md#validation).
func DefaultSettings() Settings {
	return Settings{
		ProviderBreaker: ProviderBreakerSettings{
			OAuth:  BreakerProfile{DegradationThreshold: 5, FailureThreshold: 8, ResetTimeoutMs: 60 * second, HalfOpenRequests: 1, MaxBackoffMultiplier: 8, BackoffEscalationCount: 2},
			APIKey: BreakerProfile{DegradationThreshold: 7, FailureThreshold: 12, ResetTimeoutMs: 30 * second, HalfOpenRequests: 1, MaxBackoffMultiplier: 4, BackoffEscalationCount: 3},
			Local:  BreakerProfile{DegradationThreshold: 1, FailureThreshold: 2, ResetTimeoutMs: 15 * second, HalfOpenRequests: 1, MaxBackoffMultiplier: 16, BackoffEscalationCount: 3},
			Dedup:  BreakerDedup{ConnectionMs: 5 * second, TransportMs: 10 * second},
		},
		ProviderCooldown: ProviderCooldownSettings{
			OAuth:              WindowProfile{ProviderFailureThreshold: 10, ProviderFailureWindowMs: 15 * minute, ProviderCooldownMs: 5 * minute},
			APIKey:             WindowProfile{ProviderFailureThreshold: 15, ProviderFailureWindowMs: 30 * minute, ProviderCooldownMs: 10 * minute},
			Local:              WindowProfile{ProviderFailureThreshold: 2, ProviderFailureWindowMs: 5 * minute, ProviderCooldownMs: 1 * minute},
			MinRetryCooldownMs: 5 * second,
			MaxRetryCooldownMs: 5 * minute,
		},
		ConnectionCooldown: ConnectionCooldownSettings{
			OAuth:                  CooldownProfile{BaseCooldownMs: 5 * second, MaxBackoffSteps: 8},
			APIKey:                 CooldownProfile{BaseCooldownMs: 3 * second, MaxBackoffSteps: 5},
			Local:                  CooldownProfile{BaseCooldownMs: 2 * second, MaxBackoffSteps: 3},
			MaxCooldownMs:          30 * minute,
			MaxStatedResetMs:       24 * hour,
			BackoffDecayMs:         10 * minute,
			ConcurrencyCooldownMs:  1 * second,
			TransientMaxCooldownMs: 20 * second,
		},
		ModelLockout: ModelLockoutSettings{
			ErrorCodes:            []int{403, 404, 429, 502, 503, 504},
			BaseCooldownMs:        120 * second,
			MaxCooldownMs:         30 * minute,
			MaxBackoffSteps:       10,
			UseExponentialBackoff: true,
			EscalationWindowMs:    30 * minute,
		},
		RequestQueue: RequestQueueSettings{
			MaxWaitMs:                 30 * second,
			ExecutionMaxWaitMs:        600 * second,
			AutoEnableAPIKeyProviders: true,
		},
		WaitForCooldown:            WaitForCooldownSettings{Enabled: true, MaxRetries: 5, MaxRetryWaitSec: 90, BudgetMs: 300 * second},
		ComboCooldownWait:          ComboCooldownWaitSettings{Enabled: true, MaxWaitMs: 90 * second, MaxAttempts: 5, BudgetMs: 300 * second},
		PriorityWait:               PriorityWaitSettings{Enabled: true, MaxWaitMs: 5 * second},
		QuotaShareConcurrencyLimit: Switch{Enabled: true},
		StreamRecovery: StreamRecoverySettings{ThroughputWatchdog: ThroughputWatchdog{
			WarmupMs: 30 * second, WindowMs: 30 * second, MinUsefulBytesPerSecond: 4, MinUsefulBytes: 1,
		}, MalformedEvents: MalformedEventBound{MaxConsecutive: 3, MaxTotal: 10}},
		StreamResume: StreamResumeSettings{Enabled: true, MaxResumes: 2},
		UpstreamTimeouts: UpstreamTimeouts{ConnectMs: 10 * second, ResponseHeaderMs: 120 * second,
			FirstContentMs: 120 * second, StreamIdleMs: 120 * second, AttemptMs: 600 * second},
		RequestBudget: RequestBudget{MaxAttempts: 6, DeadlineMs: 600 * second},
	}
}

// ProbeTimeout returns the effective probe timeout of a breaker profile.
func (s *Settings) ProbeTimeout(p Profile) int64 {
	if t := s.ProviderBreaker.For(p).ProbeTimeoutMs; t > 0 {
		return int64(t)
	}
	return int64(s.UpstreamTimeouts.AttemptMs)
}
