// Package namespace empties namespaces that are being deleted: it deletes every namespaced
// object in them, reports progress in the namespace's status conditions, and when nothing is
// left removes the "kubernetes" finalizer (namespaces/finalize) and deletes the namespace
// again, which then removes it.
package namespace

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
)

const (
	// contentRecheck is how soon a namespace whose content is still going is looked at again:
	// objects in it are not watched, so this is a poll.
	contentRecheck = 1 * time.Second
	// resync re-examines every terminating namespace, in case a pass was lost.
	resync = 5 * time.Minute
)

// Controller is the namespace deletion controller.
type Controller struct {
	client    kubernetes.Interface
	meta      metadata.Interface
	dynamic   dynamic.Interface
	discovery discovery.DiscoveryInterface
	lister    corelisters.NamespaceLister
	synced    cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *logrus.Entry
}

// New registers a namespace informer on ctx.Informers.
func New(ctx *controllers.Context) (*Controller, error) {
	inf := ctx.Informers.Core().V1().Namespaces()
	c := &Controller{
		client:    ctx.Client,
		meta:      ctx.Metadata,
		dynamic:   ctx.Dynamic,
		discovery: ctx.Discovery,
		lister:    inf.Lister(),
		synced:    inf.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "namespace"}),
		log: logrus.WithField("controller", "namespace"),
	}
	enqueue := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok && ns.DeletionTimestamp != nil {
			c.queue.Add(ns.Name)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watch namespaces: %w", err)
	}
	return c, nil
}

// Run empties terminating namespaces with workers goroutines until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return nil // ctx done
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	wg.Go(func() { wait.UntilWithContext(ctx, c.enqueueTerminating, resync) })
	c.log.WithField("workers", workers).Info("started")
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// enqueueTerminating queues every namespace being deleted, in case a pass was lost.
func (c *Controller) enqueueTerminating(context.Context) {
	all, err := c.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ns := range all {
		if ns.DeletionTimestamp != nil {
			c.queue.Add(ns.Name)
		}
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	requeue, err := c.sync(ctx, name)
	switch {
	case err != nil:
		c.log.WithField("namespace", name).WithError(err).Warn("deletion not finished; retrying")
		c.queue.AddRateLimited(name)
	case requeue:
		c.queue.Forget(name)
		c.queue.AddAfter(name, contentRecheck)
	default:
		c.queue.Forget(name)
	}
	return true
}
