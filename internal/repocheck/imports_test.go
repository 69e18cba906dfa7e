package repocheck

import (
	"bufio"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestProductionDoesNotImportTestTree fails for every non-test .go file outside test/ that
// imports a package under <module>/test/. Code that both a command and the tests need, such
// as internal/devsite (`flotilla dev` and test/e2e), belongs outside test/; helpers only tests
// use belong under test/ (test/framework, test/controllertest).
func TestProductionDoesNotImportTestTree(t *testing.T) {
	root, module := moduleRoot(t)
	bad, err := testTreeImports(root, module)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Errorf("%s: production code must not import test code; move what it needs out of test/ (e.g. under internal/), or move a test-only helper under test/", b)
	}
}

// TestTestTreeImportsCatchesViolation checks the checker itself on a small module.
func TestTestTreeImportsCatchesViolation(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n",
		// A command importing test code directly.
		"cmd/app/main.go":      "package main\n\nimport (\n\t_ \"example.com/m/lib\"\n\t_ \"example.com/m/test/helper\"\n)\n",
		"cmd/app/main_test.go": "package main\n\nimport _ \"example.com/m/test/helper\"\n",
		// A library importing test code.
		"lib/lib.go": "package lib\n\nimport _ \"example.com/m/test/helper/sub\"\n",
		// A helper outside test/ used only by tests is still outside test/.
		"support/a/a.go":  "package a\n\nimport _ \"example.com/m/test\"\n",
		"other/x_test.go": "package other_test\n\nimport _ \"example.com/m/support/a\"\n",
		// Not the test tree, test code itself, another module, a directory Go ignores.
		"near/ok.go":            "package near\n\nimport _ \"example.com/m/testing2\"\n",
		"test/helper/helper.go": "package helper\n\nimport _ \"example.com/m/lib\"\n",
		"nested/go.mod":         "module example.com/nested\n",
		"nested/x.go":           "package nested\n\nimport _ \"example.com/m/test/helper\"\n",
		"lib/testdata/x.go":     "package x\n\nimport _ \"example.com/m/test/helper\"\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bad, err := testTreeImports(dir, "example.com/m")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`cmd/app/main.go imports "example.com/m/test/helper"`,
		`lib/lib.go imports "example.com/m/test/helper/sub"`,
		`support/a/a.go imports "example.com/m/test"`,
	}
	if strings.Join(bad, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}

// testTreeImports returns "file imports path" for each non-test .go file of the module at
// root, outside root/test, that imports module/test or a package under it. Directories Go
// ignores (testdata, vendor, names starting with . or _) and nested modules are skipped.
func testTreeImports(root, module string) ([]string, error) {
	testTree := module + "/test"
	inTestTree := func(p string) bool { return p == testTree || strings.HasPrefix(p, testTree+"/") }
	fset := token.NewFileSet()
	var bad []string
	err := filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, file)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			name := d.Name()
			if rel == "test" || name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(file, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", rel, imp.Path.Value, err)
			}
			if inTestTree(p) {
				bad = append(bad, fmt.Sprintf("%s imports %q", rel, p))
			}
		}
		return nil
	})
	sort.Strings(bad)
	return bad, err
}

// moduleRoot finds the directory of the go.mod above the working directory and its module path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if module, err := modulePath(filepath.Join(dir, "go.mod")); err == nil {
			return dir, module
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s has no module line", gomod)
}
