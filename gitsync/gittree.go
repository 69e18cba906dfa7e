package gitsync

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

const (
	// maxTreeDepth bounds the nesting of directories read from a commit.
	maxTreeDepth = 1024
	// maxLinkHops bounds the symbolic links followed to resolve one path (as the kernel's 40).
	maxLinkHops = 40
)

// copyCommit copies the tree of commit in the repository at repoDir into mem, as copyTree
// copies a work tree: regular and executable files at their paths, a symbolic link as the
// file it leads to when that is a file of the same tree (links that leave the repository,
// dangle or lead to a directory are left out, as are submodules). Entries named .git are
// left out: git never checks them out. Every other name is kept as git stores it. A blob
// larger than maxFile is not read: its size is read first, and it is recorded as refused
// (see memFS.writeRefused). Past ctx's end the copy stops with its cause.
func copyCommit(ctx context.Context, repoDir, commit string, mem *memFS, maxFile int64) error {
	repo, err := git.PlainOpen(repoDir)
	if err != nil {
		return fmt.Errorf("open %s: %w", repoDir, err)
	}
	c, err := repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return fmt.Errorf("commit %s: %w", commit, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return fmt.Errorf("commit %s: %w", commit, err)
	}
	links := map[string]string{}
	g := &gitTreeCopy{ctx: ctx, s: repo.Storer, mem: mem, links: links, maxFile: maxFile}
	if err := g.tree(tree, "/", 0); err != nil {
		return err
	}
	for p := range links {
		target := resolveLink(mem, links, p)
		if target == "" {
			continue
		}
		if err := mem.copyFile(target, p); err != nil {
			return err
		}
	}
	return nil
}

// gitTreeCopy is one copyCommit: links records the symbolic links (path -> target).
type gitTreeCopy struct {
	ctx     context.Context
	s       storer.EncodedObjectStorer
	mem     *memFS
	links   map[string]string
	maxFile int64
}

// tree copies tree (at dir in the repository) into mem and records its symbolic links.
func (g *gitTreeCopy) tree(tree *object.Tree, dir string, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("%s: directories nested more than %d deep", dir, maxTreeDepth)
	}
	if err := g.mem.MkdirAll(dir); err != nil {
		return err
	}
	for _, e := range tree.Entries {
		if g.ctx.Err() != nil {
			return context.Cause(g.ctx)
		}
		// Tree entries are single names; git itself refuses these when it checks out.
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") {
			return fmt.Errorf("%s: invalid name %q in the repository's tree", dir, e.Name)
		}
		if strings.EqualFold(e.Name, ".git") {
			continue
		}
		p := path.Join(dir, e.Name)
		switch e.Mode {
		case filemode.Dir:
			sub, err := object.GetTree(g.s, e.Hash)
			if err != nil {
				return fmt.Errorf("%s: %w", strings.TrimPrefix(p, "/"), err)
			}
			if err := g.tree(sub, p, depth+1); err != nil {
				return err
			}
		case filemode.Regular, filemode.Executable, filemode.Deprecated, filemode.Symlink:
			size, err := blobSize(g.s, e.Hash)
			if err != nil {
				return fmt.Errorf("%s: %w", strings.TrimPrefix(p, "/"), err)
			}
			if size > g.maxFile {
				if e.Mode == filemode.Symlink {
					continue // no target path is that long: as a dangling link
				}
				if err := g.mem.writeRefused(p, size, fileTooLarge(p, size, g.maxFile)); err != nil {
					return err
				}
				continue
			}
			b, err := readBlob(g.s, e.Hash)
			if err != nil {
				return fmt.Errorf("%s: %w", strings.TrimPrefix(p, "/"), err)
			}
			if e.Mode == filemode.Symlink {
				g.links[p] = string(b)
				continue
			}
			if err := g.mem.WriteFile(p, b); err != nil {
				return err
			}
		}
		// filemode.Submodule: another repository's commit, not part of this one.
	}
	return nil
}

// blobSize is the size of the blob h, read from the object's header (git's object store
// answers without inflating the object).
func blobSize(s storer.EncodedObjectStorer, h plumbing.Hash) (int64, error) {
	if sz, ok := s.(interface {
		EncodedObjectSize(plumbing.Hash) (int64, error)
	}); ok {
		return sz.EncodedObjectSize(h)
	}
	blob, err := object.GetBlob(s, h)
	if err != nil {
		return 0, err
	}
	return blob.Size, nil
}

func readBlob(s storer.EncodedObjectStorer, h plumbing.Hash) ([]byte, error) {
	blob, err := object.GetBlob(s, h)
	if err != nil {
		return nil, err
	}
	r, err := blob.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// resolveLink returns the path of the regular file the symbolic link at p leads to, following
// links in every component as the kernel would inside the repository's tree, or "" when it
// leaves the repository (an absolute target, or ".." above the root), dangles, loops or
// leads to a directory.
func resolveLink(mem *memFS, links map[string]string, p string) string {
	hops := 0
	cur := "/"
	rest := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if cur == "/" {
				return ""
			}
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		if target, ok := links[next]; ok {
			if hops++; hops > maxLinkHops || target == "" || strings.HasPrefix(target, "/") {
				return ""
			}
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		n, err := mem.find(next)
		if err != nil || n == nil || (!n.isDir() && len(rest) > 0) {
			return ""
		}
		cur = next
	}
	if n, err := mem.find(cur); err != nil || n == nil || n.isDir() {
		return ""
	}
	return cur
}
