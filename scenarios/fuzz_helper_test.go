package scenarios

import (
	"testing"

	"github.com/breakwater-gw/breakwater/sim"
)

func runScenarioForFuzz(t *testing.T, sc *sim.Scenario) {
	res, err := sim.Run(sc, sim.Options{})
	if err != nil {
		t.Fatalf("loaded scenario failed to run: %v", err)
	}
	for _, v := range res.Violations {
		t.Errorf("invariant broken on a loaded scenario: %s", v)
	}
}
