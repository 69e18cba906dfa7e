package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/internal/gitremote"
)

// RefError is a status ref that could not be read: the other sites are read all the same.
type RefError struct {
	// Ref is the full name of the ref, such as refs/flotilla/status/paris.
	Ref string
	Err error
}

func (e *RefError) Error() string { return e.Ref + ": " + e.Err.Error() }
func (e *RefError) Unwrap() error { return e.Err }

// Read lists the status refs of remote.URL (refs/flotilla/status/* and branches
// flotilla-status/*), fetches them at depth 1 into memory and decodes each status.json.
// The statuses come sorted by site. A ref that cannot be read (no status.json, not a
// status document, a site name other than the ref's) is a *RefError and does not stop the
// others; any other error means the repository could not be read, and then there are no
// statuses. A site found under both prefixes is reported once, by its newer report.
func Read(ctx context.Context, remote gitremote.Remote) ([]Status, []error) {
	if err := remote.Check(); err != nil {
		return nil, []error{err}
	}
	// Over http the refs are listed and fetched in two requests: a site replacing its
	// status in between makes the server refuse the fetch of the commit it no longer
	// points to ("not our ref"). List and fetch again.
	for attempt := 1; ; attempt++ {
		statuses, errs, moved := read(ctx, remote)
		if !moved || attempt == 3 || ctx.Err() != nil {
			return statuses, errs
		}
	}
}

// read is one attempt of Read; moved says a ref moved between the listing and the fetch.
func read(ctx context.Context, remote gitremote.Remote) (_ []Status, _ []error, moved bool) {
	stor := memory.NewStorage()
	r := git.NewRemote(stor, &config.RemoteConfig{Name: "origin", URLs: []string{remote.URL}})
	listed, err := r.ListContext(ctx, &git.ListOptions{Auth: remote.Auth, CABundle: remote.CABundle})
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return nil, nil, false
	}
	if err != nil {
		return nil, []error{fmt.Errorf("list the refs of %s: %w", remote.URL, err)}, false
	}
	var errs []error
	var refs []plumbing.ReferenceName
	var specs []config.RefSpec
	for _, ref := range listed {
		name := ref.Name().String()
		site, ok := siteOf(name)
		if !ok || ref.Type() != plumbing.HashReference {
			continue
		}
		if msgs := validation.IsDNS1123Label(site); len(msgs) > 0 {
			errs = append(errs, &RefError{Ref: name, Err: fmt.Errorf("%q is not a site name: %s", site, strings.Join(msgs, "; "))})
			continue
		}
		refs = append(refs, ref.Name())
		specs = append(specs, config.RefSpec("+"+name+":"+name))
	}
	if len(refs) == 0 {
		return nil, errs, false
	}
	err = r.FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   specs,
		Depth:      1,
		Auth:       remote.Auth,
		CABundle:   remote.CABundle,
		Tags:       git.NoTags,
		Force:      true,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, append(errs, fmt.Errorf("fetch the status refs of %s: %w", remote.URL, err)), strings.Contains(err.Error(), "not our ref")
	}
	bySite := map[string]Status{}
	for _, name := range refs {
		st, err := readRef(stor, name)
		if err != nil {
			errs = append(errs, &RefError{Ref: name.String(), Err: err})
			continue
		}
		if old, ok := bySite[st.Site]; !ok || st.Time.After(old.Time) {
			bySite[st.Site] = st
		}
	}
	out := make([]Status, 0, len(bySite))
	for _, st := range bySite {
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Site < out[j].Site })
	return out, errs, false
}

// siteOf returns the site a status ref names.
func siteOf(ref string) (string, bool) {
	for _, p := range []string{RefPrefix, BranchPrefix} {
		if site, ok := strings.CutPrefix(ref, p); ok {
			return site, true
		}
	}
	return "", false
}

// readRef decodes the status.json of the commit ref points to in stor.
func readRef(stor *memory.Storage, name plumbing.ReferenceName) (Status, error) {
	ref, err := stor.Reference(name)
	if err != nil {
		return Status{}, fmt.Errorf("not fetched: %w", err)
	}
	c, err := object.GetCommit(stor, ref.Hash())
	if err != nil {
		return Status{}, fmt.Errorf("%s is not a commit: %w", ref.Hash(), err)
	}
	tree, err := c.Tree()
	if err != nil {
		return Status{}, fmt.Errorf("commit %s: %w", c.Hash, err)
	}
	entry, err := tree.FindEntry(FileName)
	if err != nil {
		return Status{}, fmt.Errorf("commit %s has no %s", c.Hash, FileName)
	}
	if !entry.Mode.IsFile() {
		return Status{}, fmt.Errorf("commit %s: %s is not a file", c.Hash, FileName)
	}
	blob, err := object.GetBlob(stor, entry.Hash)
	if err != nil {
		return Status{}, fmt.Errorf("commit %s: %s: %w", c.Hash, FileName, err)
	}
	if blob.Size > MaxDocument {
		return Status{}, fmt.Errorf("commit %s: %s takes %d bytes, at most %d are allowed", c.Hash, FileName, blob.Size, MaxDocument)
	}
	rd, err := blob.Reader()
	if err != nil {
		return Status{}, err
	}
	defer rd.Close()
	b, err := io.ReadAll(io.LimitReader(rd, MaxDocument+1))
	if err != nil {
		return Status{}, fmt.Errorf("commit %s: read %s: %w", c.Hash, FileName, err)
	}
	st, err := Decode(b)
	if err != nil {
		return Status{}, fmt.Errorf("commit %s: %w", c.Hash, err)
	}
	if site, _ := siteOf(name.String()); st.Site != site {
		return Status{}, fmt.Errorf("commit %s: the document is the status of site %q, not of %q", c.Hash, st.Site, site)
	}
	return st, nil
}

// RepoURL turns the REPO argument of `fleet status` into a URL: an existing directory is a
// local clone (its remote "origin" is read, where the sites push) or, without an origin,
// the repository itself (such as a bare repository the sites push to); anything else is
// taken as a URL.
func RepoURL(repo string) (string, error) {
	info, err := os.Stat(repo)
	if err != nil || !info.IsDir() {
		return repo, nil
	}
	abs, err := filepath.Abs(repo)
	if err != nil {
		return "", err
	}
	r, err := git.PlainOpen(abs)
	if err != nil {
		return "", fmt.Errorf("%s is a directory but not a git repository: give a clone of the source repository or its URL", repo)
	}
	origin, err := r.Remote("origin")
	if errors.Is(err, git.ErrRemoteNotFound) || (err == nil && len(origin.Config().URLs) == 0) {
		return "file://" + abs, nil
	}
	if err != nil {
		return "", fmt.Errorf("remote origin of %s: %w", repo, err)
	}
	url := origin.Config().URLs[0]
	// A local origin may be relative to the clone, as git resolves it.
	if ep, err := transport.NewEndpoint(url); err == nil && ep.Protocol == "file" && !strings.HasPrefix(url, "file://") && !filepath.IsAbs(url) {
		url = "file://" + filepath.Join(abs, url)
	}
	return url, nil
}
