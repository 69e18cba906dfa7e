// Package replicaset is the ReplicaSet controller: it keeps spec.replicas active pods that
// match a ReplicaSet's selector, creating them from the template, adopting matching orphans,
// releasing pods whose labels stop matching and deleting the surplus, and reports the counts
// in status.
package replicaset

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Component is the event source of the controller, as upstream.
const Component = "replicaset-controller"

// BurstReplicas caps the pods created or deleted in one sync, as upstream.
const BurstReplicas = 500

var controllerKind = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")

// Controller is the ReplicaSet controller.
type Controller struct {
	client       kubernetes.Interface
	rsLister     appslisters.ReplicaSetLister
	podLister    corelisters.PodLister
	synced       []cache.InformerSynced
	queue        workqueue.TypedRateLimitingInterface[string]
	recorder     record.EventRecorder
	expectations *internal.Expectations
	burst        int
	now          func() time.Time
	log          *logrus.Entry
}

// New builds the controller and registers its informers on the shared factories.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	return NewController(cctx)
}

// NewController is New with the concrete type.
func NewController(cctx *controllers.Context) (*Controller, error) {
	rsInformer := cctx.Informers.Apps().V1().ReplicaSets()
	podInformer := cctx.Informers.Core().V1().Pods()
	c := &Controller{
		client:    cctx.Client,
		rsLister:  rsInformer.Lister(),
		podLister: podInformer.Lister(),
		synced:    []cache.InformerSynced{rsInformer.Informer().HasSynced, podInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "replicaset"}),
		recorder:     cctx.Recorder(Component),
		expectations: internal.NewExpectations(),
		burst:        BurstReplicas,
		now:          time.Now,
		log:          logrus.WithField("controller", "replicaset"),
	}
	if _, err := rsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.deleteRS,
	}); err != nil {
		return nil, fmt.Errorf("replicaset handler: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addPod,
		UpdateFunc: c.updatePod,
		DeleteFunc: c.deletePod,
	}); err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	return c, nil
}

// Run processes ReplicaSets with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "replicaset", c.queue, workers, c.synced, c.sync)
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) deleteRS(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.expectations.Delete(key)
	c.queue.Add(key)
}

// resolveControllerRef returns the ReplicaSet a controller reference points to, if it still
// is that object.
func (c *Controller) resolveControllerRef(ns string, ref *metav1.OwnerReference) *appsv1.ReplicaSet {
	owner, _ := internal.ResolveControllerRef(ref, controllerKind, c.rsLister.ReplicaSets(ns).Get)
	return owner
}

// replicaSetsForPod returns the ReplicaSets whose selector matches an orphan pod.
func (c *Controller) replicaSetsForPod(pod *corev1.Pod) []*appsv1.ReplicaSet {
	list, err := c.rsLister.ReplicaSets(pod.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	return internal.SelectingOwners(list, func(rs *appsv1.ReplicaSet) *metav1.LabelSelector { return rs.Spec.Selector }, pod.Labels)
}

func (c *Controller) addPod(obj any) {
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		// A restarted controller can see a pod already being deleted: count it as deleted.
		c.deletePod(pod)
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		rs := c.resolveControllerRef(pod.Namespace, ref)
		if rs == nil {
			return
		}
		key, _ := cache.MetaNamespaceKeyFunc(rs)
		c.expectations.CreationObserved(key)
		c.queue.Add(key)
		return
	}
	for _, rs := range c.replicaSetsForPod(pod) {
		c.enqueue(rs)
	}
}

func (c *Controller) updatePod(old, cur any) {
	oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
	if oldPod.ResourceVersion == curPod.ResourceVersion {
		return
	}
	labelChanged := !labels.Equals(oldPod.Labels, curPod.Labels)
	if curPod.DeletionTimestamp != nil {
		// Graceful deletion shows up as an update: the pod stops counting now, not when
		// the node agent confirms.
		c.deletePod(curPod)
		if labelChanged {
			c.deletePod(oldPod)
		}
		return
	}
	curRef, oldRef := metav1.GetControllerOf(curPod), metav1.GetControllerOf(oldPod)
	refChanged := (curRef == nil) != (oldRef == nil) || (curRef != nil && curRef.UID != oldRef.UID)
	if refChanged && oldRef != nil {
		if rs := c.resolveControllerRef(oldPod.Namespace, oldRef); rs != nil {
			c.enqueue(rs)
		}
	}
	if curRef != nil {
		rs := c.resolveControllerRef(curPod.Namespace, curRef)
		if rs == nil {
			return
		}
		c.enqueue(rs)
		// Availability changes minReadySeconds after readiness without any event: look again.
		if !internal.IsPodReady(oldPod) && internal.IsPodReady(curPod) && rs.Spec.MinReadySeconds > 0 {
			key, _ := cache.MetaNamespaceKeyFunc(rs)
			c.queue.AddAfter(key, time.Duration(rs.Spec.MinReadySeconds)*time.Second+time.Second)
		}
		return
	}
	if labelChanged || refChanged {
		for _, rs := range c.replicaSetsForPod(curPod) {
			c.enqueue(rs)
		}
	}
}

func (c *Controller) deletePod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if pod, ok = tomb.Obj.(*corev1.Pod); !ok {
			return
		}
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return
	}
	rs := c.resolveControllerRef(pod.Namespace, ref)
	if rs == nil {
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(rs)
	c.expectations.DeletionObserved(key, internal.PodKey(pod))
	c.queue.Add(key)
}
