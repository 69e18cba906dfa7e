package volumeprotection_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumeprotection"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

const wait = 30 * time.Second

func claim(name string) *corev1.PersistentVolumeClaim {
	class := "manual"
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// pod is a pod of ns on host (none: not scheduled) with the given volumes.
func pod(name, host string, volumes ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:   host,
			Containers: []corev1.Container{{Name: "app", Image: "flotilla.local/hello:latest"}},
			Volumes:    volumes,
		},
	}
}

func claimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func gone(client kubernetes.Interface, ns, name string) func() (bool, error) {
	return func() (bool, error) {
		_, err := client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
}

// heldTerminating reports whether claim name is deleted and still held by the finalizer.
func heldTerminating(t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("claim %s, deleted under a pod that uses it, must stay: %v", name, err)
	}
	if c.DeletionTimestamp == nil || !slices.Contains(c.Finalizers, volumeprotection.ClaimFinalizer) {
		t.Fatalf("claim %s: want Terminating, held by %s; deletionTimestamp %v, finalizers %v",
			name, volumeprotection.ClaimFinalizer, c.DeletionTimestamp, c.Finalizers)
	}
}

// TestClaimProtection: a claim a scheduled pod uses outlives its deletion until the pod goes;
// a claim no pod uses (or only a pod not scheduled yet, or a finished pod's ephemeral claim)
// goes at once. Each case deletes, with the claim in use, a claim no pod uses: once the
// controller has released that one, it has seen the other too.
func TestClaimProtection(t *testing.T) {
	a, client := controllertest.Start(t, volumeprotection.New)
	ctx := context.Background()
	ns := "protect"
	controllertest.Namespace(t, client, ns)
	claims := client.CoreV1().PersistentVolumeClaims(ns)
	pods := client.CoreV1().Pods(ns)
	create := func(names ...string) {
		t.Helper()
		for _, n := range names {
			c, err := claims.Create(ctx, claim(n), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// The StorageObjectInUseProtection admission plugin puts the finalizer on.
			if !slices.Contains(c.Finalizers, volumeprotection.ClaimFinalizer) {
				t.Fatalf("new claim %s: finalizers %v, want %s", n, c.Finalizers, volumeprotection.ClaimFinalizer)
			}
		}
	}
	del := func(kind string, names ...string) {
		t.Helper()
		for _, n := range names {
			var err error
			if kind == "pod" {
				err = pods.Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			} else {
				err = claims.Delete(ctx, n, metav1.DeleteOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("a claim a scheduled pod uses stays until the pod is gone", func(t *testing.T) {
		create("data", "spare")
		if _, err := pods.Create(ctx, pod("db", "edge-a", claimVolume("data", "data")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		del("claim", "data", "spare")
		controllertest.Eventually(t, wait, "the unused claim spare gone", gone(client, ns, "spare"))
		heldTerminating(t, client, ns, "data")
		if out := a.MustKubectl("", "get", "pvc", "data", "-n", ns, "--no-headers"); !strings.Contains(out, "Terminating") {
			t.Errorf("kubectl get pvc data = %q, want Terminating", out)
		}
		del("pod", "db")
		controllertest.Eventually(t, wait, "claim data gone after its pod", gone(client, ns, "data"))
	})

	t.Run("a pod not scheduled yet does not hold a claim", func(t *testing.T) {
		create("pending")
		if _, err := pods.Create(ctx, pod("waiting", "", claimVolume("data", "pending")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		del("claim", "pending")
		controllertest.Eventually(t, wait, "claim pending gone", gone(client, ns, "pending"))
	})

	t.Run("the ephemeral claim of a finished pod is released", func(t *testing.T) {
		eph := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: claim("").Spec}}}}
		create("job-scratch", "run-scratch", "spare")
		for _, n := range []string{"job", "run"} {
			if _, err := pods.Create(ctx, pod(n, "edge-a", eph), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		job, err := pods.Get(ctx, "job", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		job.Status.Phase = corev1.PodSucceeded
		if _, err := pods.UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		del("claim", "job-scratch", "run-scratch", "spare")
		controllertest.Eventually(t, wait, "the finished pod's claim job-scratch gone", gone(client, ns, "job-scratch"))
		controllertest.Eventually(t, wait, "the unused claim spare gone", gone(client, ns, "spare"))
		heldTerminating(t, client, ns, "run-scratch")
	})

	t.Run("a claim stored without the finalizer gets it", func(t *testing.T) {
		create("old")
		c, err := claims.Get(ctx, "old", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Finalizers = nil
		if _, err := claims.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		controllertest.Eventually(t, wait, "claim old protected again", func() (bool, error) {
			c, err := claims.Get(ctx, "old", metav1.GetOptions{})
			return err == nil && slices.Contains(c.Finalizers, volumeprotection.ClaimFinalizer), err
		})
	})
}

// TestVolumeProtection: a deleted volume stays while it is Bound to a claim, and goes once it
// is not (the volume binding controller marks it Released when its claim goes).
func TestVolumeProtection(t *testing.T) {
	_, client := controllertest.Start(t, volumeprotection.New)
	ctx := context.Background()
	volumes := client.CoreV1().PersistentVolumes()
	pv := func(name string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName:       "manual",
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/" + name}},
			},
		}
	}
	volumeGone := func(name string) func() (bool, error) {
		return func() (bool, error) {
			_, err := volumes.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		}
	}
	for _, n := range []string{"bound", "free"} {
		v, err := volumes.Create(ctx, pv(n), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(v.Finalizers, volumeprotection.VolumeFinalizer) {
			t.Fatalf("new volume %s: finalizers %v, want %s", n, v.Finalizers, volumeprotection.VolumeFinalizer)
		}
	}
	setPhase := func(name string, phase corev1.PersistentVolumePhase) {
		t.Helper()
		v, err := volumes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v.Status.Phase = phase
		if _, err := volumes.UpdateStatus(ctx, v, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setPhase("bound", corev1.VolumeBound)
	setPhase("free", corev1.VolumeAvailable)
	for _, n := range []string{"bound", "free"} {
		if err := volumes.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	controllertest.Eventually(t, wait, "the Available volume free gone", volumeGone("free"))
	v, err := volumes.Get(ctx, "bound", metav1.GetOptions{})
	if err != nil || v.DeletionTimestamp == nil || !slices.Contains(v.Finalizers, volumeprotection.VolumeFinalizer) {
		t.Fatalf("the Bound volume must stay Terminating, held by %s: %v %+v", volumeprotection.VolumeFinalizer, err, v)
	}
	setPhase("bound", corev1.VolumeReleased)
	controllertest.Eventually(t, wait, "volume bound gone once Released", volumeGone("bound"))
}
