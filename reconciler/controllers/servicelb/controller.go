// Package servicelb gives LoadBalancer Services their address on this appliance: there is no
// cloud load balancer, so status.loadBalancer.ingress lists the addresses of the site's Ready
// hosts, each of which serves the Service's ports through the proxy (a documented choice: the
// appliance is its own load balancer).
package servicelb

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Controller keeps the ingress of LoadBalancer Services; its queue holds Service keys.
type Controller struct {
	client   kubernetes.Interface
	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller and registers its informers.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	svcInf := cctx.Informers.Core().V1().Services()
	nodeInf := cctx.Informers.Core().V1().Nodes()
	c := &Controller{
		client: cctx.Client, services: svcInf.Lister(), nodes: nodeInf.Lister(),
		synced: []cache.InformerSynced{svcInf.Informer().HasSynced, nodeInf.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "servicelb"}),
	}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := svcInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) },
	}); err != nil {
		return nil, fmt.Errorf("service handler: %w", err)
	}
	// Any node change can change every LoadBalancer's addresses.
	all := func(any) {
		svcs, _ := c.services.List(labels.Everything())
		for _, s := range svcs {
			if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
				enqueue(s)
			}
		}
	}
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: all, UpdateFunc: func(_, cur any) { all(cur) }, DeleteFunc: all,
	}); err != nil {
		return nil, fmt.Errorf("node handler: %w", err)
	}
	return c, nil
}

// Run processes Services until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "servicelb", c.queue, workers, c.synced, c.sync)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !Manages(svc) {
		return nil
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	want := Ingress(svc, nodes)
	if apiequality.Semantic.DeepEqual(want, svc.Status.LoadBalancer.Ingress) {
		return nil
	}
	cp := svc.DeepCopy()
	cp.Status.LoadBalancer.Ingress = want
	_, err = c.client.CoreV1().Services(ns).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	return err
}

// Manages reports whether the controller keeps the status of svc: not that of a Service that
// names a load balancer implementation in spec.loadBalancerClass (such as MetalLB's), which
// that implementation fills, as upstream's default load balancer leaves them alone.
func Manages(svc *corev1.Service) bool { return svc.Spec.LoadBalancerClass == nil }

// Ingress is the desired status.loadBalancer.ingress: the InternalIPs of Ready, schedulable
// nodes for a LoadBalancer Service (sorted), nothing for other types.
func Ingress(svc *corev1.Service, nodes []*corev1.Node) []corev1.LoadBalancerIngress {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return nil
	}
	var ips []string
	for _, n := range nodes {
		if n.Spec.Unschedulable || !ready(n) {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ips = append(ips, a.Address)
			}
		}
	}
	slices.Sort(ips)
	ips = slices.Compact(ips)
	var out []corev1.LoadBalancerIngress
	mode := corev1.LoadBalancerIPModeVIP
	for _, ip := range ips {
		out = append(out, corev1.LoadBalancerIngress{IP: ip, IPMode: &mode})
	}
	return out
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
