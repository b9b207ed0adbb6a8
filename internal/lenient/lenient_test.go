package lenient

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestWhole pins docs/settings.md#layers: a whole number in any JSON-style
// spelling is read, integers beyond int64 saturate (Normalize clamps them
// later), and what strconv would accept but JSON would not is refused.
func TestWhole(t *testing.T) {
	for in, want := range map[string]int64{
		"30000": 30000, "-5": -5, "1.5e3": 1500, "1E2": 100,
		"123456789012345678901234567890": math.MaxInt64, "-99999999999999999999": math.MinInt64,
		"1e400": math.MaxInt64,
	} {
		if got, err := Whole(in); err != nil || got != want {
			t.Errorf("Whole(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1.5", "Inf", "NaN", "0x10", "1_000", "abc", "-"} {
		if got, err := Whole(in); err == nil {
			t.Errorf("Whole(%q) = %d, want an error", in, got)
		}
	}
}

// TestMillis pins the forms a duration setting takes: integer ms, a string
// holding them, or a Go duration that is a whole number of milliseconds.
func TestMillis(t *testing.T) {
	for _, c := range []struct {
		in   any
		want int64
		err  string
	}{
		{json.Number("30000"), 30000, ""},
		{"30s", 30000, ""},
		{" 1500 ", 1500, ""},
		{"1m30s", 90000, ""},
		{"1500us", 0, "whole number of milliseconds"},
		{json.Number("1.5"), 0, "milliseconds"},
		{"soon", 0, "Go duration"},
		{true, 0, "got true"},
		{[]any{}, 0, "got an array"},
	} {
		got, err := Millis(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Millis(%#v) = %d, %v; want an error containing %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Millis(%#v) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	for want, v := range map[string]any{
		"null": nil, "true": true, `"x"`: "x", "12": json.Number("12"),
		"an array": []any{}, "an object": map[string]any{}, "int": 5,
	} {
		if got := Describe(v); got != want {
			t.Errorf("Describe(%#v) = %q, want %q", v, got, want)
		}
	}
}
