package gitsync

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
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
// accepts; symlinks that leave the repository are dropped), and every resource, base or
// component must be a path in the repository: remote bases are refused. A directory without a kustomization renders its
// .yaml/.yml files. Objects annotated config.kubernetes.io/local-config: "true" are dropped.
func Render(root, dir string) ([]Object, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	mem := newMemFS()
	if err := copyTree(root, mem); err != nil {
		return nil, fmt.Errorf("read repository: %w", err)
	}
	return renderTree(mem, dir)
}

// RenderCommit is Render for a commit of the git repository at repoDir (a cache Fetch
// filled): the commit's tree is read from git's object store, names, content and symbolic
// links exactly as git stores them, so no work tree is needed and a name the host's file
// system or a checkout would refuse is read as any other.
func RenderCommit(repoDir, commit, dir string) ([]Object, error) {
	mem := newMemFS()
	if err := copyCommit(repoDir, commit, mem); err != nil {
		return nil, fmt.Errorf("read repository: %w", err)
	}
	return renderTree(mem, dir)
}

// renderTree renders dir of the repository copied into mem (see Render).
func renderTree(mem *memFS, dir string) ([]Object, error) {
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
		if err := checkLocal(mem, rel, map[string]bool{}); err != nil {
			return nil, err
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

	opts := krusty.MakeDefaultOptions()
	// Bases elsewhere in the repository (../base) are allowed; the in-memory tree holds
	// nothing else to escape to.
	opts.LoadRestrictions = kustypes.LoadRestrictionsNone
	m, err := krusty.MakeKustomizer(opts).Run(mem, rel)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", "."+rel, err)
	}
	var out []Object
	for _, r := range m.Resources() {
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

// copyTree copies the regular files under root (without .git) into mem at the same
// relative paths, following symlinks only to files inside root.
func copyTree(root string, mem filesys.FileSystem) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
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
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return mem.WriteFile(target, b)
	})
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

func yamlFiles(mem filesys.FileSystem, dir string) ([]string, error) {
	names, err := mem.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) && !mem.IsDir(path.Join(dir, n)) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// checkLocal refuses kustomizations (at dir and in every base they name) whose resources,
// bases or components are not paths in the repository, so nothing is fetched from a remote.
func checkLocal(mem filesys.FileSystem, dir string, seen map[string]bool) error {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	kfile, err := kustomizationFile(mem, dir)
	if err != nil || kfile == "" {
		return err
	}
	b, err := mem.ReadFile(kfile)
	if err != nil {
		return err
	}
	var k kustypes.Kustomization
	if err := yaml.Unmarshal(b, &k); err != nil {
		return fmt.Errorf("%s: %w", strings.TrimPrefix(kfile, "/"), err)
	}
	for _, entry := range slices.Concat(k.Resources, k.Bases, k.Components) {
		p := path.Join(dir, entry)
		if strings.Contains(entry, "://") || strings.HasPrefix(entry, "git@") || !mem.Exists(p) {
			return fmt.Errorf("%s: resource %q is not a file or directory in the repository (remote bases are not allowed)",
				strings.TrimPrefix(kfile, "/"), entry)
		}
		if mem.IsDir(p) {
			if err := checkLocal(mem, p, seen); err != nil {
				return err
			}
		}
	}
	return nil
}
