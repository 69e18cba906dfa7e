// Package disruption is the PodDisruptionBudget controller: for each budget it counts the
// pods its selector matches, the pods their controllers want (scale) and the healthy ones,
// and writes how many voluntary disruptions (evictions) are allowed now into the budget's
// status, which the eviction subresource of the API consumes.
package disruption

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Component is the event source of the controller, as upstream.
const Component = "controllermanager"

// DeletionTimeout is how long a pod the eviction subresource recorded in
// status.disruptedPods stays counted as disrupted without being deleted, as upstream.
const DeletionTimeout = 2 * time.Minute

// Controller is the PodDisruptionBudget controller.
type Controller struct {
	client    kubernetes.Interface
	pdbLister policylisters.PodDisruptionBudgetLister
	podLister corelisters.PodLister
	rsLister  appslisters.ReplicaSetLister
	dLister   appslisters.DeploymentLister
	ssLister  appslisters.StatefulSetLister
	scales    scale.ScalesGetter
	mapper    meta.RESTMapper
	discovery discovery.DiscoveryInterface
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	recorder  record.EventRecorder
	now       func() time.Time
	log       *logrus.Entry
}

// New builds the controller and registers its informers on the shared factory.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	return NewController(cctx)
}

// NewController is New with the concrete type.
func NewController(cctx *controllers.Context) (*Controller, error) {
	scales, err := scale.NewForConfig(cctx.Config, cctx.RESTMapper, dynamic.LegacyAPIPathResolverFunc,
		scale.NewDiscoveryScaleKindResolver(cctx.Discovery))
	if err != nil {
		return nil, fmt.Errorf("scale client: %w", err)
	}
	pdbInformer := cctx.Informers.Policy().V1().PodDisruptionBudgets()
	podInformer := cctx.Informers.Core().V1().Pods()
	rsInformer := cctx.Informers.Apps().V1().ReplicaSets()
	dInformer := cctx.Informers.Apps().V1().Deployments()
	ssInformer := cctx.Informers.Apps().V1().StatefulSets()
	c := &Controller{
		client:    cctx.Client,
		pdbLister: pdbInformer.Lister(),
		podLister: podInformer.Lister(),
		rsLister:  rsInformer.Lister(),
		dLister:   dInformer.Lister(),
		ssLister:  ssInformer.Lister(),
		scales:    scales,
		mapper:    cctx.RESTMapper,
		discovery: cctx.Discovery,
		synced: []cache.InformerSynced{pdbInformer.Informer().HasSynced, podInformer.Informer().HasSynced,
			rsInformer.Informer().HasSynced, dInformer.Informer().HasSynced, ssInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "disruption"}),
		recorder: cctx.Recorder(Component),
		now:      time.Now,
		log:      logrus.WithField("controller", "disruption"),
	}
	if _, err := pdbInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { internal.Enqueue(c.queue, obj) },
		UpdateFunc: func(_, cur any) { internal.Enqueue(c.queue, cur) },
		DeleteFunc: func(obj any) { internal.Enqueue(c.queue, obj) },
	}); err != nil {
		return nil, fmt.Errorf("poddisruptionbudget handler: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueForPod(obj) },
		UpdateFunc: func(old, cur any) {
			oldPod, curPod := old.(*corev1.Pod), cur.(*corev1.Pod)
			if oldPod.ResourceVersion == curPod.ResourceVersion {
				return
			}
			c.enqueueForPod(curPod)
			if !labels.Equals(oldPod.Labels, curPod.Labels) {
				c.enqueueForPod(oldPod)
			}
		},
		DeleteFunc: c.enqueueForPod,
	}); err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	// A controller's scale changing moves expectedPods before any of its pods changes.
	replicas := func(obj any) (int32, string, bool) {
		switch o := obj.(type) {
		case *appsv1.ReplicaSet:
			return ptrValue(o.Spec.Replicas), o.Namespace, true
		case *appsv1.Deployment:
			return ptrValue(o.Spec.Replicas), o.Namespace, true
		case *appsv1.StatefulSet:
			return ptrValue(o.Spec.Replicas), o.Namespace, true
		}
		return 0, "", false
	}
	scaleHandler := cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, cur any) {
		o, _, ok1 := replicas(old)
		n, ns, ok2 := replicas(cur)
		if ok1 && ok2 && o != n {
			c.enqueueNamespace(ns)
		}
	}}
	for name, inf := range map[string]cache.SharedIndexInformer{"replicaset": rsInformer.Informer(),
		"deployment": dInformer.Informer(), "statefulset": ssInformer.Informer()} {
		if _, err := inf.AddEventHandler(scaleHandler); err != nil {
			return nil, fmt.Errorf("%s handler: %w", name, err)
		}
	}
	return c, nil
}

// Run processes PodDisruptionBudgets with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "disruption", c.queue, workers, c.synced, c.sync)
}

// enqueueForPod queues every budget whose selector matches the pod (or its tombstone).
func (c *Controller) enqueueForPod(obj any) {
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
	// The lister answers an error when no budget matches.
	pdbs, _ := c.pdbLister.GetPodPodDisruptionBudgets(pod)
	for _, pdb := range pdbs {
		internal.Enqueue(c.queue, pdb)
	}
}

func (c *Controller) enqueueNamespace(ns string) {
	pdbs, err := c.pdbLister.PodDisruptionBudgets(ns).List(labels.Everything())
	if err != nil {
		return
	}
	for _, pdb := range pdbs {
		internal.Enqueue(c.queue, pdb)
	}
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
