package gitsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// limitErr returns the *LimitError in err, failing the test when there is none or it names
// another flag.
func limitErr(t *testing.T, err error, flag string) *LimitError {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) {
		t.Fatalf("err = %v, want a *LimitError of %s", err, flag)
	}
	if le.Flag != flag {
		t.Fatalf("limit %s (%v), want %s", le.Flag, err, flag)
	}
	return le
}

func cmYAML(name, data string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  k: %q\n", name, data)
}

// diamond adds to files a diamond of bases: d0 uses d0/a and d0/b, both of which use d1,
// and so on down to d<depth>, which holds leaf. Rendering d0 reads the leaf 2^depth times
// and makes as many objects.
func diamond(files map[string]string, depth int, leaf string) {
	for i := range depth {
		files[fmt.Sprintf("d%d/kustomization.yaml", i)] = "resources:\n- a\n- b\n"
		for _, x := range []string{"a", "b"} {
			files[fmt.Sprintf("d%d/%s/kustomization.yaml", i, x)] = fmt.Sprintf("namePrefix: %s-\nresources:\n- ../../d%d\n", x, i+1)
		}
	}
	files[fmt.Sprintf("d%d/kustomization.yaml", depth)] = "resources:\n- cm.yaml\n"
	files[fmt.Sprintf("d%d/cm.yaml", depth)] = leaf
}

func writeAll(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		write(t, root, name, content)
	}
}

// TestRenderMaxObjects: a revision rendering more objects than --git-max-objects is refused
// (local configuration does not count).
func TestRenderMaxObjects(t *testing.T) {
	files := map[string]string{
		"app/kustomization.yaml": "resources:\n- a.yaml\n- b.yaml\n- c.yaml\n- local.yaml\n",
		"app/a.yaml":             cmYAML("a", "1"),
		"app/b.yaml":             cmYAML("b", "1"),
		"app/c.yaml":             cmYAML("c", "1"),
		"app/local.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\n",
	}
	root := t.TempDir()
	writeAll(t, root, files)
	ctx := context.Background()
	if objs, err := Render(ctx, root, "app", Limits{MaxObjects: 3}); err != nil || len(objs) != 3 {
		t.Fatalf("3 objects, limit 3: %d objects, err %v", len(objs), err)
	}
	_, err := Render(ctx, root, "app", Limits{MaxObjects: 2})
	le := limitErr(t, err, "--git-max-objects")
	if le.What != "path app renders 3 objects" || le.Limit != "2" {
		t.Errorf("limit error %q", err)
	}

	r := newRepo(t)
	commit := r.commit(files)
	_, err = RenderCommit(ctx, r.dir, commit, "app", Limits{MaxObjects: 2})
	limitErr(t, err, "--git-max-objects")
}

// TestRenderMaxObjectSize: a file larger than --git-max-object-size is never read into
// memory, and a render that needs it fails naming it; a render that does not need it is not
// affected. A rendered object larger than the limit as JSON is refused too.
func TestRenderMaxObjectSize(t *testing.T) {
	big := cmYAML("big", strings.Repeat("x", 2<<10))
	files := map[string]string{
		"app/kustomization.yaml":   "resources:\n- big.yaml\n",
		"app/big.yaml":             big,
		"plain/big.yaml":           big,
		"small/kustomization.yaml": "resources:\n- cm.yaml\n",
		"small/cm.yaml":            cmYAML("small", "1"),
		"docs/image.bin":           strings.Repeat("\x00", 64<<10),
		"gen/kustomization.yaml":   "configMapGenerator:\n- name: gen\n  files:\n  - a.txt\n  - b.txt\n",
		"gen/a.txt":                strings.Repeat("a", 700),
		"gen/b.txt":                strings.Repeat("b", 700),
	}
	lim := Limits{MaxObjectSize: 1 << 10}
	root := t.TempDir()
	writeAll(t, root, files)
	if err := os.Symlink("../app/big.yaml", filepath.Join(root, "small", "link.yaml")); err != nil {
		t.Fatal(err)
	}
	r := newRepo(t)
	commit := r.commit(files)
	ctx := context.Background()
	renders := map[string]func(dir string) ([]Object, error){
		"Render":       func(dir string) ([]Object, error) { return Render(ctx, root, dir, lim) },
		"RenderCommit": func(dir string) ([]Object, error) { return RenderCommit(ctx, r.dir, commit, dir, lim) },
	}
	for name, render := range renders {
		t.Run(name, func(t *testing.T) {
			for dir, file := range map[string]string{"app": "app/big.yaml", "plain": "plain/big.yaml"} {
				_, err := render(dir)
				le := limitErr(t, err, "--git-max-object-size")
				if want := fmt.Sprintf("file %s is %d bytes", file, len(big)); le.What != want || le.Limit != "1Ki" {
					t.Errorf("%s: %q, want %s, over 1Ki", dir, err, want)
				}
			}
			if objs, err := render("small"); err != nil || len(objs) != 1 {
				t.Errorf("small: %d objects, err %v", len(objs), err)
			}
			_, err := render("gen")
			le := limitErr(t, err, "--git-max-object-size")
			if !strings.HasPrefix(le.What, "ConfigMap gen-") || !strings.Contains(le.What, "bytes as JSON") {
				t.Errorf("generated object: %q", err)
			}
		})
	}
	// The big file's content was never read: the copy holds its size only.
	mem := newMemFS()
	if err := copyTree(ctx, root, mem, 1<<10); err != nil {
		t.Fatal(err)
	}
	n, err := mem.find("/docs/image.bin")
	if err != nil || n == nil || n.refused == nil || len(n.content) != 0 || n.size != 64<<10 {
		t.Fatalf("docs/image.bin copied as %+v (err %v)", n, err)
	}
	mem = newMemFS()
	if err := copyCommit(ctx, r.dir, commit, mem, 1<<10); err != nil {
		t.Fatal(err)
	}
	if n, err := mem.find("/docs/image.bin"); err != nil || n == nil || n.refused == nil || len(n.content) != 0 {
		t.Fatalf("docs/image.bin copied from the commit as %+v (err %v)", n, err)
	}
}

// TestRenderTimeout: a render still running at --git-render-timeout fails with it, and
// returns then, although kustomize cannot be cancelled.
func TestRenderTimeout(t *testing.T) {
	files := map[string]string{}
	diamond(files, 14, cmYAML("cm", "1"))
	root := t.TempDir()
	writeAll(t, root, files)
	start := time.Now()
	_, err := Render(context.Background(), root, "d0", Limits{RenderTimeout: 200 * time.Millisecond, MaxObjects: 1 << 24})
	elapsed := time.Since(start)
	le := limitErr(t, err, "--git-render-timeout")
	if le.What != "rendering d0 did not finish in time" || le.Limit != "200ms" {
		t.Errorf("limit error %q", err)
	}
	// Building 16384 objects takes kustomize far longer; returning then would be a bug.
	if elapsed > 10*time.Second {
		t.Errorf("Render returned after %s", elapsed)
	}

	// A cancelled context is not a limit.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Render(ctx, root, "d0", Limits{})
	var le2 *LimitError
	if !errors.Is(err, context.Canceled) || errors.As(err, &le2) {
		t.Errorf("cancelled: err = %v", err)
	}
}

// TestRenderReadBudget: a diamond of bases that reads its files over and over fails when it
// has read more than the render's budget, before it makes its objects.
func TestRenderReadBudget(t *testing.T) {
	files := map[string]string{}
	// 256 uses of a 16 KiB leaf: 4 MiB read from a repository of about 20 KiB.
	diamond(files, 8, cmYAML("cm", strings.Repeat("x", 16<<10)))
	root := t.TempDir()
	writeAll(t, root, files)
	_, err := Render(context.Background(), root, "d0", Limits{MaxObjects: 100})
	le := limitErr(t, err, "--git-max-objects")
	if !strings.HasPrefix(le.What, "rendering d0 read more than 1Mi of files") || !strings.HasPrefix(le.Limit, "1Mi, 16 times the repository's ") {
		t.Errorf("limit error %q", err)
	}
	// The same repository within a larger budget renders.
	objs, err := Render(context.Background(), root, "d0", Limits{MaxObjects: 5000})
	if err != nil || len(objs) != 256 {
		t.Fatalf("%d objects, err %v", len(objs), err)
	}
}

// TestMemFSBounds: past the deadline, or once the budget is spent, every read fails with
// the limit, and keeps failing.
func TestMemFSBounds(t *testing.T) {
	newFS := func() *memFS {
		mem := newMemFS()
		for _, p := range []string{"/a/x.yaml", "/a/y.yaml"} {
			if err := mem.WriteFile(p, []byte("12345678")); err != nil {
				t.Fatal(err)
			}
		}
		return mem
	}
	timeout := &LimitError{Flag: "--git-render-timeout", What: "rendering a did not finish in time", Limit: "1s"}
	ctx, cancel := context.WithCancelCause(context.Background())
	mem := newFS()
	mem.bounds = &renderBounds{ctx: ctx, budget: 1 << 20}
	if _, err := mem.ReadFile("/a/x.yaml"); err != nil {
		t.Fatal(err)
	}
	cancel(timeout)
	reads := map[string]func() error{
		"ReadFile":   func() error { _, err := mem.ReadFile("/a/x.yaml"); return err },
		"Open":       func() error { _, err := mem.Open("/a/x.yaml"); return err },
		"ReadDir":    func() error { _, err := mem.ReadDir("/a"); return err },
		"Glob":       func() error { _, err := mem.Glob("/a/*"); return err },
		"Walk":       func() error { return mem.Walk("/a", func(string, os.FileInfo, error) error { return nil }) },
		"CleanedAbs": func() error { _, _, err := mem.CleanedAbs("/a"); return err },
	}
	for name, read := range reads {
		if err := read(); !errors.Is(err, timeout) {
			t.Errorf("%s after the deadline: err = %v", name, err)
		}
	}

	mem = newFS()
	mem.bounds = newRenderBounds(context.Background(), "a", 16, Limits{MaxObjects: 1})
	mem.bounds.budget = 12 // below what the constructor rounds to, for the test
	if _, err := mem.ReadFile("/a/x.yaml"); err != nil {
		t.Fatal(err)
	}
	_, err := mem.ReadFile("/a/y.yaml")
	limitErr(t, err, "--git-max-objects")
	f, ferr := mem.Open("/a/x.yaml")
	if ferr == nil {
		_, ferr = f.Read(make([]byte, 1))
	}
	if !errors.Is(ferr, err) {
		t.Errorf("read after the budget: err = %v", ferr)
	}
}
