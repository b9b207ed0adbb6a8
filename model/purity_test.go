package model

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPurity pins the rule of docs/README.md#one-model-two-shells: model/ never
// reads the wall clock, sleeps, starts goroutines, uses channels or mutexes,
// does I/O, or draws from global randomness. The proxy and the simulator must
// decide identically, which only holds if every input arrives as an argument.
func TestPurity(t *testing.T) {
	checkPure(t, ".", modelImports())
}

// modelImports are the packages model/ may import.
func modelImports() map[string]bool {
	return map[string]bool{
		"bytes": true, "cmp": true, "encoding/json": true, "errors": true, "fmt": true,
		"math": true, "math/bits": true, "math/rand/v2": true, "maps": true, "regexp": true,
		"slices": true, "sort": true, "strconv": true, "strings": true, "time": true,
		"unicode": true, "unicode/utf8": true, "unicode/utf16": true,
		// pure helpers held to the same rule by TestPurityOfHelpers
		"github.com/breakwater-gw/breakwater/internal/jsonscan":  true,
		"github.com/breakwater-gw/breakwater/internal/jsonvalid": true,
		"github.com/breakwater-gw/breakwater/internal/lenient":   true,
		"github.com/breakwater-gw/breakwater/internal/suggest":   true,
	}
}

// The settings codec (model/settings) is held to model's rule: it may
// import what model imports, and model.
func TestPuritySettingsCodec(t *testing.T) {
	allowed := modelImports()
	allowed["github.com/breakwater-gw/breakwater/model"] = true
	checkPure(t, "settings", allowed)
}

// The packages model/ calls are held to the same rule, each with the
// imports it needs.
func TestPurityOfHelpers(t *testing.T) {
	for dir, allowed := range map[string]map[string]bool{
		"../internal/jsonscan":  {"math/bits": true, "unicode/utf16": true, "unicode/utf8": true},
		"../internal/jsonvalid": {"encoding/binary": true, "math/bits": true},
		"../internal/lenient": {"encoding/json": true, "errors": true, "fmt": true, "math": true,
			"strconv": true, "strings": true, "time": true},
		"../internal/suggest": {"strings": true},
	} {
		checkPure(t, dir, allowed)
	}
}

// checkPure fails t when a non-test Go file of dir imports a package outside
// allowed, reads the wall clock, sleeps, starts goroutines, uses channels or
// draws from global randomness.
func checkPure(t *testing.T, dir string, allowedImports map[string]bool) {
	t.Helper()
	// time is allowed for its types, parsing and arithmetic only.
	forbiddenSelectors := map[string]map[string]bool{
		"time": {"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true,
			"Tick": true, "NewTimer": true, "NewTicker": true},
	}
	// math/rand/v2 is allowed only to build an injected, seeded generator.
	randAllowed := map[string]bool{"New": true, "NewPCG": true, "NewChaCha8": true, "Rand": true, "Source": true, "PCG": true, "ChaCha8": true}

	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		local := map[string]string{} // local name → import path
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowedImports[path] {
				t.Errorf("%s imports %q: it must stay pure (no I/O, clock, sync or globals)", name, path)
			}
			ln := path[strings.LastIndex(path, "/")+1:]
			if path == "math/rand/v2" {
				ln = "rand"
			}
			if imp.Name != nil {
				ln = imp.Name.Name
			}
			local[ln] = path
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: starts a goroutine", fset.Position(x.Pos()))
			case *ast.ChanType:
				t.Errorf("%s: uses a channel", fset.Position(x.Pos()))
			case *ast.SelectStmt:
				t.Errorf("%s: uses select", fset.Position(x.Pos()))
			case *ast.SendStmt:
				t.Errorf("%s: sends on a channel", fset.Position(x.Pos()))
			case *ast.SelectorExpr:
				id, ok := x.X.(*ast.Ident)
				if !ok {
					return true
				}
				path := local[id.Name]
				if forbiddenSelectors[path][x.Sel.Name] {
					t.Errorf("%s: calls %s.%s (the model takes time as an argument)", fset.Position(x.Pos()), path, x.Sel.Name)
				}
				if path == "math/rand/v2" && !randAllowed[x.Sel.Name] {
					t.Errorf("%s: uses global randomness rand.%s (inject a seeded *rand.Rand)", fset.Position(x.Pos()), x.Sel.Name)
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatalf("no source files were checked in %s", dir)
	}
}
