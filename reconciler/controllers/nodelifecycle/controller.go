// Package nodelifecycle is the node lifecycle controller: it watches the
// hosts' heartbeats (Lease renewals in kube-node-lease and the Ready condition), marks a node
// whose heartbeats stopped for GracePeriod Ready=Unknown, keeps the node.kubernetes.io/*
// condition and cordon taints in step with the node, and, as taint manager, deletes pods bound
// to a node with a NoExecute taint they do not tolerate (or no longer tolerate). When every node
// looks unhealthy it suspects a partition of its own and evicts nothing.
package nodelifecycle

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Component is the event source of the controller, as upstream.
const Component = "node-controller"

// ReasonEviction is the event reason recorded on an evicted pod, as upstream.
const ReasonEviction = "TaintManagerEviction"

// podsByNode indexes the shared pod informer by spec.nodeName.
const podsByNode = "nodelifecycle/nodeName"

// Config tunes the controller; zero fields take the defaults of DefaultConfig.
type Config struct {
	// GracePeriod is how long a node may go without a heartbeat (Lease renewal or Ready
	// heartbeat) before it is marked Ready=Unknown (default 40 s).
	GracePeriod time.Duration
	// MonitorPeriod is how often node health is checked (default 5 s).
	MonitorPeriod time.Duration
	// EvictionQPS and EvictionBurst limit pod deletions by the taint manager.
	EvictionQPS   float32
	EvictionBurst int
	// GossipGrace is how long gossip must report a host dead before its node counts as
	// unhealthy even though its last heartbeat is younger than GracePeriod (5 s).
	GossipGrace time.Duration
}

// DefaultConfig returns the defaults: 40 s grace, 5 s monitor period, 10 evictions/s.
func DefaultConfig() Config {
	return Config{GracePeriod: 40 * time.Second, MonitorPeriod: 5 * time.Second, EvictionQPS: 10, EvictionBurst: 10, GossipGrace: 5 * time.Second}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.GracePeriod <= 0 {
		c.GracePeriod = d.GracePeriod
	}
	if c.MonitorPeriod <= 0 {
		c.MonitorPeriod = d.MonitorPeriod
	}
	if c.EvictionQPS <= 0 {
		c.EvictionQPS = d.EvictionQPS
	}
	if c.EvictionBurst <= 0 {
		c.EvictionBurst = d.EvictionBurst
	}
	if c.GossipGrace <= 0 {
		c.GossipGrace = d.GossipGrace
	}
	return c
}

// health is what the controller last saw of a node's heartbeats. probe is the local time at
// which a heartbeat last changed: comparing remote timestamps with the local clock would make
// clock skew between hosts look like (or hide) a dead node.
type health struct {
	heartbeat, renew time.Time
	// probe is when the node last showed a sign of life: a heartbeat through the API, or
	// gossip seeing its host alive. api is when a heartbeat through the API last changed.
	probe, api time.Time
	stale      bool
}

// Controller is the node lifecycle controller.
type Controller struct {
	cfg Config
	// hostDeadSince is gossip's view of dead hosts (nil without gossip).
	hostDeadSince func(name string) (time.Time, bool)
	// hostAlive reports whether gossip sees a host alive now (nil without gossip).
	hostAlive   func(name string) bool
	client      kubernetes.Interface
	nodeLister  corelisters.NodeLister
	leaseLister coordlisters.LeaseLister
	podLister   corelisters.PodLister
	podIndexer  cache.Indexer
	synced      []cache.InformerSynced
	nodeQueue   workqueue.TypedRateLimitingInterface[string]
	podQueue    workqueue.TypedRateLimitingInterface[string]
	recorder    record.EventRecorder
	limiter     flowcontrol.RateLimiter
	now         func() time.Time
	log         *logrus.Entry

	mu     sync.Mutex
	health map[string]*health
	// disrupted is the partition rule's verdict from the last monitor pass.
	disrupted atomic.Bool
}

// New builds the controller with DefaultConfig.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	return NewController(cctx, DefaultConfig())
}

// NewWithConfig builds the controller with cfg.
func NewWithConfig(cctx *controllers.Context, cfg Config) (controllers.Runner, error) {
	return NewController(cctx, cfg)
}

// NewController is NewWithConfig with the concrete type.
func NewController(cctx *controllers.Context, cfg Config) (*Controller, error) {
	cfg = cfg.withDefaults()
	nodeInformer := cctx.Informers.Core().V1().Nodes()
	leaseInformer := cctx.Informers.Coordination().V1().Leases()
	podInformer := cctx.Informers.Core().V1().Pods()
	if err := podInformer.Informer().AddIndexers(cache.Indexers{podsByNode: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return nil, nil
		}
		return []string{pod.Spec.NodeName}, nil
	}}); err != nil {
		return nil, fmt.Errorf("pod index: %w", err)
	}
	newQueue := func(name string) workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	}
	c := &Controller{
		cfg:           cfg,
		hostDeadSince: cctx.HostDeadSince,
		hostAlive:     cctx.HostAlive,
		client:        cctx.Client,
		nodeLister:    nodeInformer.Lister(),
		leaseLister:   leaseInformer.Lister(),
		podLister:     podInformer.Lister(),
		podIndexer:    podInformer.Informer().GetIndexer(),
		synced: []cache.InformerSynced{nodeInformer.Informer().HasSynced, leaseInformer.Informer().HasSynced,
			podInformer.Informer().HasSynced},
		nodeQueue: newQueue("nodelifecycle-node"),
		podQueue:  newQueue("nodelifecycle-pod"),
		recorder:  cctx.Recorder(Component),
		limiter:   flowcontrol.NewTokenBucketRateLimiter(cfg.EvictionQPS, cfg.EvictionBurst),
		now:       time.Now,
		log:       logrus.WithField("controller", "nodelifecycle"),
		health:    map[string]*health{},
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueNode,
		UpdateFunc: c.updateNode,
		DeleteFunc: c.enqueueNode,
	}); err != nil {
		return nil, fmt.Errorf("node handler: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePod,
		UpdateFunc: func(_, cur any) { c.enqueuePod(cur) },
	}); err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	return c, nil
}

// Run monitors node health and runs the taint and eviction workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return internal.RunWorkers(ctx, "nodelifecycle-node", c.nodeQueue, workers, c.synced, c.syncNode)
	})
	g.Go(func() error {
		return internal.RunWorkers(ctx, "nodelifecycle-pod", c.podQueue, workers, c.synced, c.syncPod)
	})
	g.Go(func() error {
		if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
			return nil
		}
		wait.UntilWithContext(ctx, c.monitor, c.cfg.MonitorPeriod)
		return nil
	})
	return g.Wait()
}

func (c *Controller) enqueueNode(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.nodeQueue.Add(key)
}

func (c *Controller) updateNode(old, cur any) {
	oldNode, curNode := old.(*corev1.Node), cur.(*corev1.Node)
	c.enqueueNode(curNode)
	if !equalNoExecute(oldNode.Spec.Taints, curNode.Spec.Taints) {
		c.enqueuePodsOn(curNode.Name)
	}
}

func (c *Controller) enqueuePodsOn(node string) {
	objs, err := c.podIndexer.ByIndex(podsByNode, node)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, obj := range objs {
		c.enqueuePod(obj)
	}
}

func (c *Controller) enqueuePod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
		return
	}
	c.podQueue.Add(internal.PodKey(pod))
}

func equalNoExecute(a, b []corev1.Taint) bool {
	pick := func(ts []corev1.Taint) map[string]string {
		m := map[string]string{}
		for _, t := range ts {
			if t.Effect == corev1.TaintEffectNoExecute {
				m[t.Key+"="+t.Value] = ""
				if t.TimeAdded != nil {
					m[t.Key+"="+t.Value] = t.TimeAdded.UTC().Format(time.RFC3339)
				}
			}
		}
		return m
	}
	pa, pb := pick(a), pick(b)
	if len(pa) != len(pb) {
		return false
	}
	for k, v := range pa {
		if w, ok := pb[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// monitor is one health pass over all nodes: it notes heartbeats, marks nodes silent for
// longer than the grace period Ready=Unknown, applies the partition rule and queues every node
// for its taints.
func (c *Controller) monitor(ctx context.Context) {
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	now := c.now()
	ready, notReady := 0, 0
	seen := map[string]bool{}
	for _, node := range nodes {
		seen[node.Name] = true
		stale := c.observe(node, now)
		if stale && c.needsUnknown(node) {
			if err := c.markUnknown(ctx, node); err != nil {
				// Retried on the next pass; the taint follows from stale meanwhile.
				c.log.WithField("node", node.Name).WithError(err).Warn("mark node Ready=Unknown")
			}
		}
		if !stale && readyStatus(node) == corev1.ConditionTrue {
			ready++
		} else {
			notReady++
		}
	}
	c.mu.Lock()
	for name := range c.health {
		if !seen[name] {
			delete(c.health, name)
		}
	}
	c.mu.Unlock()
	disrupted := FullDisruption(ready, notReady)
	if was := c.disrupted.Swap(disrupted); was != disrupted {
		if disrupted {
			c.log.WithField("nodes", notReady).Warn("all nodes unhealthy: suspecting a partition, evictions stopped")
		} else {
			// As upstream: leaving a full disruption gives every node a new grace period, so
			// hosts whose heartbeats are a few seconds behind the first one back after a
			// partition heals are not tainted and evicted for it.
			c.mu.Lock()
			for _, h := range c.health {
				h.probe, h.stale = now, false
			}
			c.mu.Unlock()
			c.log.WithFields(logrus.Fields{"ready": ready, "notReady": notReady}).Info("some nodes healthy again: evictions resumed, every node gets a new grace period")
		}
	}
	for _, node := range nodes {
		c.nodeQueue.Add(node.Name)
	}
}

// observe records the node's heartbeats and reports whether they are older than the grace
// period on the local clock.
func (c *Controller) observe(node *corev1.Node, now time.Time) bool {
	var heartbeat, renew time.Time
	if cond := condition(node, corev1.NodeReady); cond != nil {
		heartbeat = cond.LastHeartbeatTime.Time
	}
	apiGrace := c.cfg.GracePeriod
	if lease, err := c.leaseLister.Leases(corev1.NamespaceNodeLease).Get(node.Name); err == nil && lease.Spec.RenewTime != nil {
		renew = lease.Spec.RenewTime.Time
		if d := time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)) * time.Second; d > apiGrace {
			apiGrace = d
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.health[node.Name]
	if h == nil {
		// A node seen for the first time (or after a controller restart) gets a full grace
		// period, as upstream.
		h = &health{heartbeat: heartbeat, renew: renew, probe: now, api: now}
		c.health[node.Name] = h
	}
	if !heartbeat.Equal(h.heartbeat) || !renew.Equal(h.renew) {
		h.heartbeat, h.renew, h.probe, h.api = heartbeat, renew, now, now
	}
	// Gossip carries a host's liveness without writing anything: while it sees the host
	// alive, the node is alive, and the host renews its Lease rarely (its leaseDurationSeconds
	// says how rarely). The heartbeats through the API must still come within that duration:
	// a host that gossips but cannot write to the API is not healthy.
	if c.hostAlive != nil && c.hostAlive(node.Name) {
		h.probe = now
	}
	wasStale := h.stale
	h.stale = now.Sub(h.probe) > c.cfg.GracePeriod || now.Sub(h.api) > apiGrace
	// Gossip sees a dead host within seconds: do not wait for the whole grace period then.
	// Unless the host renewed its heartbeat after gossip lost it: after a partition heals,
	// gossip takes a few seconds to reconnect, and a controller that has just taken over
	// would otherwise evict the pods of hosts whose heartbeats it can see.
	if c.hostDeadSince != nil {
		if since, dead := c.hostDeadSince(node.Name); dead && now.Sub(since) > c.cfg.GossipGrace && since.After(h.probe.Add(-c.cfg.GracePeriod)) &&
			!renew.After(since) && !heartbeat.After(since) {
			h.stale = true
		}
	}
	if h.stale != wasStale {
		c.log.WithFields(logrus.Fields{"node": node.Name, "lastHeartbeat": h.probe.Format(time.RFC3339)}).
			Infof("node heartbeats %s", map[bool]string{true: "stopped", false: "resumed"}[h.stale])
	}
	return h.stale
}

func (c *Controller) isStale(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.health[node]
	return h != nil && h.stale
}

func (c *Controller) needsUnknown(node *corev1.Node) bool {
	for _, t := range unknownConditions {
		if cond := condition(node, t); cond == nil || cond.Status != corev1.ConditionUnknown {
			return true
		}
	}
	return false
}

func (c *Controller) markUnknown(ctx context.Context, node *corev1.Node) error {
	node = node.DeepCopy()
	if !markUnknown(&node.Status, metav1.NewTime(c.now())) {
		return nil
	}
	if _, err := c.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of node %s: %w", node.Name, err)
	}
	c.log.WithField("node", node.Name).Warn("node stopped posting status: Ready=Unknown")
	c.recorder.Eventf(node, corev1.EventTypeNormal, "NodeNotReady", "Node %s status is now: NodeNotReady", node.Name)
	return nil
}

// syncNode brings the node's managed taints in line with its conditions and cordon.
func (c *Controller) syncNode(ctx context.Context, key string) error {
	node, err := c.nodeLister.Get(key)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	desired := DesiredTaints(node, c.isStale(node.Name), c.disrupted.Load())
	taints, changed := ReconcileTaints(node.Spec.Taints, desired, c.now())
	if !changed {
		return nil
	}
	node = node.DeepCopy()
	node.Spec.Taints = taints
	if _, err := c.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
		// The host posted status meanwhile; its update event brings the node back here.
		return nil
	} else if err != nil {
		return fmt.Errorf("update taints of node %s: %w", node.Name, err)
	}
	c.log.WithFields(logrus.Fields{"node": node.Name, "taints": taintKeys(taints)}).Info("node taints updated")
	return nil
}

func taintKeys(ts []corev1.Taint) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Key+":"+string(t.Effect))
	}
	return out
}

// syncPod is the taint manager for one pod: it deletes the pod when its node's NoExecute
// taints are not (or no longer) tolerated, or looks again when a toleration runs out.
func (c *Controller) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.podLister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
		return nil
	}
	node, err := c.nodeLister.Get(pod.Spec.NodeName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	taints := node.Spec.Taints
	if c.disrupted.Load() {
		// The health taints may not be withdrawn yet; the partition rule wins.
		taints = withoutHealthTaints(taints)
	}
	now := c.now()
	at, evict := EvictionTime(pod.Spec.Tolerations, taints, now)
	if !evict {
		return nil
	}
	if wait := at.Sub(now); wait > 0 {
		c.podQueue.AddAfter(key, wait)
		return nil
	}
	if !c.limiter.TryAccept() {
		c.podQueue.AddAfter(key, time.Duration(float64(time.Second)/float64(c.cfg.EvictionQPS)))
		return nil
	}
	return c.evict(ctx, pod)
}

func withoutHealthTaints(ts []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range ts {
		if t.Key != TaintUnreachable && t.Key != TaintNotReady {
			out = append(out, t)
		}
	}
	return out
}

// evict deletes the pod gracefully; the node agent (if it is alive) finishes the job.
func (c *Controller) evict(ctx context.Context, pod *corev1.Pod) error {
	// The cache may lag our own earlier delete; a second one would record a second event.
	cur, err := c.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && (cur.UID != pod.UID || cur.DeletionTimestamp != nil)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get pod %s: %w", internal.PodKey(pod), err)
	}
	uid := pod.UID
	err = c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("evict pod %s from node %s: %w", internal.PodKey(pod), pod.Spec.NodeName, err)
	}
	c.log.WithFields(logrus.Fields{"pod": internal.PodKey(pod), "node": pod.Spec.NodeName}).Info("evicted pod for NoExecute taint")
	c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonEviction, "Marking for deletion Pod %s", internal.PodKey(pod))
	return nil
}
