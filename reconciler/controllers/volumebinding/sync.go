package volumebinding

import (
	"context"
	"fmt"
	"slices"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// Event reasons and messages, worded as upstream.
const (
	reasonFailedBinding      = "FailedBinding"
	reasonProvisioningFailed = "ProvisioningFailed"
	reasonWaitForConsumer    = "WaitForFirstConsumer"
	reasonVolumeMismatch     = "VolumeMismatch"
	reasonClaimLost          = "ClaimLost"
	reasonClaimMisbound      = "ClaimMisbound"

	msgNoVolumeNoClass = "no persistent volumes available for this claim and no storage class is set"
	msgWaitForConsumer = "waiting for first consumer to be created before binding"
)

func (c *Controller) syncClaim(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	claim, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, done := claim.Annotations[AnnBindCompleted]; done {
		return c.syncBoundClaim(ctx, claim)
	}
	if claim.Spec.VolumeName != "" {
		return c.syncPreboundClaim(ctx, claim)
	}

	var node *corev1.Node
	if DelayBinding(claim) {
		nodeName, ok := claim.Annotations[AnnSelectedNode]
		if !ok {
			c.recorder.Event(claim, corev1.EventTypeNormal, reasonWaitForConsumer, msgWaitForConsumer)
			return nil
		}
		node, err = c.nodes.Get(nodeName)
		if apierrors.IsNotFound(err) {
			return nil // the node's arrival enqueues the claim again
		}
		if err != nil {
			return err
		}
	}
	volumes, err := c.volumes.List(labels.Everything())
	if err != nil {
		return err
	}
	if pv := FindBestMatch(claim, volumes, node); pv != nil {
		return c.bind(ctx, claim, pv)
	}
	// Nothing fits: wait for a volume to appear or change (the volume handlers enqueue every
	// waiting claim), rather than polling.
	switch class := ClaimClass(claim); class {
	case "":
		c.recorder.Event(claim, corev1.EventTypeWarning, reasonFailedBinding, msgNoVolumeNoClass)
	case LocalClass:
		// The node agent provisions a volume pre-bound to the claim on the selected node.
	default:
		c.recorder.Event(claim, corev1.EventTypeWarning, reasonProvisioningFailed, fmt.Sprintf("storageclass.storage.k8s.io %q not found", class))
	}
	return nil
}

// syncPreboundClaim binds a claim that names its volume in spec.volumeName.
func (c *Controller) syncPreboundClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	pv, err := c.volumes.Get(claim.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return nil // stays Pending until the volume exists
	}
	if err != nil {
		return err
	}
	switch {
	case pv.Spec.ClaimRef == nil:
		if why := Mismatch(claim, pv, nil); why != "" {
			c.recorder.Event(claim, corev1.EventTypeWarning, reasonVolumeMismatch, fmt.Sprintf("Cannot bind to requested volume %q: %s", pv.Name, why))
			return nil
		}
		return c.bind(ctx, claim, pv)
	case BoundToClaim(pv, claim):
		return c.bind(ctx, claim, pv)
	default:
		c.recorder.Event(claim, corev1.EventTypeWarning, reasonFailedBinding, fmt.Sprintf("volume %q already bound to a different claim.", pv.Name))
		return nil
	}
}

// syncBoundClaim keeps a claim that went through binding consistent with its volume.
func (c *Controller) syncBoundClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	if claim.Spec.VolumeName == "" {
		return c.claimLost(ctx, claim, reasonClaimLost, "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!")
	}
	pv, err := c.volumes.Get(claim.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		// Confirm with the API: losing a claim is not to be decided on a lagging cache.
		pv, err = c.client.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return c.claimLost(ctx, claim, reasonClaimLost, "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
	}
	if err != nil {
		return err
	}
	if pv.Spec.ClaimRef == nil || BoundToClaim(pv, claim) {
		return c.bind(ctx, claim, pv) // finishes a binding interrupted half-way
	}
	return c.claimLost(ctx, claim, reasonClaimMisbound, "Two claims are bound to the same volume, this one is bound incorrectly")
}

func (c *Controller) claimLost(ctx context.Context, claim *corev1.PersistentVolumeClaim, reason, msg string) error {
	if claim.Status.Phase == corev1.ClaimLost {
		return nil
	}
	c.recorder.Event(claim, corev1.EventTypeWarning, reason, msg)
	cp := claim.DeepCopy()
	cp.Status.Phase = corev1.ClaimLost
	if _, err := c.client.CoreV1().PersistentVolumeClaims(cp.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("mark claim %s/%s Lost: %w", cp.Namespace, cp.Name, err)
	}
	return nil
}

// bind ties claim and pv together in upstream's order: volume claimRef, volume phase, claim
// volumeName and annotations, claim phase. Each step is skipped when already done, so a
// binding interrupted by an error or a crash is finished by the next sync.
func (c *Controller) bind(ctx context.Context, claim *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	vols := c.client.CoreV1().PersistentVolumes()
	claims := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace)
	var err error
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Namespace != claim.Namespace || ref.Name != claim.Name || ref.UID != claim.UID {
		cp := pv.DeepCopy()
		// A volume pre-bound by name was bound by hand: only a volume the controller
		// chose carries bound-by-controller.
		if !BoundToClaim(pv, claim) {
			metav1.SetMetaDataAnnotation(&cp.ObjectMeta, AnnBoundByController, "yes")
		}
		cp.Spec.ClaimRef = &corev1.ObjectReference{
			Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claim.Namespace, Name: claim.Name,
			UID: claim.UID, ResourceVersion: claim.ResourceVersion,
		}
		if pv, err = vols.Update(ctx, cp, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("bind volume %s to claim %s/%s: %w", cp.Name, claim.Namespace, claim.Name, err)
		}
	}
	if pv.Status.Phase != corev1.VolumeBound {
		if pv, err = c.setVolumePhase(ctx, pv, corev1.VolumeBound); err != nil {
			return err
		}
	}
	_, completed := claim.Annotations[AnnBindCompleted]
	if claim.Spec.VolumeName != pv.Name || !completed {
		cp := claim.DeepCopy()
		if cp.Spec.VolumeName == "" {
			cp.Spec.VolumeName = pv.Name
			metav1.SetMetaDataAnnotation(&cp.ObjectMeta, AnnBoundByController, "yes")
		}
		metav1.SetMetaDataAnnotation(&cp.ObjectMeta, AnnBindCompleted, "yes")
		if claim, err = claims.Update(ctx, cp, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("bind claim %s/%s to volume %s: %w", cp.Namespace, cp.Name, pv.Name, err)
		}
	}
	capacity := corev1.ResourceList{}
	if q, ok := pv.Spec.Capacity[corev1.ResourceStorage]; ok {
		capacity[corev1.ResourceStorage] = q
	}
	if claim.Status.Phase != corev1.ClaimBound || !apiequality.Semantic.DeepEqual(claim.Status.Capacity, capacity) ||
		!slices.Equal(claim.Status.AccessModes, pv.Spec.AccessModes) {
		cp := claim.DeepCopy()
		cp.Status.Phase = corev1.ClaimBound
		cp.Status.Capacity = capacity
		cp.Status.AccessModes = slices.Clone(pv.Spec.AccessModes)
		if _, err := claims.UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("mark claim %s/%s Bound: %w", cp.Namespace, cp.Name, err)
		}
		c.log.WithFields(logrus.Fields{"claim": claim.Namespace + "/" + claim.Name, "volume": pv.Name}).Info("bound")
	}
	return nil
}

func (c *Controller) setVolumePhase(ctx context.Context, pv *corev1.PersistentVolume, phase corev1.PersistentVolumePhase) (*corev1.PersistentVolume, error) {
	cp := pv.DeepCopy()
	cp.Status.Phase = phase
	cp.Status.Reason, cp.Status.Message = "", ""
	out, err := c.client.CoreV1().PersistentVolumes().UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("set volume %s phase %s: %w", pv.Name, phase, err)
	}
	return out, nil
}

// syncVolume keeps a volume's phase in line with its claim: Available while free or
// pre-bound, Bound while its claim holds it, Released (then deleted, for reclaim policy
// Delete) once the claim it was bound to is gone. A volume a provisioner created
// (AnnProvisionedBy) is left for that provisioner to delete, as upstream leaves them to
// external provisioners: localvolume deletes those of flotilla.dev/local once their node is
// set to remove the directory.
func (c *Controller) syncVolume(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.DeletionTimestamp != nil {
		return c.releaseDeleted(ctx, pv)
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		if pv.Status.Phase != corev1.VolumeAvailable {
			_, err = c.setVolumePhase(ctx, pv, corev1.VolumeAvailable)
		}
		return err
	}
	claim, err := c.claimFor(ctx, ref)
	if err != nil {
		return err
	}
	log := c.log.WithFields(logrus.Fields{"volume": pv.Name, "claim": ref.Namespace + "/" + ref.Name})
	switch {
	case claim == nil:
		if pv.Status.Phase != corev1.VolumeReleased && pv.Status.Phase != corev1.VolumeFailed {
			log.Info("claim gone, volume released")
			_, err = c.setVolumePhase(ctx, pv, corev1.VolumeReleased)
			return err
		}
		if pv.Status.Phase == corev1.VolumeReleased && pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete &&
			pv.Annotations[AnnProvisionedBy] == "" {
			err = c.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete released volume %s: %w", pv.Name, err)
			}
			log.Info("released volume deleted (reclaim policy Delete)")
		}
		return nil
	case claim.Spec.VolumeName == "":
		return nil // binding in progress; the claim's sync finishes it
	case claim.Spec.VolumeName == pv.Name:
		if pv.Status.Phase != corev1.VolumeBound {
			_, err = c.setVolumePhase(ctx, pv, corev1.VolumeBound)
		}
		return err
	default:
		// The claim is bound to another volume. A volume the controller chose goes back to
		// the pool; one pre-bound by hand keeps its claim name, as upstream.
		cp := pv.DeepCopy()
		if _, ok := pv.Annotations[AnnBoundByController]; ok {
			cp.Spec.ClaimRef = nil
			delete(cp.Annotations, AnnBoundByController)
		} else {
			cp.Spec.ClaimRef.UID, cp.Spec.ClaimRef.ResourceVersion = "", ""
		}
		if _, err := c.client.CoreV1().PersistentVolumes().Update(ctx, cp, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("unbind volume %s: %w", pv.Name, err)
		}
		log.Info("claim bound elsewhere, volume unbound")
		return nil
	}
}

// releaseDeleted marks a deleted volume Released once the claim it is bound to is gone, as
// upstream's PV controller does: its in-use finalizer (kubernetes.io/pv-protection) holds it
// while it is Bound. A deleted volume is not otherwise changed.
func (c *Controller) releaseDeleted(ctx context.Context, pv *corev1.PersistentVolume) error {
	ref := pv.Spec.ClaimRef
	if pv.Status.Phase != corev1.VolumeBound || ref == nil || ref.UID == "" {
		return nil
	}
	claim, err := c.claimFor(ctx, ref)
	if err != nil || claim != nil {
		return err
	}
	c.log.WithFields(logrus.Fields{"volume": pv.Name, "claim": ref.Namespace + "/" + ref.Name}).Info("claim gone, deleted volume released")
	_, err = c.setVolumePhase(ctx, pv, corev1.VolumeReleased)
	return err
}

// claimFor returns the claim ref points at, or nil when no claim with that UID exists. A
// miss in the cache is confirmed with the API: releasing a volume is not to be decided on a
// lagging cache.
func (c *Controller) claimFor(ctx context.Context, ref *corev1.ObjectReference) (*corev1.PersistentVolumeClaim, error) {
	claim, err := c.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
	if err == nil && claim.UID == ref.UID {
		return claim, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	claim, err = c.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get claim %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	if claim.UID != ref.UID {
		return nil, nil
	}
	return claim, nil
}
