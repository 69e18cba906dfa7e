package localvolume

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func testClaim(mods ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "shop", UID: "1234", ResourceVersion: "7"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(ClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
	}
	for _, m := range mods {
		m(c)
	}
	return c
}

func TestProvisionedVolume(t *testing.T) {
	retain := DefaultStorageClass("")
	retain.Name, retain.ReclaimPolicy = "keep", ptr.To(corev1.PersistentVolumeReclaimRetain)
	retain.Parameters = map[string]string{ParamPath: "/srv/vols/"}
	cases := []struct {
		name     string
		claim    *corev1.PersistentVolumeClaim
		class    *storagev1.StorageClass
		wantPath string
		wantErr  string
		reclaim  corev1.PersistentVolumeReclaimPolicy
		node     string // edge-a when empty
	}{
		{name: "default class", claim: testClaim(), class: DefaultStorageClass(""),
			wantPath: "/var/lib/flotilla/volumes/pvc-1234", reclaim: corev1.PersistentVolumeReclaimDelete},
		{name: "path parameter and Retain", claim: testClaim(), class: retain,
			wantPath: "/srv/vols/pvc-1234", reclaim: corev1.PersistentVolumeReclaimRetain},
		{name: "relative path parameter", claim: testClaim(), class: func() *storagev1.StorageClass {
			c := DefaultStorageClass("")
			c.Parameters = map[string]string{ParamPath: "vols"}
			return c
		}(), wantErr: "must be an absolute path"},
		{name: "block mode", claim: testClaim(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
		}), class: DefaultStorageClass(""), wantErr: "use Filesystem"},
		{name: "ReadWriteMany", claim: testClaim(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}), class: DefaultStorageClass(""), wantErr: "ReadWriteOnce"},
		{name: "no storage request", claim: testClaim(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests = nil
		}), class: DefaultStorageClass(""), wantErr: "requests.storage"},
		{name: "node name too long for a label", claim: testClaim(), class: DefaultStorageClass(""), node: strings.Repeat("n", 64),
			wantErr: "cannot be a label value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			node := c.node
			if node == "" {
				node = "edge-a"
			}
			pv, err := ProvisionedVolume(c.claim, c.class, node)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pv.Name != "pvc-1234" || pv.Spec.Local == nil || pv.Spec.Local.Path != c.wantPath {
				t.Errorf("name %q local %+v, want pvc-1234 at %s", pv.Name, pv.Spec.Local, c.wantPath)
			}
			if pv.Spec.PersistentVolumeReclaimPolicy != c.reclaim || pv.Spec.StorageClassName != c.class.Name {
				t.Errorf("reclaim %s class %s", pv.Spec.PersistentVolumeReclaimPolicy, pv.Spec.StorageClassName)
			}
			if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.String() != "2Gi" {
				t.Errorf("capacity %s, want 2Gi", q.String())
			}
			if pv.Annotations[AnnProvisionedBy] != Provisioner {
				t.Errorf("annotations %v", pv.Annotations)
			}
			if pv.Labels[LabelNode] != "edge-a" || len(pv.Finalizers) != 1 || pv.Finalizers[0] != Finalizer {
				t.Errorf("labels %v finalizers %v, want %s=edge-a and %s", pv.Labels, pv.Finalizers, LabelNode, Finalizer)
			}
			ref := pv.Spec.ClaimRef
			if ref == nil || ref.Namespace != "shop" || ref.Name != "data" || ref.UID != "1234" {
				t.Errorf("claimRef %+v", ref)
			}
			terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
			if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 {
				t.Fatalf("node affinity %+v", terms)
			}
			if e := terms[0].MatchExpressions[0]; e.Key != corev1.LabelHostname || e.Operator != corev1.NodeSelectorOpIn || len(e.Values) != 1 || e.Values[0] != "edge-a" {
				t.Errorf("node affinity expression %+v", e)
			}
		})
	}
}

// A relative --local-volume-path is refused before the controller starts.
func TestRelativeVolumePathRefused(t *testing.T) {
	_, err := NewWithOptions(nil, Options{Path: "volumes"})
	if err == nil || !strings.Contains(err.Error(), "absolute path") {
		t.Fatalf("NewWithOptions with a relative path: %v, want an error asking for an absolute path", err)
	}
}
