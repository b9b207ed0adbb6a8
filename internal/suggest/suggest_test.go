package suggest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

type testError struct{ Field string }

func (e *testError) Error() string { return e.Field }

func TestEditDistance(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{{"failureThreshold", "failureTreshold", 1}, {"", "abc", 3}, {"same", "same", 0}, {"kitten", "sitting", 3}}
	for _, c := range cases {
		if got := EditDistance(c.a, c.b); got != c.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	long := strings.Repeat("x", 100)
	if EditDistance(long, long) != 0 || EditDistance(long, long+"y") != 101 {
		t.Error("long names compare by equality only")
	}
}

func TestErrorsOf(t *testing.T) {
	a, b := &testError{Field: "a"}, &testError{Field: "b"}
	err := fmt.Errorf("wrapped: %w", errors.Join(a, errors.New("other"), fmt.Errorf("x: %w", b)))
	got := ErrorsOf[*testError](err)
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("got %v", got)
	}
	if ErrorsOf[*testError](nil) != nil || ErrorsOf[*testError](errors.New("plain")) != nil {
		t.Fatal("no match must be nil")
	}
}

// TestNearest pins the one "did you mean" rule every input shares: a
// near miss within max(2, len/3) edits, case-insensitive, ties to the first
// name in byte order, containment as one edit only for names of three letters
// or more (a one-letter typo must not "contain" half the candidates).
func TestNearest(t *testing.T) {
	known := []string{"maxWaitMs", "maxQueueDepth", "executionMaxWaitMs", "gpt-4o", "gpt-4o-mini"}
	for in, want := range map[string]string{
		"maxWaitMS":  "maxWaitMs",     // case only
		"maxWaitM":   "maxWaitMs",     // one edit
		"QueueDepth": "maxQueueDepth", // contained
		"gpt-4":      "gpt-4o",        // tie broken by order: gpt-4o < gpt-4o-mini
		"m":          "",              // too short to be contained; too far otherwise
		"zzzzzzzz":   "",
	} {
		if got := Nearest(in, known); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}
