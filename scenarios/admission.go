package scenarios

import (
	"net"
	"strconv"
	"strings"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/scenarios/yamlnode"
	"go.yaml.in/yaml/v3"
)

// Connection admission keys (docs/admission.md#concurrency-gates, docs/admission.md): the simulator runs the same
// limiter and concurrency gate as the gateway (sim/admission.go), so these
// keys mean in a scenario what they mean in the config file.
var rateLimitKeys = []string{"rpm", "minTimeMs", "maxWaitMs", "executionMaxWaitMs", "modelConcurrency"}

// connAdmission decodes one admission key of a connection; it reports
// whether key was one.
func (l *loader) connAdmission(key string, v *yaml.Node, f string, c *model.ConnectionConfig) bool {
	switch key {
	case "maxConcurrent":
		c.MaxConcurrent = l.d.NonNegInt(v, f)
	case "rateLimitProtection":
		c.RateLimitProtection = l.d.Bool(v, f)
	case "egressIp":
		c.EgressIP = l.d.String(v, f)
		if net.ParseIP(c.EgressIP) == nil {
			l.d.Errf(v, f, "want an IP address, got %q", c.EgressIP)
		}
	case "rateLimitOverrides":
		l.fields(v, f, rateLimitKeys, func(k, kf string, _, v *yaml.Node) {
			switch k {
			case "rpm":
				c.Limits.RPM = l.d.NonNegInt(v, kf)
			case "minTimeMs":
				c.Limits.MinTimeMs = l.millis(v, kf)
			case "maxWaitMs":
				c.MaxWaitMs = l.millis(v, kf)
			case "executionMaxWaitMs":
				l.millis(v, kf)
				l.warn(v, kf, "ignored by the simulator: attempts end by their timeline, not by the execution bound")
			case "modelConcurrency":
				c.ModelConcurrency = map[string]int{}
				l.d.Map(v, kf, nil, func(m string, _, v *yaml.Node) {
					c.ModelConcurrency[m] = l.d.NonNegInt(v, yamlnode.Join(kf, m))
				})
			}
		})
	default:
		return false
	}
	return true
}

// millis decodes a *Ms value: an integer of milliseconds or a Go duration
// string (docs/settings.md#layers).
func (l *loader) millis(v *yaml.Node, f string) int64 {
	if v != nil && v.Kind == yaml.ScalarNode {
		if n, err := strconv.ParseInt(strings.TrimSpace(v.Value), 10, 64); err == nil {
			if n < 0 {
				l.d.Errf(v, f, "must not be negative, got %d", n)
				return 0
			}
			return n
		}
	}
	return l.d.Duration(v, f).Milliseconds()
}

// comboMode decodes a combo's mode: "" or quota-share (docs/admission.md#concurrency-gates).
func (l *loader) comboMode(v *yaml.Node, f string) string {
	s := l.d.String(v, f)
	if s != "" && s != "quota-share" {
		l.d.Errf(v, f, "unknown combo mode %q (want quota-share, or leave it out)", s)
	}
	return s
}
