package scenarios

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/model"
)

const base = `name: a scenario for loader tests
providers:
  - {id: glm, type: glm, profile: apikey, models: [glm-5], connections: [{id: k1}, {id: k2}]}
traffic:
  - {at: 0s, model: glm/glm-5, count: 3, every: 1s}
`

func TestLoadErrorsNameFileLineAndField(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"unknown top key", base + "expext: []\n", `t.yaml:6:1: expext: unknown key "expext" (did you mean "expect"?)`},
		{"unknown traffic key", strings.Replace(base, "every: 1s", "evrey: 1s", 1), `t.yaml:5:42: traffic[0].evrey: unknown key "evrey" (did you mean "every"?)`},
		{"bad duration", strings.Replace(base, "every: 1s", "every: 1 sec", 1), `t.yaml:5:49: traffic[0].every: bad duration "1 sec"`},
		{"unknown provider in a rule", base + "upstream:\n  - match: {provider: gml}\n    respond: {status: 503}\n",
			`t.yaml:7:23: upstream[0].match.provider: unknown provider "gml" (did you mean "glm"?)`},
		{"unknown connection in a rule", base + "upstream:\n  - match: {provider: glm, connection: k9}\n    respond: {status: 503}\n",
			`upstream[0].match.connection: provider "glm" has no connection "k9"`},
		{"request never sent", base + "expect:\n  - {request: 4, status: 200}\n", `t.yaml:7:15: expect[0].request: can never be evaluated: the traffic sends only 3 request(s)`},
		{"window can never hold", base + "expect:\n  - requests: {from: 0s, until: 2s}\n    status: {\"200\": 3}\n",
			`can never hold: the traffic sends only 2 request(s) in [0s, 2s)`},
		{"empty window", base + "expect:\n  - requests: {from: 5s, until: 5s}\n    upstreamCalls: 1\n", `the window [5s, 5s) is empty`},
		{"expect checks nothing", base + "expect:\n  - {at: 1s}\n", `expect[0]: checks nothing`},
		{"unknown breaker state", base + "expect:\n  - {at: 1s, breaker: {glm: OPENED}}\n", `unknown breaker state "OPENED"`},
		{"unknown connection in expect", base + "expect:\n  - {request: 1, servedBy: glm/k3}\n", `expect[0].servedBy: unknown connection "glm/k3"`},
		{"settings unknown key", base + "settings:\n  waitForCooldwn: {enabled: false}\n", `t.yaml:7:3: settings.waitForCooldwn: unknown key "waitForCooldwn" (did you mean "waitForCooldown"?)`},
		{"settings wrong type", base + "settings:\n  providerBreaker: {apikey: {failureThreshold: lots}}\n", `t.yaml:7:48: settings.providerBreaker.apikey.failureThreshold: want an integer`},
		{"unknown model", strings.Replace(base, "model: glm/glm-5", "model: glm/glm-9", 1), `traffic[0].model: model_not_found`},
		{"settings not a mapping", base + "settings: 5\n", `t.yaml:6:11: settings: settings must be an object, got 5`},
		{"count out of range", strings.Replace(base, "count: 3", "count: 1000000000000", 1), `traffic[0].count: 1000000000000 is out of range`},
		// docs/classification.md#provider-types: the type selects the built-in rules; an unknown one would run without them.
		{"unknown provider type", strings.Replace(base, "type: glm,", "type: locl,", 1), `t.yaml:3:21: providers[0].type: unknown provider type "locl" (did you mean "local"?)`},
		{"bad strategy", base + "combos:\n  - {id: c, strategy: prority, targets: [glm/glm-5]}\n", `unknown strategy "prority" (did you mean "priority"?)`},
		{"combo target model", base + "combos:\n  - {id: c, targets: [glm/glm-9]}\n", `combos[0].targets[0].model: provider "glm" does not list model "glm-9"`},
		{"unknown action", base + "actions:\n  - {at: 1s, action: reset-breakers}\n", `unknown action "reset-breakers" (did you mean "reset-breaker"?)`},
		{"rate-limit without enabled", base + "actions:\n  - {at: 1s, action: rate-limit, connection: glm/k1}\n", `rate-limit needs a connection (provider/connection) and enabled: true|false`},
		{"action set bad value", base + "actions:\n  - {at: 1s, action: set, settings: {requestBudget: {maxAttempts: many}}}\n", `actions[0].settings.requestBudget.maxAttempts: want an integer`},
		{"no name", strings.Replace(base, "name: a scenario for loader tests\n", "", 1), `name: a scenario needs a name`},
		{"invalid yaml", "name: [\n", `t.yaml:1: invalid YAML`},
		{"duplicate key", base + "seed: 1\nseed: 2\n", `seed: duplicate key`},
		// virtual time must not overflow (it read "simulated -1635191h")
		{"traffic past 10 years", strings.Replace(base, "every: 1s", "every: 87000h", 1), `t.yaml:5:5: traffic[0].every: the last request would arrive more than 10 years after the start`},
		{"empty file", "", `t.yaml: empty scenario`},
		// docs/scenarios.md#actions: leased traffic presents a named client's lease, which an action acquires.
		{"traffic lease never acquired", strings.Replace(base, "count: 3", "count: 3, lease: a", 1), `t.yaml:5:49: traffic[0].lease: no lease-acquire action names lease "a"`},
		{"named acquire without model", base + "actions:\n  - {at: 1s, action: lease-acquire, lease: a, connections: [glm/k1]}\n", `lease-acquire of lease "a" needs model and connections`},
		{"lease ttl below the floor", base + "actions:\n  - {at: 1s, action: lease-acquire, connection: glm/k1, ttl: 500ms}\n", `ttl applies to lease-acquire and lease-renew only, from 1s to 30m`},
		{"ttl on another action", base + "actions:\n  - {at: 1s, action: reset-breaker, ttl: 5s}\n", `t.yaml:7:37: actions[0].ttl: reset-breaker ignores ttl (its keys: at, action, provider)`},
		// An action refuses the keys its kind ignores (the file would mean something it does not do).
		{"lease on rate-limit", base + "actions:\n  - {at: 1s, action: rate-limit, connection: glm/k1, enabled: true, lease: a, model: glm/glm-5}\n",
			`t.yaml:7:69: actions[0].lease: rate-limit ignores lease (its keys: at, action, connection, connections, enabled)`},
		{"model on reset-connection", base + "actions:\n  - {at: 1s, action: reset-connection, connection: glm/k1, model: glm/glm-5}\n",
			`t.yaml:7:60: actions[0].model: reset-connection ignores model (its keys: at, action, connection, connections)`},
		{"ttl on lease-release", base + "actions:\n  - {at: 1s, action: lease-release, connection: glm/k1, ttl: 5s}\n", `actions[0].ttl: lease-release ignores ttl`},
		{"model on an outside lease", base + "actions:\n  - {at: 1s, action: lease-acquire, connection: glm/k1, model: glm/glm-5}\n", `actions[0].model: model applies to a named lease-acquire`},
		{"empty lease name on an action", base + "actions:\n  - {at: 1s, action: lease-acquire, lease: \"\", model: glm/glm-5, connections: [glm/k1]}\n",
			`t.yaml:7:44: actions[0].lease: a lease needs a name`},
		{"empty lease name on traffic", strings.Replace(base, "count: 3", "count: 3, lease: \"\"", 1), `t.yaml:5:49: traffic[0].lease: a lease needs a name`},
		{"leaseGeneration without lease", strings.Replace(base, "count: 3", "count: 3, leaseGeneration: 2", 1), `t.yaml:5:59: traffic[0].leaseGeneration: leaseGeneration needs lease`},
		// docs/scenarios.md#actions: lease actions that would change nothing, as their at: order shows.
		{"acquire of a lease held", base + "actions:\n  - {at: 1s, action: lease-acquire, lease: a, model: glm/glm-5, connections: [glm/k1]}\n" +
			"  - {at: 2s, action: lease-acquire, lease: a, model: glm/glm-5, connections: [glm/k2]}\n",
			`t.yaml:8:5: actions[1].lease: lease-acquire at 2s: lease "a" is already held then (until 30m1s); release it first`},
		{"acquire of a connection held", base + "actions:\n  - {at: 3s, action: lease-acquire, connection: glm/k1}\n  - {at: 1s, action: lease-acquire, connections: [glm/k2, glm/k1], ttl: 5s}\n",
			`t.yaml:7:5: actions[0].connection: lease-acquire at 3s: the lease of glm/k1 is already held then (until 6s)`},
		{"release before acquire", base + "actions:\n  - {at: 2s, action: lease-acquire, lease: a, model: glm/glm-5, connections: [glm/k1]}\n  - {at: 1s, action: lease-release, lease: a}\n",
			`t.yaml:8:5: actions[1].lease: lease-release at 1s: lease "a" is not held then (never acquired, already released, or past its ttl)`},
		{"double release", base + "actions:\n  - {at: 1s, action: lease-acquire, connection: glm/k1}\n  - {at: 2s, action: lease-release, connection: glm/k1}\n  - {at: 3s, action: lease-release, connection: glm/k1}\n",
			`t.yaml:9:5: actions[2].connection: lease-release at 3s: the lease of glm/k1 is not held then`},
		{"release past the ttl", base + "actions:\n  - {at: 1s, action: lease-acquire, lease: a, model: glm/glm-5, connections: [glm/k1], ttl: 2s}\n  - {at: 3s, action: lease-release, lease: a}\n",
			`actions[1].lease: lease-release at 3s: lease "a" is not held then`},
		{"renew of a lease never acquired", base + "actions:\n  - {at: 1s, action: lease-renew, lease: a}\n", `lease-renew of lease "a": no earlier lease-acquire names it`},
		{"bad lease generation", strings.Replace(base, "count: 3", "count: 3, leaseGeneration: 0", 1), `traffic[0].leaseGeneration: a lease generation is a positive integer`},
		{"topology duplicate connection", strings.Replace(base, "{id: k2}", "{id: k1}", 1), `providers[0].connections[1].id: duplicate connection id "k1"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load("t.yaml", []byte(c.src), Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v\nwant it to contain %q", err, c.want)
			}
		})
	}
}

func TestLoadSetAndSeed(t *testing.T) {
	seed := uint64(42)
	sc, err := Load("t.yaml", []byte(base+"settings:\n  providerBreaker: {apikey: {failureThreshold: 5}}\n"), Options{
		Seed: &seed, Sets: []string{"providerBreaker.apikey.failureThreshold=9", "upstreamTimeouts.streamIdleMs=30s"}})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Seed != 42 || sc.Settings.ProviderBreaker.APIKey.FailureThreshold != 9 || sc.Settings.UpstreamTimeouts.StreamIdleMs != 30000 {
		t.Errorf("seed %d, threshold %d, idle %d", sc.Seed, sc.Settings.ProviderBreaker.APIKey.FailureThreshold, sc.Settings.UpstreamTimeouts.StreamIdleMs)
	}
	_, err = Load("t.yaml", []byte(base), Options{Sets: []string{"providerBreaker.apikey.failureTreshold=9"}})
	if err == nil || !strings.Contains(err.Error(), "-set providerBreaker.apikey.failureTreshold=9") || !strings.Contains(err.Error(), "failureThreshold") {
		t.Errorf("bad -set: %v", err)
	}
	_, err = Load("t.yaml", []byte(base), Options{Sets: []string{"novalue"}})
	if err == nil || !strings.Contains(err.Error(), "want -set path=value") {
		t.Errorf("bad -set form: %v", err)
	}
}

func TestLoadBuildsTopologyAndEverySection(t *testing.T) {
	src := `name: everything the format has, loaded
seed: 9
start: 2026-03-01T12:00:00Z
providers:
  - id: a
    type: gemini
    profile: oauth
    models: [m1, m2]
    strategy: round-robin
    perModelQuota: true
    dailyResetUtc: "07:00"
    quotaFamilies: {fam: [m1, m2]}
    connections: [{id: k1, priority: 2, weight: 3, disableCooling: true}, {id: k2}]
combos:
  - {id: c, strategy: weighted, targets: [a/m1, {target: a/m2, weight: 2, connection: k2}]}
aliases: {fast: a/m1}
upstream:
  - {match: {provider: a, model: m1}, from: 1s, until: 2s, probability: 0.5, flap: {down: 1s, up: 1s}, sequence: [{use: reset}, {status: 200, latency: 5ms, jitter: 2ms, stream: {chunks: 3, interval: 1ms}}]}
traffic:
  - {at: 0s, model: fast, count: 10, every: 100ms, poisson: true, stream: true, timeout: 30s}
actions:
  - {at: 1s, action: set, set: {requestBudget.maxAttempts: "3"}}
  - {at: 2s, action: clear-lockout, connection: a/k1, model: m1}
  - {at: 3s, action: clear-cooldowns, connections: [a/k1]}
expect:
  - {request: 1, result: served, retryAfter: 0, code: "", attempts: 1}
  - {at: 1s, connections: {a/k1: {status: active, cooldown: 0s, uses: 0}}, lockouts: [{connection: a/k1, model: m1, remaining: 1s}], noLockouts: false}
  - {requests: {from: 0s}, count: 10, results: {served: 1}, servedBy: {a/k1: 1}}
liveness: false
`
	sc, err := Load("all.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := sc.Topology.Providers[0]
	if p.Type != "gemini" || p.Profile != model.ProfileOAuth || p.Strategy != model.RoundRobin || !*p.PerModelQuota ||
		p.DailyResetUTC != "07:00" || len(p.QuotaFamilies["fam"]) != 2 || p.Connections[0].Weight != 3 || !p.Connections[0].DisableCooling {
		t.Errorf("provider %+v", p)
	}
	c := sc.Topology.Combos[0]
	if c.Strategy != model.Weighted || c.Targets[1].Weight != 2 || c.Targets[1].Connection != "k2" {
		t.Errorf("combo %+v", c)
	}
	if sc.Seed != 9 || sc.Start.Hour() != 12 || !sc.NoLiveness || len(sc.Rules) != 1 || len(sc.Rules[0].Sequence) != 2 ||
		len(sc.Actions) != 3 || len(sc.Expects) != 3 || !sc.Traffic[0].Poisson || sc.Topology.Aliases["fast"] != "a/m1" {
		t.Errorf("scenario %+v", sc)
	}
}

// FuzzLoad: the loader never panics, and whatever it accepts the simulator
// can run without panicking.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("library/*.yaml")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(base))
	f.Add([]byte("name: x\nproviders: [{id: a, connections: [{id: b}]}]\ntraffic: [{model: a/m, count: 2}]\n"))
	f.Add([]byte("- - -\n"))
	f.Add([]byte("name: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		sc, err := Load("fuzz.yaml", src, Options{})
		if err != nil {
			return
		}
		// Keep runs short (minimisation replays an input thousands of
		// times): the fuzzer is after panics, not long scenarios.
		n := 0
		for i := range sc.Traffic {
			sc.Traffic[i].Count = min(sc.Traffic[i].Count, 5)
			n += sc.Traffic[i].Count
		}
		if n > 50 {
			return
		}
		runScenarioForFuzz(t, sc)
	})
}

// TestLoadReportsEachProblemOnce pins "errors name file, line and field"
// (docs/scenarios.md) without noise: a wrong type is one error, not also the range
// check of the zero it decoded to, and an expect whose only key is misspelt
// gets the "did you mean", not also "checks nothing".
func TestLoadReportsEachProblemOnce(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"wrong type", strings.Replace(base, "count: 3", "count: three", 1), `t.yaml:5:39: traffic[0].count: want an integer, got "three"`},
		{"wrong status type", base + "expect:\n  - {request: 1, status: ok}\n", `t.yaml:7:26: expect[0].status: want an integer, got "ok"`},
		{"misspelt check", base + "expect:\n  - request: 1\n    stauts: 200\n", `t.yaml:8:5: expect[0].stauts: unknown key "stauts" (did you mean "status"?)`},
		{"wrong count type, then an expect", strings.Replace(base, "count: 3", "count: 3.5", 1) + "expect:\n  - {request: 2, status: 200}\n", `t.yaml:5:39: traffic[0].count: want an integer, got "3.5"`},
		{"misspelt state check", base + "expect:\n  - {at: 1s, breakr: {glm: OPEN}}\n", `t.yaml:7:14: expect[0].breakr: unknown key "breakr" (did you mean "breaker"?)`},
	} {
		_, err := Load("t.yaml", []byte(c.src), Options{})
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: got\n%v\nwant exactly\n%s", c.name, err, c.want)
		}
	}
}
