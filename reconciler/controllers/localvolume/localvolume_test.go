package localvolume_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumeprotection"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

const wait = 30 * time.Second

func newClaim(name string, class *string, node string) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if node != "" {
		c.Annotations = map[string]string{volumebinding.AnnSelectedNode: node}
	}
	return c
}

// waitClaimEvent waits for an event of volumebinding about claim ns/name: a sign that the
// controllers' shared claim informer has delivered the claim.
func waitClaimEvent(t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	controllertest.Eventually(t, 30*time.Second, "an event of "+volumebinding.Component+" about claim "+name, func() (bool, error) {
		evs, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Source.Component == volumebinding.Component {
				return true, nil
			}
		}
		return false, nil
	})
}

// waitBound waits until the claim is Bound to pvc-<uid> and that volume is Bound.
func waitBound(t *testing.T, client kubernetes.Interface, ns, name string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	t.Helper()
	ctx := context.Background()
	var claim *corev1.PersistentVolumeClaim
	var pv *corev1.PersistentVolume
	controllertest.Eventually(t, wait, "claim "+name+" and its volume Bound", func() (bool, error) {
		var err error
		if claim, err = client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		if pv, err = client.CoreV1().PersistentVolumes().Get(ctx, localvolume.VolumeName(claim), metav1.GetOptions{}); err != nil {
			return false, err
		}
		return claim.Status.Phase == corev1.ClaimBound && claim.Spec.VolumeName == pv.Name && pv.Status.Phase == corev1.VolumeBound, nil
	})
	return claim, pv
}

// waitTerminating waits until volume name is deleted, and held by the cleanup finalizer.
func waitTerminating(t *testing.T, client kubernetes.Interface, name string) *corev1.PersistentVolume {
	t.Helper()
	var pv *corev1.PersistentVolume
	controllertest.Eventually(t, wait, "volume "+name+" deleted and held by "+localvolume.Finalizer, func() (bool, error) {
		var err error
		pv, err = client.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && pv.DeletionTimestamp != nil && slices.Contains(pv.Finalizers, localvolume.Finalizer), err
	})
	return pv
}

// waitGone waits until volume name no longer exists.
func waitGone(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	controllertest.Eventually(t, wait, "volume "+name+" gone", func() (bool, error) {
		_, err := client.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

func TestLocalProvisioning(t *testing.T) {
	_, client := controllertest.Start(t,
		func(c *controllers.Context) (controllers.Runner, error) { return localvolume.New(c) },
		volumebinding.New, volumeprotection.New)
	ctx := context.Background()

	// Run creates the default class.
	var sc *storagev1.StorageClass
	controllertest.Eventually(t, wait, "StorageClass flotilla-local", func() (bool, error) {
		var err error
		sc, err = client.StorageV1().StorageClasses().Get(ctx, localvolume.ClassName, metav1.GetOptions{})
		return err == nil, err
	})
	if sc.Provisioner != localvolume.Provisioner || ptr.Deref(sc.VolumeBindingMode, "") != storagev1.VolumeBindingWaitForFirstConsumer ||
		ptr.Deref(sc.ReclaimPolicy, "") != corev1.PersistentVolumeReclaimDelete || sc.Annotations[localvolume.AnnIsDefaultClass] != "true" {
		t.Fatalf("flotilla-local class: %+v", sc)
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-a", Labels: map[string]string{corev1.LabelHostname: "edge-a"}}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := "lv"
	controllertest.Namespace(t, client, ns)
	claims := client.CoreV1().PersistentVolumeClaims(ns)

	t.Run("default class, Delete", func(t *testing.T) {
		// No class: the API server fills in the default class.
		claim, err := claims.Create(ctx, newClaim("data", nil, ""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(claim.Spec.StorageClassName, "<nil>"); got != localvolume.ClassName {
			t.Fatalf("storageClassName = %s, want the default %s", got, localvolume.ClassName)
		}
		// Nothing is provisioned before the scheduler picks a node. volumebinding's event shows
		// the claim reached the shared claim informer, which hands it to localvolume at the same
		// time; its sync takes milliseconds, so a second is ample.
		waitClaimEvent(t, client, ns, claim.Name)
		controllertest.Consistently(t, time.Second, "no volume before a node was selected", func() (bool, error) {
			if _, err := client.CoreV1().PersistentVolumes().Get(ctx, localvolume.VolumeName(claim), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("volume exists before a node was selected (err %v)", err)
			}
			return true, nil
		})
		// Play the scheduler.
		claim.Annotations = map[string]string{volumebinding.AnnSelectedNode: "edge-a"}
		if _, err := claims.Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		claim, pv := waitBound(t, client, ns, "data")
		if pv.Spec.Local == nil || pv.Spec.Local.Path != localvolume.DefaultPath+"/"+pv.Name {
			t.Errorf("local source %+v", pv.Spec.Local)
		}
		if pv.Annotations[localvolume.AnnProvisionedBy] != localvolume.Provisioner || pv.Spec.StorageClassName != localvolume.ClassName ||
			pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
			t.Errorf("volume %s: annotations %v class %q reclaim %s", pv.Name, pv.Annotations, pv.Spec.StorageClassName, pv.Spec.PersistentVolumeReclaimPolicy)
		}
		terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
		if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 || terms[0].MatchExpressions[0].Key != corev1.LabelHostname ||
			len(terms[0].MatchExpressions[0].Values) != 1 || terms[0].MatchExpressions[0].Values[0] != "edge-a" {
			t.Errorf("node affinity %+v", terms)
		}
		if q := claim.Status.Capacity[corev1.ResourceStorage]; q.String() != "1Gi" {
			t.Errorf("claim capacity %s", q.String())
		}
		if pv.Labels[localvolume.LabelNode] != "edge-a" || !slices.Equal(pv.Finalizers, []string{localvolume.Finalizer, volumeprotection.VolumeFinalizer}) {
			t.Errorf("volume %s: labels %v finalizers %v, want the node label, the cleanup and the in-use finalizers", pv.Name, pv.Labels, pv.Finalizers)
		}

		// Released, the volume is deleted; its finalizer keeps it until edge-a's agent has
		// removed the directory (played here).
		if err := claims.Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		terminating := waitTerminating(t, client, pv.Name)
		controllertest.Consistently(t, time.Second, "the finalizer holds the deleted volume", func() (bool, error) {
			cur, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if err != nil || !slices.Contains(cur.Finalizers, localvolume.Finalizer) {
				return false, fmt.Errorf("volume %v finalizers %v, want it held", err, cur.GetFinalizers())
			}
			return true, nil
		})
		terminating.Finalizers = slices.DeleteFunc(terminating.Finalizers, func(f string) bool { return f == localvolume.Finalizer })
		if _, err := client.CoreV1().PersistentVolumes().Update(ctx, terminating, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, client, pv.Name)
	})

	t.Run("volumes provisioned before the cleanup get its label and finalizer", func(t *testing.T) {
		old := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pvc-old", Annotations: map[string]string{localvolume.AnnProvisionedBy: localvolume.Provisioner}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName:              localvolume.ClassName,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: localvolume.DefaultPath + "/pvc-old"}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"edge-a"}}}}}}},
			},
		}
		if _, err := client.CoreV1().PersistentVolumes().Create(ctx, old, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		controllertest.Eventually(t, wait, "pvc-old labelled and held", func() (bool, error) {
			cur, err := client.CoreV1().PersistentVolumes().Get(ctx, "pvc-old", metav1.GetOptions{})
			return err == nil && cur.Labels[localvolume.LabelNode] == "edge-a" && slices.Contains(cur.Finalizers, localvolume.Finalizer), err
		})
		// A volume of another provisioner is not touched.
		other := old.DeepCopy()
		other.Name, other.Annotations = "pv-other", map[string]string{localvolume.AnnProvisionedBy: "example.com/nfs"}
		other.Spec.Local.Path = "/srv/other"
		if _, err := client.CoreV1().PersistentVolumes().Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		controllertest.Consistently(t, 2*time.Second, "pv-other untouched", func() (bool, error) {
			cur, err := client.CoreV1().PersistentVolumes().Get(ctx, "pv-other", metav1.GetOptions{})
			if err != nil || len(cur.Labels) != 0 || slices.Contains(cur.Finalizers, localvolume.Finalizer) {
				return false, fmt.Errorf("pv-other: %v labels %v finalizers %v", err, cur.GetLabels(), cur.GetFinalizers())
			}
			return true, nil
		})
	})

	t.Run("a removed node's deleted volume is let go", func(t *testing.T) {
		edgeB := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-b", Labels: map[string]string{corev1.LabelHostname: "edge-b"}}}
		if _, err := client.CoreV1().Nodes().Create(ctx, edgeB, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := claims.Create(ctx, newClaim("on-b", nil, "edge-b"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, pv := waitBound(t, client, ns, "on-b")
		if err := claims.Delete(ctx, "on-b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitTerminating(t, client, pv.Name)
		// edge-b's agent would clean it; the host is removed instead.
		if err := client.CoreV1().Nodes().Delete(ctx, "edge-b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, client, pv.Name)
	})

	t.Run("Retain class with path", func(t *testing.T) {
		keep := &storagev1.StorageClass{
			ObjectMeta:        metav1.ObjectMeta{Name: "local-keep"},
			Provisioner:       localvolume.Provisioner,
			Parameters:        map[string]string{localvolume.ParamPath: "/srv/keep"},
			ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		}
		if _, err := client.StorageV1().StorageClasses().Create(ctx, keep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := claims.Create(ctx, newClaim("keep", ptr.To("local-keep"), "edge-a"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, pv := waitBound(t, client, ns, "keep")
		if pv.Spec.Local == nil || pv.Spec.Local.Path != "/srv/keep/"+pv.Name || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
			t.Errorf("volume %s: local %+v reclaim %s", pv.Name, pv.Spec.Local, pv.Spec.PersistentVolumeReclaimPolicy)
		}
		if err := claims.Delete(ctx, "keep", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		controllertest.Eventually(t, wait, "volume "+pv.Name+" Released", func() (bool, error) {
			cur, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			return err == nil && cur.Status.Phase == corev1.VolumeReleased, err
		})
		// Retain: the volume stays Released. localvolume gets the phase change from the same
		// shared volume informer that showed it here and decides in milliseconds: 2 s is ample.
		controllertest.Consistently(t, 2*time.Second, "retained volume stays Released", func() (bool, error) {
			cur, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if err != nil || cur.Status.Phase != corev1.VolumeReleased || cur.DeletionTimestamp != nil {
				return false, fmt.Errorf("retained volume: %v phase %v", err, cur)
			}
			return true, nil
		})
	})

	t.Run("class of another provisioner is ignored", func(t *testing.T) {
		other := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "nfs"}, Provisioner: "example.com/nfs"}
		if _, err := client.StorageV1().StorageClasses().Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		claim, err := claims.Create(ctx, newClaim("nfs", ptr.To("nfs"), "edge-a"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// volumebinding's event shows the claim reached the shared claim informer, which hands
		// it to localvolume at the same time; its sync takes milliseconds, so 2 s is ample.
		waitClaimEvent(t, client, ns, claim.Name)
		controllertest.Consistently(t, 2*time.Second, "no volume for a class of another provisioner", func() (bool, error) {
			if _, err := client.CoreV1().PersistentVolumes().Get(ctx, localvolume.VolumeName(claim), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("volume provisioned for a class of another provisioner (err %v)", err)
			}
			return true, nil
		})
	})

	t.Run("EnsureDefaultStorageClass is idempotent and keeps changes", func(t *testing.T) {
		cur, err := client.StorageV1().StorageClasses().Get(ctx, localvolume.ClassName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Annotations[localvolume.AnnIsDefaultClass] = "false"
		if _, err := client.StorageV1().StorageClasses().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := localvolume.EnsureDefaultStorageClass(ctx, client, ""); err != nil {
				t.Fatal(err)
			}
		}
		got, err := client.StorageV1().StorageClasses().Get(ctx, localvolume.ClassName, metav1.GetOptions{})
		if err != nil || got.Annotations[localvolume.AnnIsDefaultClass] != "false" {
			t.Fatalf("class after ensure: %v %v", err, got)
		}
		// No default class any more: a claim without a class keeps none.
		claim, err := claims.Create(ctx, newClaim("nodefault", nil, ""), metav1.CreateOptions{})
		if err != nil || claim.Spec.StorageClassName != nil {
			t.Fatalf("claim without default class: %v class %v", err, claim.Spec.StorageClassName)
		}
		// An explicit "" is kept even when a default exists.
		if err := client.StorageV1().StorageClasses().Delete(ctx, localvolume.ClassName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := localvolume.EnsureDefaultStorageClass(ctx, client, ""); err != nil {
			t.Fatal(err)
		}
		claim, err = claims.Create(ctx, newClaim("noclass", ptr.To(""), ""), metav1.CreateOptions{})
		if err != nil || ptr.Deref(claim.Spec.StorageClassName, "<nil>") != "" {
			t.Fatalf("claim with class \"\": %v class %v", err, claim.Spec.StorageClassName)
		}
		// --local-volume-path: a class created anew keeps its volumes there.
		if err := client.StorageV1().StorageClasses().Delete(ctx, localvolume.ClassName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := localvolume.EnsureDefaultStorageClass(ctx, client, "/srv/site/volumes"); err != nil {
			t.Fatal(err)
		}
		got, err = client.StorageV1().StorageClasses().Get(ctx, localvolume.ClassName, metav1.GetOptions{})
		if err != nil || got.Parameters[localvolume.ParamPath] != "/srv/site/volumes" {
			t.Fatalf("class created with a path: %v %+v", err, got)
		}
	})
}
