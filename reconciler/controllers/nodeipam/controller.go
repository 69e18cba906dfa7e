// Package nodeipam is the node IPAM controller: it gives every Node without spec.podCIDR a
// subnet of the cluster's pod CIDR (a /24 of 10.244.0.0/16 by default), from which the node
// agent's CNI host-local plugin hands out pod IPs. A subnet counts as used while any Node has a
// podCIDR overlapping it, so a new leader (or a restarted one) never hands out a subnet twice.
package nodeipam

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Component is the event source of the controller.
const Component = "node-ipam-controller"

// Event reasons, as upstream.
const (
	ReasonCIDRNotAvailable     = "CIDRNotAvailable"
	ReasonCIDRAssignmentFailed = "CIDRAssignmentFailed"
)

// Defaults of Options.
const (
	DefaultClusterCIDR  = "10.244.0.0/16"
	DefaultNodeMaskSize = 24
	// defaultNodeMaskSizeIPv6 applies when the cluster CIDR is IPv6.
	defaultNodeMaskSizeIPv6 = 64
)

const (
	patchFieldManager   = "flotilla-node-ipam"
	notAvailableMessage = "no free /%d left in cluster CIDR %s (%d pod CIDRs in use): remove unused Nodes or choose a larger cluster CIDR"
)

// Options choose the ranges; zero fields take the defaults (10.244.0.0/16 split into /24s,
// or /64s for an IPv6 cluster CIDR).
type Options struct {
	ClusterCIDR  string
	NodeMaskSize int
}

// Controller is the node IPAM controller.
type Controller struct {
	cluster    netip.Prefix
	mask       int
	client     kubernetes.Interface
	nodeLister corelisters.NodeLister
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
	recorder   record.EventRecorder
	log        *logrus.Entry
	// allocMu serializes allocations: two workers must not both pick the lowest free subnet.
	allocMu sync.Mutex
}

// New builds the controller with the default Options.
func New(cctx *controllers.Context) (*Controller, error) {
	return NewWithOptions(cctx, Options{})
}

// NewWithOptions builds the controller for the given cluster CIDR and node mask size.
func NewWithOptions(cctx *controllers.Context, o Options) (*Controller, error) {
	cluster, mask, err := o.parse()
	if err != nil {
		return nil, err
	}
	nodeInformer := cctx.Informers.Core().V1().Nodes()
	c := &Controller{
		cluster:    cluster,
		mask:       mask,
		client:     cctx.Client,
		nodeLister: nodeInformer.Lister(),
		synced:     []cache.InformerSynced{nodeInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeipam"}),
		recorder: cctx.Recorder(Component),
		log:      logrus.WithFields(logrus.Fields{"controller": "nodeipam", "clusterCIDR": cluster.String()}),
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		// A deleted Node frees its subnet: nodes waiting for one may get it now.
		DeleteFunc: func(any) { c.enqueueWaiting() },
	}); err != nil {
		return nil, fmt.Errorf("node handler: %w", err)
	}
	return c, nil
}

func (o Options) parse() (netip.Prefix, int, error) {
	s := o.ClusterCIDR
	if s == "" {
		s = DefaultClusterCIDR
	}
	cluster, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, 0, fmt.Errorf("cluster CIDR %q: %w (want a prefix such as %s)", s, err, DefaultClusterCIDR)
	}
	cluster = cluster.Masked()
	mask := o.NodeMaskSize
	if mask == 0 {
		mask = DefaultNodeMaskSize
		if cluster.Addr().Is6() {
			mask = defaultNodeMaskSizeIPv6
		}
	}
	if err := checkRange(cluster, mask); err != nil {
		return netip.Prefix{}, 0, err
	}
	return cluster, mask, nil
}

// Run assigns pod CIDRs until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "nodeipam", c.queue, workers, c.synced, c.sync)
}

func (c *Controller) enqueue(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Spec.PodCIDR != "" {
		return
	}
	c.queue.Add(node.Name)
}

func (c *Controller) enqueueWaiting() {
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, n := range nodes {
		c.enqueue(n)
	}
}

// sync gives the node a pod CIDR if it has none.
func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if node.Spec.PodCIDR != "" || node.DeletionTimestamp != nil {
		return nil
	}
	return c.allocate(ctx, name)
}

// allocate picks the lowest free subnet and patches it onto the node. The used set comes from
// a fresh (quorum) list of every Node rather than from memory or the informer cache: the cache
// may lag a patch this or a previous leader made a moment ago, and only a subnet that no Node
// holds is free. The patch carries the node's resourceVersion, so a node that changed since
// the list (say, got a podCIDR from someone else) is re-examined instead of overwritten.
func (c *Controller) allocate(ctx context.Context, name string) error {
	c.allocMu.Lock()
	defer c.allocMu.Unlock()
	list, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes to find free pod CIDRs: %w", err)
	}
	var node *corev1.Node
	var used []netip.Prefix
	for i := range list.Items {
		n := &list.Items[i]
		if n.Name == name {
			node = n
		}
		used = append(used, NodeCIDRs(n)...)
	}
	if node == nil || node.Spec.PodCIDR != "" || node.DeletionTimestamp != nil {
		return nil
	}
	cidr, ok := NextFree(c.cluster, c.mask, used)
	if !ok {
		msg := fmt.Sprintf(notAvailableMessage, c.mask, c.cluster, len(used))
		c.recorder.Event(node, corev1.EventTypeWarning, ReasonCIDRNotAvailable, msg)
		return fmt.Errorf("node %s: %s", name, msg)
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"spec":     map[string]any{"podCIDR": cidr.String(), "podCIDRs": []string{cidr.String()}},
	})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: patchFieldManager})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		// The node changed since the list: look again with fresh state.
		c.queue.Add(name)
		return nil
	case err != nil && ctx.Err() != nil:
		return err
	case err != nil:
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonCIDRAssignmentFailed, "assign pod CIDR %s: %v", cidr, err)
		return fmt.Errorf("assign pod CIDR %s to node %s: %w", cidr, name, err)
	}
	c.log.WithFields(logrus.Fields{"node": name, "podCIDR": cidr.String()}).Info("assigned pod CIDR")
	return nil
}

// NodeCIDRs returns the pod CIDRs a Node holds (spec.podCIDR and spec.podCIDRs), skipping
// unparsable ones (validation refuses them, so there are none in practice).
func NodeCIDRs(n *corev1.Node) []netip.Prefix {
	var out []netip.Prefix
	seen := map[string]bool{}
	for _, s := range append([]string{n.Spec.PodCIDR}, n.Spec.PodCIDRs...) {
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}
