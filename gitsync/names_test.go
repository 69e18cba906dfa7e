package gitsync

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// deepDir is a directory nested to a path of about 200 characters.
var deepDir = "deep/" + strings.TrimSuffix(strings.Repeat("d123456789/", 18), "/")

func namesCM(name string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata: {k: v}\n"
}

// namesFiles is a repository whose names kyaml's in-memory file system and go-git's
// checkout refused: "+", spaces, unicode, leading dots, "..", Windows device names, a
// control character, a path of ~200 characters; and a symbolic link into such a directory.
var namesFiles = map[string]string{
	"kustomization.yaml": "resources:\n- manifests/ha-1.21+\n- aux/con.yaml\n- \"tab\\tdir/cm.yaml\"\n- " + deepDir + "/cm.yaml\n- links/cm-link.yaml\n",
	"manifests/ha-1.21+/kustomization.yaml": "resources:\n- cm.yaml\n- with space.yaml\n- ünïcødé 名前.yaml\n- c++.yaml\n" +
		"- .leading.yaml\n- a..b.yaml\n- .config/sub+dir/x.yaml\n- 100%/x#y@z=w~.yaml\n",
	"manifests/ha-1.21+/cm.yaml":                namesCM("plus"),
	"manifests/ha-1.21+/with space.yaml":        namesCM("space"),
	"manifests/ha-1.21+/ünïcødé 名前.yaml":        namesCM("unicode"),
	"manifests/ha-1.21+/c++.yaml":               namesCM("cplusplus"),
	"manifests/ha-1.21+/.leading.yaml":          namesCM("leading-dot"),
	"manifests/ha-1.21+/a..b.yaml":              namesCM("dots"),
	"manifests/ha-1.21+/.config/sub+dir/x.yaml": namesCM("hidden-dir"),
	"manifests/ha-1.21+/100%/x#y@z=w~.yaml":     namesCM("punctuation"),
	"manifests/ha-1.21+/plain dir/a b.yaml":     namesCM("plain-a"),
	"manifests/ha-1.21+/plain dir/b+c.yml":      namesCM("plain-b"),
	"aux/con.yaml":                              namesCM("windows-device-names"),
	"tab\tdir/cm.yaml":                          namesCM("control-character"),
	deepDir + "/cm.yaml":                        namesCM("deep"),
	"manifests/ha-1.21+/linked target+.yaml":    namesCM("via-link"),
}

// namesLinks are symbolic links (path -> target): one to a file in the "+" directory, and
// two that leave the repository and must not be read.
var namesLinks = map[string]string{
	"links/cm-link.yaml": "../manifests/ha-1.21+/linked target+.yaml",
	"links/escape.yaml":  "../../outside.yaml",
	"links/abs.yaml":     "/etc/hostname",
}

// namesWant is "file:name" of every object the root renders.
var namesWant = []string{
	"aux/con.yaml:windows-device-names",
	deepDir + "/cm.yaml:deep",
	"links/cm-link.yaml:via-link",
	"manifests/ha-1.21+/.config/sub+dir/x.yaml:hidden-dir",
	"manifests/ha-1.21+/.leading.yaml:leading-dot",
	"manifests/ha-1.21+/100%/x#y@z=w~.yaml:punctuation",
	"manifests/ha-1.21+/a..b.yaml:dots",
	"manifests/ha-1.21+/c++.yaml:cplusplus",
	"manifests/ha-1.21+/cm.yaml:plus",
	"manifests/ha-1.21+/with space.yaml:space",
	"manifests/ha-1.21+/ünïcødé 名前.yaml:unicode",
	"tab\tdir/cm.yaml:control-character",
}

func namesGot(t *testing.T, objs []Object) []string {
	t.Helper()
	var got []string
	for _, o := range objs {
		got = append(got, o.File+":"+o.Obj.GetName())
		if o.Obj.GetKind() != "ConfigMap" || o.Obj.Object["data"] == nil {
			t.Errorf("%s: not rendered as the ConfigMap in the file: %v", o.File, o.Obj.Object)
		}
	}
	slices.Sort(got)
	return got
}

func checkNames(t *testing.T, what string, objs []Object, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got := namesGot(t, objs); !reflect.DeepEqual(got, namesWant) {
		t.Fatalf("%s rendered\n  %q\nwant\n  %q", what, got, namesWant)
	}
}

// checkPlainDir renders a directory without a kustomization whose name has "+" and a space.
func checkPlainDir(t *testing.T, what string, render func(dir string) ([]Object, error)) {
	t.Helper()
	objs, err := render("manifests/ha-1.21+/plain dir")
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	want := []string{"manifests/ha-1.21+/plain dir/a b.yaml:plain-a", "manifests/ha-1.21+/plain dir/b+c.yml:plain-b"}
	if got := namesGot(t, objs); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: plain directory rendered %q, want %q", what, got, want)
	}
}

// gitTreeNode is a directory (children) or a file (blob, mode) of a tree being committed.
type gitTreeNode struct {
	children map[string]*gitTreeNode
	blob     plumbing.Hash
	mode     filemode.FileMode
}

// commitFiles commits files and symbolic links (path -> target) to branch main of the
// repository at dir, writing blobs, trees and the commit into the object store directly:
// go-git's work tree refuses some names git accepts, which is what is under test.
func commitFiles(t *testing.T, dir string, files, links map[string]string) string {
	t.Helper()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	store := func(typ plumbing.ObjectType, encode func(plumbing.EncodedObject) error) plumbing.Hash {
		obj := repo.Storer.NewEncodedObject()
		obj.SetType(typ)
		if err := encode(obj); err != nil {
			t.Fatal(err)
		}
		h, err := repo.Storer.SetEncodedObject(obj)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	root := &gitTreeNode{children: map[string]*gitTreeNode{}}
	put := func(p, content string, mode filemode.FileMode) {
		h := store(plumbing.BlobObject, func(o plumbing.EncodedObject) error {
			w, err := o.Writer()
			if err != nil {
				return err
			}
			if _, err := w.Write([]byte(content)); err != nil {
				return err
			}
			return w.Close()
		})
		parts := strings.Split(p, "/")
		n := root
		for _, d := range parts[:len(parts)-1] {
			if n.children[d] == nil {
				n.children[d] = &gitTreeNode{children: map[string]*gitTreeNode{}}
			}
			n = n.children[d]
		}
		n.children[parts[len(parts)-1]] = &gitTreeNode{blob: h, mode: mode}
	}
	for p, c := range files {
		put(p, c, filemode.Regular)
	}
	for p, target := range links {
		put(p, target, filemode.Symlink)
	}
	var writeTree func(n *gitTreeNode) plumbing.Hash
	writeTree = func(n *gitTreeNode) plumbing.Hash {
		tree := &object.Tree{}
		for name, c := range n.children {
			if c.children != nil {
				tree.Entries = append(tree.Entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: writeTree(c)})
			} else {
				tree.Entries = append(tree.Entries, object.TreeEntry{Name: name, Mode: c.mode, Hash: c.blob})
			}
		}
		// git's order: by name, a directory's name as if it ended in "/".
		key := func(e object.TreeEntry) string {
			if e.Mode == filemode.Dir {
				return e.Name + "/"
			}
			return e.Name
		}
		slices.SortFunc(tree.Entries, func(a, b object.TreeEntry) int { return strings.Compare(key(a), key(b)) })
		return store(plumbing.TreeObject, tree.Encode)
	}
	sig := object.Signature{Name: "test", Email: "test@example.com", When: time.Unix(1700000000, 0).UTC()}
	commit := &object.Commit{Author: sig, Committer: sig, Message: "names\n", TreeHash: writeTree(root)}
	h := store(plumbing.CommitObject, commit.Encode)
	if err := repo.Storer.SetReference(plumbing.NewHashReference(plumbing.NewBranchReferenceName("main"), h)); err != nil {
		t.Fatal(err)
	}
	if err := repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.NewBranchReferenceName("main"))); err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// TestRenderNamesGitAccepts: a repository with names git accepts but kyaml's in-memory file
// system (and go-git's checkout) refused renders every object, from the commit as the
// controller reads it, after a fetch into a cache, and from a directory on disk as plan
// reads it.
func TestRenderNamesGitAccepts(t *testing.T) {
	parent := t.TempDir()
	write(t, parent, "outside.yaml", namesCM("stolen"))
	src := filepath.Join(parent, "src")
	commit := commitFiles(t, src, namesFiles, namesLinks)

	t.Run("commit", func(t *testing.T) {
		objs, err := RenderCommit(context.Background(), src, commit, "", Limits{})
		checkNames(t, "RenderCommit", objs, err)
		checkPlainDir(t, "RenderCommit", func(dir string) ([]Object, error) {
			return RenderCommit(context.Background(), src, commit, dir, Limits{})
		})
	})

	t.Run("fetched", func(t *testing.T) {
		if _, err := exec.LookPath("git-upload-pack"); err != nil {
			if _, err := exec.LookPath("git"); err != nil {
				if framework.InCI() {
					t.Fatal("git CLI not installed (Debian package git): go-git serves file:// through git-upload-pack")
				}
				t.Skip("git CLI not installed: go-git serves file:// through git-upload-pack")
			}
		}
		cache := filepath.Join(t.TempDir(), "cache")
		// A work tree an earlier version checked out is removed.
		write(t, cache, "stale.yaml", namesCM("stale"))
		if _, err := git.PlainInit(cache, false); err != nil {
			t.Fatal(err)
		}
		co, err := Fetch(context.Background(), cache, Remote{URL: "file://" + src, Ref: &v1alpha1.GitRef{Branch: "main"}}, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if co.Commit != commit || co.Revision != "main@sha1:"+commit {
			t.Fatalf("fetched %+v, want commit %s", co, commit)
		}
		entries, err := os.ReadDir(cache)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != ".git" {
			t.Fatalf("cache holds more than .git: %v", entries)
		}
		repo, err := git.PlainOpen(cache)
		if err != nil {
			t.Fatal(err)
		}
		if h, err := repo.Head(); err != nil || h.Hash().String() != commit {
			t.Fatalf("cache HEAD = %v (%v), want %s", h, err, commit)
		}
		objs, err := RenderCommit(context.Background(), co.Dir, co.Commit, "", Limits{})
		checkNames(t, "RenderCommit of the fetched cache", objs, err)
	})

	t.Run("disk", func(t *testing.T) {
		root := filepath.Join(parent, "work")
		for p, c := range namesFiles {
			write(t, root, p, c)
		}
		for p, target := range namesLinks {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
				t.Fatal(err)
			}
		}
		objs, err := Render(context.Background(), root, "", Limits{})
		checkNames(t, "Render", objs, err)
		checkPlainDir(t, "Render", func(dir string) ([]Object, error) { return Render(context.Background(), root, dir, Limits{}) })

		p, err := PlanOffline(root, "", Limits{}, "")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range p.Items {
			if it.Action != PlanRendered {
				t.Errorf("%s: action %s", it.File, it.Action)
			}
			got = append(got, it.File+":"+it.Name)
		}
		slices.Sort(got)
		if !reflect.DeepEqual(got, namesWant) {
			t.Fatalf("PlanOffline listed\n  %q\nwant\n  %q", got, namesWant)
		}
	})
}

// TestResolveLink follows links as the kernel would, inside the tree only.
func TestResolveLink(t *testing.T) {
	mem := newMemFS()
	for _, p := range []string{"/a/f.yaml", "/b/g.yaml", "/top.yaml"} {
		if err := mem.WriteFile(p, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"/a/up":        "../top.yaml",
		"/a/chain":     "up",
		"/a/dirlink":   "../b",
		"/a/viadir":    "dirlink/g.yaml",
		"/a/todir":     "../b",
		"/a/abs":       "/top.yaml",
		"/a/above":     "../../top.yaml",
		"/a/dangling":  "nothing.yaml",
		"/a/loop1":     "loop2",
		"/a/loop2":     "loop1",
		"/a/throughf":  "f.yaml/x",
		"/a/dotdotdir": "./../a/./f.yaml",
	}
	want := map[string]string{
		"/a/up": "/top.yaml", "/a/chain": "/top.yaml", "/a/viadir": "/b/g.yaml", "/a/dotdotdir": "/a/f.yaml",
	}
	for p := range links {
		if got := resolveLink(mem, links, p); got != want[p] {
			t.Errorf("resolveLink(%s) = %q, want %q", p, got, want[p])
		}
	}
}
