package ephemeralvolume_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/ephemeralvolume"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/garbagecollector"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumeprotection"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

const wait = 30 * time.Second

func claimSpec(size string) corev1.PersistentVolumeClaimSpec {
	class := "flotilla-local"
	return corev1.PersistentVolumeClaimSpec{
		StorageClassName: &class,
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
	}
}

func podWithScratch(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "flotilla.local/hello:latest"}},
			Volumes: []corev1.Volume{
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
					VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"type": "scratch"}, Annotations: map[string]string{"team": "a"}},
						Spec:       claimSpec("2Gi"),
					}}}},
			},
		},
	}
}

// TestEphemeralVolumes: the claim of a pod's generic ephemeral volume is created from its
// template, controlled by the pod, made again when deleted under the pod, and deleted with
// the pod; a claim of that name the pod does not own is left alone and the pod gets a
// Warning event.
func TestEphemeralVolumes(t *testing.T) {
	gc := func(c *controllers.Context) (controllers.Runner, error) { return garbagecollector.New(c) }
	_, client := controllertest.Start(t, ephemeralvolume.New, volumeprotection.New, gc)
	ctx := context.Background()
	ns := "ephemeral"
	controllertest.Namespace(t, client, ns)
	claims := client.CoreV1().PersistentVolumeClaims(ns)
	pods := client.CoreV1().Pods(ns)

	pod, err := pods.Create(ctx, podWithScratch("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var claim *corev1.PersistentVolumeClaim
	controllertest.Eventually(t, wait, "claim web-scratch created", func() (bool, error) {
		claim, err = claims.Get(ctx, "web-scratch", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if !metav1.IsControlledBy(claim, pod) || claim.OwnerReferences[0].BlockOwnerDeletion == nil || !*claim.OwnerReferences[0].BlockOwnerDeletion {
		t.Errorf("claim web-scratch owners %+v, want controlled by pod web (uid %s), blocking its deletion", claim.OwnerReferences, pod.UID)
	}
	if claim.Labels["type"] != "scratch" || claim.Annotations["team"] != "a" {
		t.Errorf("claim web-scratch labels %v annotations %v, want the template's", claim.Labels, claim.Annotations)
	}
	if got := claim.Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "2Gi" || *claim.Spec.StorageClassName != "flotilla-local" {
		t.Errorf("claim web-scratch spec %+v, want the template's", claim.Spec)
	}
	if _, err := claims.Get(ctx, "web-cache", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("an emptyDir got a claim: %v", err)
	}

	t.Run("a claim deleted under its pod is made again", func(t *testing.T) {
		old := claim.UID
		if err := claims.Delete(ctx, "web-scratch", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		controllertest.Eventually(t, wait, "a new claim web-scratch", func() (bool, error) {
			c, err := claims.Get(ctx, "web-scratch", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && c.UID != old && metav1.IsControlledBy(c, pod), err
		})
	})

	t.Run("a claim the pod does not own is not taken", func(t *testing.T) {
		if _, err := claims.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "db-scratch"},
			Spec: claimSpec("1Gi")}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Create(ctx, podWithScratch("db"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := "ephemeral volume scratch: PVC ephemeral/db-scratch was not created for pod ephemeral/db (pod is not owner)"
		controllertest.Eventually(t, wait, "a Warning event on pod db", func() (bool, error) {
			evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "db").String()})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && e.Reason == ephemeralvolume.ReasonFailedBinding && strings.Contains(e.Message, want) {
					return true, nil
				}
			}
			return false, nil
		})
		c, err := claims.Get(ctx, "db-scratch", metav1.GetOptions{})
		if err != nil || len(c.OwnerReferences) != 0 || c.Spec.Resources.Requests.Storage().String() != "1Gi" {
			t.Fatalf("the claim db-scratch made by hand must be left as it is: %v %+v", err, c)
		}
		// Once it is gone, the pod gets its own.
		if err := claims.Delete(ctx, "db-scratch", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		controllertest.Eventually(t, wait, "pod db's own claim", func() (bool, error) {
			c, err := claims.Get(ctx, "db-scratch", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && len(c.OwnerReferences) == 1 && c.OwnerReferences[0].Name == "db", err
		})
	})

	t.Run("the claim goes with its pod", func(t *testing.T) {
		if err := pods.Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		controllertest.Eventually(t, wait, "claim web-scratch gone", func() (bool, error) {
			_, err := claims.Get(ctx, "web-scratch", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
	})
}
