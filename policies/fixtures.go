package policies

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ExpectMessageAnnotation, on an object of a denied/ fixture, is a substring the admission
// error must contain.
const ExpectMessageAnnotation = "policies.flotilla.dev/expect-message"

// Suite is one test directory: a directory (under the tested root, the root included) with an
// allowed/ or denied/ subdirectory.
type Suite struct {
	// Dir is the directory, relative to the root ("." for the root itself).
	Dir string
	// Context lists the YAML files whose objects the fixtures are evaluated against: those
	// directly in Dir and in each of its ancestors up to the root (not in sibling
	// directories), root first.
	Context []string
	// Fixtures are the files of allowed/ and denied/, in order.
	Fixtures []Fixture
}

// Fixture is one file of allowed/ or denied/.
type Fixture struct {
	// Name is the file's path relative to the root, e.g. "no-privileged/denied/pod.yaml".
	Name string
	// Denied tells whether the file is in denied/: each of its objects must be refused.
	Denied bool
}

// FixtureResult is the outcome of one fixture file.
type FixtureResult struct {
	Fixture
	Elapsed time.Duration
	// Failures say why the fixture failed (none: it passed), one per offending object.
	Failures []string
}

// FindSuites walks fsys and returns its test directories in path order. A tree without any
// is an error describing the expected layout.
func FindSuites(fsys fs.FS) ([]*Suite, error) {
	var suites []*Suite
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if b := path.Base(p); p != "." && (b == "allowed" || b == "denied" || strings.HasPrefix(b, ".")) {
			// Fixture directories hold fixtures, not tests; hidden ones (.git) neither.
			return fs.SkipDir
		}
		var fixtures []Fixture
		for _, sub := range []string{"allowed", "denied"} {
			files, err := yamlFiles(fsys, path.Join(p, sub))
			if err != nil {
				return err
			}
			for _, f := range files {
				fixtures = append(fixtures, Fixture{Name: f, Denied: sub == "denied"})
			}
		}
		if fixtures == nil && !isDir(fsys, path.Join(p, "allowed")) && !isDir(fsys, path.Join(p, "denied")) {
			return nil
		}
		s := &Suite{Dir: p, Fixtures: fixtures}
		for _, dir := range ancestors(p) {
			files, err := yamlFiles(fsys, dir)
			if err != nil {
				return err
			}
			s.Context = append(s.Context, files...)
		}
		suites = append(suites, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(suites) == 0 {
		return nil, errors.New("no policy tests found: a test is a directory with the policies (and context objects) in YAML files " +
			"directly in it or in its parent directories, and fixtures in allowed/*.yaml (objects the policies must admit) " +
			"and denied/*.yaml (objects they must refuse), e.g. DIR/<policy>/policy.yaml, DIR/<policy>/allowed/pod.yaml, DIR/<policy>/denied/pod.yaml")
	}
	return suites, nil
}

// Load decodes the suite's context files.
func (s *Suite) Load(fsys fs.FS) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, f := range s.Context {
		got, err := readObjects(fsys, f)
		if err != nil {
			return nil, err
		}
		objs = append(objs, got...)
	}
	return objs, nil
}

// Run evaluates every fixture of the suite against its context objects, and calls report
// with each result as it is known. The error is for a suite that cannot run: a context file
// that does not decode, a policy with type errors (named with its file), or an engine that
// does not start.
func (s *Suite) Run(ctx context.Context, fsys fs.FS, mapper meta.RESTMapper, report func(FixtureResult)) error {
	objs, err := s.Load(fsys)
	if err != nil {
		return err
	}
	if err := s.typeCheck(fsys, mapper); err != nil {
		return err
	}
	engine, err := NewEngine(objs, mapper)
	if err != nil {
		return err
	}
	defer engine.Close()
	for _, f := range s.Fixtures {
		start := time.Now()
		res := FixtureResult{Fixture: f}
		fixtureObjs, err := readObjects(fsys, f.Name)
		if err != nil {
			res.Failures = append(res.Failures, err.Error())
		}
		for _, o := range fixtureObjs {
			if msg := check(ctx, engine, o, f.Denied, len(fixtureObjs) > 1); msg != "" {
				res.Failures = append(res.Failures, msg)
			}
		}
		if err == nil && len(fixtureObjs) == 0 {
			res.Failures = append(res.Failures, "the file has no objects")
		}
		res.Elapsed = time.Since(start)
		report(res)
	}
	return nil
}

// check evaluates one fixture object and returns why it fails the expectation ("" when it
// meets it). named prefixes the message with the object's kind and name.
func check(ctx context.Context, engine *Engine, o *unstructured.Unstructured, wantDenied, named bool) string {
	prefix := ""
	if named {
		prefix = fmt.Sprintf("%s %s: ", o.GetKind(), o.GetName())
	}
	res, err := engine.Evaluate(ctx, o)
	switch {
	case err != nil:
		return prefix + err.Error()
	case wantDenied && res.Denied == nil:
		return prefix + "want denied, got admitted"
	case !wantDenied && res.Denied != nil:
		return prefix + "want admitted, got denied: " + res.Denied.Error()
	case wantDenied:
		if want := o.GetAnnotations()[ExpectMessageAnnotation]; want != "" && !strings.Contains(res.Denied.Error(), want) {
			return fmt.Sprintf("%swant a denial containing %q, got: %v", prefix, want, res.Denied)
		}
	}
	return ""
}

// readObjects decodes file f of fsys; errors name the file.
func readObjects(fsys fs.FS, f string) ([]*unstructured.Unstructured, error) {
	data, err := fs.ReadFile(fsys, f)
	if err != nil {
		return nil, err
	}
	objs, err := DecodeYAML(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f, err)
	}
	return objs, nil
}

// yamlFiles lists the .yaml and .yml files directly in dir (none when dir does not exist).
func yamlFiles(fsys fs.FS, dir string) ([]string, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if ext := path.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, path.Join(dir, e.Name()))
		}
	}
	sort.Strings(files)
	return files, nil
}

func isDir(fsys fs.FS, p string) bool {
	st, err := fs.Stat(fsys, p)
	return err == nil && st.IsDir()
}

// ancestors is p and its parent directories up to ".", root first.
func ancestors(p string) []string {
	dirs := []string{p}
	for p != "." {
		p = path.Dir(p)
		dirs = append([]string{p}, dirs...)
	}
	return dirs
}
