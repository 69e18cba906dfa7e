// Package garbagecollector deletes objects whose owners are gone and carries out the
// foreground and orphan propagation policies (the `foregroundDeletion` and `orphan`
// finalizers the API server adds on delete). It watches every served resource (through the
// typed informer another controller already runs for it, otherwise through a metadata
// informer of its own), keeps an owner->dependents graph keyed by UID, and acts through the
// metadata client.
package garbagecollector

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
)

const (
	// rediscoverPeriod is how often served resources are listed again, to watch new ones.
	rediscoverPeriod = 30 * time.Second
	// foregroundRecheck re-examines an owner still waiting for dependents, in case an
	// event was missed.
	foregroundRecheck = 30 * time.Second
	// cacheSyncTimeout bounds the wait for the first list of every resource; the collector
	// works without a full cache (it checks owners live before deleting), only less well.
	cacheSyncTimeout = 60 * time.Second
)

// ignored resources are never watched: high volume and never owners or owned in practice.
var ignored = map[schema.GroupResource]bool{
	{Group: "", Resource: "events"}:              true,
	{Group: "events.k8s.io", Resource: "events"}: true,
}

// Controller is the garbage collector.
type Controller struct {
	meta      metadata.Interface
	discovery discovery.DiscoveryInterface
	mapper    *restmapper.DeferredDiscoveryRESTMapper
	factory   metadatainformer.SharedInformerFactory
	queue     workqueue.TypedRateLimitingInterface[types.UID]
	graph     *graph
	log       *logrus.Entry

	// typed are the controllers' shared typed informers: a resource one of them already
	// watches is observed through it rather than through a second watch of its metadata.
	typed informers.SharedInformerFactory

	mu       sync.Mutex
	monitors map[schema.GroupVersionResource]*monitor
}

// monitor is the watch of one resource.
type monitor struct {
	gvr        schema.GroupVersionResource
	namespaced bool
	informer   cache.SharedIndexInformer
}

// New returns the collector; it discovers the served resources when it runs, once the
// other controllers' informers have started (see syncMonitors).
func New(ctx *controllers.Context) (*Controller, error) {
	c := &Controller{
		meta:      ctx.Metadata,
		discovery: ctx.Discovery,
		mapper:    ctx.RESTMapper,
		factory:   ctx.MetadataInformers,
		typed:     ctx.Informers,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.UID](),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "garbagecollector"}),
		graph:    newGraph(),
		log:      logrus.WithField("controller", "garbagecollector"),
		monitors: map[schema.GroupVersionResource]*monitor{},
	}
	return c, nil
}

// Run processes the graph with workers goroutines until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()

	// A failed discovery is retried every rediscoverPeriod below.
	if _, err := c.syncMonitors(); err != nil {
		c.log.WithError(err).Warn("resource discovery")
	}
	c.factory.Start(ctx.Done())
	c.log.WithField("resources", len(c.synced())).Info("waiting for caches")
	syncCtx, cancel := context.WithTimeout(ctx, cacheSyncTimeout)
	if !cache.WaitForCacheSync(syncCtx.Done(), c.synced()...) {
		if ctx.Err() != nil {
			cancel()
			return nil
		}
		c.log.Warn("not every resource listed in time; starting anyway")
	}
	cancel()

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	wg.Go(func() {
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			added, err := c.syncMonitors()
			if err != nil {
				c.log.WithError(err).Warn("resource discovery")
			}
			if added > 0 {
				c.factory.Start(ctx.Done())
			}
		}, rediscoverPeriod)
	})
	c.log.WithField("workers", workers).Info("started")
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) synced() []cache.InformerSynced {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]cache.InformerSynced, 0, len(c.monitors))
	for _, m := range c.monitors {
		out = append(out, m.informer.HasSynced)
	}
	return out
}

// resourceInfo is what discovery says of a served resource.
type resourceInfo struct {
	kind       string
	namespaced bool
}

// deletableResources returns every served resource that can be listed, watched and deleted.
// A partial discovery failure still returns what was found, with the error.
func deletableResources(d discovery.DiscoveryInterface) (map[schema.GroupVersionResource]resourceInfo, error) {
	lists, err := d.ServerPreferredResources()
	if len(lists) == 0 && err != nil {
		return nil, fmt.Errorf("discover served resources: %w", err)
	}
	out := map[schema.GroupVersionResource]resourceInfo{}
	for _, list := range lists {
		gv, perr := schema.ParseGroupVersion(list.GroupVersion)
		if perr != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || ignored[gv.WithResource(r.Name).GroupResource()] {
				continue
			}
			if !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch") || !slices.Contains(r.Verbs, "delete") {
				continue
			}
			out[gv.WithResource(r.Name)] = resourceInfo{kind: r.Kind, namespaced: r.Namespaced}
		}
	}
	if err != nil {
		return out, fmt.Errorf("discover served resources (partial): %w", err)
	}
	return out, nil
}

// syncMonitors starts watching resources not watched yet and returns how many it added.
func (c *Controller) syncMonitors() (int, error) {
	resources, err := deletableResources(c.discovery)
	if resources == nil {
		return 0, err
	}
	running := c.runningTypedInformers()
	c.mu.Lock()
	defer c.mu.Unlock()
	added, shared := 0, 0
	for gvr, info := range resources {
		if c.monitors[gvr] != nil {
			continue
		}
		m := &monitor{gvr: gvr, namespaced: info.namespaced}
		if inf := c.typedInformer(running, gvr, info.kind); inf != nil {
			m.informer = inf
			shared++
		} else {
			m.informer = c.factory.ForResource(gvr).Informer()
		}
		_, herr := m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.observe(m, obj) },
			UpdateFunc: func(_, obj any) { c.observe(m, obj) },
			DeleteFunc: func(obj any) { c.forget(obj) },
		})
		if herr != nil {
			return added, fmt.Errorf("watch %s: %w", gvr, herr)
		}
		c.monitors[gvr] = m
		added++
	}
	if added > 0 {
		c.log.WithFields(logrus.Fields{"added": added, "typed": shared, "watched": len(c.monitors)}).Info("watching resources")
	}
	return added, err
}

func toNode(m *monitor, obj any) *node {
	o, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	return &node{
		gvr:        m.gvr,
		namespaced: m.namespaced,
		namespace:  o.GetNamespace(),
		name:       o.GetName(),
		uid:        o.GetUID(),
		owners:     o.GetOwnerReferences(),
		deleting:   o.GetDeletionTimestamp() != nil,
		finalizers: o.GetFinalizers(),
	}
}

// runningTypedInformers returns the object types of the typed informers already started.
func (c *Controller) runningTypedInformers() map[reflect.Type]bool {
	if c.typed == nil {
		return nil
	}
	// With a context already done, this returns at once: every started informer, synced or not.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	return c.typed.WaitForCacheSyncWithContext(done).Synced
}

// typedInformer returns the running typed informer of gvr (of the given kind), or nil if
// none runs. Only informers already running are used: starting a typed one here would cache
// whole objects where the collector needs their metadata.
func (c *Controller) typedInformer(running map[reflect.Type]bool, gvr schema.GroupVersionResource, kind string) cache.SharedIndexInformer {
	if len(running) == 0 {
		return nil
	}
	obj, err := scheme.Scheme.New(gvr.GroupVersion().WithKind(kind))
	if err != nil {
		return nil
	}
	if _, ok := running[reflect.TypeOf(obj)]; !ok {
		return nil
	}
	g, err := c.typed.ForResource(gvr)
	if err != nil {
		return nil
	}
	return g.Informer()
}

// observe records an added or updated object and queues whoever must react to it.
func (c *Controller) observe(m *monitor, obj any) {
	n := toNode(m, obj)
	if n == nil {
		return
	}
	old := c.graph.upsert(n)
	if old != nil && !ownersChanged(old, n) {
		return
	}
	if len(n.owners) > 0 || (n.deleting && (n.hasFinalizer(finalizerOrphan) || n.hasFinalizer(finalizerForeground))) {
		c.queue.Add(n.uid)
	}
	c.enqueueDeletingOwners(old, n)
}

// forget drops a deleted object and queues its dependents (their owner may be gone now)
// and its owners that wait for their dependents.
func (c *Controller) forget(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	old := c.graph.remove(o.GetUID())
	for _, d := range c.graph.dependentUIDs(o.GetUID()) {
		c.queue.Add(d)
	}
	if old != nil {
		c.enqueueDeletingOwners(old, nil)
	}
}

func (c *Controller) enqueueDeletingOwners(nodes ...*node) {
	for _, n := range nodes {
		if n == nil {
			continue
		}
		for _, r := range n.owners {
			if o := c.graph.get(r.UID); o != nil && o.deleting {
				c.queue.Add(r.UID)
			}
		}
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	uid, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(uid)
	if err := c.sync(ctx, uid); err != nil {
		c.log.WithFields(logrus.Fields{"uid": uid, "retries": c.queue.NumRequeues(uid)}).WithError(err).Warn("sync failed; retrying")
		c.queue.AddRateLimited(uid)
		return true
	}
	c.queue.Forget(uid)
	return true
}

// watched returns the resources watched now (for tests and diagnostics).
func (c *Controller) watched() sets.Set[schema.GroupVersionResource] {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := sets.New[schema.GroupVersionResource]()
	for gvr := range c.monitors {
		s.Insert(gvr)
	}
	return s
}
