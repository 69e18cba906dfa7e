package internal

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// PodDeletionCostAnnotation ranks pods for scale-down: lower cost goes first.
const PodDeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"

// podReadyCondition returns the pod's Ready condition, or nil.
func podReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// IsPodReady reports whether the pod's Ready condition is True.
func IsPodReady(pod *corev1.Pod) bool {
	c := podReadyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// IsPodAvailable reports whether the pod has been ready for at least minReadySeconds at now.
func IsPodAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	c := podReadyCondition(pod)
	if c == nil || c.Status != corev1.ConditionTrue {
		return false
	}
	if minReadySeconds == 0 {
		return true
	}
	d := time.Duration(minReadySeconds) * time.Second
	return !c.LastTransitionTime.IsZero() && c.LastTransitionTime.Add(d).Before(now)
}

// IsPodActive reports whether the pod counts toward a controller's replicas: not finished and
// not being deleted.
func IsPodActive(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed &&
		pod.DeletionTimestamp == nil
}

// FilterActivePods returns the active pods of pods.
func FilterActivePods(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if IsPodActive(p) {
			out = append(out, p)
		}
	}
	return out
}

// PodKey is the namespace/name of a pod, as expectations track it.
func PodKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// PodFromTemplate builds the pod a controller creates from its template: labels, annotations
// and finalizers of the template, generateName "<owner>-" (the API server appends five random
// characters) and a controller reference to the owner.
func PodFromTemplate(template *corev1.PodTemplateSpec, owner metav1.Object, gvk schema.GroupVersionKind) *corev1.Pod {
	prefix := owner.GetName() + "-"
	// A name the API would refuse as a prefix (too long) is cut like upstream does: the
	// server's generated suffix keeps the final name valid.
	if len(prefix) > validation.DNS1123SubdomainMaxLength-5 {
		prefix = prefix[:validation.DNS1123SubdomainMaxLength-5]
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    prefix,
			Namespace:       owner.GetNamespace(),
			Labels:          copyMap(template.Labels),
			Annotations:     copyMap(template.Annotations),
			Finalizers:      append([]string(nil), template.Finalizers...),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, gvk)},
		},
	}
	pod.Spec = *template.Spec.DeepCopy()
	return pod
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// podPhaseOrdinal orders phases for scale-down: pending pods go before unknown before running.
var podPhaseOrdinal = map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}

// deletionCost reads the pod-deletion-cost annotation (0 when absent or invalid).
func deletionCost(pod *corev1.Pod) int32 {
	v, ok := pod.Annotations[PodDeletionCostAnnotation]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}

func maxRestarts(pod *corev1.Pod) int32 {
	var m int32
	for _, c := range pod.Status.ContainerStatuses {
		m = max(m, c.RestartCount)
	}
	return m
}

// afterOrZero reports whether t1 sorts before t2 when newer goes first: a zero time is newest.
func afterOrZero(t1, t2 time.Time) bool {
	if t1.IsZero() || t2.IsZero() {
		return t1.IsZero()
	}
	return t1.After(t2)
}

// DeletionLess reports whether pod a should be deleted before pod b when scaling down.
// sameNode is how many pods of the owner share each pod's node (doubled-up pods go first).
// The order is upstream's: unscheduled < scheduled; Pending < Unknown < Running; not ready <
// ready; lower pod-deletion-cost; more pods on the same node; ready for less time; more
// container restarts; newer creationTimestamp.
func DeletionLess(a, b *corev1.Pod, sameNodeA, sameNodeB int) bool {
	if a.Spec.NodeName != b.Spec.NodeName && (a.Spec.NodeName == "" || b.Spec.NodeName == "") {
		return a.Spec.NodeName == ""
	}
	if pa, pb := podPhaseOrdinal[a.Status.Phase], podPhaseOrdinal[b.Status.Phase]; pa != pb {
		return pa < pb
	}
	ra, rb := IsPodReady(a), IsPodReady(b)
	if ra != rb {
		return !ra
	}
	if ca, cb := deletionCost(a), deletionCost(b); ca != cb {
		return ca < cb
	}
	if sameNodeA != sameNodeB {
		return sameNodeA > sameNodeB
	}
	if ra && rb {
		ta, tb := podReadyCondition(a).LastTransitionTime.Time, podReadyCondition(b).LastTransitionTime.Time
		if !ta.Equal(tb) {
			return afterOrZero(ta, tb)
		}
	}
	if xa, xb := maxRestarts(a), maxRestarts(b); xa != xb {
		return xa > xb
	}
	if ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time; !ta.Equal(tb) {
		return afterOrZero(ta, tb)
	}
	return false
}

// PodsToDelete returns the n pods to delete first from pods, per DeletionLess.
func PodsToDelete(pods []*corev1.Pod, n int) []*corev1.Pod {
	if n >= len(pods) {
		return pods
	}
	perNode := map[string]int{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			perNode[p.Spec.NodeName]++
		}
	}
	rank := func(p *corev1.Pod) int {
		if p.Spec.NodeName == "" {
			return 0
		}
		return perNode[p.Spec.NodeName]
	}
	sorted := append([]*corev1.Pod(nil), pods...)
	sort.SliceStable(sorted, func(i, j int) bool {
		return DeletionLess(sorted[i], sorted[j], rank(sorted[i]), rank(sorted[j]))
	})
	return sorted[:n]
}

// ControllerRefPatch is the strategic merge patch that adds a controller reference to a
// dependent (adoption); the uid guards against a recreated object of the same name.
func ControllerRefPatch(owner metav1.Object, gvk schema.GroupVersionKind, dependentUID string) []byte {
	return fmt.Appendf(nil, `{"metadata":{"ownerReferences":[{"apiVersion":%q,"kind":%q,"name":%q,"uid":%q,"controller":true,"blockOwnerDeletion":true}],"uid":%q}}`,
		gvk.GroupVersion().String(), gvk.Kind, owner.GetName(), owner.GetUID(), dependentUID)
}

// ReleasePatch is the strategic merge patch that removes the owner's reference (release).
func ReleasePatch(owner metav1.Object, dependentUID string) []byte {
	return fmt.Appendf(nil, `{"metadata":{"ownerReferences":[{"$patch":"delete","uid":%q}],"uid":%q}}`, owner.GetUID(), dependentUID)
}
