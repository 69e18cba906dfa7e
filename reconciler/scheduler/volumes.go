package scheduler

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
)

// VolumeBinding reasons, worded as upstream.
const (
	reasonVolumeNodeConflict = "node(s) had volume node affinity conflict"
	reasonVolumeBindConflict = "node(s) didn't find available persistent volumes to bind"
	reasonVolumeMissingPV    = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
	reasonUnboundImmediate   = "pod has unbound immediate PersistentVolumeClaims"
)

// volumeState is what the pod's claims need from a node.
type volumeState struct {
	// bound claims and their volumes (nil volume: the claim names a volume that is gone).
	bound []boundClaim
	// delayed are unbound WaitForFirstConsumer claims: a node is chosen for them by
	// scheduling the pod, then the volumebinding controller binds (or the node agent
	// provisions) on that node.
	delayed []*corev1.PersistentVolumeClaim
	// volumes are all volumes, listed once for the delayed claims.
	volumes []*corev1.PersistentVolume
}

type boundClaim struct {
	claim  *corev1.PersistentVolumeClaim
	volume *corev1.PersistentVolume
}

// hasVolumes reports whether pod uses a claim.
func hasVolumes(pod *corev1.Pod) bool { return len(volumebinding.ClaimNames(pod)) > 0 }

// newVolumeState sorts the pod's claims; a status means the pod cannot be placed anywhere
// until a claim changes.
func newVolumeState(pod *corev1.Pod, src VolumeSource) (*volumeState, *Status) {
	names := volumebinding.ClaimNames(pod)
	if len(names) == 0 {
		return nil, nil
	}
	st := &volumeState{}
	for _, name := range names {
		var claim *corev1.PersistentVolumeClaim
		if src != nil {
			claim = src.Claim(pod.Namespace, name)
		}
		if claim == nil {
			return nil, unresolvable(fmt.Sprintf("persistentvolumeclaim %q not found", name))
		}
		if volumebinding.IsEphemeralClaim(pod, name) {
			if err := volumebinding.EphemeralClaimIsForPod(pod, claim); err != nil {
				return nil, unresolvable(err.Error())
			}
		}
		if claim.DeletionTimestamp != nil {
			return nil, unresolvable(fmt.Sprintf("persistentvolumeclaim %q is being deleted", name))
		}
		if claim.Spec.VolumeName != "" {
			st.bound = append(st.bound, boundClaim{claim: claim, volume: src.Volume(claim.Spec.VolumeName)})
			continue
		}
		if !volumebinding.DelayBinding(claim) {
			return nil, unresolvable(reasonUnboundImmediate)
		}
		st.delayed = append(st.delayed, claim)
	}
	if len(st.delayed) > 0 {
		st.volumes = src.Volumes()
	}
	return st, nil
}

// filterVolumeBinding: a bound claim's volume must be reachable from the node (its node
// affinity); every delayed claim needs an Available volume that fits it on the node, or a
// class the node agent provisions locally. A claim already given a node (selected-node
// annotation of an earlier decision, e.g. shared by another pod) keeps it.
func filterVolumeBinding(c *cycle, ni *NodeInfo) *Status {
	st := c.volumes
	if st == nil {
		return nil
	}
	for _, b := range st.bound {
		if b.volume == nil {
			return unresolvable(reasonVolumeMissingPV)
		}
		if !volumebinding.NodeAffinityMatches(b.volume, ni.Node) {
			return unresolvable(reasonVolumeNodeConflict)
		}
	}
	if len(st.delayed) == 0 {
		return nil
	}
	volumes := st.volumes
	taken := map[string]bool{}
	for _, claim := range st.delayed {
		if sel, ok := claim.Annotations[volumebinding.AnnSelectedNode]; ok && sel != "" && sel != ni.Node.Name && c.snap.Get(sel) != nil {
			return unresolvable(reasonVolumeNodeConflict)
		}
		var free []*corev1.PersistentVolume
		for _, pv := range volumes {
			if !taken[pv.Name] {
				free = append(free, pv)
			}
		}
		if pv := volumebinding.FindBestMatch(claim, free, ni.Node); pv != nil {
			taken[pv.Name] = true // two claims of one pod cannot share a volume
			continue
		}
		if volumebinding.ClaimClass(claim) == volumebinding.LocalClass {
			continue // the node agent provisions it on the chosen node
		}
		return unresolvable(reasonVolumeBindConflict)
	}
	return nil
}

// selectNodeForClaims tells each unbound WaitForFirstConsumer claim of pod which node its
// consumer goes to (annotation volume.kubernetes.io/selected-node, as upstream): the
// volumebinding controller then binds a volume on that node, or the node agent provisions
// one there.
func (s *Scheduler) selectNodeForClaims(ctx context.Context, pod *corev1.Pod, node string) error {
	for _, name := range volumebinding.ClaimNames(pod) {
		claim, err := s.claims.PersistentVolumeClaims(pod.Namespace).Get(name)
		if err != nil {
			return fmt.Errorf("claim %s/%s of pod %s: %w", pod.Namespace, name, pod.Name, err)
		}
		if claim.Spec.VolumeName != "" || !volumebinding.DelayBinding(claim) || claim.Annotations[volumebinding.AnnSelectedNode] == node {
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{volumebinding.AnnSelectedNode: node}}})
		if err != nil {
			return err
		}
		if _, err := s.client.CoreV1().PersistentVolumeClaims(pod.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("select node %s for claim %s/%s: %w", node, pod.Namespace, name, err)
		}
	}
	return nil
}
