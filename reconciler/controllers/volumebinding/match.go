package volumebinding

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Annotations and names of the binding protocol, as upstream's PV controller and volume binder.
const (
	AnnBindCompleted     = "pv.kubernetes.io/bind-completed"
	AnnBoundByController = "pv.kubernetes.io/bound-by-controller"
	AnnSelectedNode      = "volume.kubernetes.io/selected-node"
	// AnnProvisionedBy names the provisioner that created a volume, which also deletes it.
	AnnProvisionedBy = "pv.kubernetes.io/provisioned-by"
	// LocalClass is the built-in WaitForFirstConsumer class whose volumes the node agent
	// provisions on the node a pod lands on.
	LocalClass = "flotilla-local"
)

// ClaimClass is the storage class a claim asks for: the deprecated beta annotation wins over
// spec.storageClassName; "" means no class.
func ClaimClass(claim *corev1.PersistentVolumeClaim) string {
	if v, ok := claim.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return v
	}
	if claim.Spec.StorageClassName != nil {
		return *claim.Spec.StorageClassName
	}
	return ""
}

// VolumeClass is the storage class of a volume, with the same annotation rule as ClaimClass.
func VolumeClass(pv *corev1.PersistentVolume) string {
	if v, ok := pv.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return v
	}
	return pv.Spec.StorageClassName
}

// DelayBinding reports whether a claim binds only once a consumer's node is chosen
// (WaitForFirstConsumer). StorageClass objects are not served yet, so every class counts as
// Immediate except flotilla-local, or a claim the scheduler already placed on a node.
func DelayBinding(claim *corev1.PersistentVolumeClaim) bool {
	_, selected := claim.Annotations[AnnSelectedNode]
	return selected || ClaimClass(claim) == LocalClass
}

// BoundToClaim reports whether pv's claimRef names claim (a claimRef without UID is a
// pre-binding by name and counts).
func BoundToClaim(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) bool {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace != claim.Namespace || ref.Name != claim.Name {
		return false
	}
	return ref.UID == "" || ref.UID == claim.UID
}

func volumeMode(m *corev1.PersistentVolumeMode) corev1.PersistentVolumeMode {
	if m == nil {
		return corev1.PersistentVolumeFilesystem
	}
	return *m
}

// Mismatch says why pv cannot serve claim on node (nil: no node constraint), or "" when it
// can. It checks what a claim asks for, not whether pv is free; a claim that names the volume
// in spec.volumeName gets this check too.
func Mismatch(claim *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, node *corev1.Node) string {
	if volumeMode(claim.Spec.VolumeMode) != volumeMode(pv.Spec.VolumeMode) {
		return fmt.Sprintf("incompatible volumeMode: claim %s, volume %s", volumeMode(claim.Spec.VolumeMode), volumeMode(pv.Spec.VolumeMode))
	}
	if ClaimClass(claim) != VolumeClass(pv) {
		return "storageClassName does not match"
	}
	for _, m := range claim.Spec.AccessModes {
		if !slices.Contains(pv.Spec.AccessModes, m) {
			return "incompatible accessMode"
		}
	}
	request := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity, ok := pv.Spec.Capacity[corev1.ResourceStorage]
	if !ok || capacity.Cmp(request) < 0 {
		return "requested PV is too small"
	}
	if claim.Spec.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
		if err != nil {
			return fmt.Sprintf("invalid claim selector: %v", err)
		}
		if !sel.Matches(labels.Set(pv.Labels)) {
			return "volume labels do not match the claim's selector"
		}
	}
	if node != nil && !NodeAffinityMatches(pv, node) {
		return fmt.Sprintf("volume node affinity does not match node %q", node.Name)
	}
	return ""
}

// FindBestMatch picks the volume claim binds to: a volume pre-bound to the claim (claimRef
// naming it) that fits wins; otherwise the smallest Available, unclaimed volume that passes
// Mismatch. node constrains node affinity for delayed binding (nil: none). nil: no match.
func FindBestMatch(claim *corev1.PersistentVolumeClaim, volumes []*corev1.PersistentVolume, node *corev1.Node) *corev1.PersistentVolume {
	var best *corev1.PersistentVolume
	for _, pv := range volumes {
		if pv.DeletionTimestamp != nil {
			continue
		}
		if pv.Spec.ClaimRef != nil {
			// Upstream honours a pre-binding whatever the class and selector say.
			if BoundToClaim(pv, claim) && preboundFits(claim, pv, node) {
				return pv
			}
			continue
		}
		if pv.Status.Phase != corev1.VolumeAvailable || Mismatch(claim, pv, node) != "" {
			continue
		}
		if best == nil || smaller(pv, best) {
			best = pv
		}
	}
	return best
}

func preboundFits(claim *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, node *corev1.Node) bool {
	if volumeMode(claim.Spec.VolumeMode) != volumeMode(pv.Spec.VolumeMode) {
		return false
	}
	for _, m := range claim.Spec.AccessModes {
		if !slices.Contains(pv.Spec.AccessModes, m) {
			return false
		}
	}
	request := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity, ok := pv.Spec.Capacity[corev1.ResourceStorage]
	if !ok || capacity.Cmp(request) < 0 {
		return false
	}
	return node == nil || NodeAffinityMatches(pv, node)
}

// smaller orders candidates by capacity, then name, so the choice is deterministic.
func smaller(a, b *corev1.PersistentVolume) bool {
	ca, cb := a.Spec.Capacity[corev1.ResourceStorage], b.Spec.Capacity[corev1.ResourceStorage]
	if c := ca.Cmp(cb); c != 0 {
		return c < 0
	}
	return a.Name < b.Name
}

// NodeAffinityMatches applies pv's required node affinity to node: terms ORed, requirements
// of a term ANDed, a volume without affinity fits every node.
func NodeAffinityMatches(pv *corev1.PersistentVolume, node *corev1.Node) bool {
	na := pv.Spec.NodeAffinity
	if na == nil || na.Required == nil {
		return true
	}
	for _, term := range na.Required.NodeSelectorTerms {
		if termMatches(term, node) {
			return true
		}
	}
	return false
}

func termMatches(term corev1.NodeSelectorTerm, node *corev1.Node) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	if len(term.MatchExpressions) > 0 {
		sel, err := requirementsSelector(term.MatchExpressions)
		if err != nil || !sel.Matches(labels.Set(node.Labels)) {
			return false
		}
	}
	for _, f := range term.MatchFields {
		if f.Key != metav1.ObjectNameField {
			return false
		}
		in := slices.Contains(f.Values, node.Name)
		if (f.Operator == corev1.NodeSelectorOpIn && !in) || (f.Operator == corev1.NodeSelectorOpNotIn && in) ||
			(f.Operator != corev1.NodeSelectorOpIn && f.Operator != corev1.NodeSelectorOpNotIn) {
			return false
		}
	}
	return true
}

var nodeSelectorOps = map[corev1.NodeSelectorOperator]selection.Operator{
	corev1.NodeSelectorOpIn:           selection.In,
	corev1.NodeSelectorOpNotIn:        selection.NotIn,
	corev1.NodeSelectorOpExists:       selection.Exists,
	corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	corev1.NodeSelectorOpGt:           selection.GreaterThan,
	corev1.NodeSelectorOpLt:           selection.LessThan,
}

func requirementsSelector(reqs []corev1.NodeSelectorRequirement) (labels.Selector, error) {
	sel := labels.NewSelector()
	for _, r := range reqs {
		op, ok := nodeSelectorOps[r.Operator]
		if !ok {
			return nil, fmt.Errorf("unknown node selector operator %q", r.Operator)
		}
		req, err := labels.NewRequirement(r.Key, op, r.Values)
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*req)
	}
	return sel, nil
}

// ClaimNames lists the claims a pod uses: those of its persistentVolumeClaim volumes and of
// its generic ephemeral volumes (named <pod>-<volume>, as upstream).
func ClaimNames(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			out = append(out, EphemeralClaimName(pod, &v))
		}
	}
	return out
}

// EphemeralClaimName is the claim of the generic ephemeral volume v of pod: <pod>-<volume>,
// as upstream names it.
func EphemeralClaimName(pod *corev1.Pod, v *corev1.Volume) string { return pod.Name + "-" + v.Name }

// IsEphemeralClaim reports whether claim is the name of the claim of one of pod's generic
// ephemeral volumes.
func IsEphemeralClaim(pod *corev1.Pod, claim string) bool {
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; v.Ephemeral != nil && EphemeralClaimName(pod, v) == claim {
			return true
		}
	}
	return false
}

// EphemeralClaimIsForPod refuses the claim of a generic ephemeral volume of pod that the
// pod does not control (a claim of that name made by someone else, or for an earlier pod of
// the same name): the pod must not take another's data. The message is upstream's.
func EphemeralClaimIsForPod(pod *corev1.Pod, claim *corev1.PersistentVolumeClaim) error {
	if !metav1.IsControlledBy(claim, pod) {
		return fmt.Errorf("PVC %s/%s was not created for pod %s/%s (pod is not owner)", claim.Namespace, claim.Name, pod.Namespace, pod.Name)
	}
	return nil
}
