// Package suggest holds the helpers every input reader shares to report
// problems well: Nearest, the one "did you mean" rule (settings keys and
// variables, the config file, scenario, fault and chaos files, unknown model
// names), EditDistance under it, and ErrorsOf, which lists every typed
// problem of a joined error.
//
// It owns no rule and no input format. It must stay pure (no I/O, clock,
// goroutines or global state), because model/ calls it, and bounded: a
// hostile name can never make a suggestion expensive.
package suggest
