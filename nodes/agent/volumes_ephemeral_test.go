package agent

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// TestEphemeralVolume: a generic ephemeral volume mounts the local volume of the claim
// <pod>-<volume> once that claim, created for the pod, is bound; a claim of that name the pod
// does not control is refused and the pod waits.
func TestEphemeralVolume(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-web"},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{},
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{
				Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}}}}},
		},
	}
	data := filepath.Join(t.TempDir(), "pvc-1")
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: data}}}}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "web", UID: pod.UID, Controller: ptr.To(true)}
	claims := map[string]*corev1.PersistentVolumeClaim{}
	src := volumeSources{
		PVC: func(ns, name string) (*corev1.PersistentVolumeClaim, error) {
			if c := claims[ns+"/"+name]; c != nil {
				return c, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, name)
		},
		PV: func(name string) (*corev1.PersistentVolume, error) {
			if name == pv.Name {
				return pv, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumes"}, name)
		},
	}
	claim := func(owners ...metav1.OwnerReference) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "web-scratch", Namespace: "ns", OwnerReferences: owners},
			Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv.Name},
			Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
		}
	}
	wait := func(want string) {
		t.Helper()
		_, err := prepareVolumes(pod, t.TempDir(), src)
		if !errors.Is(err, errVolumeNotReady) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want the pod to wait: %s", err, want)
		}
	}

	wait(`persistentVolumeClaim "web-scratch" of the ephemeral volume`)
	earlier := owner
	earlier.UID = "uid-of-an-earlier-web"
	claims["ns/web-scratch"] = claim(earlier)
	wait("PVC ns/web-scratch was not created for pod ns/web (pod is not owner)")
	claims["ns/web-scratch"] = claim()
	wait("was not created for pod ns/web")

	claims["ns/web-scratch"] = claim(owner)
	paths, err := prepareVolumes(pod, t.TempDir(), src)
	if err != nil {
		t.Fatal(err)
	}
	if paths["scratch"] != data {
		t.Fatalf("scratch mounts %q, want the local volume %q", paths["scratch"], data)
	}
}

// TestClaimBeingDeleted: a pod that has not started yet waits while its claim is being
// deleted; a pod already running keeps mounting it.
func TestClaimBeingDeleted(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "ns", UID: "uid-db"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}}}},
	}
	data := filepath.Join(t.TempDir(), "pvc-2")
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data-db-0", Namespace: "ns", DeletionTimestamp: ptr.To(metav1.Now()),
			Finalizers: []string{"kubernetes.io/pvc-protection"}},
		Spec:   corev1.PersistentVolumeClaimSpec{VolumeName: "pvc-2"},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	src := volumeSources{
		PVC: func(string, string) (*corev1.PersistentVolumeClaim, error) { return claim, nil },
		PV: func(string) (*corev1.PersistentVolume, error) {
			return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-2"},
				Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: data}}}}, nil
		},
		Starting: true,
	}
	_, err := prepareVolumes(pod, t.TempDir(), src)
	if !errors.Is(err, errVolumeNotReady) || !strings.Contains(err.Error(), `persistentVolumeClaim "data-db-0" is being deleted`) {
		t.Fatalf("starting pod: got %v, want it to wait for a claim not being deleted", err)
	}
	src.Starting = false
	paths, err := prepareVolumes(pod, t.TempDir(), src)
	if err != nil || paths["data"] != data {
		t.Fatalf("running pod: got %v %v, want it to keep %s", paths, err, data)
	}
	claim.DeletionTimestamp = nil
	src.Starting = true
	if paths, err := prepareVolumes(pod, t.TempDir(), src); err != nil || paths["data"] != data {
		t.Fatalf("starting pod, claim not deleted: got %v %v, want %s", paths, err, data)
	}
}
