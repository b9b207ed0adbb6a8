package store

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Rule: appendCopyTime writes exactly what time.Time.AppendFormat writes for
// the COPY layout, for any instant and zone (fractions trimmed of trailing
// zeros, none for a whole second, years outside 1..9999 included).
func TestAppendCopyTimeMatchesAppendFormat(t *testing.T) {
	const layout = "2006-01-02 15:04:05.999999999Z07:00"
	zones := []*time.Location{time.UTC, time.FixedZone("x", -5*3600-30*60), time.FixedZone("y", 14*3600)}
	check := func(tm time.Time) {
		t.Helper()
		if got, want := string(appendCopyTime(nil, tm)), tm.UTC().Format(layout); got != want {
			t.Fatalf("appendCopyTime(%v) = %q, want %q", tm, got, want)
		}
	}
	check(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	check(time.Date(2026, 1, 1, 0, 0, 0, 123456000, time.UTC))
	check(time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC))
	check(time.Date(2026, 6, 1, 0, 0, 0, 1, time.UTC))
	check(time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC))
	check(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC))
	check(time.Date(1, 1, 1, 0, 0, 0, 0, zones[2]))
	check(time.Date(9999, 12, 31, 23, 59, 59, 0, zones[1]))
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		ns := int64(r.Uint64()) // 1677..2262
		frac := []int64{0, 1000, 1000000, r.Int64N(int64(time.Second))}[i%4]
		check(time.Unix(0, ns).Truncate(time.Second).Add(time.Duration(frac)).In(zones[i%3]))
	}
}
