// Package gitsync keeps the cluster equal to what a git repository says: it fetches a ref
// (go-git, shallow; file, https, ssh with known_hosts), verifies the head commit's OpenPGP
// signature when asked, renders the commit's tree as git stores it (kustomize), validates
// every object (by server dry-run; a custom resource whose CustomResourceDefinition is in
// the same revision offline against that definition), applies the whole revision by
// server-side apply (CustomResourceDefinitions established before their resources), prunes
// what left git and reports the health of what it applied. The controller runs on the leader; every host serves the push
// webhook (Webhook) and keeps a warm clone (RunWarm).
package gitsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Checkout is a fetched revision: the cache's HEAD (detached) points to it, but nothing is
// checked out into a work tree. RenderCommit reads the commit's tree from the repository's
// object store, so every name git accepts is read as git stores it (go-git's checkout
// refuses some, such as Windows device names like "aux", or names with control characters).
type Checkout struct {
	// Dir is the cache repository (its git directory is Dir/.git).
	Dir string
	// Commit is the full SHA-1 of the checked-out commit.
	Commit string
	// Revision is "<ref>@sha1:<commit>" ("sha1:<commit>" for a commit ref).
	Revision string
}

// refName returns the name shown in revisions and the full reference to fetch (empty for
// a commit).
func refName(ref *v1alpha1.GitRef) (string, plumbing.ReferenceName) {
	switch {
	case ref == nil:
		return v1alpha1.DefaultBranch, plumbing.NewBranchReferenceName(v1alpha1.DefaultBranch)
	case ref.Commit != "":
		return "", ""
	case ref.Tag != "":
		return ref.Tag, plumbing.NewTagReferenceName(ref.Tag)
	case ref.Branch != "":
		return ref.Branch, plumbing.NewBranchReferenceName(ref.Branch)
	default:
		return v1alpha1.DefaultBranch, plumbing.NewBranchReferenceName(v1alpha1.DefaultBranch)
	}
}

// Fetch brings dir (a cache kept between calls for one source) to the commit ref points to
// at url: only that ref, at depth 1 for a branch or tag. A cache that cannot be updated is
// thrown away and cloned again.
func Fetch(ctx context.Context, dir, url string, ref *v1alpha1.GitRef, auth transport.AuthMethod) (*Checkout, error) {
	// The leader's controller and the warm-clone runner may share a cache directory.
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	co, err := fetchInto(ctx, dir, url, ref, auth)
	if err == nil {
		return co, nil
	}
	if ctx.Err() != nil {
		return nil, err
	}
	if rmErr := os.RemoveAll(dir); rmErr != nil {
		return nil, errors.Join(err, rmErr)
	}
	return fetchInto(ctx, dir, url, ref, auth)
}

func fetchInto(ctx context.Context, dir, url string, ref *v1alpha1.GitRef, auth transport.AuthMethod) (*Checkout, error) {
	repo, err := git.PlainOpen(dir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		repo, err = git.PlainInit(dir, false)
	}
	if err != nil {
		return nil, fmt.Errorf("open cache %s: %w", dir, err)
	}
	remote, err := repo.Remote("origin")
	if errors.Is(err, git.ErrRemoteNotFound) {
		_, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{url}})
	} else if err == nil && (len(remote.Config().URLs) != 1 || remote.Config().URLs[0] != url) {
		return nil, fmt.Errorf("cache %s has another remote URL", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}

	name, full := refName(ref)
	opts := &git.FetchOptions{RemoteName: "origin", Auth: auth, Tags: git.NoTags, Force: true}
	if full != "" {
		// Into a local ref of our own so a tag and a branch of the same name cannot collide.
		opts.RefSpecs = []config.RefSpec{config.RefSpec("+" + full + ":refs/flotilla/want")}
		opts.Depth = 1
	} else {
		if !commitRE.MatchString(ref.Commit) {
			return nil, fmt.Errorf("ref.commit %q: want 40 lower-case hex digits", ref.Commit)
		}
		// A single commit cannot be asked for by most servers: fetch the branches, unshallow.
		opts.RefSpecs = []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*"}
	}
	if err := repo.FetchContext(ctx, opts); err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, fmt.Errorf("fetch %s from %s: %w", refLabel(name, ref), url, err)
	}
	var hash plumbing.Hash
	if full != "" {
		r, err := repo.Reference("refs/flotilla/want", true)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", name, err)
		}
		hash = r.Hash()
		// An annotated tag points to a tag object; check out its commit.
		if tag, err := repo.TagObject(hash); err == nil {
			c, err := tag.Commit()
			if err != nil {
				return nil, fmt.Errorf("tag %s: %w", name, err)
			}
			hash = c.Hash
		}
	} else {
		hash = plumbing.NewHash(ref.Commit)
		if _, err := repo.CommitObject(hash); err != nil {
			return nil, fmt.Errorf("commit %s not found in %s: %w", ref.Commit, url, err)
		}
	}
	if _, err := repo.CommitObject(hash); err != nil {
		return nil, fmt.Errorf("read commit %s: %w", hash, err)
	}
	// HEAD (detached) says which revision the cache holds; no file is checked out.
	if err := repo.Storer.SetReference(plumbing.NewHashReference(plumbing.HEAD, hash)); err != nil {
		return nil, fmt.Errorf("set HEAD to %s: %w", hash, err)
	}
	if err := dropWorkTree(dir); err != nil {
		return nil, err
	}
	rev := "sha1:" + hash.String()
	if name != "" {
		rev = name + "@" + rev
	}
	return &Checkout{Dir: dir, Commit: hash.String(), Revision: rev}, nil
}

// dropWorkTree removes what an earlier version checked out next to .git: the revision is
// read from the object store, and a stale copy on disk would only mislead.
func dropWorkTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == ".git" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("remove stale work tree of %s: %w", dir, err)
		}
	}
	return nil
}

func refLabel(name string, ref *v1alpha1.GitRef) string {
	if name != "" {
		return name
	}
	return ref.Commit
}

// lockDir takes an exclusive flock on <dir>.lock, blocking until it is free. flock works
// between processes and between open files of one process alike.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock cache %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock cache %s: %w", dir, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
