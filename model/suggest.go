package model

// EditDistance is the Levenshtein distance between two names, used to
// suggest the nearest known key or field in error messages (settings,
// config, scenarios). Names longer than 64 runes are only compared for
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
