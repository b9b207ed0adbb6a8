package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
)

// TestReplayAgainstTarget pins the -target mode (docs/scenarios.md): a gateway
// already running (configured by its operator) and a `breakwater upstream`
// given with -upstream; replay installs the file's rules there, cleans the
// gateway's state first, and checks the same expects.
func TestReplayAgainstTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("wall-clock replay")
	}
	sc := load(t, "failover-one-500.yaml")
	ctx, op := operatorGateway(t, sc)
	res, err := Run(ctx, sc, Options{Target: op.base, ManagementKey: op.mgmtKey, Upstream: op.upstream, Clean: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed {
		t.Errorf("target replay failed: %v", res.Failures)
	}
	if res.Upstream != 3 {
		t.Errorf("upstream calls from the target's upstream /_stats: %d, want 3", res.Upstream)
	}
	// A wrong management key is a typed error, not a panic or a pass.
	if _, err := Run(ctx, sc, Options{Target: op.base, ManagementKey: "wrong", Upstream: op.upstream}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong management key: %v", err)
	}
	// Without -upstream the rules cannot be installed: said, not hidden.
	res, err = Run(ctx, sc, Options{Target: op.base, ManagementKey: op.mgmtKey, Clean: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Skipped) == 0 {
		t.Error("a target run without -upstream must say what it could not check")
	}
}

// TestReplayTargetTwiceCountsThisRunsUses pins docs/scenarios.md "same
// decisions" for -target: a connection's use counter cannot be reset over the
// management API, so a second replay on the same gateway must count `uses`
// (expects and -compare) from its own start, as the first run did.
func TestReplayTargetTwiceCountsThisRunsUses(t *testing.T) {
	if testing.Short() {
		t.Skip("wall-clock replay")
	}
	sc := load(t, "failover-accounting.yaml") // reads uses at 10s and 35s (moved below)
	// The file's cooldowns end on the very instants requests arrive, which
	// a -target gateway on its own clock sees a moment early or late, so
	// which connection a request uses would rest on the wall clock. Here
	// k1 answers every attempt with a 429 (breaker-neutral) and cools
	// never, so every request uses k1, then k2: only the counting this
	// test pins can differ between the runs.
	k1 := sc.Rules[1] // k2's 429 with Retry-After
	k1.Match.Connection, k1.Until = "k1", 0
	sc.Rules = []faults.Rule{k1}
	sc.Topology.Providers[0].Connections[0].DisableCooling = true
	// The reads at 10s and 35s come 1 s (100 ms at speed 10) after the
	// last request of a burst, which a -target gateway on a loaded machine
	// may still be answering: read 10 s later, when nothing is in flight
	// (the counts read are the same).
	for i := range sc.Expects {
		if sc.Expects[i].Kind == sim.ExpectState {
			sc.Expects[i].At += 10 * time.Second
		}
	}
	ctx, op := operatorGateway(t, sc)
	uses := func() map[string]uint64 {
		res, err := Run(ctx, sc, Options{Target: op.base, ManagementKey: op.mgmtKey, Upstream: op.upstream, Clean: true, ApplySettings: true, Speed: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.States) == 0 {
			t.Fatal("no state reads")
		}
		m := map[string]uint64{}
		for i, st := range res.States {
			for _, c := range st.Connections {
				m[fmt.Sprintf("read %d %s/%s", i, c.Provider, c.Connection)] = c.Uses
			}
		}
		return m
	}
	first, second := uses(), uses()
	if first["read 0 p/k1"] == 0 || first["read 0 p/k1"] != first["read 0 p/k2"] {
		t.Fatalf("every request should use k1, then k2: %v", first)
	}
	if !maps.Equal(first, second) {
		t.Errorf("uses read by a second run on the same target differ from the first:\nfirst:  %v\nsecond: %v", first, second)
	}
}

// operatorGateway starts the "operator's" gateway and fault upstream for
// sc on the wall clock, for a -target replay to drive; both stop with the
// test. ctx bounds the test's replays (a minute).
func operatorGateway(t *testing.T, sc *sim.Scenario) (context.Context, *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	op, err := startLocal(ctx, sc, &Options{Logger: discard()}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.close)
	return ctx, op
}

// rateLimitToggle turns p/k1's rateLimitProtection on before its one
// request.
const rateLimitToggle = `
name: "an operator turns on a connection's rate-limit protection"
providers:
  - {id: p, profile: apikey, models: [m], connections: [{id: k1}]}
actions:
  - {at: 0s, action: rate-limit, connection: p/k1, enabled: true}
traffic:
  - {at: 100ms, model: p/m}
expect:
  - request: 1
    servedBy: p/k1
`

// TestReplayAppliesRateLimitAction pins docs/replay.md's rate-limit
// action: the replay turns the connection's rateLimitProtection on through
// POST /api/rate-limits, as the simulator's action does through the same
// model step, and the gateway shows it after the run.
func TestReplayAppliesRateLimitAction(t *testing.T) {
	if testing.Short() {
		t.Skip("wall-clock replay")
	}
	sc, err := scenarios.Load("rate-limit-toggle.yaml", []byte(rateLimitToggle), scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := sim.Run(sc, sim.Options{}); err != nil || !res.Passed {
		t.Fatalf("the simulator: %v %+v", err, res)
	}
	ctx, op := operatorGateway(t, sc)
	res, err := Run(ctx, sc, Options{Target: op.base, ManagementKey: op.mgmtKey, Upstream: op.upstream, Clean: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed {
		t.Errorf("replay failed: %v", res.Failures)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, op.base+"/api/rate-limits", nil)
	req.Header.Set("Authorization", "Bearer "+op.mgmtKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Connections []struct {
			ConnectionID        string `json:"connectionId"`
			RateLimitProtection bool   `json:"rateLimitProtection"`
		} `json:"connections"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if len(got.Connections) != 1 || got.Connections[0].ConnectionID != "p/k1" || !got.Connections[0].RateLimitProtection {
		t.Errorf("the gateway's rate limits after the replay: %+v, want p/k1 protected", got.Connections)
	}
}

// TestTargetReadJudgedAtItsInstant pins docs/replay.md "Time, and the
// tolerance of `at:` reads" for the wall clock (-target, -wall-clock): a
// read that ran late is judged at the instant it ran, which the replay
// measured, so how late a loaded machine made it does not fail a
// remaining time; a read on time gets no more room below than its own
// duration and the slack, and above no more than a read on the replay's
// own clock.
func TestTargetReadJudgedAtItsInstant(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	r := &runner{o: &Options{Target: "http://gw", Settle: 100 * time.Millisecond, Slack: 50 * time.Millisecond}, e: &env{}, t0: t0}
	cool := 3 * time.Second
	for _, c := range []struct {
		name  string
		late  time.Duration // read start after the instant (1 s)
		found int64         // remaining ms the gateway showed
		ok    bool
	}{
		{"late read, the time it ran", 400 * time.Millisecond, 2600, true},
		{"late read, within its duration and slack", 400 * time.Millisecond, 2541, true},
		{"late read, below even that", 400 * time.Millisecond, 2530, false},
		{"read on time, within its duration and slack", 0, 2941, true},
		{"read on time, below its duration and slack", 0, 2930, false},
		{"above: settle + duration + slack", 400 * time.Millisecond, 3159, true},
		{"above, past that", 400 * time.Millisecond, 3170, false},
	} {
		w := r.readWindow(time.Second, t0.Add(time.Second+c.late), 10*time.Millisecond)
		if got := near(c.found, cool, w); got != c.ok {
			t.Errorf("%s: %dms against %v %v: accepted %v, want %v", c.name, c.found, cool, w, got, c.ok)
		}
	}
}
