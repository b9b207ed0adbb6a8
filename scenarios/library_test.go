package scenarios

import (
	"bufio"
	"bytes"
	"encoding/json"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/sim"
)

func libraryFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("library/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no library scenarios: %v", err)
	}
	return files
}

func runFile(t *testing.T, file string, opts sim.Options) *sim.Result {
	t.Helper()
	sc, err := LoadFile(file, Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(sc, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestLibrary plays every library scenario: every expect must hold and no
// invariant may break. Each file is played twice — once writing the JSON
// trace, once not — and the trace hashes must agree (the determinism
// self-check, and proof that the hash does not depend on -trace).
func TestLibrary(t *testing.T) {
	for _, file := range libraryFiles(t) {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			t.Parallel()
			var trace bytes.Buffer
			res := runFile(t, file, sim.Options{Trace: &trace})
			for _, f := range res.Failures {
				t.Errorf("%s:%d at %v: %s\n  expected: %s\n  found:    %s", file, f.Line, f.At, f.What, f.Expected, f.Found)
			}
			for _, v := range res.Violations {
				t.Errorf("%s: %s", file, v)
			}
			if !res.Passed {
				t.Errorf("reproduce: %s", res.Repro)
			}
			again := runFile(t, file, sim.Options{})
			if again.TraceSHA256 != res.TraceSHA256 {
				t.Errorf("nondeterministic: trace hash %s then %s\nreproduce: %s", res.TraceSHA256, again.TraceSHA256, res.Repro)
			}
			checkTraceLines(t, trace.Bytes())
		})
	}
}

// checkTraceLines: every line is a JSON object whose keys are sorted.
func checkTraceLines(t *testing.T, b []byte) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		dec := json.NewDecoder(bytes.NewReader(line))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("trace line %d is not a JSON object: %s", n, line)
		}
		var keys []string
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				t.Fatalf("trace line %d: %v: %s", n, err, line)
			}
			keys = append(keys, k.(string))
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("trace line %d: %v: %s", n, err, line)
			}
		}
		if !slices.IsSorted(keys) {
			t.Fatalf("trace line %d has unsorted keys %v: %s", n, keys, line)
		}
	}
	if n == 0 {
		t.Fatal("empty trace")
	}
}

// TestDeterminismGOMAXPROCS: the same seed gives the same hash whatever
// the scheduler does.
func TestDeterminismGOMAXPROCS(t *testing.T) {
	files := libraryFiles(t)
	want := map[string]string{}
	for _, f := range files {
		want[f] = runFile(t, f, sim.Options{}).TraceSHA256
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	for _, f := range files {
		if got := runFile(t, f, sim.Options{}).TraceSHA256; got != want[f] {
			t.Errorf("%s: trace hash %s under GOMAXPROCS=1, %s before", f, got, want[f])
		}
	}
}

// TestLibraryNames: every scenario's name says the rule it pins.
func TestLibraryNames(t *testing.T) {
	seen := map[string]string{}
	for _, f := range libraryFiles(t) {
		sc, err := LoadFile(f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(sc.Name) < 20 {
			t.Errorf("%s: name %q is too short to say the rule it pins", f, sc.Name)
		}
		if other, ok := seen[sc.Name]; ok {
			t.Errorf("%s and %s share the name %q", f, other, sc.Name)
		}
		seen[sc.Name] = f
		if len(sc.Expects) == 0 {
			t.Errorf("%s: no expect", f)
		}
	}
}
