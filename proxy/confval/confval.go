// Package confval holds the plain value types of the config file that the
// management API speaks too (a connection's rateLimitOverrides and its
// millisecond fields), so proxy and proxy/mgmt share them without an
// import cycle. proxy keeps its names for them as aliases.
package confval

import (
	"bytes"
	"encoding/json"
	"reflect"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// RateLimitOverrides are a connection's admission overrides (docs/admission.md#concurrency-gates, docs/admission.md).
type RateLimitOverrides struct {
	ModelConcurrency   map[string]int `yaml:"modelConcurrency" json:"modelConcurrency,omitempty"`
	MaxWaitMs          Millis         `yaml:"maxWaitMs" json:"maxWaitMs,omitempty"`
	ExecutionMaxWaitMs Millis         `yaml:"executionMaxWaitMs" json:"executionMaxWaitMs,omitempty"`
	RPM                int            `yaml:"rpm" json:"rpm,omitempty"`
	MinTimeMs          Millis         `yaml:"minTimeMs" json:"minTimeMs,omitempty"`
}

// Millis is a duration in milliseconds; YAML accepts an integer or a Go
// duration string ("30s").
type Millis int64

var millisType = reflect.TypeFor[Millis]()

// Duration converts to a time.Duration.
func (m Millis) Duration() time.Duration { return time.Duration(m) * time.Millisecond }

// UnmarshalJSON accepts what the config file accepts (PUT /api/providers
// takes the same fields): an integer or a Go duration string that is a
// whole number of milliseconds, never negative. null leaves m unchanged.
// A refusal is a *json.UnmarshalTypeError, which encoding/json fills with
// the field's path, so the 400 names the field (mgmt.JSONProblem).
func (m *Millis) UnmarshalJSON(b []byte) error {
	var v model.Millis
	if err := v.UnmarshalJSON(b); err != nil || v < 0 {
		return &json.UnmarshalTypeError{Value: string(bytes.TrimSpace(b)), Type: millisType}
	}
	*m = Millis(v)
	return nil
}
