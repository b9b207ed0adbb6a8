package replay

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
)

func load(t *testing.T, name string) *sim.Scenario {
	t.Helper()
	sc, err := scenarios.LoadFile(filepath.Join("..", "scenarios", "library", name), scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestScaleDividesEveryDuration pins docs/scenarios.md `replay -speed N`: every
// duration of the file and of its settings is divided by N, Retry-After
// headers too, and the original scenario is not modified.
func TestScaleDividesEveryDuration(t *testing.T) {
	sc := load(t, "failover-429-retry-after.yaml")
	before := sc.Settings
	out, warns, err := Scale(sc, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Traffic[1].At; got != 19*time.Second/4 {
		t.Errorf("traffic at: %v", got)
	}
	if got := out.Rules[0].Until; got != 10*time.Second/4 {
		t.Errorf("rule until: %v", got)
	}
	if got := out.Rules[0].Respond.Headers["Retry-After"]; got != "5" {
		t.Errorf("Retry-After: %q, want 5", got)
	}
	if got, want := out.Settings.ProviderBreaker.APIKey.ResetTimeoutMs, before.ProviderBreaker.APIKey.ResetTimeoutMs/4; got != want {
		t.Errorf("resetTimeoutMs: %d, want %d", got, want)
	}
	if got, want := out.Settings.UpstreamTimeouts.AttemptMs, before.UpstreamTimeouts.AttemptMs/4; got != want {
		t.Errorf("attemptMs: %d, want %d", got, want)
	}
	if sc.Rules[0].Respond.Headers["Retry-After"] != "20" || sc.Traffic[1].At != 19*time.Second || sc.Settings.UpstreamTimeouts.AttemptMs != before.UpstreamTimeouts.AttemptMs {
		t.Error("Scale modified its input")
	}
	var cd time.Duration
	for _, e := range out.Expects {
		if c, ok := e.Connections["p/k1"]; ok && c.HasCooldown {
			cd = c.Cooldown
		}
	}
	if cd != 5*time.Second {
		t.Errorf("expected cooldown scaled to %v, want 5s", cd)
	}
	_ = warns
	if _, _, err := Scale(sc, 0); err == nil {
		t.Error("speed 0 accepted")
	}
	if same, _, _ := Scale(sc, 1); same != sc {
		t.Error("speed 1 should return the scenario itself")
	}
}

// TestScaleWarnsWhatItCannotScale: a Retry-After that speed does not
// divide is rounded up and reported; retryAfter expects are dropped and
// reported (they are whole seconds).
func TestScaleWarnsWhatItCannotScale(t *testing.T) {
	sc := load(t, "breaker-trip-lazy-half-open.yaml")
	_, warns, err := Scale(sc, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(warns, "\n"), "retryAfter") {
		t.Errorf("no retryAfter warning in %q", warns)
	}
	sc = load(t, "failover-429-retry-after.yaml")
	out, warns, _ := Scale(sc, 3)
	if out.Rules[0].Respond.Headers["Retry-After"] != "7" || !strings.Contains(strings.Join(warns, "\n"), "rounded up") {
		t.Errorf("Retry-After 20 ÷ 3: %q, warnings %q", out.Rules[0].Respond.Headers["Retry-After"], warns)
	}
}

// TestScaledScenarioSimulatesAlike checks the scaling itself: the
// simulator takes the same decisions on a file and on its scaled copy when
// the file uses no constant the scaling cannot reach (docs/settings.md#layers settings
// only).
func TestScaledScenarioSimulatesAlike(t *testing.T) {
	for _, name := range []string{"contracts-example.yaml", "failover-one-500.yaml", "failover-persistent-503.yaml"} {
		sc := load(t, name)
		var a, b Observed
		if _, err := sim.Run(sc, sim.Options{Observe: a.Observe()}); err != nil {
			t.Fatal(err)
		}
		scaled, _, err := Scale(sc, 4)
		if err != nil {
			t.Fatal(err)
		}
		res, err := sim.Run(scaled, sim.Options{Observe: b.Observe()})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Passed {
			t.Errorf("%s scaled ÷4 fails in the simulator: %v", name, res.Failures)
		}
		g := &Result{RequestLog: b.Requests, States: b.States}
		for i := range g.States {
			g.States[i].At = a.States[i].At
		}
		for _, d := range Compare(&a, g) {
			t.Errorf("%s: scaled ÷4 differs: %s", name, d)
		}
	}
}
