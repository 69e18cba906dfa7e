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
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/flotilla-dev/flotilla/internal/gitremote"
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

// Remote is where a source fetches from, and how.
type Remote struct {
	// URL of the repository (spec.url).
	URL string
	// Ref to fetch (spec.ref; nil: the default branch).
	Ref *v1alpha1.GitRef
	// Auth authenticates to the server (nil: anonymous).
	Auth transport.AuthMethod
	// CABundle holds the PEM CA certificates an https server's certificate must chain to
	// (nil: the host's trusted roots).
	CABundle []byte
	// Insecure allows http:// and git:// URLs (spec.insecure).
	Insecure bool
}

// Repo is the repository of r, for reading and writing refs other than r.Ref.
func (r Remote) Repo() gitremote.Remote {
	return gitremote.Remote{URL: r.URL, Auth: r.Auth, CABundle: r.CABundle, Insecure: r.Insecure}
}

// Fetch brings dir (a cache kept between calls for one source) to the commit r.Ref points to
// at r.URL: only that ref, at depth 1 for a branch or tag. A cache that cannot be updated is
// thrown away and cloned again. The fetch is bounded by lim.FetchTimeout and the cache by
// lim.MaxRepoSize (checked while the objects arrive): past either the fetch stops, the
// cache is removed and the error is a *LimitError.
func Fetch(ctx context.Context, dir string, r Remote, lim Limits) (*Checkout, error) {
	lim = lim.WithDefaults()
	if err := gitremote.CheckTransport(r.URL, r.Insecure, r.Auth != nil); err != nil {
		return nil, err
	}
	// The leader's controller and the warm-clone runner may share a cache directory.
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	co, err := fetchBounded(ctx, dir, r, lim)
	if err == nil {
		return co, nil
	}
	var le *LimitError
	if ctx.Err() != nil || errors.As(err, &le) {
		if le != nil {
			// What was fetched is over a limit: keep nothing of it on disk.
			err = errors.Join(err, os.RemoveAll(dir))
		}
		return nil, err
	}
	if rmErr := os.RemoveAll(dir); rmErr != nil {
		return nil, errors.Join(err, rmErr)
	}
	return fetchBounded(ctx, dir, r, lim)
}

// fetchBounded is fetchInto under lim's fetch timeout, with the size of dir watched while
// it runs.
func fetchBounded(ctx context.Context, dir string, r Remote, lim Limits) (*Checkout, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, lim.FetchTimeout, &LimitError{Flag: "--git-fetch-timeout",
		What: "the fetch of " + r.URL + " did not finish in time", Limit: lim.FetchTimeout.String()})
	defer cancel()
	over := make(chan int64, 1)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if n := dirSize(dir); n > lim.MaxRepoSize {
					over <- n
					cancel()
					return
				}
			}
		}
	}()
	co, err := fetchInto(ctx, dir, r)
	close(stop)
	<-watched
	n := dirSize(dir)
	select {
	case n = <-over:
	default:
	}
	if n > lim.MaxRepoSize {
		return nil, &LimitError{Flag: "--git-max-repo-size", Limit: FormatBytes(lim.MaxRepoSize),
			What: fmt.Sprintf("the repository at %s takes more than %s on disk", r.URL, FormatBytes(n))}
	}
	if err != nil {
		var le *LimitError
		if cause := context.Cause(ctx); errors.As(cause, &le) {
			return nil, le
		}
		return nil, err
	}
	return co, nil
}

// dirSize is the size of the regular files under dir (0 when it cannot be read).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func fetchInto(ctx context.Context, dir string, r Remote) (*Checkout, error) {
	url, ref, auth := r.URL, r.Ref, r.Auth
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

	if ref != nil && ref.Semver != "" {
		tag, err := resolveSemver(ctx, repo, r)
		if err != nil {
			return nil, err
		}
		ref = &v1alpha1.GitRef{Tag: tag}
	}
	name, full := refName(ref)
	opts := &git.FetchOptions{RemoteName: "origin", Auth: auth, Tags: git.NoTags, Force: true, CABundle: r.CABundle}
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

// resolveSemver lists the remote's tags and returns the one of the highest version in
// r.Ref.Semver (tags read as versions with or without a leading "v").
func resolveSemver(ctx context.Context, repo *git.Repository, r Remote) (string, error) {
	c, err := semver.NewConstraint(r.Ref.Semver)
	if err != nil {
		return "", fmt.Errorf("spec.ref.semver %q is not a version range: %w", r.Ref.Semver, err)
	}
	remote, err := repo.Remote("origin")
	if err != nil {
		return "", fmt.Errorf("remote: %w", err)
	}
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: r.Auth, CABundle: r.CABundle})
	if err != nil {
		return "", fmt.Errorf("list the tags of %s: %w", r.URL, err)
	}
	var best *semver.Version
	var tag string
	for _, ref := range refs {
		if !ref.Name().IsTag() {
			continue
		}
		name := ref.Name().Short()
		v, err := semver.NewVersion(name)
		if err != nil || !c.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best, tag = v, name
		}
	}
	if best == nil {
		return "", fmt.Errorf("no tag of %s is a version in spec.ref.semver %q: push such a tag or change the range", r.URL, r.Ref.Semver)
	}
	return tag, nil
}
