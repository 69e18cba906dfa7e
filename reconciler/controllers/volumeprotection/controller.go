// Package volumeprotection keeps storage that is in use from being removed, as upstream's
// pvc-protection and pv-protection controllers do (storage object in use protection).
//
// Every PersistentVolumeClaim carries the finalizer kubernetes.io/pvc-protection and every
// PersistentVolume kubernetes.io/pv-protection: the API server's StorageObjectInUseProtection
// admission plugin adds them at create, and this controller adds them to the objects stored
// before it. A claim that is deleted stays (Terminating) while a pod scheduled to a host uses
// it; a volume that is deleted stays while it is Bound to a claim. Then the controller removes
// the finalizer and the API server finishes the delete.
package volumeprotection

import (
	"context"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
)

// The finalizers, named as upstream.
const (
	ClaimFinalizer  = "kubernetes.io/pvc-protection"
	VolumeFinalizer = "kubernetes.io/pv-protection"
)

// claimIndex indexes pods by the claims they use ("namespace/claim").
const claimIndex = "volumeprotection.claims"

// Controller is the storage protection controller. Its queue holds the keys of claims
// ("namespace/name") and of volumes ("name": a volume is cluster-wide, so its key has no
// slash).
type Controller struct {
	client    kubernetes.Interface
	claims    corelisters.PersistentVolumeClaimLister
	volumes   corelisters.PersistentVolumeLister
	podsIndex cache.Indexer
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *logrus.Entry
}

// New builds the controller and registers its informers on the shared factory.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	claimInformer := cctx.Informers.Core().V1().PersistentVolumeClaims()
	volumeInformer := cctx.Informers.Core().V1().PersistentVolumes()
	podInformer := cctx.Informers.Core().V1().Pods()
	c := &Controller{
		client:  cctx.Client,
		claims:  claimInformer.Lister(),
		volumes: volumeInformer.Lister(),
		synced: []cache.InformerSynced{claimInformer.Informer().HasSynced, volumeInformer.Informer().HasSynced,
			podInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "volumeprotection"}),
		log: logrus.WithField("controller", "volumeprotection"),
	}
	if err := podInformer.Informer().AddIndexers(cache.Indexers{claimIndex: podClaimKeys}); err != nil {
		return nil, fmt.Errorf("volumeprotection pod index: %w", err)
	}
	c.podsIndex = podInformer.Informer().GetIndexer()

	enqueue := func(obj any) { internal.Enqueue(c.queue, obj) }
	for name, inf := range map[string]cache.SharedIndexInformer{"claim": claimInformer.Informer(), "volume": volumeInformer.Informer()} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) },
		}); err != nil {
			return nil, fmt.Errorf("volumeprotection %s handler: %w", name, err)
		}
	}
	// A pod that goes (or ends, for the claims of its ephemeral volumes) may free a claim
	// being deleted.
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { c.enqueueClaimsOf(obj) },
		DeleteFunc: c.enqueueClaimsOf,
	}); err != nil {
		return nil, fmt.Errorf("volumeprotection pod handler: %w", err)
	}
	return c, nil
}

// Run processes claims and volumes with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "volumeprotection", c.queue, workers, c.synced, c.sync)
}

// enqueueClaimsOf queues the claims of a pod (or of the tombstone of a deleted one) that are
// being deleted.
func (c *Controller) enqueueClaimsOf(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	for _, name := range volumebinding.ClaimNames(pod) {
		if claim, err := c.claims.PersistentVolumeClaims(pod.Namespace).Get(name); err == nil && claim.DeletionTimestamp != nil {
			c.queue.Add(pod.Namespace + "/" + name)
		}
	}
}

// podClaimKeys is the index function of claimIndex.
func podClaimKeys(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	names := volumebinding.ClaimNames(pod)
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = pod.Namespace + "/" + n
	}
	return keys, nil
}

// isClaimKey tells a claim's key from a volume's.
func isClaimKey(key string) bool { return strings.Contains(key, "/") }
