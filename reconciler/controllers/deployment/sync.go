package deployment

import (
	"context"
	"fmt"
	"reflect"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Event reasons, as upstream.
const (
	EventScalingReplicaSet = "ScalingReplicaSet"
	EventSelectingAll      = "SelectingAll"
)

// sync reconciles one Deployment from the informers' current state.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	cached, err := c.dLister.Deployments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	d := cached.DeepCopy()

	if d.Spec.Selector == nil || (len(d.Spec.Selector.MatchLabels) == 0 && len(d.Spec.Selector.MatchExpressions) == 0) {
		c.recorder.Eventf(d, corev1.EventTypeWarning, EventSelectingAll, "This deployment is selecting all pods. A non-empty selector is required.")
		if d.Status.ObservedGeneration < d.Generation {
			d.Status.ObservedGeneration = d.Generation
			_, err := c.client.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{})
			return err
		}
		return nil
	}

	rsList, err := c.replicaSetsFor(ctx, d)
	if err != nil {
		return err
	}
	if d.DeletionTimestamp != nil {
		return c.syncStatusOnly(ctx, d, rsList)
	}
	if err := c.checkPausedConditions(ctx, d); err != nil {
		return err
	}
	if d.Spec.Paused {
		return c.syncScaleAndStatus(ctx, d, rsList)
	}
	scaling, err := c.isScalingEvent(ctx, d, rsList)
	if err != nil {
		return err
	}
	if scaling {
		return c.syncScaleAndStatus(ctx, d, rsList)
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		pods, err := c.podMapFor(d, rsList)
		if err != nil {
			return err
		}
		return c.rolloutRecreate(ctx, d, rsList, pods)
	}
	return c.rolloutRolling(ctx, d, rsList)
}

// replicaSetsFor claims the Deployment's ReplicaSets: adopts matching orphans and releases
// owned ones that stopped matching.
func (c *Controller) replicaSetsFor(ctx context.Context, d *appsv1.Deployment) ([]*appsv1.ReplicaSet, error) {
	all, err := c.rsLister.ReplicaSets(d.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector of deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	rsClient := c.client.AppsV1().ReplicaSets(d.Namespace)
	claimer := internal.Claimer[*appsv1.ReplicaSet]{
		Owner:    d,
		Selector: selector,
		CanAdopt: func(ctx context.Context) error {
			fresh, err := c.client.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fresh.UID != d.UID {
				return fmt.Errorf("original Deployment %s/%s is gone: got uid %v, wanted %v", d.Namespace, d.Name, fresh.UID, d.UID)
			}
			if fresh.DeletionTimestamp != nil {
				return fmt.Errorf("%s/%s has just been deleted at %v", d.Namespace, d.Name, fresh.DeletionTimestamp)
			}
			return nil
		},
		Adopt: func(ctx context.Context, rs *appsv1.ReplicaSet) error {
			_, err := rsClient.Patch(ctx, rs.Name, types.StrategicMergePatchType,
				internal.ControllerRefPatch(d, controllerKind, string(rs.UID)), metav1.PatchOptions{})
			return err
		},
		Release: func(ctx context.Context, rs *appsv1.ReplicaSet) error {
			_, err := rsClient.Patch(ctx, rs.Name, types.StrategicMergePatchType,
				internal.ReleasePatch(d, string(rs.UID)), metav1.PatchOptions{})
			return err
		},
	}
	return claimer.Claim(ctx, all)
}

// podMapFor groups the Deployment's pods by the UID of the ReplicaSet that controls them.
func (c *Controller) podMapFor(d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) (map[types.UID][]*corev1.Pod, error) {
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err
	}
	pods, err := c.podLister.Pods(d.Namespace).List(selector)
	if err != nil {
		return nil, err
	}
	out := map[types.UID][]*corev1.Pod{}
	for _, rs := range rsList {
		out[rs.UID] = nil
	}
	for _, p := range pods {
		ref := metav1.GetControllerOf(p)
		if ref == nil {
			continue
		}
		if _, ok := out[ref.UID]; ok {
			out[ref.UID] = append(out[ref.UID], p)
		}
	}
	return out, nil
}

// findNewReplicaSet returns the oldest ReplicaSet whose template equals the Deployment's.
func findNewReplicaSet(d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	sorted := append([]*appsv1.ReplicaSet(nil), rsList...)
	byCreation(sorted)
	for _, rs := range sorted {
		if internal.EqualIgnoreHash(&rs.Spec.Template, &d.Spec.Template) {
			return rs
		}
	}
	return nil
}

// findOldReplicaSets returns every ReplicaSet but the new one.
func findOldReplicaSets(d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	newRS := findNewReplicaSet(d, rsList)
	var old []*appsv1.ReplicaSet
	for _, rs := range rsList {
		if newRS != nil && rs.UID == newRS.UID {
			continue
		}
		old = append(old, rs)
	}
	return old
}

// allReplicaSets returns the new ReplicaSet (created when create is set and none exists)
// and the old ones, with the new one's revision brought up to date.
func (c *Controller) allReplicaSets(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet, error) {
	old := findOldReplicaSets(d, rsList)
	newRS, err := c.newReplicaSet(ctx, d, rsList, old, create)
	if err != nil {
		return nil, nil, err
	}
	return newRS, old, nil
}

func (c *Controller) newReplicaSet(ctx context.Context, d *appsv1.Deployment, rsList, oldRSs []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, error) {
	existing := findNewReplicaSet(d, rsList)
	newRevision := strconv.FormatInt(maxRevision(oldRSs)+1, 10)
	dClient := c.client.AppsV1().Deployments(d.Namespace)
	if existing != nil {
		rsCopy := existing.DeepCopy()
		changed := setNewReplicaSetAnnotations(d, rsCopy, newRevision, true)
		if changed || rsCopy.Spec.MinReadySeconds != d.Spec.MinReadySeconds {
			rsCopy.Spec.MinReadySeconds = d.Spec.MinReadySeconds
			return c.client.AppsV1().ReplicaSets(rsCopy.Namespace).Update(ctx, rsCopy, metav1.UpdateOptions{})
		}
		needsUpdate := setDeploymentRevision(d, rsCopy.Annotations[RevisionAnnotation])
		if hasProgressDeadline(d) && getCondition(d.Status, appsv1.DeploymentProgressing) == nil {
			setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonFoundNewRS,
				fmt.Sprintf("Found new replica set %q", rsCopy.Name), c.now()))
			needsUpdate = true
		}
		if needsUpdate {
			updated, err := dClient.UpdateStatus(ctx, d, metav1.UpdateOptions{})
			if err != nil {
				return nil, err
			}
			*d = *updated
		}
		return rsCopy, nil
	}
	if !create {
		return nil, nil
	}

	template := *d.Spec.Template.DeepCopy()
	hash := internal.ComputeHash(&template, d.Status.CollisionCount)
	template.Labels = withLabel(d.Spec.Template.Labels, internal.PodTemplateHashLabel, hash)
	selector := d.Spec.Selector.DeepCopy()
	if selector.MatchLabels == nil {
		selector.MatchLabels = map[string]string{}
	}
	selector.MatchLabels[internal.PodTemplateHashLabel] = hash
	newRS := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:            d.Name + "-" + hash,
			Namespace:       d.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, controllerKind)},
			Labels:          template.Labels,
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        new(int32),
			MinReadySeconds: d.Spec.MinReadySeconds,
			Selector:        selector,
			Template:        template,
		},
	}
	*newRS.Spec.Replicas = NewRSNewReplicas(d, append(append([]*appsv1.ReplicaSet(nil), oldRSs...), newRS), newRS)
	setNewReplicaSetAnnotations(d, newRS, newRevision, false)

	created, err := c.client.AppsV1().ReplicaSets(d.Namespace).Create(ctx, newRS, metav1.CreateOptions{})
	alreadyExists := false
	switch {
	case apierrors.IsAlreadyExists(err):
		alreadyExists = true
		rs, getErr := c.rsLister.ReplicaSets(d.Namespace).Get(newRS.Name)
		if getErr != nil {
			return nil, getErr
		}
		if ref := metav1.GetControllerOf(rs); ref != nil && ref.UID == d.UID && internal.EqualIgnoreHash(&d.Spec.Template, &rs.Spec.Template) {
			created, err = rs, nil
			break
		}
		// A different ReplicaSet has the name: step the collision count so the next hash
		// (and name) differs.
		if d.Status.CollisionCount == nil {
			d.Status.CollisionCount = new(int32)
		}
		*d.Status.CollisionCount++
		if _, uerr := dClient.UpdateStatus(ctx, d, metav1.UpdateOptions{}); uerr == nil {
			c.log.WithField("deployment", d.Namespace+"/"+d.Name).WithField("collisionCount", *d.Status.CollisionCount).Info("hash collision")
		}
		return nil, err
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil, err
	case err != nil:
		msg := fmt.Sprintf("Failed to create new replica set %q: %v", newRS.Name, err)
		if hasProgressDeadline(d) {
			setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, ReasonFailedRSCreate, msg, c.now()))
			_, _ = dClient.UpdateStatus(ctx, d, metav1.UpdateOptions{})
		}
		c.recorder.Event(d, corev1.EventTypeWarning, ReasonFailedRSCreate, msg)
		return nil, err
	}
	if !alreadyExists && rsReplicas(created) > 0 {
		c.recorder.Eventf(d, corev1.EventTypeNormal, EventScalingReplicaSet, "Scaled up replica set %s to %d from 0", created.Name, rsReplicas(created))
	}
	needsUpdate := setDeploymentRevision(d, newRevision)
	if !alreadyExists && hasProgressDeadline(d) {
		setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonNewRSCreated,
			fmt.Sprintf("Created new replica set %q", created.Name), c.now()))
		needsUpdate = true
	}
	if needsUpdate {
		updated, err := dClient.UpdateStatus(ctx, d, metav1.UpdateOptions{})
		if err != nil {
			return created, err
		}
		*d = *updated
	}
	return created, nil
}

func withLabel(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

// setDeploymentRevision sets the Deployment's revision annotation (written with its status).
func setDeploymentRevision(d *appsv1.Deployment, revision string) bool {
	if d.Annotations[RevisionAnnotation] == revision {
		return false
	}
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[RevisionAnnotation] = revision
	return true
}

// isScalingEvent reports whether spec.replicas changed since the active ReplicaSets were
// last sized (their desired-replicas annotation), outside of a template change.
func (c *Controller) isScalingEvent(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) (bool, error) {
	newRS, oldRSs, err := c.allReplicaSets(ctx, d, rsList, false)
	if err != nil {
		return false, err
	}
	for _, rs := range filterActive(append(oldRSs, newRS)) {
		if desired, ok := intAnnotation(rs, DesiredReplicasAnnotation); ok && desired != specReplicas(d) {
			return true, nil
		}
	}
	return false, nil
}

// syncScaleAndStatus handles a paused Deployment or a scaling event: resize without rolling.
func (c *Controller) syncScaleAndStatus(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, oldRSs, err := c.allReplicaSets(ctx, d, rsList, false)
	if err != nil {
		return err
	}
	if err := c.scale(ctx, d, newRS, oldRSs); err != nil {
		return err
	}
	if d.Spec.Paused {
		c.cleanup(ctx, d, oldRSs)
	}
	return c.syncStatus(ctx, d, append(oldRSs, newRS), newRS)
}

func (c *Controller) syncStatusOnly(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, oldRSs, err := c.allReplicaSets(ctx, d, rsList, false)
	if err != nil {
		return err
	}
	return c.syncStatus(ctx, d, append(oldRSs, newRS), newRS)
}

// scale resizes the ReplicaSets to a new spec.replicas: one active ReplicaSet takes it all,
// otherwise (mid-rollout) the change is shared in proportion to their sizes.
func (c *Controller) scale(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, oldRSs []*appsv1.ReplicaSet) error {
	if rs := findActiveOrLatest(newRS, oldRSs); rs != nil {
		if rsReplicas(rs) == specReplicas(d) {
			return nil
		}
		_, _, err := c.scaleAndRecord(ctx, rs, specReplicas(d), d)
		return err
	}
	if isSaturated(d, newRS) {
		for _, old := range filterActive(oldRSs) {
			if _, _, err := c.scaleAndRecord(ctx, old, 0, d); err != nil {
				return err
			}
		}
		return nil
	}
	if !isRollingUpdate(d) {
		return nil
	}
	all := filterActive(append(append([]*appsv1.ReplicaSet(nil), oldRSs...), newRS))
	allowed := int32(0)
	if specReplicas(d) > 0 {
		allowed = specReplicas(d) + MaxSurge(d)
	}
	toAdd := allowed - sumSpec(all)
	op := ""
	switch {
	case toAdd > 0:
		bySize(all, true)
		op = "up"
	case toAdd < 0:
		bySize(all, false)
		op = "down"
	}
	added := int32(0)
	sizes := map[string]int32{}
	for _, rs := range all {
		sizes[rs.Name] = rsReplicas(rs)
		if toAdd != 0 {
			p := GetProportion(rs, d, toAdd, added)
			sizes[rs.Name] += p
			added += p
		}
	}
	for i, rs := range all {
		if i == 0 && toAdd != 0 {
			sizes[rs.Name] = max(sizes[rs.Name]+toAdd-added, 0)
		}
		if _, _, err := c.scaleReplicaSet(ctx, rs, sizes[rs.Name], d, op); err != nil {
			return err
		}
	}
	return nil
}

func (c *Controller) scaleAndRecord(ctx context.Context, rs *appsv1.ReplicaSet, n int32, d *appsv1.Deployment) (bool, *appsv1.ReplicaSet, error) {
	if rsReplicas(rs) == n {
		return false, rs, nil
	}
	op := "down"
	if rsReplicas(rs) < n {
		op = "up"
	}
	return c.scaleReplicaSet(ctx, rs, n, d, op)
}

// scaleReplicaSet sets a ReplicaSet's size and its replicas annotations, with the
// ScalingReplicaSet event upstream writes.
func (c *Controller) scaleReplicaSet(ctx context.Context, rs *appsv1.ReplicaSet, n int32, d *appsv1.Deployment, op string) (bool, *appsv1.ReplicaSet, error) {
	sizeChange := rsReplicas(rs) != n
	maxReplicas := specReplicas(d) + MaxSurge(d)
	if !sizeChange && !replicasAnnotationsNeedUpdate(rs, specReplicas(d), maxReplicas) {
		return false, rs, nil
	}
	from := rsReplicas(rs)
	rsCopy := rs.DeepCopy()
	rsCopy.Spec.Replicas = &n
	setReplicasAnnotations(rsCopy, specReplicas(d), maxReplicas)
	updated, err := c.client.AppsV1().ReplicaSets(rs.Namespace).Update(ctx, rsCopy, metav1.UpdateOptions{})
	if err != nil {
		return false, nil, err
	}
	if sizeChange {
		c.recorder.Eventf(d, corev1.EventTypeNormal, EventScalingReplicaSet, "Scaled %s replica set %s to %d from %d", op, rs.Name, n, from)
	}
	return sizeChange, updated, nil
}

// cleanup deletes the oldest scaled-down ReplicaSets beyond revisionHistoryLimit.
func (c *Controller) cleanup(ctx context.Context, d *appsv1.Deployment, oldRSs []*appsv1.ReplicaSet) {
	if d.Spec.RevisionHistoryLimit == nil {
		return
	}
	var alive []*appsv1.ReplicaSet
	for _, rs := range oldRSs {
		if rs != nil && rs.DeletionTimestamp == nil {
			alive = append(alive, rs)
		}
	}
	diff := len(alive) - int(*d.Spec.RevisionHistoryLimit)
	if diff <= 0 {
		return
	}
	byRevision(alive)
	for _, rs := range alive[:diff] {
		if rs.Status.Replicas != 0 || rsReplicas(rs) != 0 || rs.Generation > rs.Status.ObservedGeneration {
			continue
		}
		err := c.client.AppsV1().ReplicaSets(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &rs.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) {
			c.log.WithError(err).WithField("replicaset", rs.Namespace+"/"+rs.Name).Warn("delete old replica set")
		}
	}
}

// calculateStatus derives a Deployment's status from its ReplicaSets.
func calculateStatus(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, now func() metav1.Time) appsv1.DeploymentStatus {
	var replicas, updated, ready, available, total int32
	for _, rs := range all {
		if rs == nil {
			continue
		}
		replicas += rs.Status.Replicas
		ready += rs.Status.ReadyReplicas
		available += rs.Status.AvailableReplicas
		total += rsReplicas(rs)
	}
	if newRS != nil {
		updated = newRS.Status.Replicas
	}
	status := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            replicas,
		UpdatedReplicas:     updated,
		ReadyReplicas:       ready,
		AvailableReplicas:   available,
		UnavailableReplicas: max(total-available, 0),
		CollisionCount:      d.Status.CollisionCount,
	}
	for _, cond := range d.Status.Conditions {
		status.Conditions = append(status.Conditions, *cond.DeepCopy())
	}
	t := now().Time
	if available >= specReplicas(d)-MaxUnavailable(d) {
		setCondition(&status, newCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue, ReasonMinimumAvailable, "Deployment has minimum availability.", t))
	} else {
		setCondition(&status, newCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse, ReasonMinimumUnavail, "Deployment does not have minimum availability.", t))
	}
	return status
}

// syncStatus writes the status when it changed.
func (c *Controller) syncStatus(ctx context.Context, d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) error {
	status := calculateStatus(d, all, newRS, c.metaNow)
	if reflect.DeepEqual(d.Status, status) {
		return nil
	}
	d.Status = status
	_, err := c.client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	return err
}

func (c *Controller) metaNow() metav1.Time { return metav1.NewTime(c.now()) }

// checkPausedConditions records pausing and resuming in the Progressing condition (which
// stops the progress deadline while paused).
func (c *Controller) checkPausedConditions(ctx context.Context, d *appsv1.Deployment) error {
	if !hasProgressDeadline(d) {
		return nil
	}
	cond := getCondition(d.Status, appsv1.DeploymentProgressing)
	if cond != nil && cond.Reason == ReasonTimedOut {
		return nil
	}
	pausedExists := cond != nil && cond.Reason == ReasonPaused
	switch {
	case d.Spec.Paused && !pausedExists:
		setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ReasonPaused, "Deployment is paused", c.now()))
	case !d.Spec.Paused && pausedExists:
		setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ReasonResumed, "Deployment is resumed", c.now()))
	default:
		return nil
	}
	updated, err := c.client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	*d = *updated
	return nil
}
