package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/breakwater-gw/breakwater/proxy"
)

// version and commit are set at build time:
//
//	go build -ldflags "-X main.version=1.2.3 -X main.commit=$(git rev-parse HEAD)" ./cmd/breakwater
//
// Without them the Go build info fills in what it knows (the module version
// of a `go install`, the VCS revision of a build in a checkout).
var (
	version = ""
	commit  = ""
)

func init() {
	register("version", "print the version, commit and Go version (-json)", runVersion)
	proxy.Build = buildInfo()
}

// buildInfo combines the -ldflags values with runtime/debug's build info.
func buildInfo() proxy.BuildInfo {
	b := proxy.BuildInfo{Version: version, Commit: commit}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.GoVersion = bi.GoVersion
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && b.Commit != "" && commit == "" {
			b.Commit += "-dirty"
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

func versionLine(b proxy.BuildInfo) string {
	c := b.Commit
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("breakwater %s (commit %s, %s)", b.Version, c, b.GoVersion)
}

func runVersion(args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print as JSON")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: breakwater version [-json]\n\nPrints the version, commit and Go version of this binary.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlagsOnly(fs, args, "version takes no arguments"); !ok {
		return code
	}
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(proxy.Build)
		return 0
	}
	fmt.Println(versionLine(proxy.Build))
	return 0
}
