package statefulset

import (
	"fmt"
	"maps"
	"regexp"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
)

// Labels the controller puts on its pods, as upstream.
const (
	PodNameLabel  = appsv1.StatefulSetPodNameLabel        // statefulset.kubernetes.io/pod-name
	PodIndexLabel = appsv1.PodIndexLabel                  // apps.kubernetes.io/pod-index
	RevisionLabel = appsv1.ControllerRevisionHashLabelKey // controller-revision-hash
)

var ordinalSuffix = regexp.MustCompile(`^(.*)-([0-9]+)$`)

// parentAndOrdinal splits a pod name "<set>-<ordinal>"; the ordinal is -1 when the name has
// no numeric suffix.
func parentAndOrdinal(name string) (string, int) {
	m := ordinalSuffix.FindStringSubmatch(name)
	if m == nil {
		return "", -1
	}
	n, err := strconv.ParseInt(m[2], 10, 32)
	if err != nil {
		return "", -1
	}
	return m[1], int(n)
}

// ordinalOf returns the ordinal in a pod's name, or -1.
func ordinalOf(pod *corev1.Pod) int {
	_, o := parentAndOrdinal(pod.Name)
	return o
}

// isMemberOf reports whether the pod's name says it belongs to set: only such pods are
// claimed, so that a matching pod of another name is never adopted.
func isMemberOf(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	parent, o := parentAndOrdinal(pod.Name)
	return o >= 0 && parent == set.Name
}

// startOrdinal is spec.ordinals.start (0 when unset).
func startOrdinal(set *appsv1.StatefulSet) int {
	if set.Spec.Ordinals != nil {
		return int(set.Spec.Ordinals.Start)
	}
	return 0
}

func specReplicas(set *appsv1.StatefulSet) int {
	if set.Spec.Replicas == nil {
		return 1
	}
	return int(*set.Spec.Replicas)
}

// inRange reports whether ordinal is one the set should run: [start, start+replicas).
func inRange(set *appsv1.StatefulSet, ordinal int) bool {
	start := startOrdinal(set)
	return ordinal >= start && ordinal < start+specReplicas(set)
}

// podName is "<set>-<ordinal>".
func podName(set *appsv1.StatefulSet, ordinal int) string {
	return fmt.Sprintf("%s-%d", set.Name, ordinal)
}

// claimName is "<template>-<set>-<ordinal>".
func claimName(set *appsv1.StatefulSet, template string, ordinal int) string {
	return fmt.Sprintf("%s-%s-%d", template, set.Name, ordinal)
}

// claimsFor returns the PVCs the pod of ordinal uses, keyed by template name: the template with
// the claim name and the set's selector labels added.
func claimsFor(set *appsv1.StatefulSet, ordinal int) map[string]*corev1.PersistentVolumeClaim {
	out := make(map[string]*corev1.PersistentVolumeClaim, len(set.Spec.VolumeClaimTemplates))
	for i := range set.Spec.VolumeClaimTemplates {
		t := &set.Spec.VolumeClaimTemplates[i]
		c := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name:        claimName(set, t.Name, ordinal),
				Namespace:   set.Namespace,
				Labels:      maps.Clone(t.Labels),
				Annotations: maps.Clone(t.Annotations),
			},
			Spec: *t.Spec.DeepCopy(),
		}
		if set.Spec.Selector != nil && len(set.Spec.Selector.MatchLabels) > 0 {
			if c.Labels == nil {
				c.Labels = map[string]string{}
			}
			maps.Copy(c.Labels, set.Spec.Selector.MatchLabels)
		}
		out[t.Name] = c
	}
	return out
}

// newPod builds the pod of ordinal from set's template, labelled with revision.
func newPod(set *appsv1.StatefulSet, ordinal int, revision string) *corev1.Pod {
	pod := internal.PodFromTemplate(&set.Spec.Template, set, controllerKind)
	pod.GenerateName = ""
	pod.Name = podName(set, ordinal)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[PodNameLabel] = pod.Name
	pod.Labels[PodIndexLabel] = strconv.Itoa(ordinal)
	pod.Labels[RevisionLabel] = revision
	pod.Spec.Hostname = pod.Name
	pod.Spec.Subdomain = set.Spec.ServiceName
	setStorage(set, pod, ordinal)
	return pod
}

// setStorage points the pod's volumes named like the claim templates at the ordinal's claims,
// replacing the template's volumes of the same name.
func setStorage(set *appsv1.StatefulSet, pod *corev1.Pod, ordinal int) {
	claims := claimsFor(set, ordinal)
	if len(claims) == 0 {
		return
	}
	volumes := make([]corev1.Volume, 0, len(pod.Spec.Volumes)+len(claims))
	for i := range set.Spec.VolumeClaimTemplates {
		name := set.Spec.VolumeClaimTemplates[i].Name
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claims[name].Name}}})
	}
	for _, v := range pod.Spec.Volumes {
		if _, ok := claims[v.Name]; !ok {
			volumes = append(volumes, v)
		}
	}
	pod.Spec.Volumes = volumes
}

// identityMatches reports whether the pod carries the identity labels of its ordinal.
func identityMatches(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	o := ordinalOf(pod)
	return o >= 0 && pod.Name == podName(set, o) && pod.Namespace == set.Namespace &&
		pod.Labels[PodNameLabel] == pod.Name && pod.Labels[PodIndexLabel] == strconv.Itoa(o)
}

// podRevision is the pod's controller-revision-hash label.
func podRevision(pod *corev1.Pod) string { return pod.Labels[RevisionLabel] }

func isCreated(pod *corev1.Pod) bool     { return pod.Status.Phase != "" }
func isTerminating(pod *corev1.Pod) bool { return pod.DeletionTimestamp != nil }
func isFailed(pod *corev1.Pod) bool      { return pod.Status.Phase == corev1.PodFailed }
func isSucceeded(pod *corev1.Pod) bool   { return pod.Status.Phase == corev1.PodSucceeded }

func isRunningAndReady(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && internal.IsPodReady(pod)
}

// maxUnavailable resolves rollingUpdate.maxUnavailable (default 1, at least 1) against replicas;
// a percentage rounds down as upstream.
func maxUnavailable(set *appsv1.StatefulSet) int {
	ru := set.Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable == nil {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(ru.MaxUnavailable, intstr.FromInt32(1)), specReplicas(set), false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// partition is rollingUpdate.partition (0 when unset).
func partition(set *appsv1.StatefulSet) int {
	ru := set.Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.Partition == nil {
		return 0
	}
	return int(*ru.Partition)
}

// allowsBurst is Parallel pod management: no waiting between pods.
func allowsBurst(set *appsv1.StatefulSet) bool {
	return set.Spec.PodManagementPolicy == appsv1.ParallelPodManagement
}
