// Package lenient reads the scalar values of settings leniently, so that
// quoting in YAML, environment variables or `sim -set` never matters:
// whole numbers (saturating beyond int64), milliseconds written as numbers
// or Go durations, and the description of a value in an error message. It
// is shared by model.Millis (JSON decoding) and the settings codec
// (model/settings), which must read the same text the same way.
//
// It owns no rule and no range (model.Normalize clamps). It must stay pure
// (no I/O, clock, goroutines or global state; model's TestPurityOfHelpers
// pins its imports) and never panic on any input.
package lenient
