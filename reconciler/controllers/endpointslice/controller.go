// Package endpointslice is the EndpointSlice controller: for every Service with a selector it
// keeps EndpointSlices of the selected pods (at most MaxEndpointsPerSlice each, grouped by the
// ports each pod resolves) and the legacy Endpoints object of the same name. Services
// without a selector are left to slices and Endpoints their users write.
package endpointslice

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// ControllerName is the managed-by value of the slices this controller owns, as upstream;
// slices with another managed-by value are left alone.
const ControllerName = "endpointslice-controller.k8s.io"

// Component is the event source of the controller, as upstream.
const Component = "endpointslice-controller"

// MaxEndpointsPerSlice is the default capacity of one slice, as upstream.
const MaxEndpointsPerSlice = 100

// Controller is the EndpointSlice and Endpoints controller.
type Controller struct {
	client      kubernetes.Interface
	svcLister   corelisters.ServiceLister
	podLister   corelisters.PodLister
	nodeLister  corelisters.NodeLister
	sliceLister discoverylisters.EndpointSliceLister
	epLister    corelisters.EndpointsLister
	synced      []cache.InformerSynced
	queue       workqueue.TypedRateLimitingInterface[string]
	recorder    record.EventRecorder
	tracker     *tracker
	// MaxEndpoints is the capacity of one slice; tests lower it.
	MaxEndpoints int
	log          *logrus.Entry
}

// New builds the controller and registers its informers on the shared factories.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	return NewController(cctx)
}

// NewController is New with the concrete type.
func NewController(cctx *controllers.Context) (*Controller, error) {
	core := cctx.Informers.Core().V1()
	svcInf, podInf, nodeInf := core.Services(), core.Pods(), core.Nodes()
	epInf := core.Endpoints() // deprecated upstream, still maintained for older clients
	sliceInf := cctx.Informers.Discovery().V1().EndpointSlices()
	c := &Controller{
		client:      cctx.Client,
		svcLister:   svcInf.Lister(),
		podLister:   podInf.Lister(),
		nodeLister:  nodeInf.Lister(),
		sliceLister: sliceInf.Lister(),
		epLister:    epInf.Lister(),
		synced: []cache.InformerSynced{svcInf.Informer().HasSynced, podInf.Informer().HasSynced,
			nodeInf.Informer().HasSynced, sliceInf.Informer().HasSynced, epInf.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpointslice"}),
		recorder:     cctx.Recorder(Component),
		tracker:      newTracker(),
		MaxEndpoints: MaxEndpointsPerSlice,
		log:          logrus.WithField("controller", "endpointslice"),
	}
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{svcInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueue,
			UpdateFunc: func(_, cur any) { c.enqueue(cur) },
			DeleteFunc: c.enqueue,
		}},
		{podInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.podChanged(nil, obj) },
			UpdateFunc: c.podChanged,
			DeleteFunc: func(obj any) { c.podChanged(nil, obj) },
		}},
		{nodeInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.nodeChanged(&corev1.Node{}, obj) },
			UpdateFunc: c.nodeChanged,
		}},
		{sliceInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.sliceChanged,
			UpdateFunc: func(_, cur any) { c.sliceChanged(cur) },
			DeleteFunc: c.sliceChanged,
		}},
		// Someone else's edit or delete of the Endpoints is repaired.
		{epInf.Informer(), cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, cur any) { c.enqueue(cur) },
			DeleteFunc: c.enqueue,
		}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, fmt.Errorf("endpointslice handler: %w", err)
		}
	}
	return c, nil
}

// Run processes Services with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "endpointslice", c.queue, workers, c.synced, c.sync)
}

func (c *Controller) enqueue(obj any) { internal.Enqueue(c.queue, obj) }

func unwrap[T any](obj any) (T, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

// podChanged enqueues the Services selecting the pod before or after the change.
func (c *Controller) podChanged(old, cur any) {
	pod, ok := unwrap[*corev1.Pod](cur)
	if !ok {
		return
	}
	var oldPod *corev1.Pod
	if old != nil {
		oldPod = old.(*corev1.Pod)
		if oldPod.ResourceVersion == pod.ResourceVersion {
			return
		}
	}
	svcs, err := c.svcLister.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range svcs {
		if selectorless(svc) {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		if sel.Matches(labels.Set(pod.Labels)) || (oldPod != nil && sel.Matches(labels.Set(oldPod.Labels))) {
			c.enqueue(svc)
		}
	}
}

// nodeChanged resyncs every Service when a node gets or changes its zone; rare enough to be
// simple.
func (c *Controller) nodeChanged(old, cur any) {
	o, n := old.(*corev1.Node), cur.(*corev1.Node)
	if o.Labels[corev1.LabelTopologyZone] == n.Labels[corev1.LabelTopologyZone] {
		return
	}
	svcs, err := c.svcLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range svcs {
		c.enqueue(svc)
	}
}

// sliceChanged enqueues the Service of a slice this controller manages, so writes by others
// are repaired and the cache catching up with our own writes is noticed.
func (c *Controller) sliceChanged(obj any) {
	es, ok := unwrap[*discoveryv1.EndpointSlice](obj)
	if !ok || es.Labels[discoveryv1.LabelManagedBy] != ControllerName {
		return
	}
	if svc := es.Labels[discoveryv1.LabelServiceName]; svc != "" {
		c.queue.Add(es.Namespace + "/" + svc)
	}
}

// requeueStale looks at a Service again once the informer should have caught up.
func (c *Controller) requeueStale(key string) { c.queue.AddAfter(key, time.Second) }
