package settings

import (
	"encoding/json"
	"github.com/breakwater-gw/breakwater/model"
	"sort"
)

// ClampedValue is a number a settings layer asked for that model.Normalize moved
// into its range: the API answers with the value it applied, and says so.
type ClampedValue struct {
	Field     string      `json:"field"`
	Requested json.Number `json:"requested"`
	Applied   any         `json:"applied"`
}

// Clamped lists the numeric leaves of l whose resolved value in s differs
// from the number l asked for (sorted by field). Leaves that are not numbers
// (durations written "30s", lists, strings) are not compared.
func Clamped(l Layer, s model.Settings) []ClampedValue {
	out := []ClampedValue{}
	full := map[string]any(Full(s))
	var walk func(m map[string]any, applied map[string]any, path string)
	walk = func(m map[string]any, applied map[string]any, path string) {
		for k, v := range m {
			p := joinSettingsPath(path, k)
			got, ok := applied[k]
			if !ok {
				continue
			}
			switch x := v.(type) {
			case map[string]any:
				if sub, ok := got.(map[string]any); ok {
					walk(x, sub, p)
				}
			case json.Number:
				want, err1 := x.Float64()
				n, isNum := got.(json.Number)
				if !isNum || err1 != nil {
					continue
				}
				if have, err := n.Float64(); err == nil && have != want {
					out = append(out, ClampedValue{Field: p, Requested: x, Applied: n})
				}
			}
		}
	}
	walk(map[string]any(l), full, "")
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

// Override is a leaf the saved layer sets over a value from the config file
// or the environment: after a restart the saved value still wins, which an
// operator editing the file needs to be told.
type Override struct {
	Field string `json:"field"`
	// Layer is the lower layer the saved value beats ("file" or "env").
	Layer string `json:"layer"`
	Lower any    `json:"lowerValue"`
	Saved any    `json:"savedValue"`
}

// Overrides compares the resolution of lower alone with that of lower plus
// saved: every leaf the saved layer supplies that a lower (non-default)
// layer also sets is listed, sorted by field. Invalid layers give none
// (resolving them is the caller's error to report).
func Overrides(lower []NamedLayer, saved Layer) []Override {
	if len(saved) == 0 {
		return nil
	}
	ls, lsrc, err := Resolve(lower...)
	if err != nil {
		return nil
	}
	s, src, err := Resolve(append(append([]NamedLayer(nil), lower...), NamedLayer{Name: "saved", Tree: saved})...)
	if err != nil {
		return nil
	}
	out := []Override{}
	for p, name := range src {
		below := lsrc[p]
		if name != "saved" || below == "" || below == SourceDefault {
			continue
		}
		lv, _ := Get(ls, p)
		sv, _ := Get(s, p)
		out = append(out, Override{Field: p, Layer: below, Lower: lv, Saved: sv})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}
