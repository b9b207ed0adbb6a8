package settings

import (
	"sort"

	"github.com/breakwater-gw/breakwater/internal/lenient"
	"github.com/breakwater-gw/breakwater/model"
)

// settingProblems collects SettingsErrors and reports them sorted by field,
// in the order model.Normalize reports its own.
type settingProblems = model.SettingsProblems

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
