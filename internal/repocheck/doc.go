// Package repocheck holds repository-wide checks that belong to no other
// package: the repository explains itself, so code, docs and config cite
// the docs pages (docs/README.md), never files outside the repository, and
// every docs page and anchor they cite exists; and functions stay short
// (docs/testing.md#function-length).
package repocheck
