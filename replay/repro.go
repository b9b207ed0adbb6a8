package replay

import (
	"fmt"
	"strings"

	"github.com/breakwater-gw/breakwater/sim"
)

// reproWarnings lists what the replay cannot carry from a scenario into
// the gateway, the fault upstream or the traffic, at any speed (Scale
// reports what scaling changes). sc is the loaded file, scaled its scaled
// copy; target says the gateway is an operator's (its config is its own).
func reproWarnings(sc, scaled *sim.Scenario, target bool) (warns, skipped []string) {
	for _, w := range sc.Warnings {
		// The loader accepts these keys but keeps no value the replay could
		// pass on.
		switch {
		case strings.Contains(w, "executionMaxWaitMs"):
			warns = append(warns, w+" — replay: the loader drops the value, so the gateway runs with its default execution bound")
		case strings.Contains(w, "orgId"):
			warns = append(warns, w+" — replay: the in-process gateway uses a generated organisation id the replay's reset endpoint accepts")
		}
	}
	leases, resets := false, false
	for _, a := range scaled.Actions {
		if a.Kind == sim.ActLeaseAcquire || a.Kind == sim.ActLeaseRelease || a.Kind == sim.ActLeaseRenew {
			leases = true
		}
	}
	seen := map[string]string{}
	for _, p := range sc.Topology.Providers {
		for _, c := range p.Connections {
			if !c.SpendWall.LimitReset {
				continue
			}
			resets = true
			if q, dup := seen[c.ID]; dup {
				warns = append(warns, fmt.Sprintf("connections %s/%s and %s/%s ask for limit resets under one id: the replay's reset endpoint tells connections apart by id and answers both as %s/%s",
					q, c.ID, p.ID, c.ID, q, c.ID))
			}
			seen[c.ID] = p.ID
		}
	}
	if target {
		if leases {
			skipped = append(skipped, "lease-acquire / lease-release: a -target gateway's managed client keys are its own; these actions fail")
		}
		if resets {
			skipped = append(skipped, "spendWall.resetAnswer: the usage / reset endpoints of a -target gateway are wherever its config points")
		}
		skipped = append(skipped, "topology keys (maxConcurrent, rateLimitOverrides, rateLimitProtection, egressIp, spendWall, combo mode): a -target gateway runs its own config")
	}
	return warns, skipped
}
