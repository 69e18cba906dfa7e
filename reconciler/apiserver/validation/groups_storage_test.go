package validation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/utils/ptr"
)

// A defaulted StorageClass, as the defaulter leaves it before validation.
const storageClassYAML = `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: flotilla-local
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: flotilla.dev/local
parameters:
  path: /srv/volumes
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: false
mountOptions: [noatime]
allowedTopologies:
- matchLabelExpressions:
  - key: kubernetes.io/hostname
    values: [edge-a, edge-b]
`

func TestValidateStorageClass(t *testing.T) {
	checkErrs(t, ValidateStorageClass(fixture[storagev1.StorageClass](t, storageClassYAML, false)), none())
	cases := []struct {
		name   string
		mutate func(*storagev1.StorageClass)
		want   []string
	}{
		{"no provisioner", func(sc *storagev1.StorageClass) { sc.Provisioner = "" }, errs(req("provisioner"))},
		{"provisioner with spaces", func(sc *storagev1.StorageClass) { sc.Provisioner = "my provisioner" }, errs(inv("provisioner"))},
		{"provisioner upper case is fine", func(sc *storagev1.StorageClass) { sc.Provisioner = "Example.com/Local" }, none()},
		{"reclaimPolicy Recycle", func(sc *storagev1.StorageClass) {
			sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimRecycle)
		}, errs(nsup("reclaimPolicy"))},
		{"reclaimPolicy Retain", func(sc *storagev1.StorageClass) {
			sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimRetain)
		}, none()},
		{"unknown volumeBindingMode", func(sc *storagev1.StorageClass) {
			sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingMode("Later"))
		}, errs(nsup("volumeBindingMode"))},
		{"volumeBindingMode Immediate", func(sc *storagev1.StorageClass) {
			sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingImmediate)
		}, none()},
		{"no volumeBindingMode (not defaulted)", func(sc *storagev1.StorageClass) { sc.VolumeBindingMode = nil }, errs(req("volumeBindingMode"))},
		{"empty parameter key", func(sc *storagev1.StorageClass) { sc.Parameters[""] = "x" }, errs(inv("parameters"))},
		{"parameters too large", func(sc *storagev1.StorageClass) { sc.Parameters["big"] = strings.Repeat("x", 256*1024) }, errs(long("parameters"))},
		{"too many parameters", func(sc *storagev1.StorageClass) {
			for i := range 513 {
				sc.Parameters[strings.Repeat("k", i+1)] = ""
			}
		}, errs(many("parameters"))},
		{"topology term without expressions", func(sc *storagev1.StorageClass) {
			sc.AllowedTopologies[0].MatchLabelExpressions = nil
		}, errs(req("allowedTopologies[0].matchLabelExpressions"))},
		{"topology bad key and duplicate value", func(sc *storagev1.StorageClass) {
			sc.AllowedTopologies[0].MatchLabelExpressions[0].Key = "bad key"
			sc.AllowedTopologies[0].MatchLabelExpressions[0].Values = []string{"a", "a"}
		}, errs(inv("allowedTopologies[0].matchLabelExpressions[0].key"), dup("allowedTopologies[0].matchLabelExpressions[0].values[1]"))},
		{"topology without values", func(sc *storagev1.StorageClass) {
			sc.AllowedTopologies[0].MatchLabelExpressions[0].Values = nil
		}, errs(req("allowedTopologies[0].matchLabelExpressions[0].values"))},
		{"blank mount option", func(sc *storagev1.StorageClass) { sc.MountOptions = []string{" "} }, errs(inv("mountOptions[0]"))},
		{"bad name", func(sc *storagev1.StorageClass) { sc.Name = "Local_SSD" }, errs(inv("metadata.name"))},
		{"namespace set", func(sc *storagev1.StorageClass) { sc.Namespace = "default" }, errs(forb("metadata.namespace"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc := fixture[storagev1.StorageClass](t, storageClassYAML, false)
			c.mutate(sc)
			checkErrs(t, ValidateStorageClass(sc), c.want)
		})
	}
}

func TestValidateStorageClassUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*storagev1.StorageClass)
		want   []string
	}{
		{"annotations, expansion, mount options and topologies may change", func(sc *storagev1.StorageClass) {
			sc.Annotations = nil
			sc.AllowVolumeExpansion = ptr.To(true)
			sc.MountOptions = nil
			sc.AllowedTopologies = nil
		}, none()},
		{"parameters", func(sc *storagev1.StorageClass) { sc.Parameters["path"] = "/elsewhere" }, errs(forb("parameters"))},
		{"provisioner", func(sc *storagev1.StorageClass) { sc.Provisioner = "example.com/other" }, errs(forb("provisioner"))},
		{"reclaimPolicy", func(sc *storagev1.StorageClass) {
			sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimRetain)
		}, errs(forb("reclaimPolicy"))},
		{"volumeBindingMode", func(sc *storagev1.StorageClass) {
			sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingImmediate)
		}, errs(inv("volumeBindingMode"))},
		{"invalid new value is still checked", func(sc *storagev1.StorageClass) { sc.MountOptions = []string{""} }, errs(inv("mountOptions[0]"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := fixture[storagev1.StorageClass](t, storageClassYAML, false)
			sc := old.DeepCopy()
			c.mutate(sc)
			checkErrs(t, ValidateStorageClassUpdate(sc, old), c.want)
		})
	}
}
