package incident

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// InputError is a bad flag or a bad input file: the command reports it and
// exits 2.
type InputError struct {
	Field   string // the flag or the file:line it concerns
	Problem string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return e.Problem
	}
	return e.Field + ": " + e.Problem
}

// ErrEmptyWindow says the window holds no request log record.
var ErrEmptyWindow = errors.New("the window holds no request log record")

// ParseTime reads a window bound. It accepts an RFC 3339 instant
// (2026-01-02T15:04:05Z, any offset, fractional seconds allowed), "now", or
// a negative Go duration relative to now ("-1h", "-90m", "-1h30m"). Relative
// times are what an operator types during an incident; absolute ones are
// what goes in a ticket, so both are accepted and nothing else is guessed.
func ParseTime(flag, s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return time.Time{}, &InputError{Field: flag, Problem: "is required (RFC 3339 such as 2026-01-02T15:04:05Z, or relative such as -1h)"}
	case s == "now":
		return now.UTC(), nil
	case strings.HasPrefix(s, "-"):
		d, err := time.ParseDuration(s)
		if err != nil {
			return time.Time{}, &InputError{Field: flag, Problem: fmt.Sprintf("want a relative time such as -1h or -90m, got %q", s)}
		}
		return now.Add(d).UTC(), nil
	case strings.HasPrefix(s, "+"):
		return time.Time{}, &InputError{Field: flag, Problem: fmt.Sprintf("relative times look back from now and start with '-', got %q", s)}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, &InputError{Field: flag, Problem: fmt.Sprintf("want an RFC 3339 instant such as 2026-01-02T15:04:05Z, \"now\" or a relative time such as -1h, got %q", s)}
	}
	return t.UTC(), nil
}

// MaxWindow bounds an export: more than a week of traffic is not an
// incident, and the simulator would still have to play all of it.
const MaxWindow = 7 * 24 * time.Hour

// ParseWindow reads -from and -to (to defaults to now) and checks the
// window is non-empty and bounded.
func ParseWindow(fromS, toS string, now time.Time) (from, to time.Time, err error) {
	from, err = ParseTime("-from", fromS, now)
	if err != nil {
		return from, to, err
	}
	if strings.TrimSpace(toS) == "" {
		toS = "now"
	}
	to, err = ParseTime("-to", toS, now)
	if err != nil {
		return from, to, err
	}
	if !to.After(from) {
		return from, to, &InputError{Field: "-to", Problem: fmt.Sprintf("must be after -from (%s), got %s", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))}
	}
	if to.Sub(from) > MaxWindow {
		return from, to, &InputError{Field: "-to", Problem: fmt.Sprintf("the window %v is longer than %v; export a shorter one", to.Sub(from), MaxWindow)}
	}
	return from, to, nil
}
