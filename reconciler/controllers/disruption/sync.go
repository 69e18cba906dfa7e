package disruption

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// sync recomputes the status of one PodDisruptionBudget. A failure other than a write
// conflict leaves the budget allowing no disruption, with condition DisruptionAllowed False
// reason SyncFailed saying why, and is retried with back-off.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pdb, err := c.pdbLister.PodDisruptionBudgets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	err = c.trySync(ctx, pdb)
	if err == nil || apierrors.IsConflict(err) {
		return err
	}
	c.log.WithFields(logrus.Fields{"pdb": key}).WithError(err).Warn("cannot compute the disruption budget; it allows no disruption")
	if ferr := c.failSafe(ctx, pdb, err); ferr != nil {
		return fmt.Errorf("%w (and recording it: %v)", err, ferr)
	}
	return err
}

func (c *Controller) trySync(ctx context.Context, pdb *policyv1.PodDisruptionBudget) error {
	pods, err := c.podsFor(pdb)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		c.recorder.Event(pdb, corev1.EventTypeNormal, "NoPods", "No matching pods found")
	}
	expected, desired, unmanaged, err := expectedAndDesired(pdb, pods, func(ref *metav1.OwnerReference, ns string) (types.UID, int32, bool, error) {
		return c.controllerScale(ctx, ref, ns)
	})
	if err != nil {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "CalculateExpectedPodCountFailed", "Failed to calculate the number of expected pods: %v", err)
		return err
	}
	if len(unmanaged) > 0 {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "UnmanagedPods",
			"Pods selected by this PodDisruptionBudget (selector: %s) were found to be unmanaged: %s. They are not counted in expectedPods, "+
				"which may make the budget allow fewer or more disruptions than meant; to account for these pods set .spec.minAvailable to an integer.",
			metav1.FormatLabelSelector(pdb.Spec.Selector), strings.Join(unmanaged, ", "))
	}
	now := c.now()
	disrupted, recheck, expired := disruptedPods(pods, pdb.Status.DisruptedPods, now)
	for _, pod := range expired {
		c.recorder.Eventf(pod, corev1.EventTypeWarning, "NotDeleted", "Pod was expected by PDB %s/%s to be deleted but it wasn't", pdb.Namespace, pdb.Name)
	}
	status := newStatus(pdb, countHealthy(pods, disrupted, now), desired, expected, disrupted)
	if err := c.writeStatus(ctx, pdb, status); err != nil {
		return err
	}
	if recheck > 0 {
		key, _ := cache.MetaNamespaceKeyFunc(pdb)
		c.queue.AddAfter(key, recheck)
	}
	return nil
}

// failSafe records why the budget could not be computed and allows no disruption.
func (c *Controller) failSafe(ctx context.Context, pdb *policyv1.PodDisruptionBudget, cause error) error {
	status := *pdb.Status.DeepCopy()
	status.DisruptionsAllowed = 0
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:               policyv1.DisruptionAllowedCondition,
		Status:             metav1.ConditionFalse,
		Reason:             policyv1.SyncFailedReason,
		Message:            cause.Error(),
		ObservedGeneration: status.ObservedGeneration,
	})
	return c.writeStatus(ctx, pdb, status)
}

// writeStatus updates the status subresource unless it already says status.
func (c *Controller) writeStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget, status policyv1.PodDisruptionBudgetStatus) error {
	if apiequality.Semantic.DeepEqual(pdb.Status, status) {
		return nil
	}
	next := pdb.DeepCopy()
	next.Status = status
	if _, err := c.client.PolicyV1().PodDisruptionBudgets(pdb.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of PodDisruptionBudget %s/%s: %w", pdb.Namespace, pdb.Name, err)
	}
	return nil
}

// podsFor lists the pods of the budget's namespace its selector matches: an empty selector
// matches every pod, a missing one none (policy/v1).
func (c *Controller) podsFor(pdb *policyv1.PodDisruptionBudget) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("spec.selector: %w", err)
	}
	return c.podLister.Pods(pdb.Namespace).List(sel)
}

// scaleFinder returns the UID and desired scale of the controller a pod's controller
// reference names, or found false when that controller does not exist (any more).
type scaleFinder func(ref *metav1.OwnerReference, ns string) (uid types.UID, scale int32, found bool, err error)

// expectedAndDesired computes status.expectedPods and status.desiredHealthy as upstream. An
// integer minAvailable needs no controller: the expected pods are the matched ones. A
// percentage, or maxUnavailable, is taken of the sum of the scales of the pods' controllers
// (rounded up); pods without a controller are returned as unmanaged and not counted.
func expectedAndDesired(pdb *policyv1.PodDisruptionBudget, pods []*corev1.Pod, find scaleFinder) (expected, desired int32, unmanaged []string, err error) {
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		if expected, unmanaged, err = expectedScale(pods, find); err != nil {
			return 0, 0, nil, err
		}
		maxUnavailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, int(expected), true)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("spec.maxUnavailable: %w", err)
		}
		desired = max(expected-int32(maxUnavailable), 0)
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int:
		desired = pdb.Spec.MinAvailable.IntVal
		expected = int32(len(pods))
	case pdb.Spec.MinAvailable != nil:
		if expected, unmanaged, err = expectedScale(pods, find); err != nil {
			return 0, 0, nil, err
		}
		minAvailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(expected), true)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("spec.minAvailable: %w", err)
		}
		desired = int32(minAvailable)
	}
	return expected, desired, unmanaged, nil
}

// expectedScale sums the scales of the controllers of pods, each controller once.
func expectedScale(pods []*corev1.Pod, find scaleFinder) (int32, []string, error) {
	scales := map[types.UID]int32{}
	var unmanaged []string
	for _, pod := range pods {
		ref := metav1.GetControllerOf(pod)
		if ref == nil {
			unmanaged = append(unmanaged, pod.Name)
			continue
		}
		if _, seen := scales[ref.UID]; seen {
			continue
		}
		uid, n, found, err := find(ref, pod.Namespace)
		if err != nil {
			return 0, nil, fmt.Errorf("pod %q: %w", pod.Name, err)
		}
		if !found {
			return 0, nil, fmt.Errorf("found no controller for pod %q: its controller %s %q (%s) does not exist; "+
				"a percentage minAvailable or a maxUnavailable is taken of the scale of the pods' controllers, "+
				"so use an integer minAvailable for pods without one", pod.Name, ref.Kind, ref.Name, ref.APIVersion)
		}
		scales[uid] = n
	}
	var sum int32
	for _, n := range scales {
		sum += n
	}
	sort.Strings(unmanaged)
	return sum, unmanaged, nil
}

// disruptedPods keeps the entries of status.disruptedPods whose pod still exists, is not
// being deleted, and was evicted less than DeletionTimeout ago; it returns when the oldest
// kept entry expires (0: none) and the pods whose entry expired without their deletion.
func disruptedPods(pods []*corev1.Pod, recorded map[string]metav1.Time, now time.Time) (map[string]metav1.Time, time.Duration, []*corev1.Pod) {
	var (
		out     map[string]metav1.Time
		recheck time.Duration
		expired []*corev1.Pod
	)
	for _, pod := range pods {
		at, ok := recorded[pod.Name]
		if !ok || pod.DeletionTimestamp != nil {
			continue
		}
		left := at.Add(DeletionTimeout).Sub(now)
		if left <= 0 {
			expired = append(expired, pod)
			continue
		}
		if out == nil {
			out = map[string]metav1.Time{}
		}
		out[pod.Name] = at
		if recheck == 0 || left < recheck {
			recheck = left
		}
	}
	return out, recheck, expired
}

// countHealthy counts the Ready pods that are neither being deleted nor recorded as evicted.
func countHealthy(pods []*corev1.Pod, disrupted map[string]metav1.Time, now time.Time) int32 {
	var n int32
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if at, ok := disrupted[pod.Name]; ok && at.Add(DeletionTimeout).After(now) {
			continue
		}
		if internal.IsPodReady(pod) {
			n++
		}
	}
	return n
}

// newStatus is the status of pdb for the given counts: disruptionsAllowed is what the
// healthy pods exceed the desired ones by, and 0 while the budget expects no pods (so that
// a budget created before its pods allows nothing until it has seen them).
func newStatus(pdb *policyv1.PodDisruptionBudget, currentHealthy, desiredHealthy, expected int32, disrupted map[string]metav1.Time) policyv1.PodDisruptionBudgetStatus {
	allowed := currentHealthy - desiredHealthy
	if expected <= 0 || allowed < 0 {
		allowed = 0
	}
	s := policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.Generation,
		DisruptedPods:      disrupted,
		DisruptionsAllowed: allowed,
		CurrentHealthy:     currentHealthy,
		DesiredHealthy:     desiredHealthy,
		ExpectedPods:       expected,
		Conditions:         append([]metav1.Condition(nil), pdb.Status.Conditions...),
	}
	cond := metav1.Condition{
		Type:               policyv1.DisruptionAllowedCondition,
		Status:             metav1.ConditionFalse,
		Reason:             policyv1.InsufficientPodsReason,
		ObservedGeneration: s.ObservedGeneration,
	}
	if allowed > 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, policyv1.SufficientPodsReason
	}
	meta.SetStatusCondition(&s.Conditions, cond)
	return s
}

// controllerScale finds the scale of the controller ref names: ReplicaSets (their Deployment's
// when they have one) and StatefulSets from the informers' caches, any other kind through its
// scale subresource.
func (c *Controller) controllerScale(ctx context.Context, ref *metav1.OwnerReference, ns string) (types.UID, int32, bool, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return "", 0, false, fmt.Errorf("controller reference %s %q: apiVersion %q: %w", ref.Kind, ref.Name, ref.APIVersion, err)
	}
	if gv.Group == appsv1.GroupName || gv.Group == "extensions" {
		switch ref.Kind {
		case "ReplicaSet":
			rs, err := c.rsLister.ReplicaSets(ns).Get(ref.Name)
			if err != nil || rs.UID != ref.UID {
				return "", 0, false, nil
			}
			if dref := metav1.GetControllerOf(rs); dref != nil && dref.Kind == "Deployment" {
				if d, err := c.dLister.Deployments(ns).Get(dref.Name); err == nil && d.UID == dref.UID {
					return d.UID, ptrValue(d.Spec.Replicas), true, nil
				}
			}
			return rs.UID, ptrValue(rs.Spec.Replicas), true, nil
		case "StatefulSet":
			ss, err := c.ssLister.StatefulSets(ns).Get(ref.Name)
			if err != nil || ss.UID != ref.UID {
				return "", 0, false, nil
			}
			return ss.UID, ptrValue(ss.Spec.Replicas), true, nil
		case "Deployment":
			d, err := c.dLister.Deployments(ns).Get(ref.Name)
			if err != nil || d.UID != ref.UID {
				return "", 0, false, nil
			}
			return d.UID, ptrValue(d.Spec.Replicas), true, nil
		}
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: ref.Kind}
	mapping, err := c.mapper.RESTMapping(gk, gv.Version)
	if meta.IsNoMatchError(err) {
		// The kind may be a custom resource served since the mapper last asked.
		if r, ok := c.mapper.(meta.ResettableRESTMapper); ok {
			r.Reset()
			mapping, err = c.mapper.RESTMapping(gk, gv.Version)
		}
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("find the resource of its controller %s %q (%s): %w", ref.Kind, ref.Name, ref.APIVersion, err)
	}
	gr := mapping.Resource.GroupResource()
	sc, err := c.scales.Scales(ns).Get(ctx, gr, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Not found is also the answer for a resource without a scale subresource.
		has, derr := c.hasScale(mapping.Resource)
		if derr != nil {
			return "", 0, false, derr
		}
		if !has {
			return "", 0, false, fmt.Errorf("its controller %s %q is a %s, which has no scale subresource; "+
				"a percentage minAvailable or a maxUnavailable is taken of the scale of the pods' controllers, "+
				"so use an integer minAvailable for these pods", ref.Kind, ref.Name, gr)
		}
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("get the scale of its controller %s %q: %w", ref.Kind, ref.Name, err)
	}
	if sc.UID != ref.UID {
		return "", 0, false, nil
	}
	return sc.UID, sc.Spec.Replicas, true, nil
}

// hasScale reports whether the API serves the scale subresource of resource.
func (c *Controller) hasScale(resource schema.GroupVersionResource) (bool, error) {
	list, err := c.discovery.ServerResourcesForGroupVersion(resource.GroupVersion().String())
	if err != nil {
		return false, fmt.Errorf("discover the subresources of %s: %w", resource.GroupResource(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == resource.Resource+"/scale" {
			return true, nil
		}
	}
	return false, nil
}
