package gitsync

import (
	"fmt"
	"time"
)

// Limits bound what one source may cost a host, so that an oversized or hostile push
// stalls its source instead of exhausting the leader (and then the next leader). Every
// field is a flag of `flotilla agent` and of `flotilla plan`; zero means the default.
type Limits struct {
	// MaxRepoSize bounds the cache of one source on disk (its .git: the fetched objects),
	// checked while the fetch runs (--git-max-repo-size).
	MaxRepoSize int64
	// MaxObjects bounds the objects one revision renders to (--git-max-objects).
	MaxObjects int
	// MaxObjectSize bounds one file of the revision's tree and one rendered object, as JSON
	// (--git-max-object-size).
	MaxObjectSize int64
	// FetchTimeout bounds one fetch (--git-fetch-timeout); spec.timeout of a source may
	// only shorten it.
	FetchTimeout time.Duration
	// RenderTimeout bounds one render (--git-render-timeout).
	RenderTimeout time.Duration
}

// Defaults of Limits.
const (
	DefaultMaxRepoSize   = 512 << 20
	DefaultMaxObjects    = 20000
	DefaultMaxObjectSize = 3 << 20
	DefaultFetchTimeout  = 5 * time.Minute
	DefaultRenderTimeout = time.Minute
)

// DefaultLimits returns the defaults: 512 MiB on disk, 20,000 objects, 3 MiB per file or
// object, 5 minutes to fetch and 1 minute to render.
func DefaultLimits() Limits {
	return Limits{MaxRepoSize: DefaultMaxRepoSize, MaxObjects: DefaultMaxObjects, MaxObjectSize: DefaultMaxObjectSize,
		FetchTimeout: DefaultFetchTimeout, RenderTimeout: DefaultRenderTimeout}
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxRepoSize <= 0 {
		l.MaxRepoSize = d.MaxRepoSize
	}
	if l.MaxObjects <= 0 {
		l.MaxObjects = d.MaxObjects
	}
	if l.MaxObjectSize <= 0 {
		l.MaxObjectSize = d.MaxObjectSize
	}
	if l.FetchTimeout <= 0 {
		l.FetchTimeout = d.FetchTimeout
	}
	if l.RenderTimeout <= 0 {
		l.RenderTimeout = d.RenderTimeout
	}
	return l
}

// LimitError says that a source exceeded one of its Limits. Its message names the limit,
// its flag and what to change.
type LimitError struct {
	// Flag is the flag that sets the limit, such as "--git-max-objects".
	Flag string
	// What says what exceeded it, such as "the revision renders 25000 objects".
	What string
	// Limit is the limit as the flag reads it.
	Limit string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s, over the limit of %s (%s): make the repository smaller, or raise %s on the hosts", e.What, e.Limit, e.Flag, e.Flag)
}

// FormatBytes prints n bytes as the size flags read it: exact multiples as 512Mi, others
// rounded to a tenth (10.7Mi).
func FormatBytes(n int64) string {
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{30, "Gi"}, {20, "Mi"}, {10, "Ki"}} {
		if n < 1<<u.shift {
			continue
		}
		if n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.suffix)
		}
		return fmt.Sprintf("%.1f%s", float64(n)/float64(int64(1)<<u.shift), u.suffix)
	}
	return fmt.Sprintf("%d", n)
}
