package store

import (
	"github.com/breakwater-gw/breakwater/model/settings"
	"reflect"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/model"
)

func TestMergeConnectionRules(t *testing.T) {
	// docs/store.md "Conflicts": concurrent connection values — terminal
	// wins over transient; cooldowns, backoff and streaks only extend; the
	// last error comes from the later one. merge is commutative.
	cool := func(until model.Time, level int, errAt model.Time) model.Conn {
		return model.Conn{RateLimitedUntil: until, CooldownSetAt: errAt, BackoffLevel: level, LastErrorAt: errAt,
			LastError: "e", ErrorCode: 429, LastFailureAt: errAt, HasFailure: true}
	}
	banned := model.Conn{Status: model.StatusBanned, LastErrorAt: t0, ErrorCode: 403}
	cases := []struct {
		name string
		a, b model.Conn
		want func(model.Conn) bool
	}{
		{"terminal wins", banned, cool(t0.Add(90_000), 3, t0.Add(5)), func(c model.Conn) bool { return c.Status == model.StatusBanned && c.RateLimitedUntil == 0 }},
		{"cooldown only extends", cool(t0.Add(30_000), 1, t0.Add(1)), cool(t0.Add(90_000), 0, t0), func(c model.Conn) bool {
			return c.RateLimitedUntil == t0.Add(90_000) && c.BackoffLevel == 1 && c.CooldownSetAt == t0.Add(1)
		}},
		{"streak takes the longer", model.Conn{Rejected: model.Streak{Count: 2, LastAt: t0, CooldownUntil: t0.Add(5)}},
			model.Conn{Rejected: model.Streak{Count: 1, LastAt: t0.Add(9), CooldownUntil: t0.Add(10)}},
			func(c model.Conn) bool {
				return c.Rejected == model.Streak{Count: 2, LastAt: t0, CooldownUntil: t0.Add(10)}
			}},
	}
	for _, tc := range cases {
		ab := merge(kindConn, value{present: true, conn: tc.a}, value{present: true, conn: tc.b}).conn
		ba := merge(kindConn, value{present: true, conn: tc.b}, value{present: true, conn: tc.a}).conn
		if !tc.want(ab) {
			t.Errorf("%s: got %+v", tc.name, ab)
		}
		if !reflect.DeepEqual(ab, ba) {
			t.Errorf("%s: not commutative:\n%+v\n%+v", tc.name, ab, ba)
		}
	}
}

func TestMergeLockoutAndBreakerRules(t *testing.T) {
	l1 := model.Lockout{Key: model.LockKey{Name: "m"}, Until: t0.Add(100), LockedAt: t0, FailureCount: 3, LastFailureAt: t0}
	l2 := model.Lockout{Key: model.LockKey{Name: "m"}, Until: t0.Add(500), LockedAt: t0.Add(1), FailureCount: 1, LastFailureAt: t0.Add(1)}
	got := merge(kindLockout, value{present: true, lock: l1}, value{present: true, lock: l2}).lock
	if got.Until != t0.Add(500) || got.FailureCount != 3 || got.LastFailureAt != t0.Add(1) {
		t.Errorf("lockout until only extends, counts take the greater: %+v", got)
	}
	if v := merge(kindLockout, value{present: false}, value{present: true, lock: l1}); !v.present {
		t.Error("a concurrent removal must not drop a lockout")
	}
	open := model.Breaker{State: model.Open, Generation: 4, FailureCount: 8}
	closed := model.Breaker{State: model.Closed, Generation: 3, FailureCount: 2}
	if b := merge(kindBreaker, value{present: true, breaker: closed}, value{present: true, breaker: open}).breaker; b.State != model.Open {
		t.Errorf("higher generation wins: %+v", b)
	}
	deg := model.Breaker{State: model.Degraded, Generation: 3, FailureCount: 5, LastFailureAt: t0}
	if b := merge(kindBreaker, value{present: true, breaker: closed}, value{present: true, breaker: deg}).breaker; b.State != model.Degraded {
		t.Errorf("same generation: more failures wins: %+v", b)
	}
	ho1 := model.Breaker{State: model.HalfOpen, Generation: 5, ProbesLeft: 0, Probes: []model.Probe{{ID: 1, Deadline: t0}}}
	ho2 := model.Breaker{State: model.HalfOpen, Generation: 5, ProbesLeft: 0, Probes: []model.Probe{{ID: 2, Deadline: t0}}, NextProbe: 2}
	if b := merge(kindBreaker, value{present: true, breaker: ho1}, value{present: true, breaker: ho2}).breaker; len(b.Probes) != 2 || b.ProbesLeft != 0 || b.NextProbe != 2 {
		t.Errorf("same generation half-open: probes united: %+v", b)
	}
	w := merge(kindWindow, value{present: true, window: model.Window{Failures: []model.Time{1, 3}, CoolUntil: 9}},
		value{present: true, window: model.Window{Failures: []model.Time{2, 3}}}).window
	if !reflect.DeepEqual(w, model.Window{Failures: []model.Time{1, 2, 3}, CoolUntil: 9}) {
		t.Errorf("window: %+v", w)
	}
}

func TestMemoryStoreRoundTrip(t *testing.T) {
	// The embedded default restores within one process what Apply accepted,
	// exactly as the Postgres store does.
	e := newEngine(t)
	m := NewMemory(MemoryOptions{})
	now := driveIncident(t, e, m)
	st, err := m.Load(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	r := restoredEngine(t, st)
	if got, want := durable(r, now), durable(e, now); !reflect.DeepEqual(got, want) {
		t.Fatalf("memory restore:\n got %+v\nwant %+v", got, want)
	}
	l, _ := settings.ParseLayerJSON([]byte(`{"modelLockout":{"enabled":true}}`))
	if err := m.SaveSettings(ctxT(t), l); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.LoadSettings(ctxT(t)); !reflect.DeepEqual(got, l) {
		t.Fatalf("settings: %v", got)
	}
}

func TestRedact(t *testing.T) {
	// docs/store.md#request-log: error bodies and header values are redacted of anything
	// that looks like a key.
	for _, in := range []string{
		"sk-proj-abcdefghijklmnop1234",
		`{"api_key": "abcd1234efgh"}`,
		"Authorization: Bearer abcdefghijkl.mnop",
		"key AIzaSyA-1234567890abcdefghijklmn",
		"owner vlo_" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
		"token=0123456789abcdef0123456789abcdef0123",
	} {
		out := Redact(in)
		if out == in || !strings.Contains(out, redacted) {
			t.Errorf("Redact(%q) = %q", in, out)
		}
	}
	if got := Redact("model glm-5 is overloaded, retry after 20s"); got != "model glm-5 is overloaded, retry after 20s" {
		t.Errorf("plain text changed: %q", got)
	}
}
