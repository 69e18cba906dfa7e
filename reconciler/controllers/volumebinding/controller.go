// Package volumebinding is the static part of the PersistentVolume controller: it binds
// unbound claims to the smallest matching Available volume (or to the volume they name),
// waits for a node for WaitForFirstConsumer claims (flotilla-local), and releases or deletes
// volumes whose claim is gone. Provisioning new volumes is the node agent's job; a volume it
// creates pre-bound to a claim (claimRef without UID) is bound here like any other.
package volumebinding

import (
	"context"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Component is the event source of the controller, as upstream.
const Component = "persistentvolume-controller"

// Queue keys carry the kind: claims are namespaced, volumes are not.
const (
	claimPrefix  = "claim:"
	volumePrefix = "volume:"
)

// Controller binds PersistentVolumeClaims to PersistentVolumes.
type Controller struct {
	client   kubernetes.Interface
	claims   corelisters.PersistentVolumeClaimLister
	volumes  corelisters.PersistentVolumeLister
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *logrus.Entry
}

// New builds the controller and registers its informers on the shared factory.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	return NewController(cctx)
}

// NewController is New with the concrete type.
func NewController(cctx *controllers.Context) (*Controller, error) {
	claimInf := cctx.Informers.Core().V1().PersistentVolumeClaims()
	volumeInf := cctx.Informers.Core().V1().PersistentVolumes()
	nodeInf := cctx.Informers.Core().V1().Nodes()
	c := &Controller{
		client: cctx.Client, claims: claimInf.Lister(), volumes: volumeInf.Lister(), nodes: nodeInf.Lister(),
		synced: []cache.InformerSynced{claimInf.Informer().HasSynced, volumeInf.Informer().HasSynced, nodeInf.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "volumebinding"}),
		recorder: cctx.Recorder(Component),
		log:      logrus.WithField("controller", "volumebinding"),
	}
	if _, err := claimInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.claimChanged,
		UpdateFunc: func(_, cur any) { c.claimChanged(cur) },
		DeleteFunc: c.claimDeleted,
	}); err != nil {
		return nil, fmt.Errorf("persistentvolumeclaim handler: %w", err)
	}
	if _, err := volumeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.volumeChanged,
		UpdateFunc: func(_, cur any) { c.volumeChanged(cur) },
		DeleteFunc: c.volumeChanged,
	}); err != nil {
		return nil, fmt.Errorf("persistentvolume handler: %w", err)
	}
	// A delayed claim may name a node the cache has not seen yet.
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.nodeChanged, UpdateFunc: func(_, cur any) { c.nodeChanged(cur) },
	}); err != nil {
		return nil, fmt.Errorf("node handler: %w", err)
	}
	return c, nil
}

// Run processes claims and volumes until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "volumebinding", c.queue, workers, c.synced, c.sync)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	switch {
	case strings.HasPrefix(key, claimPrefix):
		return c.syncClaim(ctx, strings.TrimPrefix(key, claimPrefix))
	case strings.HasPrefix(key, volumePrefix):
		return c.syncVolume(ctx, strings.TrimPrefix(key, volumePrefix))
	}
	return nil
}

func (c *Controller) enqueueClaim(namespace, name string) {
	c.queue.Add(claimPrefix + namespace + "/" + name)
}

func (c *Controller) enqueueVolume(name string) {
	c.queue.Add(volumePrefix + name)
}

func (c *Controller) claimChanged(obj any) {
	claim, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	c.enqueueClaim(claim.Namespace, claim.Name)
	if claim.Spec.VolumeName != "" {
		c.enqueueVolume(claim.Spec.VolumeName)
	}
}

// claimDeleted wakes every volume that refers to the claim, so it is released.
func (c *Controller) claimDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	claim, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	if claim.Spec.VolumeName != "" {
		c.enqueueVolume(claim.Spec.VolumeName)
	}
	volumes, _ := c.volumes.List(labels.Everything())
	for _, pv := range volumes {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == claim.Namespace && ref.Name == claim.Name {
			c.enqueueVolume(pv.Name)
		}
	}
}

// volumeChanged syncs the volume and its claim, and gives every waiting claim another look:
// this is what retries a Pending claim, instead of a timer.
func (c *Controller) volumeChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return
	}
	c.enqueueVolume(pv.Name)
	if ref := pv.Spec.ClaimRef; ref != nil {
		c.enqueueClaim(ref.Namespace, ref.Name)
	}
	claims, _ := c.claims.List(labels.Everything())
	for _, claim := range claims {
		if claim.Status.Phase != corev1.ClaimBound {
			c.enqueueClaim(claim.Namespace, claim.Name)
		}
	}
}

func (c *Controller) nodeChanged(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	claims, _ := c.claims.List(labels.Everything())
	for _, claim := range claims {
		if claim.Status.Phase != corev1.ClaimBound && claim.Annotations[AnnSelectedNode] == node.Name {
			c.enqueueClaim(claim.Namespace, claim.Name)
		}
	}
}
