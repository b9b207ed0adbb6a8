package replay

import (
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
)

// leftBehind fails k1 once at 1 s (k2 serves): a run leaves k1's lastError
// behind on the gateway, and the read at 500 ms, before this run's error,
// sees whatever the previous run left. The read of the error is at the
// failure's own instant, which a -target read waits for the requests of
// (docs/replay.md): a read at a later instant would rest on a -target
// gateway, which runs on the wall clock, having taken in the request by
// then.
const leftBehind = `
name: "a connection's lastError left behind by an earlier run"
settings:
  waitForCooldown: {enabled: false}
providers:
  - {id: p, profile: apikey, models: [m], connections: [{id: k1}, {id: k2}]}
upstream:
  - match: {provider: p, connection: k1}
    sequence:
      - {use: server-error-500}
      - {status: 200}
traffic:
  - {at: 1s, model: p/m}
expect:
  - at: 500ms
    connections: {p/k1: {status: active}}
  - request: 1
    servedBy: p/k2
  - at: 1s
    connections: {p/k1: {status: cooldown}}
`

// TestReplayTargetCleanClearsLastError pins the -target rule of
// docs/replay.md "A connection's last error, unlike its use counter, is
// reset by -clean": clearing cooldowns keeps lastError / lastErrorType and
// health shows no time for them, so -clean resets every connection of the
// scenario (POST /api/resilience/connections/{p}/{c}/reset). A second replay on
// the same gateway then compares (and checks expects) against this run's
// errors only: no difference from an error an earlier run left, and the
// error this run produces itself — the same text as the earlier run's — is
// still compared, so a simulator that did not produce it is a difference.
func TestReplayTargetCleanClearsLastError(t *testing.T) {
	if testing.Short() {
		t.Skip("wall-clock replay")
	}
	sc, err := scenarios.Load("lasterror-left-behind.yaml", []byte(leftBehind), scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ob Observed
	sres, err := sim.Run(sc, sim.Options{Observe: ob.Observe()})
	if err != nil {
		t.Fatal(err)
	}
	if !sres.Passed || len(ob.States) != 2 {
		t.Fatalf("the simulator: passed %v, %d state reads: %v", sres.Passed, len(ob.States), sres.Failures)
	}
	lastErr := func(st sim.StateObservation, ref string) string {
		for _, c := range st.Connections {
			if c.Provider+"/"+c.Connection == ref {
				return c.LastErrorType.String()
			}
		}
		t.Fatalf("no connection %s in the state read", ref)
		return ""
	}
	produced := lastErr(ob.States[1], "p/k1")
	if lastErr(ob.States[0], "p/k1") != "" || produced == "" {
		t.Fatalf("the simulator's p/k1 lastError: %q before the failure, %q after", lastErr(ob.States[0], "p/k1"), produced)
	}
	ctx, op := operatorGateway(t, sc)
	for run := 1; run <= 2; run++ {
		res, err := Run(ctx, sc, Options{Target: op.base, ManagementKey: op.mgmtKey, Upstream: op.upstream,
			Clean: true, ApplySettings: true, Speed: 4})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Passed {
			t.Errorf("run %d: %v", run, res.Failures)
		}
		for _, d := range Compare(&ob, res) {
			t.Errorf("run %d differs: %s", run, d)
		}
		if len(res.States) != 2 {
			t.Fatalf("run %d: %d state reads", run, len(res.States))
		}
		if got := lastErr(res.States[1], "p/k1"); got != produced {
			t.Errorf("run %d: p/k1 lastError after its failure %q, want %q", run, got, produced)
		}
		if run == 2 {
			// The error this run produced equals the one the first run
			// left: had the simulator not produced it, that is still a
			// difference (nothing is excused for matching old state).
			quiet := Observed{Requests: ob.Requests, States: []sim.StateObservation{ob.States[0], ob.States[0]}}
			quiet.States[1].Line, quiet.States[1].At = ob.States[1].Line, ob.States[1].At
			if !hasDiff(Compare(&quiet, res), "connection p/k1") {
				t.Errorf("an error this run produced, the same as the earlier run's, was not reported when the simulator has none")
			}
		}
	}
}

func hasDiff(ds []Diff, what string) bool {
	for _, d := range ds {
		if strings.Contains(d.What, what) {
			return true
		}
	}
	return false
}
