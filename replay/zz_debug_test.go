package replay

import (
	"path/filepath"
	"testing"

	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
)

func TestZZDebugScaledSim(t *testing.T) {
	sc, err := scenarios.LoadFile(filepath.Join("..", "scenarios", "library", "rate-limit-protection.yaml"), scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, w, err := Scale(sc, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(w, s.Rules[0].Respond.Headers)
	var ob Observed
	res, err := sim.Run(s, sim.Options{Observe: ob.Observe()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ob.Requests {
		t.Logf("%+v", r)
	}
	t.Log(res.Passed, res.Failures)
}
