package repocheck

import (
	"bufio"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestProductionDoesNotImportTestTree fails for every non-test .go file outside test/ that
// imports a package under <module>/test/, unless its own package is test support: not a
// main package, and imported only by tests (_test.go files, code under test/, or other test
// support), as reconciler/controllers/internal/controllertest is. Code that both a command
// and the tests need, such as internal/devsite (`flotilla dev` and test/e2e), belongs outside
// test/.
func TestProductionDoesNotImportTestTree(t *testing.T) {
	root, module := moduleRoot(t)
	bad, err := testTreeImports(root, module)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Errorf("%s: production code must not import test code; move what it needs out of test/ (e.g. under internal/) or make it a _test.go file", b)
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
		// A library importing test code, built into cmd/app.
		"lib/lib.go": "package lib\n\nimport _ \"example.com/m/test/helper/sub\"\n",
		// Test support used only by tests, also through another test support package.
		"support/a/a.go":      "package a\n\nimport _ \"example.com/m/test\"\n",
		"support/b/b.go":      "package b\n\nimport _ \"example.com/m/support/a\"\n",
		"support/b/b_test.go": "package b\n",
		"other/x_test.go":     "package other_test\n\nimport _ \"example.com/m/support/b\"\n",
		// Not the test tree, test code itself, another module, a directory Go ignores.
		"near/ok.go":            "package near\n\nimport _ \"example.com/m/testing2\"\n",
		"test/helper/helper.go": "package helper\n\nimport _ \"example.com/m/support/a\"\n",
		"nested/go.mod":         "module example.com/nested\n",
		"nested/x.go":           "package nested\n\nimport _ \"example.com/m/test/helper\"\n",
		"lib/testdata/x.go":     "package x\n\nimport _ \"example.com/m/test/helper\"\n",
		// Imported by nothing yet: flagged, it is not known to be test support.
		"orphan/orphan.go": "package orphan\n\nimport _ \"example.com/m/test/helper\"\n",
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
		`cmd/app/main.go imports "example.com/m/test/helper" (package main)`,
		`lib/lib.go imports "example.com/m/test/helper/sub" (imported by non-test code: cmd/app)`,
		`orphan/orphan.go imports "example.com/m/test/helper" (imported by nothing, so not known to be test support)`,
	}
	if strings.Join(bad, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}

type pkgInfo struct {
	main bool
	// prodImporters are the packages outside test/ whose non-test files import this one;
	// testImported is whether a _test.go file or code under test/ does.
	prodImporters map[string]bool
	testImported  bool
	// testTree are the non-test files' imports of the test tree, as "file imports path".
	testTree []string
}

// testTreeImports returns "file imports path (why)" for each non-test .go file of the module
// at root, outside root/test, that imports module/test or a package under it and whose package
// is not test support (see TestProductionDoesNotImportTestTree). Directories Go ignores
// (testdata, vendor, names starting with . or _) and nested modules are skipped.
func testTreeImports(root, module string) ([]string, error) {
	testTree := module + "/test"
	inTestTree := func(p string) bool { return p == testTree || strings.HasPrefix(p, testTree+"/") }
	pkgs := map[string]*pkgInfo{}
	get := func(p string) *pkgInfo {
		if pkgs[p] == nil {
			pkgs[p] = &pkgInfo{prodImporters: map[string]bool{}}
		}
		return pkgs[p]
	}
	fset := token.NewFileSet()
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
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(file, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkgPath := module
		if dir := path.Dir(rel); dir != "." {
			pkgPath += "/" + dir
		}
		isTest := strings.HasSuffix(rel, "_test.go") || inTestTree(pkgPath)
		if !isTest && f.Name.Name == "main" {
			get(pkgPath).main = true
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", rel, imp.Path.Value, err)
			}
			if p != module && !strings.HasPrefix(p, module+"/") {
				continue
			}
			if isTest {
				get(p).testImported = true
				continue
			}
			get(p).prodImporters[pkgPath] = true
			if inTestTree(p) {
				get(pkgPath).testTree = append(get(pkgPath).testTree, fmt.Sprintf("%s imports %q", rel, p))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// testOnly reports whether p is built only into tests. Go forbids import cycles, so the
	// recursion ends.
	var testOnly func(p string) bool
	testOnly = func(p string) bool {
		info := get(p)
		if info.main || (!info.testImported && len(info.prodImporters) == 0) {
			return false
		}
		for q := range info.prodImporters {
			if !testOnly(q) {
				return false
			}
		}
		return true
	}
	var bad []string
	for p, info := range pkgs {
		if len(info.testTree) == 0 || testOnly(p) {
			continue
		}
		var why string
		switch {
		case info.main:
			why = "package main"
		case !info.testImported && len(info.prodImporters) == 0:
			why = "imported by nothing, so not known to be test support"
		default:
			var by []string
			for q := range info.prodImporters {
				if !testOnly(q) {
					by = append(by, strings.TrimPrefix(q, module+"/"))
				}
			}
			sort.Strings(by)
			why = "imported by non-test code: " + strings.Join(by, ", ")
		}
		for _, b := range info.testTree {
			bad = append(bad, b+" ("+why+")")
		}
	}
	sort.Strings(bad)
	return bad, nil
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
