package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// sysmonEnv turns off the sysmon backoff below when set to "off".
const sysmonEnv = "BREAKWATER_SYSMON_BACKOFF"

// sysmonSetting keeps the Go runtime's sysmon thread out of its deep sleep.
//
// Why: when every P of the process is idle (between requests, at low and
// medium load), sysmon parks until the next timer; the next syscall of the
// gateway (the read of the next request) wakes it, and it restarts polling
// every 20 µs until everything is idle again. At 2 000 requests/s that is
// about five extra thread wake-ups per request, each costly on a VM. A
// schedtrace period is the runtime's only switch that skips the deep sleep:
// sysmon then stays on its own backoff (20 µs doubling to 10 ms while it has
// nothing to retake), exactly as in a busy process. Measured on the 2-vCPU
// bench machine (docs/gateway.md "Measuring"): gateway CPU per request at c1
// 400 → 305 µs, added latency at c1 −30 to −50 µs; no change at saturation.
//
// The period is the largest the runtime accepts (2^31-1 ms, 24.8 days), so
// the trace line itself ("SCHED ...", stderr) is printed at most once per
// 24.8 days of host uptime. A fatal runtime error also prints the scheduler
// state, which only helps there.
const sysmonSetting = "schedtrace=2147483647"

// withSysmonBackoff re-executes the binary with sysmonSetting added to
// GODEBUG (the runtime reads it only at start). It returns, leaving things
// as they are, when the operator turned it off, already set a schedtrace of
// their own, or the re-exec failed. The process keeps its PID, arguments and
// open files.
func withSysmonBackoff() {
	on, err := sysmonWanted(os.Getenv(sysmonEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater serve: %v\n", err)
		os.Exit(2)
	}
	if !on {
		return
	}
	env, ok := sysmonEnviron(os.Environ())
	if !ok {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	err = syscall.Exec(exe, os.Args, env)
	fmt.Fprintf(os.Stderr, "breakwater: starting without the sysmon backoff (%s): %v\n", sysmonEnv, err)
}

// sysmonEnviron returns environ with sysmonSetting added to GODEBUG, or false
// when GODEBUG already names a schedtrace (the operator's, or ours after the
// re-exec).
func sysmonEnviron(environ []string) ([]string, bool) {
	out := make([]string, 0, len(environ)+1)
	godebug, seen := "", false
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			if !seen { // the first one counts, as for the runtime
				godebug, seen = v, true
			}
			continue
		}
		out = append(out, kv)
	}
	for _, s := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(s), "schedtrace=") {
			return environ, false
		}
	}
	if godebug != "" {
		godebug += ","
	}
	return append(out, "GODEBUG="+godebug+sysmonSetting), true
}

// sysmonWanted reads BREAKWATER_SYSMON_BACKOFF like the other boolean
// variables: unset, on/true/1 keep the backoff, off/false/0 turn it off,
// anything else is an error naming the variable.
func sysmonWanted(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%s: want on or off (true/1, false/0), got %q", sysmonEnv, v)
}
