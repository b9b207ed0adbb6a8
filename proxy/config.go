package proxy

import (
	"errors"
	"fmt"
	didyoumean "github.com/breakwater-gw/breakwater/internal/suggest"
	"github.com/breakwater-gw/breakwater/model/settings"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy/confval"
	"github.com/breakwater-gw/breakwater/store"
)

// Config is the gateway's config file (docs/config.md).
type Config struct {
	Server     ServerConfig      `yaml:"server"`
	Store      StoreConfig       `yaml:"store"`
	ClientKeys []ClientKey       `yaml:"clientKeys"`
	Aliases    map[string]string `yaml:"aliases"`
	Providers  []ProviderConfig  `yaml:"providers"`
	Combos     []ComboConfig     `yaml:"combos"`
	// Resilience is the "file" settings layer (docs/settings.md#layers), resolved with
	// settings.Resolve together with the env and saved layers.
	Resilience settings.Layer `yaml:"resilience"`
	// Demo serves providers whose baseURL is demo:// from an in-process
	// fault upstream (make run; see examples/demo.yaml).
	Demo DemoConfig `yaml:"demo"`

	// File is the path the config was read from ("" when built in code).
	File string `yaml:"-"`
	// lines maps a dotted field path to its line in File, for messages.
	lines map[string]int
	// fromEnv maps a field set by a BREAKWATER_* variable to that variable:
	// its problems name the variable, not a line of the file.
	fromEnv map[string]string
	// envRefs are the variables the file names in ${...}: the operator's
	// own, even under a BREAKWATER_ prefix the settings use.
	envRefs map[string]bool
}

// ServerConfig is the `server:` section.
type ServerConfig struct {
	Listen        string `yaml:"listen"`
	ManagementKey string `yaml:"managementKey"`
	// MetricsListen serves GET /metrics without authentication on a second
	// address (for a Prometheus that cannot hold the management key); ""
	// = off. proxy/ops.go.
	MetricsListen string `yaml:"metricsListen"`
	// TestProvidersAtStart tests every provider's connections (GET
	// {baseURL}/models) once at start-up and logs each result.
	TestProvidersAtStart bool `yaml:"testProvidersAtStart"`
	// Tracing sends OpenTelemetry traces to an OTLP/HTTP collector; off
	// unless tracing.endpoint is set (proxy/tracing.go).
	Tracing TracingConfig `yaml:"tracing"`
	// MaxBodyBytes bounds a client request body (default 16 MiB).
	MaxBodyBytes int64 `yaml:"maxBodyBytes"`
	// ShutdownTimeoutMs bounds the drain of in-flight requests (default 30 s).
	ShutdownTimeoutMs Millis `yaml:"shutdownTimeoutMs"`
	// LogRequests logs one line per client request at info level.
	LogRequests bool `yaml:"logRequests"`
	// StreamCommit says when a stream is committed to the client: "content"
	// (default) holds metadata events (the role chunk) until the first
	// content or reasoning frame, so an error or stall before it is retried
	// elsewhere; "first-event" forwards the first event at once (lower
	// time-to-first-event, fewer pre-commit retries).
	StreamCommit string `yaml:"streamCommit"`
	// ResponsesRetentionMs is how long a stored Responses-API response is
	// kept for previous_response_id and GET /v1/responses/{id} (default
	// 1 h; proxy/surface_responses.go).
	ResponsesRetentionMs Millis `yaml:"responsesRetentionMs"`
	// PassHeaders lists the client request headers passed on to upstreams
	// (default anthropic-beta, anthropic-version, openai-beta; [] for
	// none). Credential headers are refused (proxy/surface_config.go).
	PassHeaders []string `yaml:"passHeaders"`
}

// DemoConfig is the `demo:` section.
type DemoConfig struct {
	// Faults is a fault-rule file (docs/scenarios.md `upstream:` rules) for the
	// in-process demo upstream, relative to the config file.
	Faults string `yaml:"faults"`
}

// StoreConfig is the `store:` section.
type StoreConfig struct {
	URL string `yaml:"url"`
	// FailOpen (default true) serves traffic while the database is
	// unreachable, state kept in memory; false makes /readyz answer 503
	// until it is reachable again (traffic is still served).
	FailOpen *bool `yaml:"failOpen"`
}

// ClientKey is one client API key.
type ClientKey struct {
	ID                 string   `yaml:"id"`
	Key                string   `yaml:"key"`
	Scopes             []string `yaml:"scopes"`
	AllowedConnections []string `yaml:"allowedConnections"`
}

// ProviderConfig is one upstream service.
type ProviderConfig struct {
	ID            string   `yaml:"id"`
	Type          string   `yaml:"type"`
	Profile       string   `yaml:"profile"`
	BaseURL       string   `yaml:"baseURL"`
	Models        []string `yaml:"models"`
	Strategy      string   `yaml:"strategy"`
	MaxConcurrent int      `yaml:"maxConcurrent"`
	PerModelQuota *bool    `yaml:"perModelQuota"`
	// ContextWindows: known context windows (tokens) per model, optional;
	// a request too long for one model goes to a larger one first.
	ContextWindows map[string]int      `yaml:"contextWindows"`
	DailyResetUTC  string              `yaml:"dailyResetUtc"`
	QuotaFamilies  map[string][]string `yaml:"quotaFamilies"`
	Connections    []ConnectionConfig  `yaml:"connections"`
	// Continuation: how the provider continues a prefilled assistant turn
	// when a broken stream is resumed ("" = the type's default).
	Continuation string `yaml:"continuation"`
	// ResponsesAPI: the upstream serves the OpenAI Responses API at
	// {baseURL}/responses, so Responses requests go to it natively
	// (proxy/surface_respnative.go). OpenAI-compatible types only.
	ResponsesAPI bool `yaml:"responsesAPI"`
}

// ConnectionConfig is one account or key of a provider.
type ConnectionConfig struct {
	ID                  string             `yaml:"id"`
	APIKey              string             `yaml:"apiKey"`
	MaxConcurrent       int                `yaml:"maxConcurrent"`
	Priority            int                `yaml:"priority"`
	Weight              int                `yaml:"weight"`
	DisableCooling      bool               `yaml:"disableCooling"`
	RateLimitOverrides  RateLimitOverrides `yaml:"rateLimitOverrides"`
	RateLimitProtection bool               `yaml:"rateLimitProtection"`
	SpendWall           SpendWallConfig    `yaml:"spendWall"` // docs/spendwall.md (proxy/spendwall.go)
	EgressIP            string             `yaml:"egressIp"`  // docs/classification.md: set when requests leave through an egress proxy; else learned
}

// RateLimitOverrides are a connection's admission overrides
// (confval.RateLimitOverrides).
type RateLimitOverrides = confval.RateLimitOverrides

// ComboConfig is a virtual model tried with fallback.
type ComboConfig struct {
	ID       string        `yaml:"id"`
	Strategy string        `yaml:"strategy"`
	Mode     string        `yaml:"mode"`
	Targets  []ComboTarget `yaml:"targets"`
}

// ComboTarget is "provider/model" or {target, weight, connection}.
type ComboTarget struct {
	Target     string `yaml:"target"`
	Weight     int    `yaml:"weight"`
	Connection string `yaml:"connection"`
}

// Millis is a duration in milliseconds (confval.Millis).
type Millis = confval.Millis

// ConfigError is one problem in a config file: where and what.
type ConfigError struct {
	File    string
	Line    int
	Field   string
	Problem string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	return b.String()
}

// ConfigErrors lists every *ConfigError in err.
func ConfigErrors(err error) []*ConfigError { return didyoumean.ErrorsOf[*ConfigError](err) }

// LoadConfig reads and validates a config file. environ (os.Environ()) feeds
// ${ENV} expansion; unset variables expand to "" and are reported in
// warnings.
func LoadConfig(path string, environ []string) (*Config, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return ParseConfig(path, b, environ)
}

// ParseConfig parses and validates config bytes; file names the source in
// messages.
func ParseConfig(file string, data []byte, environ []string) (*Config, []string, error) {
	env := envMap(environ)
	d := newConfigDecoder(file, env)
	root := d.Parse(data)
	if d.Failed() {
		return nil, nil, errors.Join(d.problems()...)
	}
	cfg := &Config{File: file}
	if root != nil {
		d.decode(root, reflect.ValueOf(cfg).Elem(), "")
	}
	cfg.lines = d.lines
	cfg.envRefs = d.refs
	warnings := d.warnings
	if len(cfg.Providers) == 0 {
		warnings = append(warnings, fmt.Sprintf("%s: no providers are configured: every chat request will be answered 404", file))
	}
	if w := cfg.applyEnvOverrides(env); w != "" {
		warnings = append(warnings, w)
	}
	errs := append(d.problems(), cfg.checkDecoded(d, environ)...)
	if len(errs) > 0 {
		return nil, warnings, errors.Join(errs...)
	}
	return cfg, warnings, nil
}

// envMap indexes environ (os.Environ()); the first of a repeated name wins.
func envMap(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if _, dup := env[k]; !dup {
				env[k] = v
			}
		}
	}
	return env
}

// checkDecoded checks a decoded config (after the environment overrides):
// what the decoder left to refuse, the values and references, then the
// settings.
func (c *Config) checkDecoded(d *configDecoder, environ []string) []error {
	var errs []error
	if d.mgmtUnset != "" && c.fromEnv["server.managementKey"] == "" {
		// An unset key would leave the management API open (on loopback)
		// without a word beyond a warning; as for client keys, refuse.
		errs = append(errs, &ConfigError{File: c.File, Line: d.mgmtUnsetNode.Line, Field: "server.managementKey",
			Problem: fmt.Sprintf("environment variable %s is not set: the management API would be open; set it (or BREAKWATER_MANAGEMENT_KEY), or remove managementKey to run an open management API on loopback", d.mgmtUnset)})
	}
	errs = append(errs, c.validate()...)
	errs = append(errs, c.validateOps()...) // proxy/ops.go
	if len(errs) == 0 && len(d.problems()) == 0 {
		// Settings resolved from the file and the environment, as New
		// resolves them (the saved layer comes from the store): a bad
		// value is reported with the other problems, before serve opens
		// (and migrates) a database.
		errs = append(errs, c.checkSettings(environ)...)
	}
	return errs
}

// serverEnv are the BREAKWATER_* variables that override server and store
// fields of the file (docs/config.md).
var serverEnv = []struct {
	name, field string
	at          func(*Config) *string
}{
	{"BREAKWATER_LISTEN", "server.listen", func(c *Config) *string { return &c.Server.Listen }},
	{"BREAKWATER_MANAGEMENT_KEY", "server.managementKey", func(c *Config) *string { return &c.Server.ManagementKey }},
	{"BREAKWATER_DATABASE_URL", "store.url", func(c *Config) *string { return &c.Store.URL }},
}

// DeprecatedStoreURLEnv is the old name of BREAKWATER_DATABASE_URL, still
// read (with a warning) when the new one is unset.
const DeprecatedStoreURLEnv = "BREAKWATER_STORE_URL"

// StoreURLFromEnv returns the database URL of the environment: the value of
// BREAKWATER_DATABASE_URL, else of the deprecated BREAKWATER_STORE_URL with a
// warning naming the new variable ("" when neither is set).
func StoreURLFromEnv(getenv func(string) string) (url, warning string) {
	if v := getenv("BREAKWATER_DATABASE_URL"); v != "" {
		return v, ""
	}
	if v := getenv(DeprecatedStoreURLEnv); v != "" {
		return v, DeprecatedStoreURLEnv + " is deprecated: name the database URL BREAKWATER_DATABASE_URL (the same variable `breakwater migrate` reads)"
	}
	return "", ""
}

// ServerEnvVars names the BREAKWATER_* variables that override the file's
// server and store fields (for serve's typo warning).
func ServerEnvVars() []string {
	out := make([]string, len(serverEnv))
	for i, v := range serverEnv {
		out[i] = v.name
	}
	return append(out, DeprecatedStoreURLEnv)
}

// applyEnvOverrides sets the fields of serverEnv from the environment
// before validation, so an overriding value is checked like a file value.
// It returns the deprecation warning of an old variable name, if one is used.
func (c *Config) applyEnvOverrides(env map[string]string) (warning string) {
	for _, v := range serverEnv {
		val, name := env[v.name], v.name
		if val == "" && v.field == "store.url" {
			val, warning = StoreURLFromEnv(func(k string) string { return env[k] })
			name = DeprecatedStoreURLEnv
		}
		if val == "" {
			continue
		}
		*v.at(c) = val
		if c.fromEnv == nil {
			c.fromEnv = map[string]string{}
		}
		c.fromEnv[v.field] = name
	}
	return warning
}

// checkSettings resolves the file and env settings layers and checks the
// rules New enforces on the listen address.
func (c *Config) checkSettings(environ []string) []error {
	var errs []error
	if err := c.accessProblem(); err != nil {
		errs = append(errs, err)
	}
	lower, err := c.SettingsLayers(environ)
	if err == nil {
		_, _, err = settings.Resolve(lower...)
	}
	if err != nil {
		errs = append(errs, c.settingsError(err))
	}
	return errs
}

// accessProblem enforces who may reach the gateway: an open gateway (no
// clientKeys) and an open management API only on a loopback address.
func (c *Config) accessProblem() error {
	if isLoopback(c.Server.Listen) {
		return nil
	}
	if len(c.ClientKeys) == 0 {
		return c.errAt("server.listen", "refusing to run an open gateway on %s: no clientKeys are configured, so anyone who can reach this address could use your upstream credentials; add clientKeys or listen on a loopback address (127.0.0.1:PORT)", c.Server.Listen)
	}
	if c.Server.ManagementKey == "" {
		from := ""
		if name := c.fromEnv["server.listen"]; name != "" {
			from = ", from " + name
		}
		return c.errAt("server.managementKey", "is required when listening on a non-loopback address (%s%s)", c.Server.Listen, from)
	}
	return nil
}

// headerValueProblem says why v cannot be sent as an HTTP header value
// (a connection's key goes out in Authorization or the provider's key
// header; a tracing header goes to the collector), or "". A control
// character is refused here rather than left to the Transport, which would
// refuse every request with it (and charge the failures to the provider).
// Tab is allowed, as net/http allows it. The value itself is never quoted:
// it is usually a credential.
func headerValueProblem(v string) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return fmt.Sprintf("contains a control character (byte 0x%02x at offset %d); a header value cannot carry it", c, i)
		}
	}
	return ""
}

// headerNameProblem says why name cannot be sent as an HTTP header name, or
// "": a name is a token (RFC 9110 section 5.6.2), as net/http's Transport
// requires.
func headerNameProblem(name string) string {
	if name == "" {
		return "a header name cannot be empty"
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Sprintf("%q is not a valid header name (byte 0x%02x at offset %d is not a token character)", name, name[i], i)
		}
	}
	return ""
}

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// line returns the line of a field path (0 when unknown).
func (c *Config) line(path string) int {
	for p := path; p != ""; {
		if l, ok := c.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

func (c *Config) errAt(field, format string, args ...any) error {
	problem := fmt.Sprintf(format, args...)
	if name := c.fromEnv[field]; name != "" {
		// Not on the file's line: say where the value came from.
		return &ConfigError{File: c.File, Field: field, Problem: problem + " (the value comes from " + name + ")"}
	}
	return &ConfigError{File: c.File, Line: c.line(field), Field: field, Problem: problem}
}

// validate checks what the YAML decoder cannot: required values, references
// and enumerations.
func (c *Config) validate() []error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if c.Server.Listen == "" {
		c.Server.Listen = "127.0.0.1:8080"
	}
	if _, port, err := net.SplitHostPort(c.Server.Listen); err != nil {
		add(c.errAt("server.listen", "want host:port, got %q", c.Server.Listen))
	} else if _, err := net.LookupPort("tcp", port); err != nil {
		add(c.errAt("server.listen", "want a port between 0 and 65535, got %q", port))
	}
	switch c.Server.StreamCommit {
	case "", "content", "first-event":
	default:
		add(c.errAt("server.streamCommit", "want content or first-event, got %q", c.Server.StreamCommit))
	}
	if c.Server.MaxBodyBytes < 0 {
		add(c.errAt("server.maxBodyBytes", "must not be negative"))
	} else if c.Server.MaxBodyBytes > maxMaxBodyBytes {
		// Each request in flight may hold this much: a limit past any
		// real request is none.
		add(c.errAt("server.maxBodyBytes", "at most %d (1 GiB), got %d", int64(maxMaxBodyBytes), c.Server.MaxBodyBytes))
	}
	errs = append(errs, c.validateSurfaces()...)
	if u := c.Store.URL; u != "" && !store.IsPostgresURL(u) && u != "memory" {
		add(c.errAt("store.url", "want \"\" (memory) or a postgres:// URL, got %q", redactURL(u))) // never print its password
	} else if problem := postgresURLProblem(u); problem != "" {
		add(c.errAt("store.url", "%s, got %q", problem, redactURL(u)))
	}
	provs := c.validateProviders(add)
	combos := c.validateCombos(provs, add)
	c.validateAliases(provs, combos, add)
	c.validateClientKeys(provs, add)
	if len(errs) == 0 {
		t, err := c.Topology()
		if err != nil {
			add(err)
		} else if fs, _, err := settings.Resolve(settings.NamedLayer{Name: "file", Tree: c.Resilience}); err == nil && fs.EmergencyFallback.Target != "" {
			// A combo naming an unknown target is an error; so is the
			// emergency fallback's (docs/api.md#operator-actions), which would otherwise be
			// skipped silently when it is needed.
			if eng, err := model.NewEngine(t, model.DefaultSettings(), nil); err == nil {
				if problem := fallbackTargetProblem(eng, fs.EmergencyFallback.Target); problem != "" {
					add(c.errAt("resilience.emergencyFallback.target", "%s", problem))
				}
			}
		}
	}
	sort.SliceStable(errs, func(i, j int) bool {
		a, b := ConfigErrors(errs[i]), ConfigErrors(errs[j])
		return len(a) > 0 && len(b) > 0 && a[0].Line < b[0].Line
	})
	return errs
}

// validateProviders checks the providers and their connections; it returns
// them by id (the first of a duplicated id).
func (c *Config) validateProviders(add func(error)) map[string]*ProviderConfig {
	provs := map[string]*ProviderConfig{}
	for i := range c.Providers {
		p := &c.Providers[i]
		f := fmt.Sprintf("providers[%d]", i)
		if p.ID == "" || strings.ContainsAny(p.ID, "/ ") {
			add(c.errAt(f+".id", "must be non-empty without '/' or spaces, got %q", p.ID))
		} else if provs[p.ID] != nil {
			add(c.errAt(f+".id", "duplicate provider id %q", p.ID))
		} else {
			provs[p.ID] = p
		}
		if p.Type == "" {
			p.Type = "openai"
		}
		if !slices.Contains(model.ProviderTypes, p.Type) {
			add(c.errAt(f+".type", "unknown provider type %q%s", p.Type, suggest(p.Type, model.ProviderTypes)))
		}
		if p.Profile == "" {
			p.Profile = "apikey"
			if p.Type == "local" {
				p.Profile = "local"
			}
		}
		if _, err := model.ParseProfile(p.Profile); err != nil {
			add(c.errAt(f+".profile", "want oauth, apikey or local, got %q", p.Profile))
		}
		if p.Strategy != "" {
			if _, err := model.ParseStrategy(p.Strategy); err != nil {
				add(c.errAt(f+".strategy", "%v", err))
			}
		}
		if p.BaseURL == "" {
			add(c.errAt(f+".baseURL", "is required (the upstream's base URL, e.g. https://api.openai.com/v1)"))
		} else if !strings.HasPrefix(p.BaseURL, "demo://") {
			if problem := baseURLProblem(p.BaseURL); problem != "" {
				add(c.errAt(f+".baseURL", "%s", problem))
			}
		}
		if p.MaxConcurrent < 0 {
			add(c.errAt(f+".maxConcurrent", "must not be negative"))
		}
		if len(p.Connections) == 0 {
			add(c.errAt(f+".connections", "a provider needs at least one connection"))
		}
		c.validateConnections(f, p, add)
	}
	return provs
}

// validateConnections checks provider p's connections; f names p in
// errors.
func (c *Config) validateConnections(f string, p *ProviderConfig, add func(error)) {
	conns := map[string]bool{}
	for j := range p.Connections {
		cn := &p.Connections[j]
		cf := fmt.Sprintf("%s.connections[%d]", f, j)
		if cn.ID == "" || strings.ContainsAny(cn.ID, "/ ") {
			add(c.errAt(cf+".id", "must be non-empty without '/' or spaces, got %q", cn.ID))
		} else if conns[cn.ID] {
			add(c.errAt(cf+".id", "duplicate connection id %q in provider %q", cn.ID, p.ID))
		}
		conns[cn.ID] = true
		if cn.MaxConcurrent < 0 {
			add(c.errAt(cf+".maxConcurrent", "must not be negative"))
		}
		if cn.Weight < 0 {
			add(c.errAt(cf+".weight", "must not be negative"))
		}
		for m, n := range cn.RateLimitOverrides.ModelConcurrency {
			if n < 0 {
				add(c.errAt(cf+".rateLimitOverrides.modelConcurrency."+m, "must not be negative"))
			}
		}
		if cn.RateLimitOverrides.RPM < 0 {
			add(c.errAt(cf+".rateLimitOverrides.rpm", "must not be negative"))
		}
		if problem := headerValueProblem(cn.APIKey); problem != "" {
			add(c.errAt(cf+".apiKey", "%s", problem))
		}
		if cn.EgressIP != "" && net.ParseIP(cn.EgressIP) == nil {
			add(c.errAt(cf+".egressIp", "want an IP address, got %q", cn.EgressIP))
		}
		if field, problem := cn.SpendWall.validate(); field != "" {
			add(c.errAt(cf+".spendWall."+field, "%s", problem))
		}
	}
}

// validateCombos checks the combos and that their targets name configured
// providers and models; it returns the combo ids.
func (c *Config) validateCombos(provs map[string]*ProviderConfig, add func(error)) map[string]bool {
	combos := map[string]bool{}
	for i := range c.Combos {
		cb := &c.Combos[i]
		f := fmt.Sprintf("combos[%d]", i)
		if cb.ID == "" {
			add(c.errAt(f+".id", "must be non-empty"))
		} else if combos[cb.ID] {
			add(c.errAt(f+".id", "duplicate combo id %q", cb.ID))
		}
		combos[cb.ID] = true
		if cb.Strategy != "" {
			if _, err := model.ParseStrategy(cb.Strategy); err != nil {
				add(c.errAt(f+".strategy", "%v", err))
			}
		}
		if cb.Mode != "" && cb.Mode != "quota-share" {
			add(c.errAt(f+".mode", "want \"\" or quota-share, got %q", cb.Mode))
		}
		if len(cb.Targets) == 0 {
			add(c.errAt(f+".targets", "a combo needs at least one target"))
		}
		for j, t := range cb.Targets {
			tf := fmt.Sprintf("%s.targets[%d]", f, j)
			pid, m, ok := strings.Cut(t.Target, "/")
			if !ok || pid == "" || m == "" {
				add(c.errAt(tf, "want provider/model, got %q", t.Target))
				continue
			}
			p := provs[pid]
			if p == nil {
				add(c.errAt(tf, "unknown provider %q%s", pid, suggest(pid, keysOf(provs))))
				continue
			}
			if len(p.Models) > 0 && !slices.Contains(p.Models, m) {
				add(c.errAt(tf, "provider %q does not list model %q (it lists %v)", pid, m, p.Models))
			}
			if t.Connection != "" && !slices.ContainsFunc(p.Connections, func(cn ConnectionConfig) bool { return cn.ID == t.Connection }) {
				add(c.errAt(tf+".connection", "provider %q has no connection %q", pid, t.Connection))
			}
			if t.Weight < 0 {
				add(c.errAt(tf+".weight", "must not be negative"))
			}
		}
	}
	return combos
}

// validateAliases checks that no combo id or alias hides a provider route
// and that every alias names a combo or a configured provider/model.
func (c *Config) validateAliases(provs map[string]*ProviderConfig, combos map[string]bool, add func(error)) {
	// shadows names the provider route a combo id or alias would hide:
	// combos, then aliases, resolve before provider/model (docs/settings.md#defaults).
	shadows := func(id string) string {
		pid, m, ok := strings.Cut(id, "/")
		if p := provs[pid]; ok && p != nil && m != "" && (len(p.Models) == 0 || slices.Contains(p.Models, m)) {
			return pid
		}
		return ""
	}
	for i := range c.Combos {
		if pid := shadows(c.Combos[i].ID); pid != "" {
			add(c.errAt(fmt.Sprintf("combos[%d].id", i), "%q is also a model of provider %q; the combo would hide it (combos resolve first): pick another id", c.Combos[i].ID, pid))
		}
	}
	for alias, target := range c.Aliases {
		switch hidden := shadows(alias); {
		case combos[alias]:
			add(c.errAt("aliases."+alias, "alias %q has the id of a combo, which resolves first: the alias would never apply", alias))
			continue
		case hidden != "":
			add(c.errAt("aliases."+alias, "alias %q is also a model of provider %q; the alias would hide it: pick another name", alias, hidden))
			continue
		case combos[target]:
			continue
		}
		pid, m, ok := strings.Cut(target, "/")
		p := provs[pid]
		switch {
		case !ok || p == nil || m == "":
			add(c.errAt("aliases."+alias, "want a combo id or provider/model with a configured provider, got %q", target))
		case len(p.Models) > 0 && !slices.Contains(p.Models, m):
			add(c.errAt("aliases."+alias, "provider %q does not list model %q (it lists %v)", pid, m, p.Models))
		}
	}
}

// validateClientKeys checks the client keys: unique ids and keys, none the
// managementKey, and allowedConnections that exist.
func (c *Config) validateClientKeys(provs map[string]*ProviderConfig, add func(error)) {
	keyIDs := map[string]bool{}
	keyOwner := map[string]int{} // key → index of the first client key holding it
	for i, k := range c.ClientKeys {
		if j, dup := keyOwner[k.Key]; dup && k.Key != "" {
			// Never repeat the key itself.
			add(c.errAt(fmt.Sprintf("clientKeys[%d].key", i), "same key as clientKeys[%d] (%q): a key must identify one client", j, c.ClientKeys[j].ID))
		} else {
			keyOwner[k.Key] = i
		}
		f := fmt.Sprintf("clientKeys[%d]", i)
		if k.ID == "" {
			add(c.errAt(f+".id", "must be non-empty"))
		} else if keyIDs[k.ID] {
			add(c.errAt(f+".id", "duplicate client key id %q", k.ID))
		}
		keyIDs[k.ID] = true
		if k.Key == "" {
			add(c.errAt(f+".key", "must be non-empty (is its environment variable set?)"))
		} else if k.Key == c.Server.ManagementKey {
			// Never repeat the key itself.
			add(c.errAt(f+".key", "is the managementKey: this client could change the gateway's settings and clear its states; give it its own key"))
		}
		for j, ac := range k.AllowedConnections {
			ref, err := model.ParseConnRef(ac)
			af := fmt.Sprintf("%s.allowedConnections[%d]", f, j)
			if err != nil {
				add(c.errAt(af, "%v", err))
				continue
			}
			p := provs[ref.Provider]
			if p == nil || !slices.ContainsFunc(p.Connections, func(cn ConnectionConfig) bool { return cn.ID == ref.Connection }) {
				add(c.errAt(af, "unknown connection %q", ac))
			}
		}
	}
}

func suggest(name string, known []string) string {
	if s := didyoumean.Nearest(name, known); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return fmt.Sprintf(" (known: %s)", strings.Join(known, ", "))
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Topology builds the model topology from the config.
func (c *Config) Topology() (model.Topology, error) {
	var t model.Topology
	t.Aliases = c.Aliases
	for _, p := range c.Providers {
		prof, _ := model.ParseProfile(p.Profile)
		strat, _ := model.ParseStrategy(orDefault(p.Strategy, "fill-first"))
		pc := model.ProviderConfig{ID: p.ID, Type: p.Type, Profile: prof, Models: p.Models, Strategy: strat,
			PerModelQuota: p.PerModelQuota, DailyResetUTC: p.DailyResetUTC, QuotaFamilies: p.QuotaFamilies,
			ContextWindows: p.ContextWindows, Continuation: p.Continuation}
		for _, cn := range p.Connections {
			pc.Connections = append(pc.Connections, model.ConnectionConfig{ID: cn.ID, Priority: cn.Priority, Weight: cn.Weight, DisableCooling: cn.DisableCooling,
				MaxConcurrent:       cn.MaxConcurrent, // docs/admission.md#concurrency-gates: a full connection goes after free siblings
				ModelConcurrency:    cn.RateLimitOverrides.ModelConcurrency,
				RateLimitProtection: cn.RateLimitProtection, // docs/admission.md: who goes through the admission queue
				EgressIP:            cn.EgressIP,            // docs/classification.md
				SpendWall:           cn.SpendWall.model()})  // docs/spendwall.md
		}
		t.Providers = append(t.Providers, pc)
	}
	for _, cb := range c.Combos {
		strat, _ := model.ParseStrategy(orDefault(cb.Strategy, "priority"))
		cc := model.ComboConfig{ID: cb.ID, Strategy: strat}
		for _, tg := range cb.Targets {
			pid, m, _ := strings.Cut(tg.Target, "/")
			cc.Targets = append(cc.Targets, model.ComboTarget{Provider: pid, Model: m, Connection: tg.Connection, Weight: tg.Weight})
		}
		t.Combos = append(t.Combos, cc)
	}
	// NewEngine validates; surface its error with the config's line numbers.
	if _, err := model.NewEngine(t, model.DefaultSettings(), nil); err != nil {
		var te *model.TopologyError
		if errors.As(err, &te) {
			return t, c.errAt(te.Field, "%s", te.Problem)
		}
		return t, &ConfigError{File: c.File, Problem: err.Error()}
	}
	return t, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// SettingsLayers resolves the resilience settings from the config file's
// layer, the BREAKWATER_* environment and the saved layer (docs/settings.md#layers).
// Problems in the file layer name the file and line.
func (c *Config) SettingsLayers(environ []string) ([]settings.NamedLayer, error) {
	lower := []settings.NamedLayer{{Name: "file", Tree: c.Resilience}}
	if len(c.envRefs) > 0 {
		// A variable the file expands (${BREAKWATER_STREAM_URL}) is not a
		// mistyped setting: only the settings' own names stay.
		environ = slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
			name, _, _ := strings.Cut(kv, "=")
			return c.envRefs[name] && !settingsVar(name)
		})
	}
	envL, err := settings.EnvLayer(environ)
	if err != nil {
		return nil, err
	}
	return append(lower, settings.NamedLayer{Name: "env", Tree: envL}), nil
}

// settingsError rewrites the model's settings errors of the file layer into
// ConfigErrors with a file and line.
func (c *Config) settingsError(err error) error {
	ses := model.SettingsErrors(err)
	if len(ses) == 0 {
		return err
	}
	var out []error
	for _, se := range ses {
		// No source: a rule between values that no layer set together
		// (emergencyFallback.enabled without its target); the file's
		// resilience section is where to fix it.
		if se.Source == "file" || se.Source == "" {
			field := "resilience"
			if se.Field != "" {
				field += "." + se.Field
			}
			msg := se.Problem
			if se.Problem == model.ProblemUnknownKey {
				msg = fmt.Sprintf("unknown key %q", se.Field[strings.LastIndex(se.Field, ".")+1:])
				if se.Suggestion != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", se.Suggestion)
				} else if len(se.Known) > 0 {
					msg += fmt.Sprintf(" (known keys: %s)", strings.Join(se.Known, ", "))
				}
			}
			out = append(out, &ConfigError{File: c.File, Line: c.line(field), Field: field, Problem: msg})
			continue
		}
		out = append(out, se)
	}
	return errors.Join(out...)
}

// fallbackTargetProblem says why the emergency fallback target does not
// name a route of eng's topology ("" when it does).
func fallbackTargetProblem(eng *model.Engine, target string) string {
	if _, err := eng.Resolve(target); err != nil {
		msg := err.Error()
		var me *model.Error
		if errors.As(err, &me) {
			msg = me.Message
		}
		return fmt.Sprintf("%s (want a combo id, an alias or a provider/model the config serves)", msg)
	}
	return ""
}

// maxMaxBodyBytes bounds server.maxBodyBytes.
const maxMaxBodyBytes = 1 << 30

// baseURLProblem says what is wrong with a provider's baseURL ("" when
// nothing is): the gateway appends /chat/completions and /models to it, so
// it must be an absolute http(s) URL with a host and without a query or
// fragment (a query would end up in front of the appended path). The
// problem never repeats a password or a query value of the URL.
func baseURLProblem(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https"):
		return fmt.Sprintf("want an http:// or https:// URL, got %q", redactURL(s))
	case u.Host == "":
		return fmt.Sprintf("want an http:// or https:// URL with a host, got %q", redactURL(s))
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Sprintf("must not have a query or a fragment (the gateway appends /chat/completions and /models to it), got %q", redactURL(s))
	case strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/chat/completions"):
		return fmt.Sprintf("want the API's base URL without /chat/completions (the gateway appends it), got %q", redactURL(s))
	}
	return ""
}

// redactURL hides a URL's password and query values, which may be
// credentials (https://user:token@host/v1, ?key=...), in what the
// management API shows and in error messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" { // "u:pw@h:bad" parses as scheme "u" with an opaque part
		return redactRawURL(s)
	}
	if u.User == nil && u.RawQuery == "" {
		return s // nothing to hide: shown as written ("postgres://" stays so)
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"xxxxx"}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// redactRawURL hides the password and query of a string url.Parse refused
// ("http://u:secret@host:bad/v1"): the same parts redactURL hides, found by
// position, since such a string is still quoted in error messages.
func redactRawURL(s string) string {
	rest, frag, hasFrag := strings.Cut(s, "#")
	if base, _, ok := strings.Cut(rest, "?"); ok {
		rest = base + "?xxxxx"
	}
	auth := rest
	if _, after, ok := strings.Cut(rest, "://"); ok {
		auth = after
	}
	start := len(rest) - len(auth)
	if end := strings.IndexAny(auth, "/?"); end >= 0 {
		auth = auth[:end]
	}
	if at := strings.LastIndex(auth, "@"); at >= 0 {
		if colon := strings.Index(auth[:at], ":"); colon >= 0 {
			rest = rest[:start+colon+1] + "xxxxx" + rest[start+at:]
		}
	}
	if hasFrag {
		rest += "#" + frag
	}
	return rest
}

// isLoopback reports whether a listen address only accepts local clients.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ReferencesEnv reports whether the config file expands the variable name
// (${name}), which makes it the operator's variable, not a mistyped setting.
func (c *Config) ReferencesEnv(name string) bool { return c != nil && c.envRefs[name] }

// settingsVar reports whether name is a settings variable (a named one or
// the generic BREAKWATER_SETTINGS__ form).
var settingsVar = func() func(string) bool {
	names := map[string]bool{}
	for _, v := range settings.EnvVars() {
		names[v.Name] = true
	}
	return func(name string) bool { return names[name] || strings.HasPrefix(name, "BREAKWATER_SETTINGS__") }
}()

// postgresURLProblem says what is wrong with a postgres:// store URL ("" when
// nothing is). One with neither a host nor a database (postgres:// and
// nothing else, as when the ${...} in it were unset) would fall back to
// libpq's defaults and migrate whatever database the OS user reaches there.
func postgresURLProblem(s string) string {
	if !store.IsPostgresURL(s) {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return "not a valid URL"
	}
	if u.Hostname() == "" && strings.Trim(u.Path, "/") == "" && u.Query().Get("host") == "" && u.Query().Get("dbname") == "" {
		return "names neither a host nor a database (postgres://user@host:5432/dbname)"
	}
	return ""
}
