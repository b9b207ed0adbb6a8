package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The sysmon backoff adds its schedtrace to GODEBUG, keeps the operator's
// other GODEBUG settings, and leaves an operator's own schedtrace alone
// (which also stops the re-exec from looping).
func TestSysmonEnvironAddsScheduleTraceOnce(t *testing.T) {
	cases := []struct {
		in      []string
		godebug string // the GODEBUG after; "" = unchanged (false)
	}{
		{[]string{"PATH=/bin"}, sysmonSetting},
		{[]string{"GODEBUG=http2client=0", "PATH=/bin"}, "http2client=0," + sysmonSetting},
		{[]string{"GODEBUG=madvdontneed=1", "GODEBUG=ignored=1"}, "madvdontneed=1," + sysmonSetting},
		{[]string{"GODEBUG=gctrace=1,schedtrace=1000"}, ""},
		{[]string{"GODEBUG=" + sysmonSetting}, ""},
	}
	for _, c := range cases {
		out, ok := sysmonEnviron(c.in)
		if c.godebug == "" {
			if ok || !slices.Equal(out, c.in) {
				t.Errorf("%q: changed to %q, want it left alone", c.in, out)
			}
			continue
		}
		var got []string
		for _, kv := range out {
			if v, found := strings.CutPrefix(kv, "GODEBUG="); found {
				got = append(got, v)
			}
		}
		if !ok || len(got) != 1 || got[0] != c.godebug {
			t.Errorf("%q: GODEBUG %q (ok %v), want exactly %q", c.in, got, ok, c.godebug)
		}
		for _, kv := range c.in {
			if !strings.HasPrefix(kv, "GODEBUG=") && !slices.Contains(out, kv) {
				t.Errorf("%q: lost %q", c.in, kv)
			}
		}
	}
}

// End to end through the built binary: `breakwater serve` re-executes itself
// with the schedtrace setting (visible in /proc/PID/environ under the same
// PID), and BREAKWATER_SYSMON_BACKOFF=off keeps the environment as it was.
func TestServeReexecsWithSysmonBackoff(t *testing.T) {
	bin := buildBinary(t)
	for _, off := range []bool{false, true} {
		cmd := exec.Command(bin, "serve", "-config", writeServeConfig(t))
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GODEBUG=") })
		if off {
			cmd.Env = append(cmd.Env, sysmonEnv+"=off")
		}
		godebug := startAndReadGodebug(t, cmd)
		if want := !off; strings.Contains(godebug, sysmonSetting) != want {
			t.Errorf("off=%v: GODEBUG of the running gateway is %q", off, godebug)
		}
	}
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "breakwater")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func writeServeConfig(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "serve.yaml")
	cfg := "server:\n  listen: 127.0.0.1:0\nproviders:\n  - id: up\n    baseURL: http://127.0.0.1:9/v1\n    models: [m]\n    connections:\n      - {id: k1, apiKey: x}\n"
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// startAndReadGodebug starts cmd, waits for the gateway's listening line and
// returns the GODEBUG the running process has, then stops it with SIGTERM.
func startAndReadGodebug(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	up := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "breakwater gateway listening") {
				up <- true
				io.Copy(io.Discard, stderr)
				return
			}
		}
		up <- false
	}()
	select {
	case ok := <-up:
		if !ok {
			t.Fatal("serve exited before listening")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start listening within 30 s")
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			return v
		}
	}
	return ""
}

// BREAKWATER_SYSMON_BACKOFF takes the booleans the other variables take; any
// other value is an error naming the variable (false and 0 kept the backoff
// on, "maybe" passed without a word).
func TestSysmonWanted(t *testing.T) {
	for v, want := range map[string]bool{"": true, "on": true, "TRUE": true, "1": true, "off": false, "False": false, "0": false, " off ": false} {
		if got, err := sysmonWanted(v); err != nil || got != want {
			t.Errorf("sysmonWanted(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"maybe", "no", "2"} {
		if _, err := sysmonWanted(v); err == nil || !strings.Contains(err.Error(), sysmonEnv) {
			t.Errorf("sysmonWanted(%q): %v, want an error naming %s", v, err, sysmonEnv)
		}
	}
}
