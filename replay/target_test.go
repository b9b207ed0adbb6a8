package replay

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestReplayAgainstTarget pins the -target mode (CONTRACTS §4): a gateway
// already running (configured by its operator) and a `breakwater upstream`
// given with -upstream; replay installs the file's rules there, cleans the
// gateway's state first, and checks the same expects.
func TestReplayAgainstTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("wall-clock replay")
	}
	sc := load(t, "failover-one-500.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The "operator's" gateway and upstream, on the wall clock.
	op, err := startLocal(ctx, sc, &Options{Logger: discard()}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer op.close()
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
