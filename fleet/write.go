package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/flotilla-dev/flotilla/internal/gitremote"
)

const (
	// RefPrefix is where Write puts each site's status: refs/flotilla/status/<site>. Refs
	// outside refs/heads and refs/tags are not cloned or shown as branches, so the reports
	// stay out of everyone's way.
	RefPrefix = "refs/flotilla/status/"
	// BranchPrefix is where WriteBranch puts them, for git hosts that refuse refs outside
	// refs/heads and refs/tags: branch flotilla-status/<site>.
	BranchPrefix = "refs/heads/flotilla-status/"
	// FileName is the one file of a status commit.
	FileName = "status.json"
)

// WriteOptions change where and how Write pushes.
type WriteOptions struct {
	// RefPrefix is the prefix of the ref written (RefPrefix when empty; BranchPrefix for a
	// git host that refuses custom refs). Read looks under RefPrefix and BranchPrefix only.
	RefPrefix string
	// Attempts is how often a push that failed for a transient reason is tried (default 5).
	Attempts int
}

// Write pushes st as the only file of a parentless commit to refs/flotilla/status/<site> of
// remote.URL, replacing what was there: the ref always points to one commit, so the
// repository does not grow with the reports (the replaced commits are unreachable and
// go at the server's next gc). remote.Ref is not used.
func Write(ctx context.Context, remote gitremote.Remote, st Status) error {
	return WriteWith(ctx, remote, st, WriteOptions{})
}

// WriteBranch is Write to branch flotilla-status/<site>, for git hosts that refuse refs
// outside refs/heads and refs/tags.
func WriteBranch(ctx context.Context, remote gitremote.Remote, st Status) error {
	return WriteWith(ctx, remote, st, WriteOptions{RefPrefix: BranchPrefix})
}

// WriteWith is Write with options.
func WriteWith(ctx context.Context, remote gitremote.Remote, st Status, o WriteOptions) error {
	if o.RefPrefix == "" {
		o.RefPrefix = RefPrefix
	}
	if o.RefPrefix != RefPrefix && o.RefPrefix != BranchPrefix {
		return fmt.Errorf("ref prefix %q: use fleet.RefPrefix or fleet.BranchPrefix (Read looks there only)", o.RefPrefix)
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if err := remote.Check(); err != nil {
		return err
	}
	doc, err := Encode(st)
	if err != nil {
		return err
	}
	st.normalize()
	ref := plumbing.ReferenceName(o.RefPrefix + st.Site)

	stor := memory.NewStorage()
	commit, err := storeCommit(stor, st, doc)
	if err != nil {
		return err
	}
	if err := stor.SetReference(plumbing.NewHashReference(ref, commit)); err != nil {
		return err
	}
	r := git.NewRemote(stor, &config.RemoteConfig{Name: "origin", URLs: []string{remote.URL}})
	push := func() error {
		return r.PushContext(ctx, &git.PushOptions{
			RemoteName: "origin",
			RefSpecs:   []config.RefSpec{config.RefSpec("+" + ref + ":" + ref)},
			Auth:       remote.Auth,
			CABundle:   remote.CABundle,
			Force:      true,
		})
	}
	for attempt := 1; ; attempt++ {
		err = push()
		if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil
		}
		if attempt >= o.Attempts || !transient(err) || ctx.Err() != nil {
			break
		}
		retries.Add(1)
		// Back off 50ms, 100ms, 200ms, ... with jitter, so that writers that collided do
		// not collide again.
		d := (50 * time.Millisecond) << (attempt - 1)
		d += rand.N(d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("push the status of site %s to %s of %s: %w", st.Site, ref, remote.URL, errors.Join(err, ctx.Err()))
		case <-t.C:
		}
	}
	return fmt.Errorf("push the status of site %s to %s of %s: %w%s", st.Site, ref, remote.URL, err, pushHint(o.RefPrefix, err))
}

// retries counts the pushes tried again (read by the tests and the benchmark).
var retries atomic.Int64

// storeCommit stores the blob, the tree and the parentless commit of a status document and
// returns the commit's hash. The commit's author time is the report's time, so writing the
// same report again makes the same commit (and the push is a no-op).
func storeCommit(stor *memory.Storage, st Status, doc []byte) (plumbing.Hash, error) {
	blob := stor.NewEncodedObject()
	blob.SetType(plumbing.BlobObject)
	w, err := blob.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(doc); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	blobHash, err := stor.SetEncodedObject(blob)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	tree := &object.Tree{Entries: []object.TreeEntry{{Name: FileName, Mode: filemode.Regular, Hash: blobHash}}}
	treeObj := stor.NewEncodedObject()
	if err := tree.Encode(treeObj); err != nil {
		return plumbing.ZeroHash, err
	}
	treeHash, err := stor.SetEncodedObject(treeObj)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	sig := object.Signature{Name: "flotilla", Email: "flotilla@" + st.Site + ".invalid", When: st.Time}
	c := &object.Commit{
		Author:    sig,
		Committer: sig,
		Message:   fmt.Sprintf("flotilla status of site %s\n\n%s %s\n", st.Site, st.Health, st.Revision),
		TreeHash:  treeHash,
	}
	commitObj := stor.NewEncodedObject()
	if err := c.Encode(commitObj); err != nil {
		return plumbing.ZeroHash, err
	}
	return stor.SetEncodedObject(commitObj)
}

// transient says whether a push failed for a reason another attempt may not meet: a lock
// of the server's repository held by someone else ("cannot lock ref", "unable to create
// ....lock": git-receive-pack of another writer of the same ref, a gc packing refs), or a
// broken connection. Each site writes its own ref, so writers do not contend for a ref
// lock; over file:// (go-git runs the git binary's git-receive-pack) 100 sites writing to
// one bare repository at once landed without a retry in the tests (TestConcurrentWriters,
// BenchmarkFleetStatus100Sites report the retries). The retry is a guard, not a fix of a
// known failure. Refusals (authentication, permissions, a hook, no repository) are final.
func transient(err error) bool {
	msg := err.Error()
	for _, s := range []string{
		"cannot lock ref", "unable to create", ".lock", "failed to lock",
		"unpacker error", "unpack-objects abnormal exit", "index-pack abnormal exit",
		"connection reset", "broken pipe", "unexpected EOF",
		"remote end hung up", "early EOF",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// pushHint says what to change when the server refused the ref.
func pushHint(prefix string, err error) string {
	msg := err.Error()
	switch {
	case prefix == RefPrefix && (strings.Contains(msg, "funny refname") || strings.Contains(msg, "deny") ||
		strings.Contains(msg, "refusing") || strings.Contains(msg, "pre-receive hook declined")):
		return " (if the git host refuses refs outside refs/heads, write branches flotilla-status/<site> instead: fleet.WriteBranch)"
	case strings.Contains(msg, "authentication required"), strings.Contains(msg, "authorization failed"),
		strings.Contains(msg, "unable to authenticate"):
		return " (the credentials must be allowed to push to the repository)"
	}
	return ""
}
