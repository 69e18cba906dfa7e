package statefulset_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/garbagecollector"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/statefulset"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumeprotection"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

// webYAML is the web example: a headless Service web and a StatefulSet web of three replicas
// with volumeClaimTemplates, the claim named www.
const webYAML = `apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    app: web
spec:
  clusterIP: None
  selector:
    app: web
  ports:
  - name: http
    port: 8080
    targetPort: http
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: web
  replicas: 3
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: hello
        image: ghcr.io/example/hello:1.0
        ports:
        - name: http
          containerPort: 8080
        readinessProbe:
          httpGet:
            path: /healthz
            port: http
        volumeMounts:
        - name: www
          mountPath: /data
  volumeClaimTemplates:
  - metadata:
      name: www
    spec:
      accessModes: ["ReadWriteOnce"]
      resources:
        requests:
          storage: 1Gi
`

// variant returns webYAML with extra lines inserted after "spec:\n  serviceName: web\n".
func variant(extra string) string {
	return strings.Replace(webYAML, "  serviceName: web\n", "  serviceName: web\n"+extra, 1)
}

func gc(c *controllers.Context) (controllers.Runner, error) { return garbagecollector.New(c) }

func getPod(client kubernetes.Interface, ns, name string) (*corev1.Pod, error) {
	return client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
}

func getSet(t *testing.T, client kubernetes.Interface, ns string) *appsv1.StatefulSet {
	t.Helper()
	s, err := client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// podNames lists the names of the active pods of ns, sorted.
func podNames(client kubernetes.Interface, ns string) ([]string, error) {
	pods, err := controllertest.ActivePods(client, ns)
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out, err
}

func waitPods(t *testing.T, client kubernetes.Interface, ns string, want ...string) {
	t.Helper()
	controllertest.Eventually(t, 30*time.Second, fmt.Sprintf("pods %v", want), func() (bool, error) {
		got, err := podNames(client, ns)
		return slices.Equal(got, want), err
	})
}

func waitReady(t *testing.T, client kubernetes.Interface, ns string, n int32) {
	t.Helper()
	controllertest.Eventually(t, 30*time.Second, fmt.Sprintf("%d ready replicas", n), func() (bool, error) {
		s := getSet(t, client, ns)
		return s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == n && s.Status.Replicas == n &&
			s.Status.AvailableReplicas == n, nil
	})
}

// deletions records, in order, the pods of ns that a watch saw deleted.
type deletions struct {
	mu    sync.Mutex
	names []string
}

func watchDeletions(t *testing.T, client kubernetes.Interface, ns string) *deletions {
	t.Helper()
	w, err := client.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := &deletions{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted {
				d.mu.Lock()
				d.names = append(d.names, p.Name)
				d.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return d
}

func (d *deletions) get() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.names)
}

// await returns the deletions once the watch has delivered at least n: a list can show a pod
// gone before the watch's DELETED event for it arrives.
func (d *deletions) await(t *testing.T, n int) []string {
	t.Helper()
	controllertest.Eventually(t, 10*time.Second, fmt.Sprintf("%d deletions watched", n), func() (bool, error) {
		if got := d.get(); len(got) < n {
			return false, fmt.Errorf("watched %v so far", got)
		}
		return true, nil
	})
	return d.get()
}

func (d *deletions) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names = nil
}

func TestStatefulSet(t *testing.T) {
	// volumeprotection lets the claims the retention policy deletes go (each carries the
	// in-use finalizer).
	a, client := controllertest.Start(t, statefulset.New, gc, volumeprotection.New)
	ctx := context.Background()

	// Stable identities and claims, ordered start and scale-down, a pod that comes back with its
	// claim, partitioned rolling updates and revision history.
	t.Run("web", func(t *testing.T) {
		const ns = "sts-web"
		controllertest.Namespace(t, client, ns)
		a.MustKubectl(webYAML, "apply", "-n", ns, "-f", "-")
		set := getSet(t, client, ns)
		for i := 0; i < 3; i++ {
			name := fmt.Sprintf("web-%d", i)
			var pod *corev1.Pod
			controllertest.Eventually(t, 30*time.Second, name+" created", func() (bool, error) {
				var err error
				pod, err = getPod(client, ns, name)
				return err == nil, err
			})
			// The controller has counted this pod in its status.
			controllertest.Eventually(t, 30*time.Second, fmt.Sprintf("status replicas %d", i+1), func() (bool, error) {
				s := getSet(t, client, ns)
				return s.Status.ObservedGeneration == s.Generation && s.Status.Replicas == int32(i+1), nil
			})
			// The next ordinal waits for this one to be Ready. The pod's add event syncs the set
			// again within milliseconds, so a next pod created too early shows within a second.
			next := fmt.Sprintf("web-%d", i+1)
			controllertest.Consistently(t, time.Second, fmt.Sprintf("no %s before %s is Ready", next, name), func() (bool, error) {
				if _, err := getPod(client, ns, next); !apierrors.IsNotFound(err) {
					return false, fmt.Errorf("%s exists (err %v) before %s is Ready", next, err, name)
				}
				if _, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "www-"+next, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return false, fmt.Errorf("claim www-%s exists (err %v) before %s is Ready", next, err, name)
				}
				return true, nil
			})
			checkIdentity(t, client, set, pod, i)
			if err := controllertest.MarkReady(ctx, client, pod, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		waitReady(t, client, ns, 3)
		out := a.MustKubectl("", "get", "sts", "web", "-n", ns, "--no-headers")
		if f := strings.Fields(out); len(f) < 2 || f[1] != "3/3" {
			t.Errorf("kubectl get sts: %q, want READY 3/3", out)
		}
		s := getSet(t, client, ns)
		if s.Status.CurrentReplicas != 3 || s.Status.UpdatedReplicas != 3 || s.Status.CurrentRevision == "" ||
			s.Status.CurrentRevision != s.Status.UpdateRevision || s.Status.CollisionCount == nil {
			t.Errorf("status %+v", s.Status)
		}
		if out := a.MustKubectl("", "rollout", "status", "sts/web", "-n", ns, "--timeout=10s"); !strings.Contains(out, "partitioned roll out complete: 3 new pods have been updated...") {
			t.Errorf("rollout status: %q", out)
		}

		// Scale 3 -> 1: web-2 goes, then web-1.
		dels := watchDeletions(t, client, ns)
		a.MustKubectl("", "scale", "sts/web", "-n", ns, "--replicas=1")
		waitPods(t, client, ns, "web-0")
		if got := dels.await(t, 2); !slices.Equal(got, []string{"web-2", "web-1"}) {
			t.Errorf("scale down deleted %v, want [web-2 web-1]", got)
		}
		for _, c := range []string{"www-web-1", "www-web-2"} {
			if _, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, c, metav1.GetOptions{}); err != nil {
				t.Errorf("claim %s after scale down (Retain): %v", c, err)
			}
		}

		// Back to 3, then delete web-1: it comes back as web-1 with the same claim.
		controllertest.Kubelet(t, client, ns, 100*time.Millisecond, nil)
		a.MustKubectl("", "scale", "sts/web", "-n", ns, "--replicas=3")
		waitReady(t, client, ns, 3)
		old, _ := getPod(client, ns, "web-1")
		claim, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "www-web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a.MustKubectl("", "delete", "pod", "web-1", "-n", ns)
		controllertest.Eventually(t, 30*time.Second, "web-1 recreated", func() (bool, error) {
			p, err := getPod(client, ns, "web-1")
			return err == nil && p.UID != old.UID, nil
		})
		cur, _ := getPod(client, ns, "web-1")
		if v := cur.Spec.Volumes[0]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "www-web-1" {
			t.Errorf("recreated web-1 volumes %+v", cur.Spec.Volumes)
		}
		if c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "www-web-1", metav1.GetOptions{}); err != nil || c.UID != claim.UID {
			t.Errorf("claim www-web-1 replaced (err %v)", err)
		}
		waitReady(t, client, ns, 3)

		// Partitioned rolling update: only web-2 moves to the new revision.
		oldRev := getSet(t, client, ns).Status.CurrentRevision
		a.MustKubectl("", "patch", "sts/web", "-n", ns, "-p", `{"spec":{"updateStrategy":{"rollingUpdate":{"partition":2}}}}`)
		a.MustKubectl("", "set", "image", "sts/web", "-n", ns, "hello=ghcr.io/example/hello:1.1")
		var newRev string
		controllertest.Eventually(t, 30*time.Second, "web-2 updated", func() (bool, error) {
			s := getSet(t, client, ns)
			newRev = s.Status.UpdateRevision
			p, err := getPod(client, ns, "web-2")
			return err == nil && newRev != oldRev && p.Labels[statefulset.RevisionLabel] == newRev &&
				s.Status.UpdatedReplicas == 1 && s.Status.ReadyReplicas == 3, nil
		})
		out = a.MustKubectl("", "rollout", "status", "sts/web", "-n", ns, "--timeout=10s")
		if !strings.Contains(out, "partitioned roll out complete: 1 new pods have been updated...") {
			t.Errorf("rollout status: %q", out)
		}
		for _, n := range []string{"web-0", "web-1"} {
			if p, _ := getPod(client, ns, n); p.Labels[statefulset.RevisionLabel] != oldRev || p.Spec.Containers[0].Image != "ghcr.io/example/hello:1.0" {
				t.Errorf("%s moved to %s below the partition", n, p.Labels[statefulset.RevisionLabel])
			}
		}
		// Partition 0: web-1 then web-0, highest first.
		dels.reset()
		a.MustKubectl("", "patch", "sts/web", "-n", ns, "-p", `{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}`)
		a.MustKubectl("", "rollout", "status", "sts/web", "-n", ns, "--timeout=60s")
		controllertest.Eventually(t, 30*time.Second, "rollout complete", func() (bool, error) {
			s := getSet(t, client, ns)
			return s.Status.CurrentRevision == newRev && s.Status.UpdatedReplicas == 3 && s.Status.CurrentReplicas == 3, nil
		})
		if got := dels.await(t, 2); !slices.Equal(got, []string{"web-1", "web-0"}) {
			t.Errorf("rolling update deleted %v, want [web-1 web-0]", got)
		}

		// History and undo: the first revision is renumbered, not copied.
		out = a.MustKubectl("", "rollout", "history", "sts/web", "-n", ns)
		if !strings.Contains(out, "1 ") || !strings.Contains(out, "2 ") {
			t.Errorf("rollout history: %q", out)
		}
		a.MustKubectl("", "rollout", "undo", "sts/web", "-n", ns)
		controllertest.Eventually(t, 60*time.Second, "undo rolled out", func() (bool, error) {
			s := getSet(t, client, ns)
			return s.Status.UpdateRevision == oldRev && s.Status.CurrentRevision == oldRev && s.Status.UpdatedReplicas == 3 &&
				s.Status.ReadyReplicas == 3, nil
		})
		revs, err := client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, r := range revs.Items {
			got[r.Name] = r.Revision
			if ref := metav1.GetControllerOf(&r); ref == nil || ref.Name != "web" || ref.Kind != "StatefulSet" {
				t.Errorf("revision %s controller %+v", r.Name, ref)
			}
		}
		if len(got) != 2 || got[oldRev] != 3 || got[newRev] != 2 {
			t.Errorf("revisions %v, want %s=3 %s=2", got, oldRev, newRev)
		}
		if p, _ := getPod(client, ns, "web-0"); p.Spec.Containers[0].Image != "ghcr.io/example/hello:1.0" {
			t.Errorf("web-0 image %s after undo", p.Spec.Containers[0].Image)
		}
	})

	// Parallel with ordinals from 1 creates every pod at once.
	t.Run("parallel", func(t *testing.T) {
		const ns = "sts-parallel"
		controllertest.Namespace(t, client, ns)
		a.MustKubectl(variant("  podManagementPolicy: Parallel\n  ordinals:\n    start: 1\n"), "apply", "-n", ns, "-f", "-")
		waitPods(t, client, ns, "web-1", "web-2", "web-3")
		for _, c := range []string{"www-web-1", "www-web-2", "www-web-3"} {
			if _, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, c, metav1.GetOptions{}); err != nil {
				t.Errorf("claim %s: %v", c, err)
			}
		}
		// Nothing is ready, and still all go at once on scale down.
		a.MustKubectl("", "scale", "sts/web", "-n", ns, "--replicas=0")
		waitPods(t, client, ns)
	})

	// OnDelete leaves pods alone until someone deletes them.
	t.Run("ondelete", func(t *testing.T) {
		const ns = "sts-ondelete"
		controllertest.Namespace(t, client, ns)
		controllertest.Kubelet(t, client, ns, 50*time.Millisecond, nil)
		a.MustKubectl(variant("  updateStrategy:\n    type: OnDelete\n"), "apply", "-n", ns, "-f", "-")
		waitReady(t, client, ns, 3)
		before := map[string]podVersion{}
		for _, n := range []string{"web-0", "web-1", "web-2"} {
			p, _ := getPod(client, ns, n)
			before[n] = podVersion{p.UID, p.Labels[statefulset.RevisionLabel]}
		}
		a.MustKubectl("", "set", "image", "sts/web", "-n", ns, "hello=ghcr.io/example/hello:1.1")
		var newRev string
		controllertest.Eventually(t, 30*time.Second, "new update revision", func() (bool, error) {
			s := getSet(t, client, ns)
			newRev = s.Status.UpdateRevision
			return s.Status.ObservedGeneration == s.Generation && newRev != before["web-0"].rev, nil
		})
		// The sync that wrote the new revision would have replaced pods before writing it, and
		// its status write syncs once more within milliseconds: 2 s cover both with margin.
		controllertest.Consistently(t, 2*time.Second, "OnDelete leaves the pods alone", func() (bool, error) {
			for n, b := range before {
				if p, err := getPod(client, ns, n); err != nil || p.UID != b.uid || p.DeletionTimestamp != nil {
					return false, fmt.Errorf("OnDelete touched %s (err %v)", n, err)
				}
			}
			return true, nil
		})
		if out, _, err := a.Kubectl("", "rollout", "status", "sts/web", "-n", ns); err == nil {
			t.Errorf("rollout status on OnDelete succeeded: %q", out)
		}
		a.MustKubectl("", "delete", "pod", "web-0", "-n", ns)
		controllertest.Eventually(t, 30*time.Second, "web-0 at the new revision", func() (bool, error) {
			p, err := getPod(client, ns, "web-0")
			return err == nil && p.Labels[statefulset.RevisionLabel] == newRev && p.Spec.Containers[0].Image == "ghcr.io/example/hello:1.1", nil
		})
	})

	// Retention Delete/Delete owns claims by the set, then by the condemned pod.
	t.Run("retention", func(t *testing.T) {
		const ns = "sts-retention"
		controllertest.Namespace(t, client, ns)
		controllertest.Kubelet(t, client, ns, 50*time.Millisecond, nil)
		a.MustKubectl(variant("  persistentVolumeClaimRetentionPolicy:\n    whenDeleted: Delete\n    whenScaled: Delete\n"), "apply", "-n", ns, "-f", "-")
		waitReady(t, client, ns, 3)
		set := getSet(t, client, ns)
		for _, n := range []string{"www-web-0", "www-web-1", "www-web-2"} {
			c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(c.OwnerReferences) != 1 || c.OwnerReferences[0].UID != set.UID {
				t.Errorf("claim %s owners %+v, want the StatefulSet", n, c.OwnerReferences)
			}
		}
		a.MustKubectl("", "scale", "sts/web", "-n", ns, "--replicas=1")
		waitPods(t, client, ns, "web-0")
		controllertest.Eventually(t, 30*time.Second, "condemned claims collected", func() (bool, error) {
			list, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			var names []string
			for _, c := range list.Items {
				names = append(names, c.Name)
			}
			return slices.Equal(names, []string{"www-web-0"}), nil
		})
		// Scaling up again makes fresh claims.
		a.MustKubectl("", "scale", "sts/web", "-n", ns, "--replicas=2")
		waitReady(t, client, ns, 2)
		if _, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "www-web-1", metav1.GetOptions{}); err != nil {
			t.Errorf("claim www-web-1 after scale up: %v", err)
		}
	})
}

// podVersion is what a test remembers of a pod to tell whether it was replaced.
type podVersion struct {
	uid any
	rev string
}

// checkIdentity asserts the identity of the pod of ordinal i: labels, revision hash, hostname,
// subdomain, owner and its claim.
func checkIdentity(t *testing.T, client kubernetes.Interface, set *appsv1.StatefulSet, pod *corev1.Pod, i int) {
	t.Helper()
	want := map[string]string{"app": "web", statefulset.PodNameLabel: pod.Name, statefulset.PodIndexLabel: fmt.Sprint(i)}
	for k, v := range want {
		if pod.Labels[k] != v {
			t.Errorf("%s label %s=%q, want %q", pod.Name, k, pod.Labels[k], v)
		}
	}
	if h := pod.Labels[statefulset.RevisionLabel]; !strings.HasPrefix(h, "web-") {
		t.Errorf("%s controller-revision-hash %q", pod.Name, h)
	}
	if pod.Spec.Hostname != pod.Name || pod.Spec.Subdomain != "web" {
		t.Errorf("%s hostname %q subdomain %q", pod.Name, pod.Spec.Hostname, pod.Spec.Subdomain)
	}
	ref := metav1.GetControllerOf(pod)
	if len(pod.OwnerReferences) != 1 || ref == nil || ref.Kind != "StatefulSet" || ref.Name != "web" || ref.UID != set.UID {
		t.Errorf("%s owners %+v", pod.Name, pod.OwnerReferences)
	}
	claim := fmt.Sprintf("www-web-%d", i)
	found := false
	for _, v := range pod.Spec.Volumes {
		if v.Name == "www" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			found = true
		}
	}
	if !found {
		t.Errorf("%s volumes %+v, want www -> %s", pod.Name, pod.Spec.Volumes, claim)
	}
	c, err := client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		t.Errorf("claim %s: %v", claim, err)
	} else if c.Labels["app"] != "web" || len(c.OwnerReferences) != 0 {
		t.Errorf("claim %s labels %v owners %v", claim, c.Labels, c.OwnerReferences)
	}
}
