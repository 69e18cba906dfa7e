// Package scheduler places pending pods on nodes: a queue of pending pods, a cache
// of nodes with the pods bound or assumed on them, filter and score plugins written as pure
// functions, and the binding through pods/binding, which commits only while the pod is still
// unbound (so two schedulers can never both win). It runs on the holder of the scheduler
// Lease; the caller arranges that.
package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/flotilla-dev/flotilla/internal/kubeclient"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
)

// DefaultSchedulerName is the spec.schedulerName of pods this scheduler places by default.
const DefaultSchedulerName = corev1.DefaultSchedulerName

// Event reasons and the condition reason, as upstream.
const (
	ReasonScheduled        = "Scheduled"
	ReasonFailedScheduling = "FailedScheduling"
	ReasonUnschedulable    = corev1.PodReasonUnschedulable
)

// Options tune the scheduler; the zero value is a good default.
type Options struct {
	// SchedulerName selects the pods to place by spec.schedulerName (default
	// "default-scheduler").
	SchedulerName string
	// PercentageOfNodesToScore bounds how many feasible nodes are looked for before scoring
	// (0: upstream's adaptive rule, 50% minus 1% per 125 nodes, at least 5% and 100 nodes).
	PercentageOfNodesToScore int
	// InitialBackoff and MaxBackoff bound the retry delay of a pod that failed (1 s, 10 s).
	InitialBackoff, MaxBackoff time.Duration
	// MaxUnschedulable is the longest an unschedulable pod waits for a cluster change before
	// it is tried again anyway (5 min).
	MaxUnschedulable time.Duration
	// BindingsInFlight bounds the bindings waiting for the API (2048). They go in
	// BindingBatches of up to BindingBatchSize (500) each, two batches in flight; against a
	// server without BindingBatches at most 64 pods/binding requests are in flight, well
	// under the API's limit of mutating requests in flight (200), which others share.
	BindingsInFlight int
	// BindingBatchSize bounds the bindings of one BindingBatch (500; 1 sends each binding
	// to pods/binding on its own).
	BindingBatchSize int
	// ClientQPS and ClientBurst set the rate of the scheduler's own API client (1000, 2000):
	// bindings are the scheduler's output, and the controllers' default of 50/s would cap it.
	ClientQPS   float32
	ClientBurst int
	// AssumedTTL is how long an assumption whose binding succeeded counts without the
	// informer confirming it (30 s).
	AssumedTTL time.Duration
}

func (o Options) withDefaults() Options {
	if o.SchedulerName == "" {
		o.SchedulerName = DefaultSchedulerName
	}
	if o.BindingsInFlight == 0 {
		o.BindingsInFlight = 2048
	}
	if o.BindingBatchSize == 0 {
		o.BindingBatchSize = 500
	}
	if o.ClientQPS == 0 {
		o.ClientQPS = 1000
	}
	if o.ClientBurst == 0 {
		o.ClientBurst = 2000
	}
	if o.AssumedTTL == 0 {
		o.AssumedTTL = 30 * time.Second
	}
	return o
}

// Stats counts what the scheduler did.
type Stats struct {
	// Bound is the number of bindings this scheduler committed.
	Bound int64
	// Lost is the number of bindings refused because the pod was already bound (another
	// scheduler won) or being deleted.
	Lost int64
	// Unschedulable is the number of scheduling attempts that found no node.
	Unschedulable int64
	// Nodes is the number of nodes in the scheduler's cache.
	Nodes int
}

// Scheduler places pending pods.
type Scheduler struct {
	opts     Options
	client   kubernetes.Interface
	recorder record.EventRecorder
	log      *logrus.Entry

	cache *Cache
	queue *Queue

	pods       corelisters.PodLister
	claims     corelisters.PersistentVolumeClaimLister
	volumes    corelisters.PersistentVolumeLister
	namespaces corelisters.NamespaceLister
	synced     []cache.InformerSynced

	nextStart int // rotates the first node looked at, so the first nodes do not fill up first
	binds     chan struct{}
	bindWG    sync.WaitGroup
	binder    *binder

	bound, lost, unsched atomic.Int64
}

// New builds the scheduler on the shared controller context and registers the informers it
// needs (pods, nodes, claims, volumes, namespaces); the caller starts the informers.
func New(c *controllers.Context, opts Options) (*Scheduler, error) {
	opts = opts.withDefaults()
	client := c.Client
	var cfg *rest.Config
	if c.Config != nil {
		cfg = rest.CopyConfig(c.Config)
		cfg.QPS, cfg.Burst = opts.ClientQPS, opts.ClientBurst
		cl, err := kubeclient.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("scheduler client: %w", err)
		}
		client = cl
	}
	log := logrus.WithField("component", "scheduler")
	binder, err := newBinder(client, cfg, opts.BindingBatchSize, singleBindingsInFlight, log)
	if err != nil {
		return nil, err
	}
	podInf := c.Informers.Core().V1().Pods()
	nodeInf := c.Informers.Core().V1().Nodes()
	claimInf := c.Informers.Core().V1().PersistentVolumeClaims()
	volInf := c.Informers.Core().V1().PersistentVolumes()
	nsInf := c.Informers.Core().V1().Namespaces()
	s := &Scheduler{
		opts:       opts,
		client:     client,
		recorder:   c.Recorder(opts.SchedulerName),
		log:        log,
		binder:     binder,
		cache:      NewCache(),
		queue:      NewQueue(opts.InitialBackoff, opts.MaxBackoff, opts.MaxUnschedulable, nil),
		pods:       podInf.Lister(),
		claims:     claimInf.Lister(),
		volumes:    volInf.Lister(),
		namespaces: nsInf.Lister(),
		synced: []cache.InformerSynced{podInf.Informer().HasSynced, nodeInf.Informer().HasSynced,
			claimInf.Informer().HasSynced, volInf.Informer().HasSynced, nsInf.Informer().HasSynced},
		binds: make(chan struct{}, opts.BindingsInFlight),
	}
	s.cache.snap.NamespaceLabels = s.namespaceLabels
	s.cache.snap.Volumes = listerVolumes{claims: s.claims, volumes: s.volumes}

	handlers := []struct {
		name string
		inf  cache.SharedIndexInformer
		h    cache.ResourceEventHandler
	}{
		{"pod", podInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: s.podAdded, UpdateFunc: s.podUpdated, DeleteFunc: s.podDeleted}},
		{"node", nodeInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: s.nodeAdded, UpdateFunc: s.nodeUpdated, DeleteFunc: s.nodeDeleted}},
		{"persistentvolumeclaim", claimInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: s.volumeChanged, UpdateFunc: func(_, cur any) { s.volumeChanged(cur) }}},
		{"persistentvolume", volInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: s.volumeChanged, UpdateFunc: func(_, cur any) { s.volumeChanged(cur) }}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, fmt.Errorf("scheduler %s handler: %w", h.name, err)
		}
	}
	nsInf.Informer() // registered for namespaceSelector terms
	return s, nil
}

// Stats returns the counters so far.
func (s *Scheduler) Stats() Stats {
	snap := s.cache.RLock()
	n := len(snap.Nodes)
	s.cache.RUnlock()
	return Stats{Bound: s.bound.Load(), Lost: s.lost.Load(), Unschedulable: s.unsched.Load(), Nodes: n}
}

// Run schedules until ctx ends. Decisions are made one at a time, because each must see the
// previous one's assumption; bindings run concurrently (Options.BindingsInFlight). workers
// is accepted for controllers.Runner and ignored.
func (s *Scheduler) Run(ctx context.Context, _ int) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return fmt.Errorf("scheduler: caches did not sync: %w", ctx.Err())
	}
	s.log.WithField("schedulerName", s.opts.SchedulerName).Info("scheduler started")
	go func() {
		<-ctx.Done()
		s.queue.Close()
	}()
	go s.housekeeping(ctx)
	s.binder.run(ctx)
	for {
		pod := s.queue.Pop()
		if pod == nil {
			break
		}
		s.scheduleOne(ctx, pod)
	}
	s.bindWG.Wait()
	return nil
}

// housekeeping ends backoffs and expires unconfirmed assumptions.
func (s *Scheduler) housekeeping(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	defer clearPending()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			s.queue.Flush()
			s.updatePending()
			if n := s.cache.Expire(now); n > 0 {
				s.log.WithField("pods", n).Warn("bindings never confirmed by the informer, assumptions dropped")
				s.queue.MoveAll(nil)
			}
		}
	}
}

// responsible reports whether pod is a pending pod of ours.
func (s *Scheduler) responsible(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.Spec.SchedulerName == s.opts.SchedulerName &&
		pod.DeletionTimestamp == nil && len(pod.Spec.SchedulingGates) == 0 &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// counted reports whether a bound pod still takes room on its node.
func counted(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

func (s *Scheduler) podAdded(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	switch {
	case counted(pod):
		s.cache.SetPod(pod)
		s.queue.MoveAll(dependsOnPods)
	case s.responsible(pod):
		s.queue.Add(pod)
	}
}

func (s *Scheduler) podUpdated(oldObj, curObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	pod, ok2 := curObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	switch {
	case counted(pod):
		s.queue.Delete(pod) // bound, by us or by someone else
		s.cache.SetPod(pod)
		if old.Spec.NodeName == "" || !labels.Equals(old.Labels, pod.Labels) {
			s.queue.MoveAll(dependsOnPods)
		}
	case pod.Spec.NodeName != "":
		// Finished: its room is free again.
		s.queue.Delete(pod)
		s.cache.RemovePod(string(pod.UID))
		if counted(old) {
			s.queue.MoveAll(nil)
		}
	case s.responsible(pod):
		s.queue.Update(pod, !apiequality.Semantic.DeepEqual(old.Spec, pod.Spec) ||
			!labels.Equals(old.Labels, pod.Labels) || !labels.Equals(old.Annotations, pod.Annotations))
	default:
		s.queue.Delete(pod)
	}
}

func (s *Scheduler) podDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	s.queue.Delete(pod)
	if pod.Spec.NodeName != "" {
		s.cache.RemovePod(string(pod.UID))
		s.queue.MoveAll(nil)
	}
}

// dependsOnPods selects the pending pods a new or relabelled pod may unblock: those with
// pod affinity or topology spread.
func dependsOnPods(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	return len(pod.Spec.TopologySpreadConstraints) > 0 || (a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil))
}

func (s *Scheduler) nodeAdded(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	s.cache.SetNode(node)
	s.queue.MoveAll(nil)
}

func (s *Scheduler) nodeUpdated(oldObj, curObj any) {
	old, ok1 := oldObj.(*corev1.Node)
	node, ok2 := curObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	s.cache.SetNode(node)
	if nodeSchedulingChanged(old, node) {
		s.queue.MoveAll(nil)
	}
}

// nodeSchedulingChanged reports whether a node update can make a pending pod fit:
// heartbeats alone cannot.
func nodeSchedulingChanged(old, cur *corev1.Node) bool {
	return old.Spec.Unschedulable != cur.Spec.Unschedulable ||
		!labels.Equals(old.Labels, cur.Labels) ||
		!equalTaints(old.Spec.Taints, cur.Spec.Taints) ||
		!equalResources(old.Status.Allocatable, cur.Status.Allocatable) ||
		!equalStrings(old.Status.DeclaredFeatures, cur.Status.DeclaredFeatures) ||
		len(old.Status.Images) != len(cur.Status.Images)
}

func equalTaints(a, b []corev1.Taint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Value != b[i].Value || a[i].Effect != b[i].Effect {
			return false
		}
	}
	return true
}

func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (s *Scheduler) nodeDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if node, ok := obj.(*corev1.Node); ok {
		s.cache.RemoveNode(node.Name)
	}
}

func (s *Scheduler) volumeChanged(any) { s.queue.MoveAll(hasVolumes) }

func (s *Scheduler) namespaceLabels(ns string) labels.Set {
	n, err := s.namespaces.Get(ns)
	if err != nil {
		return nil
	}
	return n.Labels
}

// listerVolumes serves VolumeSource from the informers.
type listerVolumes struct {
	claims  corelisters.PersistentVolumeClaimLister
	volumes corelisters.PersistentVolumeLister
}

func (l listerVolumes) Claim(ns, name string) *corev1.PersistentVolumeClaim {
	c, err := l.claims.PersistentVolumeClaims(ns).Get(name)
	if err != nil {
		return nil
	}
	return c
}

func (l listerVolumes) Volume(name string) *corev1.PersistentVolume {
	v, err := l.volumes.Get(name)
	if err != nil {
		return nil
	}
	return v
}

func (l listerVolumes) Volumes() []*corev1.PersistentVolume {
	v, _ := l.volumes.List(labels.Everything())
	return v
}

// numFeasibleToFind is how many feasible nodes are enough to pick from, as upstream: all of
// a small cluster, an adaptive share of a large one.
func numFeasibleToFind(all, percentage int) int {
	const minFeasible = 100
	if all < minFeasible {
		return all
	}
	if percentage <= 0 {
		percentage = max(50-all/125, 5)
	}
	n := all * percentage / 100
	return min(max(n, minFeasible), all)
}

// Decision is the outcome of placing one pod.
type Decision struct {
	Node string
	// Fit is set when no node fits.
	Fit *FitError
}

// Schedule picks a node for pod on snap, starting the search at node index start. It is the
// pure core of the scheduler: filters, then scores over the feasible nodes found. It
// returns how many nodes it examined (the next search starts after them).
func Schedule(pi *PodInfo, snap *Snapshot, start, percentage int, rnd func(n int) int) (Decision, int) {
	all := len(snap.Nodes)
	fit := &FitError{NumAllNodes: all}
	if all == 0 {
		return Decision{Fit: fit}, 0
	}
	c := newCycle(pi, snap)
	if c.preFilter != nil {
		fit.PreFilterMsg = c.preFilter.Reasons[0]
		return Decision{Fit: fit}, 0
	}
	fit.NodeReasons = map[string][]string{}
	nodes := snap.Nodes
	if c.nodeNames != nil {
		// Only the named nodes are candidates; the others say so without being filtered.
		nodes = nil
		for _, name := range c.nodeNames {
			if ni := snap.Get(name); ni != nil && ni.Node != nil {
				nodes = append(nodes, ni)
			}
		}
		wanted := sets.New(c.nodeNames...)
		for _, ni := range snap.Nodes {
			if !wanted.Has(ni.Node.Name) {
				fit.NodeReasons[ni.Node.Name] = []string{reasonNotInPreFilter}
			}
		}
		start = 0
	}
	n := len(nodes)
	want := numFeasibleToFind(n, percentage)
	feasible := make([]*NodeInfo, 0, want)
	examined := 0
	for ; examined < n && len(feasible) < want; examined++ {
		ni := nodes[(start+examined)%n]
		if st := runFilters(c, ni); st != nil {
			fit.NodeReasons[ni.Node.Name] = st.Reasons
			continue
		}
		feasible = append(feasible, ni)
	}
	if c.nodeNames != nil {
		examined = 0 // the rotation over all nodes is not advanced by a pinned pod
	}
	switch len(feasible) {
	case 0:
		return Decision{Fit: fit}, examined
	case 1:
		return Decision{Node: feasible[0].Node.Name}, examined
	}
	scores := scoreNodes(c, feasible)
	best, ties := 0, 1
	for i := 1; i < len(scores); i++ {
		switch {
		case scores[i] > scores[best]:
			best, ties = i, 1
		case scores[i] == scores[best]:
			// Pick uniformly among equal scores (reservoir sampling), as upstream.
			ties++
			if rnd(ties) == 0 {
				best = i
			}
		}
	}
	return Decision{Node: feasible[best].Node.Name}, examined
}

// scheduleOne makes one decision and starts its binding.
func (s *Scheduler) scheduleOne(ctx context.Context, pod *corev1.Pod) {
	began := time.Now()
	// The queue's copy may be stale: a pod bound or deleted meanwhile is not ours any more.
	if cur, err := s.pods.Pods(pod.Namespace).Get(pod.Name); err != nil || cur.UID != pod.UID || !s.responsible(cur) {
		s.queue.Done(pod)
		return
	} else {
		pod = cur
	}
	pi := NewPodInfo(pod)
	snap := s.cache.RLock()
	d, examined := Schedule(pi, snap, s.nextStart, s.opts.PercentageOfNodesToScore, rand.IntN)
	if n := len(snap.Nodes); n > 0 {
		s.nextStart = (s.nextStart + examined) % n
	}
	s.cache.RUnlock()

	if d.Fit != nil {
		s.unsched.Add(1)
		recordAttempt(resultUnschedulable, began)
		s.queue.Failed(pod, true)
		s.reportUnschedulable(ctx, pod, d.Fit.Error())
		return
	}
	if !s.cache.Assume(pi, d.Node) {
		s.queue.Done(pod)
		return
	}
	s.queue.Done(pod)
	select {
	case s.binds <- struct{}{}:
	case <-ctx.Done():
		s.cache.Forget(string(pod.UID))
		return
	}
	s.bindWG.Add(1)
	go func() {
		defer func() { <-s.binds; s.bindWG.Done() }()
		s.bind(ctx, pod, d.Node, began)
	}()
}

// bind commits the decision: claims waiting for a consumer learn their node, then the
// binding commits only if the pod is still unbound.
func (s *Scheduler) bind(ctx context.Context, pod *corev1.Pod, node string, began time.Time) {
	uid := string(pod.UID)
	log := s.log.WithFields(logrus.Fields{"pod": podKey(pod), "node": node})
	if err := s.selectNodeForClaims(ctx, pod, node); err != nil {
		s.cache.Forget(uid)
		if ctx.Err() != nil {
			return
		}
		recordAttempt(resultError, began)
		log.WithError(err).Warn("volume preparation failed")
		s.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonFailedScheduling, "Binding volumes: %v", err)
		s.queue.AddBackoff(pod)
		return
	}
	err := s.binder.bind(ctx, pod, node)
	switch {
	case err == nil:
		s.bound.Add(1)
		recordAttempt(resultScheduled, began)
		s.cache.FinishBinding(uid, time.Now(), s.opts.AssumedTTL)
		s.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonScheduled, "Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, node)
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		// Someone else bound it first (or it is gone, or being deleted): the commit
		// decided, and the informer brings the outcome. Never retry.
		s.lost.Add(1)
		recordAttempt(resultError, began)
		s.cache.Forget(uid)
		log.WithError(err).Debug("binding lost")
	case ctx.Err() != nil:
		s.cache.Forget(uid)
	default:
		s.cache.Forget(uid)
		recordAttempt(resultError, began)
		log.WithError(err).Warn("binding failed")
		s.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonFailedScheduling, "Binding rejected: %v", err)
		s.queue.AddBackoff(pod)
	}
}

// reportUnschedulable records the FailedScheduling event and sets PodScheduled=False with
// the reason, unless the pod already says exactly that.
func (s *Scheduler) reportUnschedulable(ctx context.Context, pod *corev1.Pod, msg string) {
	s.recorder.Event(pod, corev1.EventTypeWarning, ReasonFailedScheduling, msg)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == ReasonUnschedulable && c.Message == msg {
			return
		}
	}
	if err := s.setUnschedulable(ctx, pod, msg); err != nil && ctx.Err() == nil {
		s.log.WithError(err).WithField("pod", podKey(pod)).Warn("cannot record the Unschedulable condition")
	}
}

// setUnschedulable patches PodScheduled=False into pods/status (a strategic merge by
// condition type, so other conditions and writers are untouched).
func (s *Scheduler) setUnschedulable(ctx context.Context, pod *corev1.Pod, msg string) error {
	ltt := metav1.Now()
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			ltt = c.LastTransitionTime // the status did not change, only its explanation
		}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status": map[string]any{"conditions": []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: ReasonUnschedulable,
			Message: msg, LastTransitionTime: ltt,
		}}},
	})
	if err != nil {
		return err
	}
	_, err = s.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone or replaced: nothing to explain any more
	}
	if err != nil {
		return fmt.Errorf("patch status of pod %s: %w", podKey(pod), err)
	}
	return nil
}
