package incident

// Topology is what an export takes from the gateway config (docs/config.md):
// the parts the model reads. The command fills it from proxy.Config; it is
// a type of its own so this package never depends on the gateway, and so
// that nothing secret (apiKey, baseURL, client keys) can reach it.
type Topology struct {
	// File names the config, for the header comment.
	File       string
	Providers  []Provider
	Combos     []Combo
	Aliases    map[string]string
	Resilience map[string]any // the config's `resilience:` layer
}

// Provider is a provider of the config, without credentials or URLs.
type Provider struct {
	ID, Type, Profile, Strategy string
	Models                      []string
	PerModelQuota               *bool
	DailyResetUTC               string
	QuotaFamilies               map[string][]string
	Connections                 []Connection
}

// Connection is a connection of the config: only what selection reads.
type Connection struct {
	ID             string
	Priority       int
	Weight         int
	DisableCooling bool
}

// Combo is a combo of the config.
type Combo struct {
	ID, Strategy, Mode string
	Targets            []Target
}

// Target is one combo target ("provider/model", optional weight and
// pinned connection).
type Target struct {
	Target, Connection string
	Weight             int
}
