// Package daemonset is the DaemonSet controller: it keeps one pod on every eligible node
// (nodeSelector, required node affinity, taints against tolerations), pins each pod to its
// node with a required node affinity on metadata.name and leaves the binding to the scheduler,
// adds the automatic daemon tolerations, rolls template changes out with RollingUpdate
// (maxUnavailable or maxSurge) or OnDelete, records templates as ControllerRevisions and
// reports the counts kubectl shows in status.
package daemonset

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
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
const Component = "daemonset-controller"

// BurstReplicas caps the pods created or deleted in one sync, as upstream.
const BurstReplicas = 250

var controllerKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// Controller is the DaemonSet controller.
type Controller struct {
	client       kubernetes.Interface
	dsLister     appslisters.DaemonSetLister
	podLister    corelisters.PodLister
	nodeLister   corelisters.NodeLister
	crLister     appslisters.ControllerRevisionLister
	synced       []cache.InformerSynced
	queue        workqueue.TypedRateLimitingInterface[string]
	recorder     record.EventRecorder
	expectations *expectations
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
	dsInformer := cctx.Informers.Apps().V1().DaemonSets()
	podInformer := cctx.Informers.Core().V1().Pods()
	nodeInformer := cctx.Informers.Core().V1().Nodes()
	crInformer := cctx.Informers.Apps().V1().ControllerRevisions()
	c := &Controller{
		client:     cctx.Client,
		dsLister:   dsInformer.Lister(),
		podLister:  podInformer.Lister(),
		nodeLister: nodeInformer.Lister(),
		crLister:   crInformer.Lister(),
		synced: []cache.InformerSynced{dsInformer.Informer().HasSynced, podInformer.Informer().HasSynced,
			nodeInformer.Informer().HasSynced, crInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "daemonset"}),
		recorder:     cctx.Recorder(Component),
		expectations: newExpectations(),
		burst:        BurstReplicas,
		now:          time.Now,
		log:          logrus.WithField("controller", "daemonset"),
	}
	if _, err := dsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.deleteDS,
	}); err != nil {
		return nil, fmt.Errorf("daemonset handler: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addPod,
		UpdateFunc: c.updatePod,
		DeleteFunc: c.deletePod,
	}); err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.enqueueAll() },
		UpdateFunc: func(old, cur any) {
			if nodeChanged(old.(*corev1.Node), cur.(*corev1.Node)) {
				c.enqueueAll()
			}
		},
		DeleteFunc: func(any) { c.enqueueAll() },
	}); err != nil {
		return nil, fmt.Errorf("node handler: %w", err)
	}
	if _, err := crInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueOwner,
		UpdateFunc: func(_, cur any) { c.enqueueOwner(cur) },
		DeleteFunc: c.enqueueOwner,
	}); err != nil {
		return nil, fmt.Errorf("controllerrevision handler: %w", err)
	}
	return c, nil
}

// Run processes DaemonSets with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "daemonset", c.queue, workers, c.synced, c.sync)
}

// nodeChanged reports whether a node update can change where daemon pods belong: heartbeats
// (status) change nothing the placement reads.
func nodeChanged(old, cur *corev1.Node) bool {
	return !labels.Equals(old.Labels, cur.Labels) || !apiequality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints)
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueueAll() {
	list, err := c.dsLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ds := range list {
		c.enqueue(ds)
	}
}

func (c *Controller) deleteDS(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.expectations.Delete(key)
	c.queue.Add(key)
}

func (c *Controller) enqueueOwner(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	if ref := metav1.GetControllerOf(m); ref != nil {
		if ds := c.resolveControllerRef(m.GetNamespace(), ref); ds != nil {
			c.enqueue(ds)
		}
	}
}

func metaOf(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not an object", obj)
	}
	return m, nil
}

// resolveControllerRef returns the DaemonSet a controller reference points to, if it still is
// that object.
func (c *Controller) resolveControllerRef(ns string, ref *metav1.OwnerReference) *appsv1.DaemonSet {
	owner, _ := internal.ResolveControllerRef(ref, controllerKind, c.dsLister.DaemonSets(ns).Get)
	return owner
}

// daemonSetsForPod returns the DaemonSets whose selector matches an orphan pod.
func (c *Controller) daemonSetsForPod(pod *corev1.Pod) []*appsv1.DaemonSet {
	list, err := c.dsLister.DaemonSets(pod.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	return internal.SelectingOwners(list, func(ds *appsv1.DaemonSet) *metav1.LabelSelector { return ds.Spec.Selector }, pod.Labels)
}

func (c *Controller) addPod(obj any) {
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		c.deletePod(pod)
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		ds := c.resolveControllerRef(pod.Namespace, ref)
		if ds == nil {
			return
		}
		key, _ := cache.MetaNamespaceKeyFunc(ds)
		c.expectations.CreationObserved(key)
		c.queue.Add(key)
		return
	}
	for _, ds := range c.daemonSetsForPod(pod) {
		c.enqueue(ds)
	}
}

func (c *Controller) updatePod(old, cur any) {
	oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
	if oldPod.ResourceVersion == curPod.ResourceVersion {
		return
	}
	if curPod.DeletionTimestamp != nil {
		// Graceful deletion shows up as an update: the pod stops counting now.
		c.deletePod(curPod)
		return
	}
	curRef, oldRef := metav1.GetControllerOf(curPod), metav1.GetControllerOf(oldPod)
	refChanged := (curRef == nil) != (oldRef == nil) || (curRef != nil && curRef.UID != oldRef.UID)
	if refChanged && oldRef != nil {
		if ds := c.resolveControllerRef(oldPod.Namespace, oldRef); ds != nil {
			c.enqueue(ds)
		}
	}
	if curRef != nil {
		ds := c.resolveControllerRef(curPod.Namespace, curRef)
		if ds == nil {
			return
		}
		c.enqueue(ds)
		// Availability changes minReadySeconds after readiness without any event: look again.
		if !internal.IsPodReady(oldPod) && internal.IsPodReady(curPod) && ds.Spec.MinReadySeconds > 0 {
			key, _ := cache.MetaNamespaceKeyFunc(ds)
			c.queue.AddAfter(key, time.Duration(ds.Spec.MinReadySeconds)*time.Second+time.Second)
		}
		return
	}
	if refChanged || !labels.Equals(oldPod.Labels, curPod.Labels) {
		for _, ds := range c.daemonSetsForPod(curPod) {
			c.enqueue(ds)
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
	ds := c.resolveControllerRef(pod.Namespace, ref)
	if ds == nil {
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(ds)
	c.expectations.DeletionObserved(key, internal.PodKey(pod))
	c.queue.Add(key)
}
