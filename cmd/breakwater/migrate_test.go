package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// runStderr runs a command's entry point and returns its exit code and
// what it wrote to stderr.
func runStderr(run func([]string) int, args ...string) (int, string) {
	r, w, _ := os.Pipe()
	old := os.Stderr
	os.Stderr = w
	code := run(args)
	w.Close()
	os.Stderr = old
	out, _ := io.ReadAll(r)
	return code, string(out)
}

func runMigrateStderr(args ...string) (int, string) { return runStderr(runMigrate, args...) }

func TestMigrateRefusesBadURLAndArguments(t *testing.T) {
	// docs/cli.md `breakwater migrate`: a -database that is not a
	// postgres:// URL is a usage error (exit 2) that says so, before any
	// connection, and never echoes the URL; so is an extra argument.
	for _, u := range []string{"mysql://root:hunter2@db/x", "not a url"} {
		code, out := runMigrateStderr("up", "-database", u)
		if code != 2 || !strings.Contains(out, "must be a postgres://") || strings.Contains(out, "hunter2") {
			t.Fatalf("%q: exit %d, stderr %q", u, code, out)
		}
	}
	for _, args := range [][]string{{"up", "extra"}, {"version", "1"}, {"down", "1", "2"}} {
		code, out := runMigrateStderr(append(args, "-database", "postgres://u@127.0.0.1:1/x?sslmode=disable")...)
		if code != 2 || !strings.Contains(out, "unexpected argument") {
			t.Fatalf("%v: exit %d, stderr %q", args, code, out)
		}
	}
}
