package gitsync

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	kustypes "sigs.k8s.io/kustomize/api/types"
)

// What kustomize may read in one render. Each use of a base or component reads its files
// again, so a diamond of bases (two overlays of one base, each used twice, and so on) reads
// the same files exponentially often and keeps every copy in memory. A render may read 16
// times the repository's size (every file used 16 times over), plus 1 KiB for each object
// --git-max-objects allows (so a small repository that renders many objects is not held to
// 16 times its few bytes); rounded up to a whole MiB. Past that it fails with a LimitError.
const (
	renderReadFactor    = 16
	renderReadPerObject = 1 << 10
)

// renderReadBudget is the number of bytes a render of a repository of repoSize bytes may
// read under lim (see renderReadFactor).
func renderReadBudget(repoSize int64, lim Limits) int64 {
	b := renderReadFactor*repoSize + int64(lim.MaxObjects)*renderReadPerObject
	return (b + 1<<20 - 1) &^ (1<<20 - 1)
}

// renderContext bounds a render of dir by lim.RenderTimeout: past it, ctx is done and its
// cause is the LimitError.
func renderContext(ctx context.Context, dir string, lim Limits) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, lim.RenderTimeout, &LimitError{Flag: "--git-render-timeout",
		What: "rendering " + renderName(dir) + " did not finish in time", Limit: lim.RenderTimeout.String()})
}

// renderName is dir as errors name it: relative to the repository root, "." for the root.
func renderName(dir string) string {
	if p := cleanRel(dir); p != "" {
		return p
	}
	return "."
}

// renderBounds limit what kustomize reads through a memFS during one render: nothing after
// ctx is done (the render's deadline), and no more than budget bytes in all. The first limit
// reached sticks: every later read fails with it, so that the build stops at its next read
// and a read error kustomize ignores (it tries several names for a kustomization) cannot
// hide it. The nil *renderBounds bounds nothing.
type renderBounds struct {
	ctx    context.Context
	budget int64
	what   string
	flag   string
	limit  string

	mu   sync.Mutex
	read int64
	err  error
}

// newRenderBounds bounds the render of dir (a repository of repoSize bytes) by ctx and the
// read budget of lim.
func newRenderBounds(ctx context.Context, dir string, repoSize int64, lim Limits) *renderBounds {
	budget := renderReadBudget(repoSize, lim)
	return &renderBounds{ctx: ctx, budget: budget, what: "rendering " + renderName(dir),
		flag:  "--git-max-objects",
		limit: fmt.Sprintf("%s, %d times the repository's %s plus %s per object", FormatBytes(budget), renderReadFactor, byteCount(repoSize), FormatBytes(renderReadPerObject))}
}

// check returns the limit reached, if any.
func (b *renderBounds) check() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil && b.ctx.Err() != nil {
		b.err = context.Cause(b.ctx)
	}
	return b.err
}

// charge counts n bytes read; an error when they exceed the budget (or another limit was
// reached).
func (b *renderBounds) charge(n int) error {
	if b == nil {
		return nil
	}
	if err := b.check(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.read += int64(n)
	if b.read > b.budget && b.err == nil {
		b.err = &LimitError{Flag: b.flag, Limit: b.limit,
			What: b.what + " read more than " + FormatBytes(b.budget) + " of files (kustomize reads a base or component again each time it is used)"}
	}
	return b.err
}

// fail records err as the limit reached (unless one was already) and returns the limit.
func (b *renderBounds) fail(err error) error {
	if b == nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
	return b.err
}

// byteCount prints n bytes for a message.
func byteCount(n int64) string {
	if n == 1 {
		return "1 byte"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// kustomizeOptions are krusty's options for a render: bases anywhere in the (in-memory)
// repository, and only kustomize's builtin plugins, linked into this binary: no exec, Go or
// container (KRM function) plugins, no helm, nothing that runs a program or reaches the
// network. checkLocal refuses configurations that would need them with a clearer message.
func kustomizeOptions() *krusty.Options {
	opts := krusty.MakeDefaultOptions()
	// Bases elsewhere in the repository (../base) are allowed; the in-memory tree holds
	// nothing else to escape to.
	opts.LoadRestrictions = kustypes.LoadRestrictionsNone
	pc := kustypes.DisabledPluginConfig()
	pc.HelmConfig = kustypes.HelmConfig{Enabled: false}
	pc.FnpLoadingOptions = kustypes.FnPluginLoadingOptions{EnableExec: false, Network: false}
	opts.PluginConfig = pc
	return opts
}

// runKustomize builds dir of mem with kustomize. The build cannot be cancelled, but it reads
// everything through mem, whose bounds fail every read past ctx's deadline: runKustomize
// returns when ctx is done, and the build, left to itself, stops at its next read. A limit
// reached while building is the error, whatever kustomize made of the failed read.
func runKustomize(ctx context.Context, mem *memFS, dir string) (resmap.ResMap, error) {
	type result struct {
		m   resmap.ResMap
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("kustomize failed: %v", p)}
			}
		}()
		m, err := krusty.MakeKustomizer(kustomizeOptions()).Run(mem, dir)
		done <- result{m: m, err: err}
	}()
	select {
	case r := <-done:
		if err := mem.bounds.check(); err != nil {
			return nil, err
		}
		return r.m, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
