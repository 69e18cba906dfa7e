package internal

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// RunWorkers runs a controller's queue until ctx ends: it waits for the informer caches, then
// workers goroutines hand each key to sync. A key whose sync fails is retried with the queue's
// rate limit; one that succeeds has its failure history forgotten. The queue is shut down on
// return.
func RunWorkers(ctx context.Context, name string, queue workqueue.TypedRateLimitingInterface[string], workers int,
	synced []cache.InformerSynced, sync func(ctx context.Context, key string) error) error {
	defer utilruntime.HandleCrash()
	defer queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("%s: caches did not sync", name)
	}
	logrus.WithField("controller", name).Info("started")
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for processNext(ctx, name, queue, sync) {
			}
		}, time.Second)
	}
	<-ctx.Done()
	return nil
}

// Enqueue adds the key of obj, an object or the tombstone of a deleted one, to queue.
func Enqueue(queue workqueue.TypedInterface[string], obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	queue.Add(key)
}

// processNext syncs one key; it returns false once the queue is shut down.
func processNext(ctx context.Context, name string, queue workqueue.TypedRateLimitingInterface[string],
	sync func(ctx context.Context, key string) error) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	if err := sync(ctx, key); err != nil {
		utilruntime.HandleError(fmt.Errorf("sync %s %s: %w", name, key, err))
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}
