package incident

import (
	"fmt"

	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
)

// Check loads an exported scenario with the scenarios loader, exactly as
// `breakwater sim` will: the command runs it before writing anything, so an
// export that would not load is a reported bug, never a file left for the
// operator to debug.
func Check(name string, out []byte) (*sim.Scenario, error) {
	sc, err := scenarios.Load(name, out, scenarios.Options{})
	if err != nil {
		return nil, fmt.Errorf("the exported scenario does not load (a bug in incident export): %w", err)
	}
	return sc, nil
}
