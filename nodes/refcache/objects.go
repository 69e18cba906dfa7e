package refcache

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// Objects are the caches of the kinds a host reads by name: what the node agent's pods use
// (volumes, environment, claims and their volumes) and the Ingress proxy's TLS Secrets,
// which share the Secrets cache.
type Objects struct {
	ConfigMaps *Cache[*corev1.ConfigMap]
	Secrets    *Cache[*corev1.Secret]
	PVCs       *Cache[*corev1.PersistentVolumeClaim]
	PVs        *Cache[*corev1.PersistentVolume]
}

// NewObjects makes the caches of the four kinds, read with client while ctx lasts; their
// checkpoint files (with cfg.Checkpoint) are configmaps, secrets, persistentvolumeclaims
// and persistentvolumes.
func NewObjects(ctx context.Context, client kubernetes.Interface, cfg Config) *Objects {
	core := client.CoreV1()
	return &Objects{
		ConfigMaps: New[*corev1.ConfigMap](ctx, "configmaps", func(ns string) Client[*corev1.ConfigMapList] { return core.ConfigMaps(ns) }, cfg),
		Secrets:    New[*corev1.Secret](ctx, "secrets", func(ns string) Client[*corev1.SecretList] { return core.Secrets(ns) }, cfg),
		PVCs: New[*corev1.PersistentVolumeClaim](ctx, "persistentvolumeclaims",
			func(ns string) Client[*corev1.PersistentVolumeClaimList] { return core.PersistentVolumeClaims(ns) }, cfg),
		PVs: New[*corev1.PersistentVolume](ctx, "persistentvolumes",
			func(string) Client[*corev1.PersistentVolumeList] { return core.PersistentVolumes() }, cfg),
	}
}
