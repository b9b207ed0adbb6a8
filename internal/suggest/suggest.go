package suggest

import "strings"

// EditDistance is the Levenshtein distance between two names, the measure
// Nearest uses to suggest the nearest known key or field in error messages. Names longer than 64 runes are only compared for
// equality, so hostile input cannot make a suggestion expensive.
func EditDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 64 || len(rb) > 64 {
		if a == b {
			return 0
		}
		return max(len(ra), len(rb))
	}
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// ErrorsOf returns every error of type T in err, walking joined and wrapped
// errors in order; nil when there is none. Settings, config and scenario
// errors all report several problems at once through it.
func ErrorsOf[T error](err error) []T {
	var out []T
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if x, ok := err.(T); ok {
			out = append(out, x)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// Nearest returns the candidate closest to name (Levenshtein,
// case-insensitive), or "" when none is close enough to be a likely typo.
// It is the one "did you mean" rule of every input breakwater reads: settings
// keys and variables, the model names of an unknown-model 404, the config
// file, scenario, fault and chaos files. A name of three letters or more that
// one candidate contains (or is contained in) counts as one edit away; a
// shorter one would match nearly everything.
func Nearest(name string, candidates []string) string {
	best, bestD, bestEdits := "", -1, 0
	ln := strings.ToLower(name)
	for _, c := range candidates {
		lc := strings.ToLower(c)
		edits := EditDistance(ln, lc)
		d := edits
		if len(ln) >= 3 && (strings.Contains(lc, ln) || strings.Contains(ln, lc)) {
			d = min(d, 1)
		}
		// Ties go to the fewer real edits (maxWaitM is maxWaitMs before
		// executionMaxWaitMs, which merely contains it), then byte order.
		if bestD < 0 || d < bestD || (d == bestD && (edits < bestEdits || edits == bestEdits && c < best)) {
			best, bestD, bestEdits = c, d, edits
		}
	}
	if bestD < 0 || bestD > max(2, len([]rune(name))/3) {
		return ""
	}
	return best
}
