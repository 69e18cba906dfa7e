package daemonset

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Event reasons, as upstream.
const (
	ReasonSuccessfulCreate = "SuccessfulCreate"
	ReasonFailedCreate     = "FailedCreate"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
	ReasonFailedDaemonPod  = "FailedDaemonPod"
	ReasonSelectingAll     = "SelectingAll"
)

// sync brings one DaemonSet to one pod per eligible node and writes its status. It re-derives
// everything from the informers' current state.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	ds, err := c.dsLister.DaemonSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return fmt.Errorf("selector of %s: %w", key, err)
	}
	if selector.Empty() {
		c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonSelectingAll, "This daemon set is selecting all pods. A non-empty selector is required.")
		return nil
	}
	// A DaemonSet being deleted leaves its pods to the garbage collector.
	if ds.DeletionTimestamp != nil {
		return nil
	}
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return err
	}
	cur, old, err := c.constructHistory(ctx, ds, selector)
	if err != nil {
		return fmt.Errorf("history of %s: %w", key, err)
	}
	hash := cur.Labels[RevisionHashLabel]

	byNode, err := c.podsByNode(ctx, ds, selector)
	if err != nil {
		return err
	}
	var syncErr error
	if c.expectations.Satisfied(key) {
		syncErr = c.manage(ctx, ds, nodes, byNode, hash)
		if syncErr == nil && c.expectations.Satisfied(key) && ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
			syncErr = c.rollingUpdate(ctx, ds, nodes, byNode, hash)
		}
		if syncErr == nil {
			var pods []*corev1.Pod
			for _, ps := range byNode {
				pods = append(pods, ps...)
			}
			syncErr = c.cleanupHistory(ctx, ds, pods, old)
		}
	}
	return errors.Join(syncErr, c.updateStatus(ctx, ds, nodes, byNode, hash))
}

// podsByNode claims the DaemonSet's pods and groups the ones not finished-and-deleted by the
// node each belongs to (TargetNode).
func (c *Controller) podsByNode(ctx context.Context, ds *appsv1.DaemonSet, selector labels.Selector) (map[string][]*corev1.Pod, error) {
	all, err := c.podLister.Pods(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var candidates []*corev1.Pod
	for _, p := range all {
		// A finished pod that is being deleted is gone for every purpose.
		if p.DeletionTimestamp != nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
			continue
		}
		candidates = append(candidates, p)
	}
	pods, err := c.claimPods(ctx, ds, selector, candidates)
	if err != nil {
		return nil, err
	}
	out := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if n := TargetNode(p); n != "" {
			out[n] = append(out[n], p)
		}
	}
	return out, nil
}

func (c *Controller) canAdopt(ctx context.Context, ds *appsv1.DaemonSet) error {
	fresh, err := c.client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if fresh.UID != ds.UID {
		return fmt.Errorf("original DaemonSet %s/%s is gone: got uid %v, wanted %v", ds.Namespace, ds.Name, fresh.UID, ds.UID)
	}
	if fresh.DeletionTimestamp != nil {
		return fmt.Errorf("%s/%s has just been deleted at %v", ds.Namespace, ds.Name, fresh.DeletionTimestamp)
	}
	return nil
}

// claimPods adopts matching orphans and releases pods that no longer match.
func (c *Controller) claimPods(ctx context.Context, ds *appsv1.DaemonSet, selector labels.Selector, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	log := c.log.WithField("daemonset", ds.Namespace+"/"+ds.Name)
	claimer := internal.Claimer[*corev1.Pod]{
		Owner:    ds,
		Selector: selector,
		CanAdopt: func(ctx context.Context) error { return c.canAdopt(ctx, ds) },
		Adopt: func(ctx context.Context, pod *corev1.Pod) error {
			_, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType,
				internal.ControllerRefPatch(ds, controllerKind, string(pod.UID)), metav1.PatchOptions{})
			if err == nil {
				log.WithField("pod", pod.Name).Info("adopted pod")
			}
			return err
		},
		Release: func(ctx context.Context, pod *corev1.Pod) error {
			_, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType,
				internal.ReleasePatch(ds, string(pod.UID)), metav1.PatchOptions{})
			if err == nil {
				log.WithField("pod", pod.Name).Info("released pod")
			}
			return err
		},
	}
	return claimer.Claim(ctx, pods)
}

// manage creates the pods of nodes that need one and deletes the pods of nodes that must not
// run one (no longer eligible, gone, failed pods, duplicates).
func (c *Controller) manage(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, byNode map[string][]*corev1.Pod, hash string) error {
	var create []string
	var del []*corev1.Pod
	seen := map[string]bool{}
	for _, node := range nodes {
		seen[node.Name] = true
		need, drop := c.podsShouldBeOnNode(ds, node, byNode[node.Name], hash)
		if need {
			create = append(create, node.Name)
		}
		del = append(del, drop...)
	}
	// Pods of nodes that no longer exist.
	for name, pods := range byNode {
		if seen[name] {
			continue
		}
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				del = append(del, p)
			}
		}
	}
	return c.syncNodes(ctx, ds, del, create, hash)
}

// podsShouldBeOnNode decides for one node whether a pod must be created (need) and which of
// its pods must go, as upstream's podsShouldBeOnNode.
func (c *Controller) podsShouldBeOnNode(ds *appsv1.DaemonSet, node *corev1.Node, pods []*corev1.Pod, hash string) (need bool, drop []*corev1.Pod) {
	shouldRun, shouldContinue := ShouldRun(node, ds)
	switch {
	case shouldRun && len(pods) == 0:
		return true, nil
	case shouldContinue:
		var running []*corev1.Pod
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase == corev1.PodFailed {
				c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonFailedDaemonPod,
					"Found failed daemon pod %s/%s on node %s, will try to kill it", p.Namespace, p.Name, node.Name)
				drop = append(drop, p)
				continue
			}
			running = append(running, p)
		}
		byCreation(running)
		if surge(ds) {
			// Two pods only while the oldest updated one is not available yet and the oldest
			// old one is ready; everything else goes.
			var newest, oldest *corev1.Pod
			for _, p := range running {
				if p.Labels[RevisionHashLabel] == hash {
					if newest == nil {
						newest = p
						continue
					}
				} else if oldest == nil {
					oldest = p
					continue
				}
				drop = append(drop, p)
			}
			if newest != nil && oldest != nil &&
				(!internal.IsPodReady(oldest) || internal.IsPodAvailable(newest, ds.Spec.MinReadySeconds, c.now())) {
				drop = append(drop, oldest)
			}
		} else if len(running) > 1 {
			drop = append(drop, running[1:]...)
		}
		return false, drop
	default:
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				drop = append(drop, p)
			}
		}
		return false, drop
	}
}

// syncNodes deletes pods and creates one pod per named node, at most BurstReplicas of each,
// recording expectations first so that the next sync waits for the informer to show them.
func (c *Controller) syncNodes(ctx context.Context, ds *appsv1.DaemonSet, del []*corev1.Pod, create []string, hash string) error {
	key, _ := cache.MetaNamespaceKeyFunc(ds)
	if len(create) > c.burst {
		create = create[:c.burst]
	}
	if len(del) > c.burst {
		del = del[:c.burst]
	}
	if len(create) == 0 && len(del) == 0 {
		return nil
	}
	keys := make([]string, len(del))
	for i, p := range del {
		keys[i] = internal.PodKey(p)
	}
	c.expectations.Expect(key, len(create), keys)

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, p := range del {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.deletePodOf(ctx, ds, p); err != nil {
				c.expectations.DeletionObserved(key, internal.PodKey(p))
				if !apierrors.IsNotFound(err) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()

	next := make(chan string, len(create))
	for _, n := range create {
		next <- n
	}
	ok, err := internal.SlowStartBatch(len(create), internal.SlowStartInitialBatchSize, func() error {
		return c.createPod(ctx, ds, <-next, hash)
	})
	// The creations that never happened will never be observed.
	for i := 0; i < len(create)-ok; i++ {
		c.expectations.CreationObserved(key)
	}
	return errors.Join(append(errs, err)...)
}

func (c *Controller) createPod(ctx context.Context, ds *appsv1.DaemonSet, nodeName, hash string) error {
	tmpl := podTemplate(ds, hash)
	pod := internal.PodFromTemplate(tmpl, ds, controllerKind)
	pod.Spec.Affinity = PinToNode(pod.Spec.Affinity, nodeName)
	created, err := c.client.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil
		}
		c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating: %v", err)
		return err
	}
	c.recorder.Eventf(ds, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: %v", created.Name)
	return nil
}

func (c *Controller) deletePodOf(ctx context.Context, ds *appsv1.DaemonSet, pod *corev1.Pod) error {
	err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting: %v", err)
		}
		return err
	}
	c.recorder.Eventf(ds, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted pod: %v", pod.Name)
	return nil
}

// rollingParams returns maxSurge and maxUnavailable resolved against the number of nodes that
// should run the pod (percentages round up); both zero falls back to maxUnavailable 1.
func rollingParams(ds *appsv1.DaemonSet, desired int) (maxSurge, maxUnavailable int, err error) {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil {
		return 0, 1, nil
	}
	scaled := func(v *intstr.IntOrString) (int, error) {
		if v == nil {
			return 0, nil
		}
		return intstr.GetScaledValueFromIntOrPercent(v, desired, true)
	}
	if maxSurge, err = scaled(ru.MaxSurge); err != nil {
		return 0, 0, fmt.Errorf("maxSurge: %w", err)
	}
	if maxUnavailable, err = scaled(ru.MaxUnavailable); err != nil {
		return 0, 0, fmt.Errorf("maxUnavailable: %w", err)
	}
	if desired > 0 && maxSurge == 0 && maxUnavailable == 0 {
		maxUnavailable = 1
	}
	return maxSurge, maxUnavailable, nil
}

// surge reports whether the DaemonSet rolls out by surging (a new pod next to the old one).
func surge(ds *appsv1.DaemonSet) bool {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil {
		return false
	}
	// Any node count makes a non-zero surge non-zero, so 1 decides.
	n, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, 1, true)
	return err == nil && n > 0
}

// updatedPods returns the one updated and the one old pod of a node, ok false when the node
// has more than one of either (manage cleans up first).
func updatedPods(pods []*corev1.Pod, hash string) (newPod, oldPod *corev1.Pod, ok bool) {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Labels[RevisionHashLabel] == hash {
			if newPod != nil {
				return nil, nil, false
			}
			newPod = p
		} else {
			if oldPod != nil {
				return nil, nil, false
			}
			oldPod = p
		}
	}
	return newPod, oldPod, true
}

// rollingUpdate replaces old pods, as upstream: without surge it deletes old pods while at
// most maxUnavailable nodes lack an available pod, and manage recreates them; with
// surge it creates up to maxSurge new pods next to available old ones, and deletes an old pod
// once its replacement is available.
func (c *Controller) rollingUpdate(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, byNode map[string][]*corev1.Pod, hash string) error {
	now := c.now()
	nodeByName := map[string]*corev1.Node{}
	considered := map[string][]*corev1.Pod{}
	for name, pods := range byNode {
		considered[name] = pods
	}
	desired := 0
	for _, n := range nodes {
		nodeByName[n.Name] = n
		if run, _ := ShouldRun(n, ds); run {
			desired++
			if _, ok := considered[n.Name]; !ok {
				considered[n.Name] = nil
			}
		}
	}
	maxSurge, maxUnavailable, err := rollingParams(ds, desired)
	if err != nil {
		return fmt.Errorf("rolling update of %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	available := func(p *corev1.Pod) bool { return internal.IsPodAvailable(p, ds.Spec.MinReadySeconds, now) }

	if maxSurge == 0 {
		unavailable := 0
		var replace, candidates []*corev1.Pod
		for _, name := range sortedKeys(considered) {
			newPod, oldPod, ok := updatedPods(considered[name], hash)
			switch {
			case !ok, newPod == nil && oldPod == nil, newPod != nil && oldPod != nil:
				unavailable++ // manage creates or deletes here
			case newPod != nil:
				if !available(newPod) {
					unavailable++
				}
			case !available(oldPod):
				replace = append(replace, oldPod) // replacing it costs nothing
			case unavailable < maxUnavailable:
				candidates = append(candidates, oldPod)
			}
		}
		room := min(max(maxUnavailable-unavailable, 0), len(candidates))
		return c.syncNodes(ctx, ds, append(replace, candidates[:room]...), nil, hash)
	}

	var del, shouldNotRun []*corev1.Pod
	var allowed, candidates []string
	surged, numAvailable := 0, 0
	for _, name := range sortedKeys(considered) {
		newPod, oldPod, ok := updatedPods(considered[name], hash)
		if !ok {
			surged++
			continue
		}
		if oldPod != nil && available(oldPod) || oldPod == nil && newPod != nil && available(newPod) {
			numAvailable++
		}
		run := false
		if n := nodeByName[name]; n != nil {
			run, _ = ShouldRun(n, ds)
		}
		switch {
		case oldPod == nil:
		case newPod == nil && !available(oldPod):
			if !run {
				del = append(del, oldPod)
				continue
			}
			allowed = append(allowed, name)
		case newPod == nil:
			if !run {
				shouldNotRun = append(shouldNotRun, oldPod)
				continue
			}
			if surged >= maxSurge {
				continue
			}
			candidates = append(candidates, name)
		default:
			if !available(newPod) {
				surged++
				continue
			}
			del = append(del, oldPod)
		}
	}
	// Pods of nodes that stopped qualifying go only once enough pods elsewhere are available.
	if n := min(numAvailable-desired, len(shouldNotRun)); n > 0 {
		del = append(del, shouldNotRun[:n]...)
	}
	room := min(max(maxSurge-surged, 0), len(candidates))
	return c.syncNodes(ctx, ds, del, append(allowed, candidates[:room]...), hash)
}

func sortedKeys(m map[string][]*corev1.Pod) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// calculateStatus derives the status from the nodes and the pods on them, as upstream: the
// oldest pod of each node that should run one decides readiness and being up to date.
func calculateStatus(ds *appsv1.DaemonSet, nodes []*corev1.Node, byNode map[string][]*corev1.Pod, hash string, now time.Time) appsv1.DaemonSetStatus {
	status := *ds.Status.DeepCopy()
	var desired, current, misscheduled, ready, available, updated int32
	for _, node := range nodes {
		shouldRun, _ := ShouldRun(node, ds)
		pods := byNode[node.Name]
		if !shouldRun {
			if len(pods) > 0 {
				misscheduled++
			}
			continue
		}
		desired++
		if len(pods) == 0 {
			continue
		}
		current++
		pods = append([]*corev1.Pod(nil), pods...)
		byCreation(pods)
		p := pods[0]
		if internal.IsPodReady(p) {
			ready++
			if internal.IsPodAvailable(p, ds.Spec.MinReadySeconds, now) {
				available++
			}
		}
		if hash != "" && p.Labels[RevisionHashLabel] == hash {
			updated++
		}
	}
	status.DesiredNumberScheduled = desired
	status.CurrentNumberScheduled = current
	status.NumberMisscheduled = misscheduled
	status.NumberReady = ready
	status.NumberAvailable = available
	status.UpdatedNumberScheduled = updated
	status.NumberUnavailable = desired - available
	status.ObservedGeneration = ds.Generation
	return status
}

// updateStatus writes status through the status subresource when it changed, retrying once
// on a conflict with a fresh read.
func (c *Controller) updateStatus(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, byNode map[string][]*corev1.Pod, hash string) error {
	status := calculateStatus(ds, nodes, byNode, hash, c.now())
	if ds.Spec.MinReadySeconds > 0 && status.NumberReady != status.NumberAvailable {
		key, _ := cache.MetaNamespaceKeyFunc(ds)
		c.queue.AddAfter(key, time.Duration(ds.Spec.MinReadySeconds)*time.Second)
	}
	if statusEqual(ds.Status, status) {
		return nil
	}
	client := c.client.AppsV1().DaemonSets(ds.Namespace)
	ds = ds.DeepCopy()
	var err error
	for i := 0; i < 2; i++ {
		collisions := ds.Status.CollisionCount
		ds.Status = status
		ds.Status.CollisionCount = collisions
		if _, err = client.UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) {
			break
		}
		fresh, gerr := client.Get(ctx, ds.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		if fresh.Generation != ds.Generation {
			// The spec moved on: the next sync computes the status for it.
			return nil
		}
		ds = fresh
	}
	return fmt.Errorf("update status of %s/%s: %w", ds.Namespace, ds.Name, err)
}

func statusEqual(a, b appsv1.DaemonSetStatus) bool {
	return a.DesiredNumberScheduled == b.DesiredNumberScheduled && a.CurrentNumberScheduled == b.CurrentNumberScheduled &&
		a.NumberMisscheduled == b.NumberMisscheduled && a.NumberReady == b.NumberReady &&
		a.NumberAvailable == b.NumberAvailable && a.UpdatedNumberScheduled == b.UpdatedNumberScheduled &&
		a.NumberUnavailable == b.NumberUnavailable && a.ObservedGeneration == b.ObservedGeneration
}
