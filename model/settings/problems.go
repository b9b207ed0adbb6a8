package settings

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/breakwater-gw/breakwater/internal/lenient"
	"github.com/breakwater-gw/breakwater/model"
)

// settingProblems collects SettingsErrors and reports them sorted by field,
// in the order model.Normalize reports its own.
type settingProblems []*model.SettingsError

func (p *settingProblems) add(field, format string, args ...any) {
	*p = append(*p, &model.SettingsError{Field: field, Problem: fmt.Sprintf(format, args...)})
}

func (p settingProblems) err() error {
	if len(p) == 0 {
		return nil
	}
	sorted := slices.Clone(p)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Field < sorted[j].Field })
	errs := make([]error, len(sorted))
	for i, e := range sorted {
		errs[i] = e
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// describeSettingValue names a value in an error message; a Layer is an
// object like any other.
func describeSettingValue(v any) string {
	if l, ok := v.(Layer); ok {
		v = map[string]any(l)
	}
	return lenient.Describe(v)
}

func parseSettingMillis(v any) (model.Millis, error) {
	ms, err := lenient.Millis(v)
	return model.Millis(ms), err
}

func sortedSettingKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
