package gitsync

import (
	"context"
	"slices"
	"sync"

	"k8s.io/client-go/rest"
)

// CollectWarnings makes the clients built from cfg hand the API's warnings (HTTP Warning
// headers with code 299, such as Pod Security Admission's "would violate PodSecurity" on a
// workload) to gitsync, which reports them naming the object it applied or planned: the
// Applier's requests for one object carry a collector in their context. The warnings of
// other requests go to the handler cfg had (client-go's WarningLogger when it had none).
// Build the Applier's dynamic client from cfg after this call.
func CollectWarnings(cfg *rest.Config) {
	var next rest.WarningHandlerWithContext = rest.WarningLogger{}
	switch {
	case cfg.WarningHandlerWithContext != nil:
		next = cfg.WarningHandlerWithContext
	case cfg.WarningHandler != nil:
		next = warningHandlerNoContext{cfg.WarningHandler}
	}
	cfg.WarningHandler = nil
	cfg.WarningHandlerWithContext = warningHandler{next: next}
}

// warningHandler hands each warning to the collector of the request's context, or to next.
type warningHandler struct {
	next rest.WarningHandlerWithContext
}

func (h warningHandler) HandleWarningHeaderWithContext(ctx context.Context, code int, agent, text string) {
	if c, ok := ctx.Value(warningsKey{}).(*warningCollector); ok {
		if code == 299 && text != "" {
			c.add(text)
		}
		return
	}
	h.next.HandleWarningHeaderWithContext(ctx, code, agent, text)
}

type warningHandlerNoContext struct {
	h rest.WarningHandler
}

func (w warningHandlerNoContext) HandleWarningHeaderWithContext(_ context.Context, code int, agent, text string) {
	w.h.HandleWarningHeader(code, agent, text)
}

type warningsKey struct{}

// warningCollector gathers the distinct warnings the API answered to the requests made with
// one context, in the order they came.
type warningCollector struct {
	mu    sync.Mutex
	texts []string
}

// withWarnings returns a context whose requests (through clients set up by
// CollectWarnings) leave their warnings in the returned collector.
func withWarnings(ctx context.Context) (context.Context, *warningCollector) {
	c := &warningCollector{}
	return context.WithValue(ctx, warningsKey{}, c), c
}

func (c *warningCollector) add(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.texts, text) {
		c.texts = append(c.texts, text)
	}
}

// list returns the warnings collected so far.
func (c *warningCollector) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.texts)
}

// objectWarnings prefixes each warning with the object it was answered for:
// "Kind namespace/name: warning" ("Kind name: warning" for a cluster-scoped object).
func objectWarnings(o Object, texts []string) []string {
	out := make([]string, 0, len(texts))
	for _, t := range texts {
		out = append(out, healthKey(o.Obj)+": "+t)
	}
	return out
}

// appendDistinct appends the strings of add that are not in list yet.
func appendDistinct(list []string, add ...string) []string {
	for _, s := range add {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}
