// Package statefulset is the StatefulSet controller: it runs one pod per ordinal with a stable
// name, hostname and PersistentVolumeClaims, in order (OrderedReady) or all at once
// (Parallel), keeps the template history in ControllerRevisions, rolls updates from the
// highest ordinal down (RollingUpdate with partition and maxUnavailable, or OnDelete) and
// reports the counts and revisions in status.
package statefulset

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
const Component = "statefulset-controller"

var controllerKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")

// Controller is the StatefulSet controller.
type Controller struct {
	client       kubernetes.Interface
	setLister    appslisters.StatefulSetLister
	podLister    corelisters.PodLister
	revLister    appslisters.ControllerRevisionLister
	pvcLister    corelisters.PersistentVolumeClaimLister
	synced       []cache.InformerSynced
	queue        workqueue.TypedRateLimitingInterface[string]
	recorder     record.EventRecorder
	expectations *internal.Expectations
	now          func() time.Time
	log          *logrus.Entry
}

// New builds the controller and registers its informers on the shared factories.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	return NewController(cctx)
}

// NewController is New with the concrete type.
func NewController(cctx *controllers.Context) (*Controller, error) {
	setInformer := cctx.Informers.Apps().V1().StatefulSets()
	podInformer := cctx.Informers.Core().V1().Pods()
	revInformer := cctx.Informers.Apps().V1().ControllerRevisions()
	pvcInformer := cctx.Informers.Core().V1().PersistentVolumeClaims()
	c := &Controller{
		client:    cctx.Client,
		setLister: setInformer.Lister(),
		podLister: podInformer.Lister(),
		revLister: revInformer.Lister(),
		pvcLister: pvcInformer.Lister(),
		synced: []cache.InformerSynced{setInformer.Informer().HasSynced, podInformer.Informer().HasSynced,
			revInformer.Informer().HasSynced, pvcInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "statefulset"}),
		recorder:     cctx.Recorder(Component),
		expectations: internal.NewExpectations(),
		now:          time.Now,
		log:          logrus.WithField("controller", "statefulset"),
	}
	if _, err := setInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.deleteSet,
	}); err != nil {
		return nil, fmt.Errorf("statefulset handler: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addPod,
		UpdateFunc: c.updatePod,
		DeleteFunc: c.deletePod,
	}); err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	// A claim being collected holds back the pod of its ordinal: look again when it is gone.
	if _, err := pvcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) { c.enqueueClaimOwner(cur) },
		DeleteFunc: c.enqueueClaimOwner,
	}); err != nil {
		return nil, fmt.Errorf("pvc handler: %w", err)
	}
	return c, nil
}

// Run processes StatefulSets with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "statefulset", c.queue, workers, c.synced, c.sync)
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) deleteSet(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.expectations.Delete(key)
	c.queue.Add(key)
}

// resolveControllerRef returns the StatefulSet a controller reference points to, if it still
// is that object.
func (c *Controller) resolveControllerRef(ns string, ref *metav1.OwnerReference) *appsv1.StatefulSet {
	owner, _ := internal.ResolveControllerRef(ref, controllerKind, c.setLister.StatefulSets(ns).Get)
	return owner
}

// setsForPod returns the StatefulSets that could adopt an orphan pod.
func (c *Controller) setsForPod(pod *corev1.Pod) []*appsv1.StatefulSet {
	list, err := c.setLister.StatefulSets(pod.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var members []*appsv1.StatefulSet
	for _, set := range list {
		if isMemberOf(set, pod) {
			members = append(members, set)
		}
	}
	return internal.SelectingOwners(members, func(set *appsv1.StatefulSet) *metav1.LabelSelector { return set.Spec.Selector }, pod.Labels)
}

func (c *Controller) addPod(obj any) {
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		c.deletePod(pod)
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		set := c.resolveControllerRef(pod.Namespace, ref)
		if set == nil {
			return
		}
		key, _ := cache.MetaNamespaceKeyFunc(set)
		c.expectations.CreationObserved(key)
		c.queue.Add(key)
		return
	}
	for _, set := range c.setsForPod(pod) {
		c.enqueue(set)
	}
}

func (c *Controller) updatePod(old, cur any) {
	oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
	if oldPod.ResourceVersion == curPod.ResourceVersion {
		return
	}
	if curPod.DeletionTimestamp != nil && oldPod.DeletionTimestamp == nil {
		c.deletePod(curPod)
		return
	}
	curRef, oldRef := metav1.GetControllerOf(curPod), metav1.GetControllerOf(oldPod)
	if oldRef != nil && (curRef == nil || curRef.UID != oldRef.UID) {
		if set := c.resolveControllerRef(oldPod.Namespace, oldRef); set != nil {
			c.enqueue(set)
		}
	}
	if curRef != nil {
		set := c.resolveControllerRef(curPod.Namespace, curRef)
		if set == nil {
			return
		}
		c.enqueue(set)
		// Availability changes minReadySeconds after readiness without any event: look again.
		if !internal.IsPodReady(oldPod) && internal.IsPodReady(curPod) && set.Spec.MinReadySeconds > 0 {
			key, _ := cache.MetaNamespaceKeyFunc(set)
			c.queue.AddAfter(key, time.Duration(set.Spec.MinReadySeconds)*time.Second+time.Second)
		}
		return
	}
	if !labels.Equals(oldPod.Labels, curPod.Labels) || oldRef != nil {
		for _, set := range c.setsForPod(curPod) {
			c.enqueue(set)
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
	set := c.resolveControllerRef(pod.Namespace, ref)
	if set == nil {
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(set)
	c.expectations.DeletionObserved(key, internal.PodKey(pod))
	c.queue.Add(key)
}

// enqueueClaimOwner enqueues the set whose name a claim "<template>-<set>-<ordinal>" carries.
func (c *Controller) enqueueClaimOwner(obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if pvc, ok = tomb.Obj.(*corev1.PersistentVolumeClaim); !ok {
			return
		}
	}
	sets, err := c.setLister.StatefulSets(pvc.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, set := range sets {
		for _, t := range set.Spec.VolumeClaimTemplates {
			prefix := t.Name + "-" + set.Name + "-"
			if len(pvc.Name) > len(prefix) && pvc.Name[:len(prefix)] == prefix {
				c.enqueue(set)
			}
		}
	}
}
