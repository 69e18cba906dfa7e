package localvolume

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume/localpv"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
)

// Event reasons, as upstream's provisioners.
const (
	reasonProvisioningSucceeded = "ProvisioningSucceeded"
	reasonProvisioningFailed    = "ProvisioningFailed"
	// reasonNodeGone: the finalizer of a deleted volume was removed because its node is gone.
	reasonNodeGone = "VolumeNodeGone"
)

// VolumeName is the name of the volume provisioned for claim, as upstream: "pvc-<claim UID>".
func VolumeName(claim *corev1.PersistentVolumeClaim) string {
	return "pvc-" + string(claim.UID)
}

// ProvisionedVolume builds the local volume for claim of class on node: a directory named
// after the volume under the class's "path" parameter, pinned to node by a required node
// affinity on kubernetes.io/hostname (the node agent labels each node with its name), and
// pre-bound to the claim. It is labelled LabelNode=node and held by Finalizer, so that node's
// agent removes the directory once the volume is deleted. The error says what to change in
// the claim or class.
func ProvisionedVolume(claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, node string) (*corev1.PersistentVolume, error) {
	if claim.Spec.VolumeMode != nil && *claim.Spec.VolumeMode != corev1.PersistentVolumeFilesystem {
		return nil, fmt.Errorf("volumeMode %s is not supported by %s: use Filesystem", *claim.Spec.VolumeMode, Provisioner)
	}
	if claim.Spec.DataSource != nil || claim.Spec.DataSourceRef != nil {
		return nil, fmt.Errorf("%s cannot populate a volume from a data source: remove spec.dataSource", Provisioner)
	}
	if slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteMany) || slices.Contains(claim.Spec.AccessModes, corev1.ReadOnlyMany) {
		return nil, fmt.Errorf("%s volumes live on one node: use access mode ReadWriteOnce or ReadWriteOncePod", Provisioner)
	}
	size, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return nil, fmt.Errorf("claim requests no storage: set spec.resources.requests.storage")
	}
	base, err := localpv.Root(class.Parameters)
	if err != nil {
		return nil, fmt.Errorf("StorageClass %s: %w", class.Name, err)
	}
	if errs := validation.IsValidLabelValue(node); len(errs) > 0 {
		// The node label (kubernetes.io/hostname) has the same limits: the node agent could not
		// have registered such a node.
		return nil, fmt.Errorf("node name %q cannot be a label value: %s", node, strings.Join(errs, "; "))
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	name := VolumeName(claim)
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{AnnProvisionedBy: Provisioner},
			Labels:      map[string]string{LabelNode: node},
			Finalizers:  []string{Finalizer},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   slices.Clone(claim.Spec.AccessModes),
			StorageClassName:              class.Name,
			PersistentVolumeReclaimPolicy: reclaim,
			MountOptions:                  slices.Clone(class.MountOptions),
			VolumeMode:                    new(corev1.PersistentVolumeFilesystem),
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				Local: &corev1.LocalVolumeSource{Path: localpv.VolumePath(base, name)},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claim.Namespace, Name: claim.Name,
				UID: claim.UID, ResourceVersion: claim.ResourceVersion,
			},
		},
	}, nil
}

// syncClaim provisions the volume of an unbound claim of a flotilla.dev/local class once the
// scheduler has chosen its node.
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
	if claim.Spec.VolumeName != "" || claim.DeletionTimestamp != nil {
		return nil
	}
	className := volumebinding.ClaimClass(claim)
	if className == "" {
		return nil
	}
	class, err := c.classes.Get(className)
	if apierrors.IsNotFound(err) {
		return nil // the class's arrival enqueues the claim again
	}
	if err != nil {
		return err
	}
	if class.Provisioner != Provisioner {
		return nil
	}
	node, ok := claim.Annotations[volumebinding.AnnSelectedNode]
	if !ok || node == "" {
		// Immediate binding cannot work: a local volume needs a node, which only the
		// scheduler's choice for a consumer gives.
		if class.VolumeBindingMode == nil || *class.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			c.recorder.Eventf(claim, corev1.EventTypeWarning, reasonProvisioningFailed,
				"StorageClass %q: %s volumes need volumeBindingMode WaitForFirstConsumer", class.Name, Provisioner)
		}
		return nil
	}
	pvName := VolumeName(claim)
	if _, err := c.volumes.Get(pvName); err == nil {
		return nil // already provisioned; volumebinding binds it
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	pv, err := ProvisionedVolume(claim, class, node)
	if err != nil {
		c.recorder.Event(claim, corev1.EventTypeWarning, reasonProvisioningFailed, err.Error())
		return nil // the claim or class must change; their updates enqueue the claim
	}
	if _, err := c.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("create volume %s for claim %s/%s: %w", pvName, ns, name, err)
	}
	c.recorder.Eventf(claim, corev1.EventTypeNormal, reasonProvisioningSucceeded, "Successfully provisioned volume %s", pvName)
	c.log.WithFields(logrus.Fields{"claim": key, "volume": pvName, "node": node, "path": pv.Spec.Local.Path}).Info("provisioned")
	return nil
}

// syncVolume looks after a volume this controller provisioned: it gives one provisioned before
// the node agents cleaned volumes up its node label and finalizer, deletes it once it is
// Released with reclaim policy Delete (the finalizer keeps it until its node agent removed the
// directory), and removes the finalizer of a deleted volume whose Node is gone.
func (c *Controller) syncVolume(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.Annotations[AnnProvisionedBy] != Provisioner {
		return nil
	}
	if pv.DeletionTimestamp != nil {
		return c.releaseOrphan(ctx, pv)
	}
	if done, err := c.ensureCleanup(ctx, pv); done || err != nil {
		return err
	}
	if pv.Status.Phase != corev1.VolumeReleased || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	err = c.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete released volume %s: %w", pv.Name, err)
	}
	if err == nil {
		c.log.WithFields(logrus.Fields{"volume": pv.Name, "node": pv.Labels[LabelNode]}).
			Info("released volume deleted (reclaim policy Delete); its node removes the directory")
	}
	return nil
}

// ensureCleanup adds the node label and the finalizer to a volume provisioned before this
// controller set them (the upgrade path), from the node its affinity pins it to. done tells
// that the volume was updated: its update event syncs it again.
func (c *Controller) ensureCleanup(ctx context.Context, pv *corev1.PersistentVolume) (done bool, err error) {
	node, ok := localpv.AffinityNode(pv)
	if !ok || len(validation.IsValidLabelValue(node)) > 0 {
		return false, nil // not pinned as this controller pins volumes: nothing can clean it
	}
	if pv.Labels[LabelNode] == node && localpv.HasFinalizer(pv) {
		return false, nil
	}
	cp := pv.DeepCopy()
	if cp.Labels == nil {
		cp.Labels = map[string]string{}
	}
	cp.Labels[LabelNode] = node
	if !localpv.HasFinalizer(cp) {
		cp.Finalizers = append(cp.Finalizers, Finalizer)
	}
	if _, err := c.client.CoreV1().PersistentVolumes().Update(ctx, cp, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return true, fmt.Errorf("label volume %s for the cleanup by node %s: %w", pv.Name, node, err)
	}
	c.log.WithFields(logrus.Fields{"volume": pv.Name, "node": node}).Info("volume labelled for its node's cleanup")
	return true, nil
}

// releaseOrphan removes the finalizer of a deleted volume whose Node no longer exists: no
// agent is left to remove the directory. A miss of the cache is confirmed with the API.
func (c *Controller) releaseOrphan(ctx context.Context, pv *corev1.PersistentVolume) error {
	node := pv.Labels[LabelNode]
	if !localpv.HasFinalizer(pv) || node == "" {
		return nil
	}
	if _, err := c.nodes.Get(node); !apierrors.IsNotFound(err) {
		return err
	}
	if _, err := c.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return err
	}
	cp := pv.DeepCopy()
	cp.Finalizers = localpv.WithoutFinalizer(cp.Finalizers)
	if _, err := c.client.CoreV1().PersistentVolumes().Update(ctx, cp, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("remove finalizer of volume %s of removed node %s: %w", pv.Name, node, err)
	}
	c.recorder.Eventf(pv, corev1.EventTypeWarning, reasonNodeGone,
		"Node %s no longer exists: nobody removes %s from its disk; the volume is deleted", node, localpv.Dir(pv))
	c.log.WithFields(logrus.Fields{"volume": pv.Name, "node": node}).Warn("node gone, finalizer of deleted volume removed")
	return nil
}
