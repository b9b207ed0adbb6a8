package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Strategy orders candidates: connections inside a provider, or a combo's
// targets (docs/selection.md#strategies). Randomness only comes from the engine's seeded source.
type Strategy uint8

const (
	FillFirst  Strategy = iota // config order
	Priority                   // ascending Priority, then config order
	Weighted                   // weighted random order
	RoundRobin                 // rotate the start on every selection
	Random                     // uniform random order
	P2C                        // power of two choices on in-flight attempts
	LeastUsed                  // fewest uses, then oldest use
)

var strategyNames = enumNames{"fill-first", "priority", "weighted", "round-robin", "random", "p2c", "least-used"}

func (s Strategy) String() string               { return strategyNames.name(uint8(s), "Strategy") }
func (s Strategy) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
func (s *Strategy) UnmarshalText(b []byte) error {
	return parseInto(strategyNames, b, "strategy", (*uint8)(s))
}

// ParseStrategy parses a strategy name.
func ParseStrategy(s string) (Strategy, error) {
	v, err := strategyNames.parse(s, "strategy")
	return Strategy(v), err
}

// Topology is what the engine routes over: providers with their connections,
// and combos. The shell builds it from the config file or a scenario.
type Topology struct {
	Providers []ProviderConfig  `json:"providers"`
	Combos    []ComboConfig     `json:"combos,omitempty"`
	Aliases   map[string]string `json:"aliases,omitempty"` // alias → provider/model or combo id
}

// ProviderConfig is one upstream service.
type ProviderConfig struct {
	ID       string   `json:"id"`
	Type     string   `json:"type"` // adapter and built-in rules; default "openai"
	Profile  Profile  `json:"profile"`
	Models   []string `json:"models"` // empty = any model is passed through
	Strategy Strategy `json:"strategy"`
	// PerModelQuota overrides the type's default (true for gemini and local).
	PerModelQuota *bool `json:"perModelQuota,omitempty"`
	// ContextWindows are the known context windows (tokens) of this
	// provider's models, optional: a request too long for one model goes to
	// a target whose known window is larger first.
	ContextWindows map[string]int `json:"contextWindows,omitempty"`
	// Continuation says how the provider continues a prefilled assistant
	// turn (stream resume): "" = its type's default (ContinuationOf).
	Continuation string `json:"continuation,omitempty"`
	// DailyResetUTC is "HH:MM", when this provider's daily quota resets.
	DailyResetUTC string `json:"dailyResetUtc,omitempty"`
	// QuotaFamilies name groups of models that share one quota: a family
	// lockout on any member locks all. Members match by exact id or, with a
	// trailing "*", by prefix.
	QuotaFamilies map[string][]string `json:"quotaFamilies,omitempty"`
	Connections   []ConnectionConfig  `json:"connections"`
	// MaxConcurrent is the provider-wide cap of the composite gate (docs/admission.md#concurrency-gates;
	// read by the simulator's gate, the proxy keeps a live copy); 0 = none.
	MaxConcurrent int `json:"maxConcurrent,omitempty"`
}

// ConnectionConfig is one account or key of a provider.
type ConnectionConfig struct {
	ID             string `json:"id"`
	Priority       int    `json:"priority,omitempty"`
	Weight         int    `json:"weight,omitempty"`
	DisableCooling bool   `json:"disableCooling,omitempty"`
	// Admission (docs/admission.md#concurrency-gates, docs/admission.md). The engine reads RateLimitProtection (who
	// goes through the admission queue), MaxConcurrent and
	// ModelConcurrency (a full connection is ordered after free siblings;
	// Engine.SetCaps follows PUT /api/providers); the simulator's queue
	// reads the rest (the proxy keeps live copies that PUT /api/providers
	// may change).
	RateLimitProtection bool           `json:"rateLimitProtection,omitempty"`
	MaxConcurrent       int            `json:"maxConcurrent,omitempty"`
	ModelConcurrency    map[string]int `json:"modelConcurrency,omitempty"`
	Limits              ConnLimits     `json:"limits,omitempty"`
	MaxWaitMs           int64          `json:"maxWaitMs,omitempty"`
	// EgressIP is a configured egress address (an egress proxy); the
	// shells feed it to SetEgressIP for every attempt (docs/cooldowns.md#egress-buckets).
	EgressIP string `json:"egressIp,omitempty"`
	// SpendWall opts the connection into the spend-wall lane and session
	// limit reset (docs/spendwall.md; model/spendwall.go).
	SpendWall SpendWallConfig `json:"spendWall,omitzero"`
}

// ComboConfig is a virtual model whose targets are tried with fallback.
type ComboConfig struct {
	ID       string        `json:"id"`
	Strategy Strategy      `json:"strategy"`
	Targets  []ComboTarget `json:"targets"`
	// Mode "quota-share": several client keys share one upstream account;
	// admission fails open (docs/admission.md#concurrency-gates). "" = an ordinary combo.
	Mode string `json:"mode,omitempty"`
}

// ComboTarget is one (provider, model[, connection]) of a combo.
type ComboTarget struct {
	Provider   string `json:"provider"`
	Model      string `json:"model"`
	Connection string `json:"connection,omitempty"` // pins the target to one connection
	Weight     int    `json:"weight,omitempty"`
}

// TopologyError names the part of a topology that is wrong.
type TopologyError struct {
	Field   string // e.g. providers[1].connections[0].id
	Problem string
}

func (e *TopologyError) Error() string { return e.Field + ": " + e.Problem }

// perModelQuotaDefault: the provider's type decides, never its profile (an
// openai-type server run with profile local cools its connection on a 5xx).
func perModelQuotaDefault(typ string) bool {
	return typ == "gemini" || typ == "local"
}

// parseDailyReset turns "HH:MM" into minutes after midnight UTC.
func parseDailyReset(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 || len(m) != 2 {
		return 0, fmt.Errorf("want HH:MM (UTC), got %q", s)
	}
	return hh*60 + mm, nil
}

// validate checks ids are present and unique and references resolve.
func (t *Topology) validate() error {
	seen := map[string]bool{}
	for i := range t.Providers {
		p := &t.Providers[i]
		f := fmt.Sprintf("providers[%d]", i)
		if p.ID == "" || strings.ContainsAny(p.ID, "/ ") {
			return &TopologyError{f + ".id", fmt.Sprintf("must be non-empty without '/' or spaces, got %q", p.ID)}
		}
		if seen[p.ID] {
			return &TopologyError{f + ".id", fmt.Sprintf("duplicate provider id %q", p.ID)}
		}
		seen[p.ID] = true
		if err := p.validate(f); err != nil {
			return err
		}
	}
	for i := range t.Combos {
		c := &t.Combos[i]
		f := fmt.Sprintf("combos[%d]", i)
		if c.ID == "" {
			return &TopologyError{f + ".id", "must be non-empty"}
		}
		if seen["combo:"+c.ID] {
			return &TopologyError{f + ".id", fmt.Sprintf("duplicate combo id %q", c.ID)}
		}
		seen["combo:"+c.ID] = true
		if err := t.validateCombo(f, c); err != nil {
			return err
		}
	}
	return nil
}

// validate checks one provider's settings and connections; f names it in
// errors.
func (p *ProviderConfig) validate(f string) error {
	if _, err := ParseContinuation(p.Continuation); err != nil {
		return &TopologyError{f + ".continuation", err.Error()}
	}
	if p.Profile > ProfileLocal {
		return &TopologyError{f + ".profile", "must be oauth, apikey or local"}
	}
	if p.Strategy > LeastUsed {
		return &TopologyError{f + ".strategy", "unknown strategy"}
	}
	if _, err := parseDailyReset(p.DailyResetUTC); err != nil {
		return &TopologyError{f + ".dailyResetUtc", err.Error()}
	}
	for m, w := range p.ContextWindows {
		if m == "" || w <= 0 {
			return &TopologyError{f + ".contextWindows", fmt.Sprintf("want model: tokens > 0, got %q: %d", m, w)}
		}
	}
	if len(p.Connections) == 0 {
		return &TopologyError{f + ".connections", "a provider needs at least one connection"}
	}
	conns := map[string]bool{}
	for j, c := range p.Connections {
		cf := fmt.Sprintf("%s.connections[%d].id", f, j)
		if c.ID == "" || strings.ContainsAny(c.ID, "/ ") {
			return &TopologyError{cf, fmt.Sprintf("must be non-empty without '/' or spaces, got %q", c.ID)}
		}
		if conns[c.ID] {
			return &TopologyError{cf, fmt.Sprintf("duplicate connection id %q in provider %q", c.ID, p.ID)}
		}
		conns[c.ID] = true
		if c.Weight < 0 {
			return &TopologyError{fmt.Sprintf("%s.connections[%d].weight", f, j), "must not be negative"}
		}
	}
	return nil
}

// validateCombo checks one combo's strategy and that its targets resolve;
// f names it in errors.
func (t *Topology) validateCombo(f string, c *ComboConfig) error {
	if c.Strategy > LeastUsed {
		return &TopologyError{f + ".strategy", "unknown strategy"}
	}
	if len(c.Targets) == 0 {
		return &TopologyError{f + ".targets", "a combo needs at least one target"}
	}
	for j, tg := range c.Targets {
		tf := fmt.Sprintf("%s.targets[%d]", f, j)
		p := t.provider(tg.Provider)
		if p == nil {
			return &TopologyError{tf + ".provider", fmt.Sprintf("unknown provider %q", tg.Provider)}
		}
		if tg.Model == "" {
			return &TopologyError{tf + ".model", "must be non-empty"}
		}
		if len(p.Models) > 0 && !slices.Contains(p.Models, tg.Model) {
			return &TopologyError{tf + ".model", fmt.Sprintf("provider %q does not list model %q", tg.Provider, tg.Model)}
		}
		if tg.Connection != "" && !slices.ContainsFunc(p.Connections, func(c ConnectionConfig) bool { return c.ID == tg.Connection }) {
			return &TopologyError{tf + ".connection", fmt.Sprintf("provider %q has no connection %q", tg.Provider, tg.Connection)}
		}
		if tg.Weight < 0 {
			return &TopologyError{tf + ".weight", "must not be negative"}
		}
	}
	return nil
}

func (t *Topology) provider(id string) *ProviderConfig {
	for i := range t.Providers {
		if t.Providers[i].ID == id {
			return &t.Providers[i]
		}
	}
	return nil
}

// familyOf returns the quota family of a model on a provider, or the model
// itself when it belongs to none.
func familyOf(p *ProviderConfig, model string) string {
	if len(p.QuotaFamilies) == 0 {
		return model
	}
	names := make([]string, 0, len(p.QuotaFamilies))
	for n := range p.QuotaFamilies {
		names = append(names, n)
	}
	slices.Sort(names) // deterministic when a model matches two families
	for _, n := range names {
		for _, m := range p.QuotaFamilies[n] {
			if m == model || (strings.HasSuffix(m, "*") && strings.HasPrefix(model, m[:len(m)-1])) {
				return "family:" + n
			}
		}
	}
	return model
}
