package apiserver

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/admission"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumeprotection"
)

// StorageProtectionPluginName is the admission plugin's upstream name.
const StorageProtectionPluginName = "StorageObjectInUseProtection"

// storageProtection is the StorageObjectInUseProtection admission plugin, as upstream
// (plugin/pkg/admission/storage/storageobjectinuseprotection): a new PersistentVolumeClaim
// gets the finalizer kubernetes.io/pvc-protection and a new PersistentVolume
// kubernetes.io/pv-protection, which the volumeprotection controller removes once a deleted
// claim has no pod left, or a deleted volume no claim.
type storageProtection struct{ *admission.Handler }

var _ admission.MutationInterface = (*storageProtection)(nil)

func newStorageProtection() *storageProtection {
	return &storageProtection{Handler: admission.NewHandler(admission.Create)}
}

// Admit adds the finalizer to a new claim or volume.
func (p *storageProtection) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	switch a.GetResource().GroupResource() {
	case corev1.Resource("persistentvolumeclaims"):
		if claim, ok := a.GetObject().(*corev1.PersistentVolumeClaim); ok && !slices.Contains(claim.Finalizers, volumeprotection.ClaimFinalizer) {
			claim.Finalizers = append(claim.Finalizers, volumeprotection.ClaimFinalizer)
		}
	case corev1.Resource("persistentvolumes"):
		if pv, ok := a.GetObject().(*corev1.PersistentVolume); ok && !slices.Contains(pv.Finalizers, volumeprotection.VolumeFinalizer) {
			pv.Finalizers = append(pv.Finalizers, volumeprotection.VolumeFinalizer)
		}
	}
	return nil
}
