package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function may run, from its func line to
// its closing brace (docs/testing.md#function-length).
const maxFuncLines = 70

// longFuncs are the functions allowed past maxFuncLines, by package
// directory and name, each with its reason.
var longFuncs = map[string]string{
	// A goto state machine over the input's bytes: its states are labels
	// that jump to each other; split into functions, it would pay a call
	// per token on the request path and keep its variables in memory.
	"internal/jsonvalid.skipValue": "a goto state machine",
}

// TestFunctionsAreShort pins docs/testing.md#function-length: a function
// (or a function literal outside one) in non-test Go code runs at most
// maxFuncLines lines, so a long one is broken up along its ideas.
func TestFunctionsAreShort(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".go") || strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		ast.Inspect(f, func(n ast.Node) bool {
			var name string
			switch fn := n.(type) {
			case *ast.FuncDecl:
				name = pkg + "." + funcName(fn)
			case *ast.FuncLit:
				name = pkg + ".func literal"
			default:
				return true
			}
			start, end := fset.Position(n.Pos()), fset.Position(n.End())
			lines := end.Line - start.Line + 1
			if _, ok := longFuncs[name]; ok {
				seen[name] = true
				return false
			}
			if lines > maxFuncLines {
				t.Errorf("%s:%d: %s runs %d lines (at most %d): break it up along its ideas", filepath.ToSlash(mustRel(root, path)), start.Line, name, lines, maxFuncLines)
			}
			return false // a function inside a short one is short
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range longFuncs {
		if !seen[name] {
			t.Errorf("%s is listed as allowed to run long but does not exist: remove it from longFuncs", name)
		}
	}
}

// funcName is a function's name, or Type.Method for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}

func mustRel(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return rel
}
