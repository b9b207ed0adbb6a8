// Command breakwater is the single binary: the gateway, the simulator, the
// fake upstream, chaos runs and database migrations (docs/cli.md).
package main

import (
	"fmt"
	"os"
	"sort"
)

// command is one subcommand. Each lives in its own file and registers itself
// in init, so the areas of the tree stay independent.
type command struct {
	summary string
	run     func(args []string) int // returns the process exit code
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string) int) {
	commands[name] = command{summary: summary, run: run}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: breakwater <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-11s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'breakwater <command> -h' for a command's flags.")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	if os.Args[1] == "--version" || os.Args[1] == "-version" {
		os.Args[1] = "version" // version.go
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "breakwater: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	os.Exit(c.run(os.Args[2:]))
}
