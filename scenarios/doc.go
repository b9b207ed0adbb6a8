// Package scenarios owns the scenario file format of docs/scenarios.md —
// recorded incidents and what-if runs — its loader, and the library of
// scenarios that pin every resilience rule (scenarios/library/*.yaml, run
// by `go test` and so by `make test`).
//
// The loader reads YAML through the yaml.v3 node API so that every error
// names the file, the line and the field: an unknown key comes with the
// nearest known one, a bad duration with the syntax wanted, a rule naming an
// unknown provider with the providers there are, and an expect that can
// never be evaluated with why. Scenario `settings:` and `-set` flags go
// through the settings codec (model/settings: Resolve, SetPath), so one
// validation serves every source of settings.
//
// The package builds a sim.Scenario; running it is sim's job. It must never
// interpret a status or decide anything a rule decides.
package scenarios
