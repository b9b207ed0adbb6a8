// Package settings is the codec of breakwater's resilience settings
// (docs/settings.md): sparse layer trees (Layer) read from YAML, JSON,
// environment variables and `-set` paths; their precedence (Resolve:
// defaults < file < env < saved), PATCH (MergePatch, ApplyPatch), dotted
// paths (SetPath, Get), the BREAKWATER_* variables (EnvVars, EnvLayer),
// the full tree the API shows (Full), and the report of values that were
// clamped or that the saved layer overrides (Clamped, Overrides).
//
// It owns the shape of the settings tree (its schema) and the strict,
// lenient-scalar decoding into model.Settings; every result ends in
// model.Normalize, which owns the ranges. The rules that read the
// settings stay in model: this package must never hold a rule, and must
// stay as pure as model (no I/O, clock, goroutines or global state;
// model's TestPuritySettingsCodec pins it). Bad input is a
// *model.SettingsError naming the field, never a panic or a partly
// applied layer.
package settings
