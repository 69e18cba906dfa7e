// Package deployment is the Deployment controller: it rolls a Deployment's pod template out
// through ReplicaSets named <deployment>-<pod-template-hash>, with the RollingUpdate
// (maxSurge/maxUnavailable) or Recreate strategy, keeps revisions for rollback, and reports
// progress in status conditions that kubectl rollout status reads.
package deployment

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
const Component = "deployment-controller"

var controllerKind = appsv1.SchemeGroupVersion.WithKind("Deployment")

// Controller is the Deployment controller.
type Controller struct {
	client    kubernetes.Interface
	dLister   appslisters.DeploymentLister
	rsLister  appslisters.ReplicaSetLister
	podLister corelisters.PodLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	recorder  record.EventRecorder
	now       func() time.Time
	log       *logrus.Entry
}

// New builds the controller and registers its informers on the shared factories.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	dInformer := cctx.Informers.Apps().V1().Deployments()
	rsInformer := cctx.Informers.Apps().V1().ReplicaSets()
	podInformer := cctx.Informers.Core().V1().Pods()
	c := &Controller{
		client:    cctx.Client,
		dLister:   dInformer.Lister(),
		rsLister:  rsInformer.Lister(),
		podLister: podInformer.Lister(),
		synced: []cache.InformerSynced{dInformer.Informer().HasSynced, rsInformer.Informer().HasSynced,
			podInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "deployment"}),
		recorder: cctx.Recorder(Component),
		now:      time.Now,
		log:      logrus.WithField("controller", "deployment"),
	}
	if _, err := dInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, fmt.Errorf("deployment handler: %w", err)
	}
	if _, err := rsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addRS,
		UpdateFunc: c.updateRS,
		DeleteFunc: c.deleteRS,
	}); err != nil {
		return nil, fmt.Errorf("replicaset handler: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: c.deletePod,
	}); err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	return c, nil
}

// Run processes Deployments with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "deployment", c.queue, workers, c.synced, c.sync)
}

func (c *Controller) enqueue(obj any) { internal.Enqueue(c.queue, obj) }

func (c *Controller) resolveControllerRef(ns string, ref *metav1.OwnerReference) *appsv1.Deployment {
	owner, _ := internal.ResolveControllerRef(ref, controllerKind, c.dLister.Deployments(ns).Get)
	return owner
}

// deploymentsForRS returns the Deployments whose selector matches an orphan ReplicaSet.
func (c *Controller) deploymentsForRS(rs *appsv1.ReplicaSet) []*appsv1.Deployment {
	list, err := c.dLister.Deployments(rs.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	return internal.SelectingOwners(list, func(d *appsv1.Deployment) *metav1.LabelSelector { return d.Spec.Selector }, rs.Labels)
}

func (c *Controller) addRS(obj any) {
	rs := obj.(*appsv1.ReplicaSet)
	if rs.DeletionTimestamp != nil {
		c.deleteRS(rs)
		return
	}
	if ref := metav1.GetControllerOf(rs); ref != nil {
		if d := c.resolveControllerRef(rs.Namespace, ref); d != nil {
			c.enqueue(d)
		}
		return
	}
	for _, d := range c.deploymentsForRS(rs) {
		c.enqueue(d)
	}
}

func (c *Controller) updateRS(old, cur any) {
	oldRS, curRS := old.(*appsv1.ReplicaSet), cur.(*appsv1.ReplicaSet)
	if oldRS.ResourceVersion == curRS.ResourceVersion {
		return
	}
	curRef, oldRef := metav1.GetControllerOf(curRS), metav1.GetControllerOf(oldRS)
	refChanged := (curRef == nil) != (oldRef == nil) || (curRef != nil && curRef.UID != oldRef.UID)
	if refChanged && oldRef != nil {
		if d := c.resolveControllerRef(oldRS.Namespace, oldRef); d != nil {
			c.enqueue(d)
		}
	}
	if curRef != nil {
		if d := c.resolveControllerRef(curRS.Namespace, curRef); d != nil {
			c.enqueue(d)
		}
		return
	}
	if refChanged || !labels.Equals(oldRS.Labels, curRS.Labels) {
		for _, d := range c.deploymentsForRS(curRS) {
			c.enqueue(d)
		}
	}
}

func (c *Controller) deleteRS(obj any) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if rs, ok = tomb.Obj.(*appsv1.ReplicaSet); !ok {
			return
		}
	}
	if ref := metav1.GetControllerOf(rs); ref != nil {
		if d := c.resolveControllerRef(rs.Namespace, ref); d != nil {
			c.enqueue(d)
		}
	}
}

// deletePod wakes a Recreate Deployment when the last pod of its old ReplicaSets is gone.
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
	if ref == nil || ref.Kind != "ReplicaSet" {
		return
	}
	rs, err := c.rsLister.ReplicaSets(pod.Namespace).Get(ref.Name)
	if err != nil || rs.UID != ref.UID {
		return
	}
	dref := metav1.GetControllerOf(rs)
	if dref == nil {
		return
	}
	d := c.resolveControllerRef(rs.Namespace, dref)
	if d == nil || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		return
	}
	c.enqueue(d)
}
