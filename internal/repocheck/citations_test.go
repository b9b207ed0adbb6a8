package repocheck

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// outsideCitation matches a citation of a file that is not in the
// repository: the requirement, contract, design and reference notes the
// rules were first written in. The words are split so that this file does
// not match itself.
var outsideCitation = regexp.MustCompile(strings.Join([]string{
	`SPEC` + `\s*§`,
	`CONTRACTS` + `\s*§`,
	`\bREFE` + `RENCE\b`,
	`SPEC` + `\.md`,
	`CONTRACTS` + `\.md`,
	`DESIGN` + `\.md`,
	`"does ` + `better"`,
	`func (Test|Benchmark|Fuzz)\w*` + `Spec[0-9]`, // a section number in a test's name
}, "|"))

// docsCitation matches a cited docs page with an optional anchor, as code
// comments (docs/breaker.md#half-open) and docs links (breaker.md#half-open
// inside docs/) write it.
var docsCitation = regexp.MustCompile(`docs/([a-z0-9_-]+\.md)(#[a-z0-9_-]+)?`)

// repoRoot is the directory holding go.mod above the test's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// checkedFile reports whether a file is source, docs or config text.
func checkedFile(name string) bool {
	switch filepath.Ext(name) {
	case ".go", ".md", ".yaml", ".yml", ".sql":
		return true
	}
	return name == "Makefile"
}

// walkChecked calls f for every line of every checked file outside the
// exceptions (repository-relative path, 1-based line number).
func walkChecked(t *testing.T, root string, f func(rel string, n int, line string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !checkedFile(d.Name()) {
			return nil
		}
		file, err := os.Open(path)
		if err != nil {
			return err
		}
		defer file.Close()
		sc := bufio.NewScanner(file)
		sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
		for n := 1; sc.Scan(); n++ {
			f(rel, n, sc.Text())
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoCitationsOutsideTheRepository pins docs/testing.md#kinds-of-tests
// (no external citations): rules are cited by their docs page and anchor.
func TestNoCitationsOutsideTheRepository(t *testing.T) {
	root := repoRoot(t)
	walkChecked(t, root, func(rel string, n int, line string) {
		if m := outsideCitation.FindString(line); m != "" {
			t.Errorf("%s:%d cites %q, a file outside the repository: cite the docs page that holds the rule (docs/README.md)", rel, n, m)
		}
	})
}

// anchorSlug turns a Markdown heading into its anchor the way GitHub does:
// lower case; letters, digits, spaces, '-' and '_' kept; spaces become '-'.
func anchorSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// docsAnchors reads every docs page's heading anchors.
func docsAnchors(t *testing.T, root string) map[string]map[string]bool {
	t.Helper()
	pages := map[string]map[string]bool{}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		anchors := map[string]bool{}
		fence := false
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fence = !fence
			}
			if fence || !strings.HasPrefix(line, "#") {
				continue
			}
			anchors[anchorSlug(strings.TrimSpace(strings.TrimLeft(line, "#")))] = true
		}
		pages[filepath.Base(f)] = anchors
	}
	return pages
}

// TestDocsCitationsResolve pins that every cited docs page and anchor
// exists, so a renamed heading cannot leave citations pointing nowhere.
// Inside docs/ a page links its siblings without the docs/ prefix; those
// links are checked too.
func TestDocsCitationsResolve(t *testing.T) {
	root := repoRoot(t)
	pages := docsAnchors(t, root)
	if len(pages) == 0 {
		t.Fatal("no docs pages found")
	}
	sibling := regexp.MustCompile(`\]\(([a-z0-9_-]+\.md)(#[a-z0-9_-]+)?\)`)
	check := func(rel string, n int, page, anchor string) {
		anchors, ok := pages[page]
		if !ok {
			t.Errorf("%s:%d cites docs/%s, which does not exist", rel, n, page)
			return
		}
		if anchor != "" && !anchors[strings.TrimPrefix(anchor, "#")] {
			t.Errorf("%s:%d cites docs/%s%s, a heading that page does not have", rel, n, page, anchor)
		}
	}
	walkChecked(t, root, func(rel string, n int, line string) {
		for _, m := range docsCitation.FindAllStringSubmatch(line, -1) {
			check(rel, n, m[1], m[2])
		}
		if strings.HasPrefix(rel, "docs/") {
			for _, m := range sibling.FindAllStringSubmatch(line, -1) {
				check(rel, n, m[1], m[2])
			}
		}
	})
}
