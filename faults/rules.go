package faults

import (
	"fmt"
	"time"
)

// Match selects the attempts a rule answers; empty fields match anything.
type Match struct {
	Provider   string `json:"provider,omitempty"`
	Connection string `json:"connection,omitempty"`
	Model      string `json:"model,omitempty"`
}

// Matches reports whether the attempt's provider, connection and model match.
func (m *Match) Matches(provider, connection, model string) bool {
	return (m.Provider == "" || m.Provider == provider) &&
		(m.Connection == "" || m.Connection == connection) &&
		(m.Model == "" || m.Model == model)
}

// Flap makes a rule alternate: inside its window, the rule answers during
// Down and stays silent (lets earlier rules or the default answer) during
// Up, repeating from `from`.
type Flap struct {
	Down time.Duration `json:"down"`
	Up   time.Duration `json:"up"`
}

// Rule is one `upstream:` rule of a scenario.
type Rule struct {
	Match Match `json:"match,omitzero"`
	// From and Until bound the half-open window [From, Until) of offsets
	// from the scenario start; Until 0 means no end.
	From  time.Duration `json:"from,omitempty"`
	Until time.Duration `json:"until,omitempty"`
	// Respond answers every attempt; Sequence answers one item per attempt
	// the rule answers, the last item repeating. Exactly one is set.
	Respond  *Response  `json:"respond,omitempty"`
	Sequence []Response `json:"sequence,omitempty"`
	// Flap, when set, makes the rule apply only in the down part of each
	// period.
	Flap *Flap `json:"flap,omitempty"`
	// Probability, when in (0, 1), makes the rule answer each attempt it
	// matches with that probability (drawn from the faults random stream);
	// otherwise the earlier rules answer.
	Probability float64 `json:"probability,omitempty"`
	// Line is where the rule was written (0 when built in code).
	Line int `json:"-"`
}

// Active reports whether the rule's window (and flap phase) covers at.
func (r *Rule) Active(at time.Duration) bool {
	if at < r.From || (r.Until > 0 && at >= r.Until) {
		return false
	}
	if r.Flap != nil {
		period := r.Flap.Down + r.Flap.Up
		if period > 0 && (at-r.From)%period >= r.Flap.Down {
			return false
		}
	}
	return true
}

// Validate checks one rule.
func (r *Rule) Validate() error {
	switch {
	case r.Respond == nil && len(r.Sequence) == 0:
		return fmt.Errorf("a rule needs respond or sequence")
	case r.Respond != nil && len(r.Sequence) > 0:
		return fmt.Errorf("a rule has respond or sequence, not both")
	case r.Until > 0 && r.Until <= r.From:
		return fmt.Errorf("until (%v) must be after from (%v)", r.Until, r.From)
	case r.Probability < 0 || r.Probability > 1:
		return fmt.Errorf("probability must be in [0, 1], got %v", r.Probability)
	case r.Flap != nil && (r.Flap.Down <= 0 || r.Flap.Up <= 0):
		return fmt.Errorf("flap needs down > 0 and up > 0")
	}
	if r.Respond != nil {
		if err := r.Respond.Validate(); err != nil {
			return fmt.Errorf("respond: %w", err)
		}
	}
	for i := range r.Sequence {
		if err := r.Sequence[i].Validate(); err != nil {
			return fmt.Errorf("sequence[%d]: %w", i, err)
		}
	}
	return nil
}

// FaultsEnd is the offset after which no rule answers anything but 200 OK
// with no fault, and whether such an instant exists (false when a failing
// rule has no end).
func FaultsEnd(rules []Rule) (time.Duration, bool) {
	var end time.Duration
	for i := range rules {
		r := &rules[i]
		if r.harmless() {
			continue
		}
		if r.Until == 0 {
			return 0, false
		}
		end = max(end, r.Until)
	}
	return end, true
}

func (r *Rule) harmless() bool {
	items := r.Sequence
	if r.Respond != nil {
		items = []Response{*r.Respond}
	}
	for i := range items {
		it := &items[i]
		if !it.OK() || it.Fault != None || it.Latency > 0 || it.Jitter > 0 {
			return false
		}
	}
	return true
}

// Picker answers attempts from a rule list. It counts, per rule, how many
// attempts the rule answered (for sequences). It is not safe for concurrent
// use (Server serialises it).
type Picker struct {
	rules    []Rule
	answered []int
}

// NewPicker builds a picker over rules (kept, not copied).
func NewPicker(rules []Rule) *Picker {
	return &Picker{rules: rules, answered: make([]int, len(rules))}
}

// Rules returns the picker's rules.
func (p *Picker) Rules() []Rule { return p.rules }

// Reset forgets the sequence counters.
func (p *Picker) Reset() { clear(p.answered) }

// okResponse is the default answer.
var okResponse = Response{Status: 200}

// Pick returns the response for one attempt at offset at, and the index of
// the rule that answered (-1 for the default 200). draw returns a uniform
// number in [0, 1); it is called only for rules with a Probability, so
// adding a plain rule never perturbs the random stream. The returned
// response must not be modified (its Headers map is shared).
func (p *Picker) Pick(at time.Duration, provider, connection, model string, draw func() float64) (*Response, int) {
	for i := len(p.rules) - 1; i >= 0; i-- {
		r := &p.rules[i]
		if !r.Match.Matches(provider, connection, model) || !r.Active(at) {
			continue
		}
		if r.Probability > 0 && r.Probability < 1 {
			if draw == nil || draw() >= r.Probability {
				continue
			}
		}
		n := p.answered[i]
		p.answered[i]++
		if r.Respond != nil {
			return r.Respond, i
		}
		return &r.Sequence[min(n, len(r.Sequence)-1)], i
	}
	return &okResponse, -1
}
