package main

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/flotilla-dev/flotilla/gitsync"
)

// addGitLimitFlags adds the flags of gitsync.Limits (agent and plan share them).
func addGitLimitFlags(f *pflag.FlagSet, l *gitsync.Limits) {
	f.Var((*byteSize)(&l.MaxRepoSize), "git-max-repo-size", "largest git cache of one source on disk (the fetched objects; such as 512Mi): a larger repository stalls its source")
	f.IntVar(&l.MaxObjects, "git-max-objects", l.MaxObjects, "most objects one revision may render to: a larger revision stalls its source (also sets what kustomize may read while rendering: 16 times the repository plus 1Ki per object)")
	f.Var((*byteSize)(&l.MaxObjectSize), "git-max-object-size", "largest file of a revision and largest rendered object (such as 3Mi)")
	f.DurationVar(&l.FetchTimeout, "git-fetch-timeout", l.FetchTimeout, "longest a fetch of a source may take (a GitSource's spec.timeout may only shorten it)")
	f.DurationVar(&l.RenderTimeout, "git-render-timeout", l.RenderTimeout, "longest a render (kustomize build) of a revision may take")
}

// byteSize is a flag holding a size in bytes, read as a Kubernetes quantity (512Mi, 1G, 4096).
type byteSize int64

func (b *byteSize) String() string { return gitsync.FormatBytes(int64(*b)) }
func (b *byteSize) Type() string   { return "size" }
func (b *byteSize) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a size (such as 512Mi, 2Gi or 4096)", s)
	}
	v, ok := q.AsInt64()
	if !ok || v <= 0 {
		return fmt.Errorf("%q: give a positive whole number of bytes (such as 512Mi)", s)
	}
	*b = byteSize(v)
	return nil
}
