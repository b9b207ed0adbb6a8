package lenient

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Millis reads a canonical tree value (json.Number or string) as a number of
// milliseconds: an integer, a string holding one, or a Go duration string
// ("30s", "1m30s", "250ms") that is a whole number of milliseconds.
func Millis(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		n, err := Whole(string(x))
		if err != nil {
			return 0, fmt.Errorf("want milliseconds (an integer) or a Go duration such as \"30s\", got %s", x)
		}
		return n, nil
	case string:
		s := strings.TrimSpace(x)
		if n, err := Whole(s); err == nil && s != "" {
			return n, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("want milliseconds (an integer) or a Go duration such as \"30s\", got %q", x)
		}
		if d%time.Millisecond != 0 {
			return 0, fmt.Errorf("duration %q is not a whole number of milliseconds", x)
		}
		return int64(d / time.Millisecond), nil
	default:
		return 0, fmt.Errorf("want milliseconds (an integer) or a Go duration such as \"30s\", got %s", Describe(v))
	}
}

// Whole parses a decimal number that must be a whole number; integers
// beyond int64 saturate (normalisation clamps them anyway).
func Whole(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	} else if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
		if strings.HasPrefix(s, "-") {
			return math.MinInt64, nil
		}
		return math.MaxInt64, nil
	}
	if !looksNumeric(s) {
		return 0, errors.New("not a number")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, err
	}
	if math.IsNaN(f) || f != math.Trunc(f) {
		return 0, errors.New("not a whole number")
	}
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64, nil
	case f <= math.MinInt64:
		return math.MinInt64, nil
	}
	return int64(f), nil
}

// looksNumeric reports whether s is a JSON-style number literal (no "Inf",
// "NaN", hex or underscores, which strconv would accept).
func looksNumeric(s string) bool {
	if s == "" {
		return false
	}
	digits := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			digits = true
		case c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E':
		default:
			return false
		}
	}
	return digits
}

// Describe names a canonical tree value in an error message: the value
// itself for a scalar, its kind for an array or object.
func Describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case string:
		return strconv.Quote(x)
	case json.Number:
		return string(x)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
