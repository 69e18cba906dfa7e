package statefulset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Event reasons, as upstream.
const (
	ReasonSuccessfulCreate = "SuccessfulCreate"
	ReasonFailedCreate     = "FailedCreate"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
)

// claimWait is how soon a set whose claim is still being collected is looked at again.
const claimWait = time.Second

// sync brings one StatefulSet one step closer to its desired pods and writes its status. It
// re-derives everything from the informers' current state.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	set, err := c.setLister.StatefulSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	needsSync := c.expectations.Satisfied(key)
	selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return fmt.Errorf("selector of %s: %w", key, err)
	}
	if selector.Empty() {
		return fmt.Errorf("statefulset %s: spec.selector selects everything, refusing to manage pods", key)
	}
	pods, err := c.claimPods(ctx, set, selector)
	if err != nil {
		return err
	}
	revs, err := c.claimRevisions(ctx, set, selector)
	if err != nil {
		return err
	}
	sortRevisions(revs)
	current, update, collisions, err := c.revisions(ctx, set, revs)
	if err != nil {
		return err
	}
	currentSet, err := applyRevision(set, current)
	if err != nil {
		return err
	}
	updateSet, err := applyRevision(set, update)
	if err != nil {
		return err
	}

	r := &round{c: c, set: set, key: key, currentSet: currentSet, updateSet: updateSet,
		current: current.Name, update: update.Name, now: c.now()}
	r.count(pods)
	var manageErr error
	if needsSync && set.DeletionTimestamp == nil {
		manageErr = r.manage(ctx)
	}
	status := r.status
	status.ObservedGeneration = set.Generation
	status.CollisionCount = &collisions
	completeRollingUpdate(set, &status)
	if err := c.updateStatus(ctx, set, status); err != nil {
		return errors.Join(manageErr, err)
	}
	if err := c.truncateHistory(ctx, set, revs, pods, status); err != nil {
		return errors.Join(manageErr, err)
	}
	if r.requeue > 0 {
		c.queue.AddAfter(key, r.requeue)
	}
	if set.Spec.MinReadySeconds > 0 && status.ReadyReplicas != status.AvailableReplicas {
		c.queue.AddAfter(key, time.Duration(set.Spec.MinReadySeconds)*time.Second)
	}
	return manageErr
}

// completeRollingUpdate makes the update revision current once every pod runs it and is ready.
func completeRollingUpdate(set *appsv1.StatefulSet, status *appsv1.StatefulSetStatus) {
	if set.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
		status.UpdatedReplicas == status.Replicas && status.ReadyReplicas == status.Replicas {
		status.CurrentReplicas = status.UpdatedReplicas
		status.CurrentRevision = status.UpdateRevision
	}
}

func (c *Controller) canAdopt(set *appsv1.StatefulSet) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		fresh, err := c.client.AppsV1().StatefulSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if fresh.UID != set.UID {
			return fmt.Errorf("original StatefulSet %s/%s is gone: got uid %v, wanted %v", set.Namespace, set.Name, fresh.UID, set.UID)
		}
		if fresh.DeletionTimestamp != nil {
			return fmt.Errorf("%s/%s has just been deleted at %v", set.Namespace, set.Name, fresh.DeletionTimestamp)
		}
		return nil
	}
}

// claimPods returns the pods the set controls, adopting orphans named like its members and
// releasing pods that stopped matching.
func (c *Controller) claimPods(ctx context.Context, set *appsv1.StatefulSet, selector labels.Selector) ([]*corev1.Pod, error) {
	all, err := c.podLister.Pods(set.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var candidates []*corev1.Pod
	for _, p := range all {
		if isMemberOf(set, p) {
			candidates = append(candidates, p)
		}
	}
	claimer := internal.Claimer[*corev1.Pod]{
		Owner: set, Selector: selector, CanAdopt: c.canAdopt(set),
		Adopt: func(ctx context.Context, pod *corev1.Pod) error {
			_, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType,
				internal.ControllerRefPatch(set, controllerKind, string(pod.UID)), metav1.PatchOptions{})
			return err
		},
		Release: func(ctx context.Context, pod *corev1.Pod) error {
			_, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType,
				internal.ReleasePatch(set, string(pod.UID)), metav1.PatchOptions{})
			return err
		},
	}
	return claimer.Claim(ctx, candidates)
}

// claimRevisions returns the ControllerRevisions the set controls.
func (c *Controller) claimRevisions(ctx context.Context, set *appsv1.StatefulSet, selector labels.Selector) ([]*appsv1.ControllerRevision, error) {
	all, err := c.revLister.ControllerRevisions(set.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	claimer := internal.Claimer[*appsv1.ControllerRevision]{
		Owner: set, Selector: selector, CanAdopt: c.canAdopt(set),
		Adopt: func(ctx context.Context, cr *appsv1.ControllerRevision) error {
			_, err := c.client.AppsV1().ControllerRevisions(cr.Namespace).Patch(ctx, cr.Name, types.StrategicMergePatchType,
				internal.ControllerRefPatch(set, controllerKind, string(cr.UID)), metav1.PatchOptions{})
			return err
		},
		Release: func(ctx context.Context, cr *appsv1.ControllerRevision) error {
			_, err := c.client.AppsV1().ControllerRevisions(cr.Namespace).Patch(ctx, cr.Name, types.StrategicMergePatchType,
				internal.ReleasePatch(set, string(cr.UID)), metav1.PatchOptions{})
			return err
		},
	}
	owned, err := claimer.Claim(ctx, all)
	// The claimer hands back lister objects: copy before sorting or changing them.
	out := make([]*appsv1.ControllerRevision, len(owned))
	for i, r := range owned {
		out[i] = r.DeepCopy()
	}
	return out, err
}

// revisions finds or makes the revision of the current template (the update revision) and
// finds the current revision. An earlier revision with the same template (a rollback) is
// renumbered to the next revision instead of duplicated.
func (c *Controller) revisions(ctx context.Context, set *appsv1.StatefulSet, revs []*appsv1.ControllerRevision) (current, update *appsv1.ControllerRevision, collisions int32, err error) {
	if set.Status.CollisionCount != nil {
		collisions = *set.Status.CollisionCount
	}
	want, err := newRevision(set, nextRevision(revs), &collisions)
	if err != nil {
		return nil, nil, collisions, err
	}
	var equal *appsv1.ControllerRevision
	for _, r := range revs {
		if equalRevision(r, want) {
			equal = r
		}
	}
	switch {
	case equal != nil && equal == revs[len(revs)-1]:
		update = equal
	case equal != nil:
		equal.Revision = want.Revision
		update, err = c.client.AppsV1().ControllerRevisions(set.Namespace).Update(ctx, equal, metav1.UpdateOptions{})
		if err != nil {
			return nil, nil, collisions, fmt.Errorf("renumber revision %s: %w", equal.Name, err)
		}
	default:
		update, err = c.createRevision(ctx, set, want.Revision, &collisions)
		if err != nil {
			return nil, nil, collisions, err
		}
	}
	current = update
	for _, r := range revs {
		if r.Name == set.Status.CurrentRevision {
			current = r
		}
	}
	if current.Name == update.Name {
		current = update
	}
	return current, update, collisions, nil
}

// createRevision creates the revision of set's template; a name taken by a different
// revision bumps the collision count and tries the next hash.
func (c *Controller) createRevision(ctx context.Context, set *appsv1.StatefulSet, number int64, collisions *int32) (*appsv1.ControllerRevision, error) {
	for {
		cr, err := newRevision(set, number, collisions)
		if err != nil {
			return nil, err
		}
		created, err := c.client.AppsV1().ControllerRevisions(set.Namespace).Create(ctx, cr, metav1.CreateOptions{})
		if err == nil {
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create revision %s: %w", cr.Name, err)
		}
		existing, err := c.client.AppsV1().ControllerRevisions(set.Namespace).Get(ctx, cr.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get revision %s: %w", cr.Name, err)
		}
		if equalRevision(existing, cr) {
			if ref := metav1.GetControllerOf(existing); ref != nil && ref.UID == set.UID {
				return existing, nil
			}
		}
		*collisions++
	}
}

// truncateHistory deletes the oldest revisions beyond revisionHistoryLimit that no pod uses.
func (c *Controller) truncateHistory(ctx context.Context, set *appsv1.StatefulSet, revs []*appsv1.ControllerRevision, pods []*corev1.Pod, status appsv1.StatefulSetStatus) error {
	live := map[string]bool{status.CurrentRevision: true, status.UpdateRevision: true}
	for _, p := range pods {
		live[podRevision(p)] = true
	}
	limit := 10
	if set.Spec.RevisionHistoryLimit != nil {
		limit = int(*set.Spec.RevisionHistoryLimit)
	}
	var errs []error
	for _, r := range historyToDelete(revs, live, limit) {
		err := c.client.AppsV1().ControllerRevisions(r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete revision %s: %w", r.Name, err))
		}
	}
	return errors.Join(errs...)
}

// updateStatus writes status when it changed, retrying on conflicts with a fresh read.
func (c *Controller) updateStatus(ctx context.Context, set *appsv1.StatefulSet, status appsv1.StatefulSetStatus) error {
	if apiequality.Semantic.DeepEqual(set.Status, status) {
		return nil
	}
	cur := set.DeepCopy()
	for i := 0; ; i++ {
		cur.Status = status
		_, err := c.client.AppsV1().StatefulSets(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) || i >= 2 {
			return fmt.Errorf("update status of %s/%s: %w", set.Namespace, set.Name, err)
		}
		if cur, err = c.client.AppsV1().StatefulSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{}); err != nil {
			return err
		}
		if cur.UID != set.UID {
			return nil
		}
	}
}

// round is one pass of the update algorithm over one set.
type round struct {
	c                     *Controller
	set                   *appsv1.StatefulSet
	key                   string
	currentSet, updateSet *appsv1.StatefulSet
	current, update       string
	now                   time.Time

	replicas  []*corev1.Pod // by ordinal-start; nil until filled in manage
	condemned []*corev1.Pod // ordinals out of range, highest first
	status    appsv1.StatefulSetStatus
	requeue   time.Duration
}

// count sorts the pods into the ordinals in range and the condemned, and counts them.
func (r *round) count(pods []*corev1.Pod) {
	r.status = appsv1.StatefulSetStatus{CurrentRevision: r.current, UpdateRevision: r.update}
	start := startOrdinal(r.set)
	r.replicas = make([]*corev1.Pod, specReplicas(r.set))
	for _, p := range pods {
		r.status.Replicas++
		if isRunningAndReady(p) {
			r.status.ReadyReplicas++
			if internal.IsPodAvailable(p, r.set.Spec.MinReadySeconds, r.now) {
				r.status.AvailableReplicas++
			}
		}
		if isCreated(p) && !isTerminating(p) {
			r.countRevision(podRevision(p), 1)
		}
		o := ordinalOf(p)
		if inRange(r.set, o) {
			r.replicas[o-start] = p
		} else if o >= 0 {
			r.condemned = append(r.condemned, p)
		}
	}
	sort.Slice(r.condemned, func(i, j int) bool { return ordinalOf(r.condemned[i]) > ordinalOf(r.condemned[j]) })
}

func (r *round) countRevision(rev string, n int32) {
	if rev == r.current {
		r.status.CurrentReplicas += n
	}
	if rev == r.update {
		r.status.UpdatedReplicas += n
	}
}

func (r *round) healthy(p *corev1.Pod) bool {
	return isCreated(p) && !isTerminating(p) && isRunningAndReady(p)
}

func (r *round) available(p *corev1.Pod) bool {
	return r.healthy(p) && internal.IsPodAvailable(p, r.set.Spec.MinReadySeconds, r.now)
}

// needsCurrentRevision reports whether a missing pod of ordinal comes back from the current
// revision: below the partition of a rolling update.
func needsCurrentRevision(set *appsv1.StatefulSet, ordinal int) bool {
	if set.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		return false
	}
	ru := set.Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.Partition == nil {
		return ordinal-startOrdinal(set) < int(set.Status.CurrentReplicas)
	}
	return ordinal < int(*ru.Partition)
}

// manage creates, fixes and deletes pods: missing ordinals in increasing order, condemned
// ordinals in decreasing order, then the rolling update from the highest ordinal down. Under
// OrderedReady every step waits for the pods before it to be Running and Ready.
func (r *round) manage(ctx context.Context) error {
	set, start := r.set, startOrdinal(r.set)
	monotonic := !allowsBurst(set)

	for i, p := range r.replicas {
		if p != nil {
			continue
		}
		ord := start + i
		if needsCurrentRevision(set, ord) {
			r.replicas[i] = newPod(r.currentSet, ord, r.current)
		} else {
			r.replicas[i] = newPod(r.updateSet, ord, r.update)
		}
	}
	var firstUnhealthy *corev1.Pod
	for _, p := range append(slices.Clone(r.replicas), r.condemned...) {
		if !r.healthy(p) {
			firstUnhealthy = p
			break
		}
	}

	// Claims first: their owners follow the retention policy for the pods that exist.
	var errs []error
	for _, p := range r.replicas {
		if isCreated(p) {
			errs = append(errs, r.c.syncClaimOwners(ctx, set, p, false))
		}
	}
	for _, p := range r.condemned {
		errs = append(errs, r.c.syncClaimOwners(ctx, set, p, true))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	var toCreate []*corev1.Pod
	for _, p := range r.replicas {
		if isFailed(p) || isSucceeded(p) {
			// Replaced once it is gone from the API, never while it is still there.
			if !isTerminating(p) {
				if err := r.deletePods(ctx, []*corev1.Pod{p}); err != nil {
					return err
				}
			}
			if monotonic {
				return nil
			}
			continue
		}
		if !isCreated(p) {
			blocked, err := r.c.claimsBlocked(set, p)
			if err != nil {
				return err
			}
			if blocked {
				r.requeue = claimWait
			} else {
				toCreate = append(toCreate, p)
			}
			if monotonic {
				break
			}
			continue
		}
		if isTerminating(p) {
			if monotonic {
				return nil
			}
			continue
		}
		if monotonic && !r.healthy(p) {
			return nil
		}
		if monotonic && !r.available(p) {
			r.requeue = time.Duration(set.Spec.MinReadySeconds) * time.Second
			return nil
		}
		if !identityMatches(set, p) {
			if err := r.c.fixIdentity(ctx, set, p); err != nil {
				return err
			}
		}
		if err := r.c.createClaims(ctx, set, p); err != nil {
			return err
		}
	}
	if len(toCreate) > 0 || (monotonic && r.requeue == claimWait) {
		return r.createPods(ctx, toCreate)
	}

	for _, p := range r.condemned {
		if isTerminating(p) {
			if monotonic {
				return nil
			}
			continue
		}
		if monotonic && !r.healthy(p) && p != firstUnhealthy {
			return nil
		}
		if monotonic {
			return r.deletePods(ctx, []*corev1.Pod{p})
		}
	}
	if !monotonic {
		var victims []*corev1.Pod
		for _, p := range r.condemned {
			if !isTerminating(p) {
				victims = append(victims, p)
			}
		}
		if len(victims) > 0 {
			return r.deletePods(ctx, victims)
		}
	}

	if set.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return nil
	}
	return r.deletePods(ctx, rollingVictims(r.replicas, start, partition(set), maxUnavailable(set), r.update, r.available))
}

// rollingVictims picks the pods a rolling update deletes now: out-of-date pods at ordinals
// >= partition, highest first, as many as maxUnavailable leaves room for after counting the
// pods already unavailable.
func rollingVictims(replicas []*corev1.Pod, start, partition, maxUnavailable int, update string, available func(*corev1.Pod) bool) []*corev1.Pod {
	unavailable := 0
	for _, p := range replicas {
		if !available(p) {
			unavailable++
		}
	}
	room := maxUnavailable - unavailable
	var out []*corev1.Pod
	for i := len(replicas) - 1; i >= 0 && len(out) < room && start+i >= partition; i-- {
		p := replicas[i]
		if podRevision(p) != update && !isTerminating(p) {
			out = append(out, p)
		}
	}
	return out
}

// createPods creates the claims, then the pods, recording expectations first.
func (r *round) createPods(ctx context.Context, pods []*corev1.Pod) error {
	if len(pods) == 0 {
		return nil
	}
	r.c.expectations.ExpectCreations(r.key, len(pods))
	var errs []error
	for _, p := range pods {
		if err := r.c.createClaims(ctx, r.set, p); err != nil {
			r.c.expectations.CreationObserved(r.key)
			errs = append(errs, err)
			continue
		}
		_, err := r.c.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		switch {
		case err == nil:
			r.c.recorder.Eventf(r.set, corev1.EventTypeNormal, ReasonSuccessfulCreate, "create Pod %s in StatefulSet %s successful", p.Name, r.set.Name)
			r.status.Replicas++
			r.countRevision(podRevision(p), 1)
		case apierrors.IsAlreadyExists(err):
			r.c.expectations.CreationObserved(r.key)
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			r.c.expectations.CreationObserved(r.key)
		default:
			r.c.expectations.CreationObserved(r.key)
			r.c.recorder.Eventf(r.set, corev1.EventTypeWarning, ReasonFailedCreate, "create Pod %s in StatefulSet %s failed error: %v", p.Name, r.set.Name, err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deletePods deletes pods (guarded by UID), recording expectations first.
func (r *round) deletePods(ctx context.Context, pods []*corev1.Pod) error {
	if len(pods) == 0 {
		return nil
	}
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = internal.PodKey(p)
	}
	r.c.expectations.ExpectDeletions(r.key, keys)
	var errs []error
	for _, p := range pods {
		err := r.c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil {
			r.c.expectations.DeletionObserved(r.key, internal.PodKey(p))
			if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				r.c.recorder.Eventf(r.set, corev1.EventTypeWarning, ReasonFailedDelete, "delete Pod %s in StatefulSet %s failed error: %v", p.Name, r.set.Name, err)
				errs = append(errs, err)
			}
			continue
		}
		r.c.recorder.Eventf(r.set, corev1.EventTypeNormal, ReasonSuccessfulDelete, "delete Pod %s in StatefulSet %s successful", p.Name, r.set.Name)
		r.c.log.WithField("statefulset", r.key).WithField("pod", p.Name).Info("deleted pod")
		r.countRevision(podRevision(p), -1)
	}
	return errors.Join(errs...)
}

// fixIdentity puts back the identity labels of an adopted or edited pod.
func (c *Controller) fixIdentity(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	p := pod.DeepCopy()
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	want := newPod(set, ordinalOf(p), "")
	p.Labels[PodNameLabel] = want.Labels[PodNameLabel]
	p.Labels[PodIndexLabel] = want.Labels[PodIndexLabel]
	_, err := c.client.CoreV1().Pods(p.Namespace).Update(ctx, p, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("update identity of pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// claimsBlocked reports whether a claim of the pod about to be created is still being
// collected (deleting, or owned by an earlier pod of the ordinal): the new pod must not
// mount a claim that is about to vanish.
func (c *Controller) claimsBlocked(set *appsv1.StatefulSet, pod *corev1.Pod) (bool, error) {
	for _, want := range claimsFor(set, ordinalOf(pod)) {
		got, err := c.pvcLister.PersistentVolumeClaims(set.Namespace).Get(want.Name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, err
		}
		if got.DeletionTimestamp != nil {
			return true, nil
		}
		for _, ref := range got.OwnerReferences {
			if ref.Kind == "Pod" && ref.APIVersion == "v1" && ref.Name == pod.Name && ref.UID != pod.UID {
				return true, nil
			}
		}
	}
	return false, nil
}

// createClaims creates the pod's missing claims, owned as the retention policy says.
func (c *Controller) createClaims(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	for _, want := range claimsFor(set, ordinalOf(pod)) {
		if _, err := c.pvcLister.PersistentVolumeClaims(set.Namespace).Get(want.Name); err == nil {
			continue
		} else if !apierrors.IsNotFound(err) {
			return err
		}
		want.OwnerReferences = claimOwners(want, set, pod, false)
		_, err := c.client.CoreV1().PersistentVolumeClaims(set.Namespace).Create(ctx, want, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonFailedCreate, "create Claim %s for Pod %s in StatefulSet %s failed error: %v", want.Name, pod.Name, set.Name, err)
			return fmt.Errorf("create claim %s/%s: %w", set.Namespace, want.Name, err)
		}
		if err == nil {
			c.recorder.Eventf(set, corev1.EventTypeNormal, ReasonSuccessfulCreate, "create Claim %s Pod %s in StatefulSet %s success", want.Name, pod.Name, set.Name)
		}
	}
	return nil
}

// syncClaimOwners sets the owners of an existing pod's claims as the retention policy says.
func (c *Controller) syncClaimOwners(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod, condemned bool) error {
	for _, want := range claimsFor(set, ordinalOf(pod)) {
		got, err := c.pvcLister.PersistentVolumeClaims(set.Namespace).Get(want.Name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if got.DeletionTimestamp != nil {
			continue
		}
		owners := claimOwners(got, set, pod, condemned)
		if sameOwners(owners, got.OwnerReferences) {
			continue
		}
		up := got.DeepCopy()
		up.OwnerReferences = owners
		if _, err := c.client.CoreV1().PersistentVolumeClaims(up.Namespace).Update(ctx, up, metav1.UpdateOptions{}); err != nil &&
			!apierrors.IsNotFound(err) {
			return fmt.Errorf("update owners of claim %s/%s: %w", up.Namespace, up.Name, err)
		}
	}
	return nil
}

// claimOwners returns the ownerReferences a claim of pod should have, as upstream: the set
// when whenDeleted is Delete, except that a condemned pod's claim under whenScaled Delete is
// owned by the pod alone. References to anything else are kept.
func claimOwners(claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod, condemned bool) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	for _, ref := range claim.OwnerReferences {
		if ref.UID == set.UID || (ref.Kind == "Pod" && ref.APIVersion == "v1" && ref.Name == pod.Name) {
			continue
		}
		out = append(out, ref)
	}
	policy := set.Spec.PersistentVolumeClaimRetentionPolicy
	deleteWithSet := policy != nil && policy.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	deleteScaled := policy != nil && policy.WhenScaled == appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	switch {
	case condemned && deleteScaled:
		out = append(out, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID})
	case deleteWithSet:
		out = append(out, *metav1.NewControllerRef(set, controllerKind))
	}
	return out
}

// sameOwners compares two owner lists ignoring order.
func sameOwners(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.ContainsFunc(b, func(y metav1.OwnerReference) bool { return apiequality.Semantic.DeepEqual(x, y) }) {
			return false
		}
	}
	return true
}
