package sim

import (
	"github.com/breakwater-gw/breakwater/model/settings"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// DefaultStart is the virtual epoch when a scenario names none.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Scenario is one simulation input, as the scenarios loader builds it from
// a file (docs/scenarios.md). Offsets are from the scenario start.
type Scenario struct {
	Name string
	File string
	Seed uint64
	// Start is the virtual epoch (docs/scenarios.md `start`).
	Start time.Time
	// Layers are the settings layers over the defaults ("scenario", then
	// "set" for -set flags); Settings is what they resolve to.
	Layers   []settings.NamedLayer
	Settings model.Settings
	// Sets are the -set flags applied, for the reproduce command.
	Sets     []string
	Topology model.Topology
	Rules    []faults.Rule
	Traffic  []Traffic
	Actions  []Action
	Expects  []Expect
	// LimitResets are the simulated usage / reset endpoint answers by
	// "provider/connection" (docs/spendwall.md; spendwall.go).
	LimitResets map[string]LimitResetAnswer
	// NoLiveness skips the after-faults liveness check.
	NoLiveness bool
	// Warnings are things the loader accepted but the simulator ignores.
	Warnings []string
}

// Traffic is one traffic item: Count requests for Model from At, one every
// Every (or, with Poisson, exponentially distributed gaps of mean Every).
type Traffic struct {
	At      time.Duration
	Model   string
	Count   int
	Every   time.Duration
	Poisson bool
	// Stream asks for an SSE answer: the client is committed at the first
	// content byte, so a later failure cannot fail over.
	Stream bool
	// Session is the client's session id (X-Session-Id) for affinity
	// (docs/selection.md#session-affinity); "" = none.
	Session string
	// Timeout is when the client gives up (0 = never): the request ends
	// with 499 and any attempt in flight is recorded as a client abort.
	Timeout time.Duration
	// Format is the client's API (surface.go): chat (""), messages,
	// responses or embeddings.
	Format string
	// Lease names a managed client's lease (an action's Lease): the
	// requests present its owner and generation (X-Breakwater-Lease-Owner
	// / -Generation, docs/leases.md#fence) with that client's key; ""
	// = no lease. LeaseGeneration is the generation presented (0 = the
	// lease's own; another one is a stale claim).
	Lease           string
	LeaseGeneration int64
	Line            int
}

// ActionKind is an operator action.
type ActionKind uint8

const (
	ActResetBreaker    ActionKind = iota // POST /api/resilience/reset
	ActClearCooldowns                    // POST /api/resilience/cooldowns
	ActResetConnection                   // POST .../connections/{p}/{c}/reset
	ActClearLockout                      // DELETE /api/resilience/model-cooldowns
	ActSet                               // PATCH /api/resilience
	ActConnectionTest                    // POST /api/providers/{id}/test passed
	// ActLeaseAcquire: a managed client takes an exclusive lease (POST
	// /api/v1/session-leases, docs/leases.md); the traffic without a lease
	// is routed around it (lease_held). Without Lease, a client outside the
	// traffic leases each connection named; with Lease, the named client
	// (its key's allowedConnections are Connections) leases Model and the
	// acquire picks the connection (model.Engine.LeaseAcquire); traffic
	// naming the lease presents it.
	ActLeaseAcquire
	ActLeaseRelease // that client releases it
	// ActRateLimit turns a connection's rateLimitProtection on or off
	// (POST /api/rate-limits, docs/admission.md): whether its attempts go
	// through the limiter (the apikey safety net covers apikey connections
	// either way).
	ActRateLimit
	// ActLeaseRenew: that client renews its lease for the action's TTL
	// (model.RenewLease; the gateway's renew action).
	ActLeaseRenew
)

var actionNames = []string{"reset-breaker", "clear-cooldowns", "reset-connection", "clear-lockout", "set", "connection-test",
	"lease-acquire", "lease-release", "rate-limit", "lease-renew"}

// ActionNames lists the action names of the scenario format.
func ActionNames() []string { return append([]string(nil), actionNames...) }

func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return "action?"
}

// ParseAction parses an action name.
func ParseAction(s string) (ActionKind, bool) {
	for i, n := range actionNames {
		if n == s {
			return ActionKind(i), true
		}
	}
	return 0, false
}

// Action is one operator action at an instant.
type Action struct {
	At          time.Duration
	Kind        ActionKind
	Provider    string          // reset-breaker ("" = all), clear-cooldowns with All
	Connections []model.ConnRef // clear-cooldowns, reset-connection, clear-lockout, connection-test, rate-limit
	All         bool            // clear-cooldowns / clear-lockout of everything
	Enabled     bool            // rate-limit: rateLimitProtection on or off
	Model       string          // clear-lockout
	Settings    settings.Layer  // set: a settings layer stacked over the others
	Lease       string          // lease-acquire / lease-release of a named managed client
	// TTL: how long a lease-acquire's or lease-renew's lease lasts
	// (ttlMs, clamped to [1 s, 30 min]); 0 = 30 min, the longest the
	// gateway grants.
	TTL  time.Duration
	Line int
}

// ExpectKind says which form an expect has.
type ExpectKind uint8

const (
	// ExpectRequest checks the N-th request sent.
	ExpectRequest ExpectKind = iota
	// ExpectState checks model state at an instant.
	ExpectState
	// ExpectWindow checks the requests sent in [From, Until).
	ExpectWindow
)

// Expect is one `expect:` item. Optional checks are pointers or empty.
type Expect struct {
	Kind ExpectKind
	Line int

	// ExpectRequest
	Request  int
	Status   int    // 0 = not checked
	ServedBy string // "provider/connection"
	Attempts *int
	Code     string // the gateway's typed error code
	Result   string // served | fallback | rejected | failed | stream_error | client_abort
	// RetryAfter is the Retry-After the client got, in whole seconds.
	RetryAfter *int
	// TookAtLeast / TookAtMost bound the time from the request being sent
	// to its answer being complete (0 = not checked).
	TookAtLeast, TookAtMost time.Duration

	// ExpectState
	At          time.Duration
	Breaker     map[string]model.BreakerState
	Connections map[string]ConnExpect
	Lockouts    []LockoutExpect
	// NoLockouts asserts that no lockout is active.
	NoLockouts bool

	// ExpectWindow
	From, Until   time.Duration
	Statuses      map[int]int
	UpstreamCalls *int
	Served        map[string]int // "provider/connection" → successful requests served
	Results       map[string]int // result → count
	Requests      *int           // how many requests were sent in the window
}

// ConnExpect checks one connection's state.
type ConnExpect struct {
	Status       string // active | cooldown | banned | expired | credits_exhausted
	BackoffLevel *int
	// Cooldown is the exact remaining cooldown (checked when HasCooldown).
	Cooldown    time.Duration
	HasCooldown bool
	LastError   string // lastErrorType reason
	Uses        *int   // attempts begun on the connection so far
	// Lane is the spend-wall lane: "active" or "off" (docs/spendwall.md).
	Lane string
}

// LockoutExpect is a lockout that must exist.
type LockoutExpect struct {
	Connection string // provider/connection
	Model      string // the lock key name (model, or family:NAME)
	Reason     string
	// Remaining, when HasRemaining, is the exact time left.
	Remaining    time.Duration
	HasRemaining bool
}
