package volumeprotection

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
)

// sync handles the claim or volume of key.
func (c *Controller) sync(ctx context.Context, key string) error {
	if isClaimKey(key) {
		return c.syncClaim(ctx, key)
	}
	return c.syncVolume(ctx, key)
}

// syncClaim removes the finalizer of a deleted claim no pod uses, and adds it to a claim that
// lacks it.
func (c *Controller) syncClaim(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	claim, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	switch {
	case claim.DeletionTimestamp != nil && slices.Contains(claim.Finalizers, ClaimFinalizer):
		user, err := c.claimUser(ctx, claim)
		if err != nil || user != "" {
			if user != "" {
				c.log.WithField("claim", key).WithField("pod", user).Debug("keeping the deleted claim while a pod uses it")
			}
			return err
		}
		claim = claim.DeepCopy()
		claim.Finalizers = slices.DeleteFunc(claim.Finalizers, func(f string) bool { return f == ClaimFinalizer })
		if _, err := c.client.CoreV1().PersistentVolumeClaims(ns).Update(ctx, claim, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove %s from claim %s: %w", ClaimFinalizer, key, err)
		}
		c.log.WithField("claim", key).Info("no pod uses the deleted claim: released it")
	case claim.DeletionTimestamp == nil && !slices.Contains(claim.Finalizers, ClaimFinalizer):
		claim = claim.DeepCopy()
		claim.Finalizers = append(claim.Finalizers, ClaimFinalizer)
		if _, err := c.client.CoreV1().PersistentVolumeClaims(ns).Update(ctx, claim, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("add %s to claim %s: %w", ClaimFinalizer, key, err)
		}
	}
	return nil
}

// claimUser names a pod that uses claim, or returns "" when none does. The informer is asked
// first; when it knows of no user, the API is, since a pod created a moment ago may not have
// reached the informer yet (a claim released by mistake cannot be taken back).
func (c *Controller) claimUser(ctx context.Context, claim *corev1.PersistentVolumeClaim) (string, error) {
	objs, err := c.podsIndex.ByIndex(claimIndex, claim.Namespace+"/"+claim.Name)
	if err != nil {
		return "", err
	}
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok && UsesClaim(pod, claim.Name) {
			return pod.Name, nil
		}
	}
	pods, err := c.client.CoreV1().Pods(claim.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list the pods of namespace %s: %w", claim.Namespace, err)
	}
	for i := range pods.Items {
		if UsesClaim(&pods.Items[i], claim.Name) {
			return pods.Items[i].Name, nil
		}
	}
	return "", nil
}

// UsesClaim reports whether pod holds claim, as upstream's pvc-protection controller
// decides: a pod uses a claim once it is scheduled to a host (a pod not scheduled yet is
// refused by the scheduler while its claim is being deleted), whatever its phase. The claim
// of a generic ephemeral volume is freed when its pod has finished (Succeeded or Failed).
func UsesClaim(pod *corev1.Pod, claim string) bool {
	if pod.Spec.NodeName == "" {
		return false
	}
	finished := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim:
			return true
		case v.Ephemeral != nil && volumebinding.EphemeralClaimName(pod, &v) == claim && !finished:
			return true
		}
	}
	return false
}

// syncVolume removes the finalizer of a deleted volume that is not Bound, and adds it to a
// volume that lacks it.
func (c *Controller) syncVolume(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	switch {
	case pv.DeletionTimestamp != nil && slices.Contains(pv.Finalizers, VolumeFinalizer):
		if pv.Status.Phase == corev1.VolumeBound {
			return nil // the volume binding controller releases it once its claim is gone
		}
		pv = pv.DeepCopy()
		pv.Finalizers = slices.DeleteFunc(pv.Finalizers, func(f string) bool { return f == VolumeFinalizer })
		if _, err := c.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove %s from volume %s: %w", VolumeFinalizer, name, err)
		}
	case pv.DeletionTimestamp == nil && !slices.Contains(pv.Finalizers, VolumeFinalizer):
		pv = pv.DeepCopy()
		pv.Finalizers = append(pv.Finalizers, VolumeFinalizer)
		if _, err := c.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("add %s to volume %s: %w", VolumeFinalizer, name, err)
		}
	}
	return nil
}
