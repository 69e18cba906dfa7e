package gitsync

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/resource"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Object is one rendered object and the file (relative to the repository root) it came
// from, when kustomize could tell.
type Object struct {
	Obj  *unstructured.Unstructured
	File string
}

const localConfigAnnotation = "config.kubernetes.io/local-config"

// Render builds the objects at dir (a directory inside the work tree root) with kustomize.
// Only files inside root are visible (the tree is copied into memory, under every name git
// accepts; symlinks that leave the repository are dropped), and kustomize reaches nothing
// else: every name a kustomization the build reaches gives (resources, bases, components,
// patches, generator files, plugin configurations, ...) must be a file or directory of the
// repository, so URLs and remote git bases are refused, as are helm charts and every plugin
// but kustomize's builtin ones (see checkLocal). A directory without a kustomization renders
// its .yaml/.yml files. Objects annotated config.kubernetes.io/local-config: "true" are
// dropped.
//
// lim bounds the render (zero fields: the defaults): a file larger than lim.MaxObjectSize
// is not read (a render that needs it fails), nor is a rendered object larger than it as
// JSON accepted; the render fails past lim.RenderTimeout, when it reads more than its read
// budget (see renderReadFactor) or when it makes more than lim.MaxObjects objects. Those
// errors are a *LimitError (errors.As finds it).
func Render(ctx context.Context, root, dir string, lim Limits) ([]Object, error) {
	lim = lim.WithDefaults()
	ctx, cancel := renderContext(ctx, dir, lim)
	defer cancel()
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	mem := newMemFS()
	if err := copyTree(ctx, root, mem, lim.MaxObjectSize); err != nil {
		return nil, fmt.Errorf("read repository: %w", err)
	}
	return renderTree(ctx, mem, dir, lim)
}

// RenderCommit is Render for a commit of the git repository at repoDir (a cache Fetch
// filled): the commit's tree is read from git's object store, names, content and symbolic
// links exactly as git stores them, so no work tree is needed and a name the host's file
// system or a checkout would refuse is read as any other.
func RenderCommit(ctx context.Context, repoDir, commit, dir string, lim Limits) ([]Object, error) {
	lim = lim.WithDefaults()
	ctx, cancel := renderContext(ctx, dir, lim)
	defer cancel()
	mem := newMemFS()
	if err := copyCommit(ctx, repoDir, commit, mem, lim.MaxObjectSize); err != nil {
		return nil, fmt.Errorf("read repository: %w", err)
	}
	return renderTree(ctx, mem, dir, lim)
}

// renderTree renders dir of the repository copied into mem (see Render), within ctx.
func renderTree(ctx context.Context, mem *memFS, dir string, lim Limits) ([]Object, error) {
	// From here on every read counts (ours included).
	mem.bounds = newRenderBounds(ctx, dir, mem.contentSize(), lim)
	rel := path.Clean("/" + filepath.ToSlash(dir))
	if !mem.IsDir(rel) {
		return nil, fmt.Errorf("path %s: not a directory in the repository", strings.TrimPrefix(rel, "/"))
	}
	kfile, err := kustomizationFile(mem, rel)
	if err != nil {
		return nil, err
	}
	var k kustypes.Kustomization
	if kfile == "" {
		kfile = path.Join(rel, "kustomization.yaml")
		k.Resources, err = yamlFiles(mem, rel)
		if err != nil {
			return nil, err
		}
	} else {
		b, err := mem.ReadFile(kfile)
		if err != nil {
			return nil, err
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			return nil, fmt.Errorf("%s: %w", strings.TrimPrefix(kfile, "/"), err)
		}
	}
	// Origin annotations give each object its file; removed again below.
	if !slices.Contains(k.BuildMetadata, kustypes.OriginAnnotations) {
		k.BuildMetadata = append(k.BuildMetadata, kustypes.OriginAnnotations)
	}
	if k.APIVersion == "" {
		k.APIVersion, k.Kind = kustypes.KustomizationVersion, kustypes.KustomizationKind
	}
	b, err := yaml.Marshal(&k)
	if err != nil {
		return nil, err
	}
	if err := mem.WriteFile(kfile, b); err != nil {
		return nil, err
	}
	// What kustomize will read: the kustomization as written above, and what it reaches.
	if err := checkLocal(mem, rel); err != nil {
		return nil, err
	}

	m, err := runKustomize(ctx, mem, rel)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", "."+rel, err)
	}
	// Local configuration is dropped below: only the objects gitsync would apply count.
	n := 0
	for _, r := range m.Resources() {
		if r.GetAnnotations()[localConfigAnnotation] != "true" {
			n++
		}
	}
	if n > lim.MaxObjects {
		return nil, &LimitError{Flag: "--git-max-objects", What: fmt.Sprintf("path %s renders %d objects", renderName(dir), n),
			Limit: strconv.Itoa(lim.MaxObjects)}
	}
	var out []Object
	for _, r := range m.Resources() {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		if r.GetAnnotations()[localConfigAnnotation] == "true" {
			continue
		}
		file := ""
		if o, err := r.GetOrigin(); err == nil && o != nil && o.Repo == "" && o.Path != "" {
			file = path.Join(strings.TrimPrefix(rel, "/"), o.Path)
		}
		if err := r.SetOrigin(nil); err != nil {
			return nil, err
		}
		// Through JSON: the API machinery wants int64/float64 numbers, kyaml gives int.
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		if int64(len(b)) > lim.MaxObjectSize {
			return nil, &LimitError{Flag: "--git-max-object-size", Limit: FormatBytes(lim.MaxObjectSize),
				What: fmt.Sprintf("%s is %s as JSON", describe(Object{Obj: renderedID(r), File: file}), byteCount(int64(len(b))))}
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		if len(u.GetAnnotations()) == 0 {
			unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
		}
		out = append(out, Object{Obj: u, File: file})
	}
	return out, nil
}

// renderedID is an object with r's kind, namespace and name (for describe).
func renderedID(r *resource.Resource) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetKind(r.GetKind())
	u.SetNamespace(r.GetNamespace())
	u.SetName(r.GetName())
	return u
}

// cleanRel is p relative to the repository root, cleaned ("" for the root).
func cleanRel(p string) string {
	return strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(p)), "/")
}

// fileTooLarge is the error for a file of size bytes over lim (--git-max-object-size).
func fileTooLarge(p string, size, lim int64) *LimitError {
	return &LimitError{Flag: "--git-max-object-size", Limit: FormatBytes(lim),
		What: fmt.Sprintf("file %s is %s", cleanRel(p), byteCount(size))}
}

// copyTree copies the regular files under root (without .git) into mem at the same
// relative paths, following symlinks only to files inside root. A file larger than maxFile
// is not read: it is recorded as refused (see memFS.writeRefused).
func copyTree(ctx context.Context, root string, mem *memFS, maxFile int64) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		rel, _ := filepath.Rel(root, p)
		target := "/" + filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == ".git" && p != root {
				return filepath.SkipDir
			}
			return mem.MkdirAll(target)
		}
		src := p
		if d.Type()&fs.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil // dangling: as if absent
			}
			if real != root && !strings.HasPrefix(real, root+string(filepath.Separator)) {
				return nil // leaves the repository: never read
			}
			st, err := os.Stat(real)
			if err != nil || !st.Mode().IsRegular() {
				return nil
			}
			src = real
		} else if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(src, target, mem, maxFile)
	})
}

// copyFile copies the regular file src to target of mem, or records it as refused when it
// is larger than maxFile (its size read first; it is never read whole).
func copyFile(src, target string, mem *memFS, maxFile int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > maxFile {
		return mem.writeRefused(target, st.Size(), fileTooLarge(target, st.Size(), maxFile))
	}
	// The file may grow after Stat: read no more than the limit allows.
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return err
	}
	if int64(len(b)) > maxFile {
		return mem.writeRefused(target, int64(len(b)), fileTooLarge(target, int64(len(b)), maxFile))
	}
	return mem.WriteFile(target, b)
}

func kustomizationFile(mem filesys.FileSystem, dir string) (string, error) {
	var found []string
	for _, n := range konfig.RecognizedKustomizationFileNames() {
		if p := path.Join(dir, n); mem.Exists(p) && !mem.IsDir(p) {
			found = append(found, p)
		}
	}
	if len(found) > 1 {
		return "", fmt.Errorf("%s: more than one kustomization file", strings.TrimPrefix(dir, "/"))
	}
	if len(found) == 0 {
		return "", nil
	}
	return found[0], nil
}

// yamlFiles lists the .yaml and .yml files of dir as resources of a kustomization: "./name",
// so that no name reads to kustomize as a URL or a git repository.
func yamlFiles(mem filesys.FileSystem, dir string) ([]string, error) {
	names, err := mem.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) && !mem.IsDir(path.Join(dir, n)) {
			out = append(out, "./"+n)
		}
	}
	slices.Sort(out)
	return out, nil
}
