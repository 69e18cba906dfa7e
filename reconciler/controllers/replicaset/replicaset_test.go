package replicaset_test

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/replicaset"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

// frontendYAML is controllers/frontend.yaml of the Kubernetes documentation.
const frontendYAML = `apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: frontend
  labels:
    app: guestbook
    tier: frontend
spec:
  replicas: 3
  selector:
    matchLabels:
      tier: frontend
  template:
    metadata:
      labels:
        tier: frontend
    spec:
      containers:
      - name: php-redis
        image: gcr.io/google_samples/gb-frontend:v3
`

// podRSYAML is pods/pod-rs.yaml of the Kubernetes documentation.
const podRSYAML = `apiVersion: v1
kind: Pod
metadata:
  name: pod1
  labels:
    tier: frontend
spec:
  containers:
  - name: hello1
    image: gcr.io/google-samples/hello-app:2.0

---

apiVersion: v1
kind: Pod
metadata:
  name: pod2
  labels:
    tier: frontend
spec:
  containers:
  - name: hello2
    image: gcr.io/google-samples/hello-app:1.0
`

var generatedName = regexp.MustCompile(`^frontend-[bcdfghjklmnpqrstvwxz2456789]{5}$`)

// ownedPods returns the active pods of ns controlled by the ReplicaSet rs.
func ownedPods(client kubernetes.Interface, ns string, rs *appsv1.ReplicaSet) ([]corev1.Pod, error) {
	pods, err := controllertest.ActivePods(client, ns)
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == rs.UID {
			out = append(out, p)
		}
	}
	return out, nil
}

func getRS(t *testing.T, client kubernetes.Interface, ns, name string) *appsv1.ReplicaSet {
	t.Helper()
	rs, err := client.AppsV1().ReplicaSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get rs %s/%s: %v", ns, name, err)
	}
	return rs
}

func events(t *testing.T, client kubernetes.Interface, ns, reason string) []corev1.Event {
	t.Helper()
	list, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", reason).String()})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	return list.Items
}

func waitOwned(t *testing.T, client kubernetes.Interface, ns string, rs *appsv1.ReplicaSet, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	controllertest.Eventually(t, 30*time.Second, fmt.Sprintf("%d pods owned by %s", n, rs.Name), func() (bool, error) {
		var err error
		pods, err = ownedPods(client, ns, rs)
		return len(pods) == n, err
	})
	return pods
}

func TestReplicaSet(t *testing.T) {
	a, client := controllertest.Start(t, replicaset.New)
	ctx := context.Background()

	// frontend.yaml makes 3 pods; a deleted pod is replaced; a
	// relabelled pod is released and replaced; bare matching pods are adopted and the
	// surplus deleted.
	t.Run("frontend", func(t *testing.T) {
		const ns = "rs-frontend"
		controllertest.Namespace(t, client, ns)
		controllertest.Kubelet(t, client, ns, 100*time.Millisecond, nil)
		a.MustKubectl(frontendYAML, "apply", "-n", ns, "-f", "-")
		rs := getRS(t, client, ns, "frontend")
		pods := waitOwned(t, client, ns, rs, 3)
		for _, p := range pods {
			if !generatedName.MatchString(p.Name) || p.GenerateName != "frontend-" {
				t.Errorf("pod name %q generateName %q, want frontend-xxxxx", p.Name, p.GenerateName)
			}
			want := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "frontend", UID: rs.UID,
				Controller: ptr(true), BlockOwnerDeletion: ptr(true)}
			if len(p.OwnerReferences) != 1 || !reflect.DeepEqual(p.OwnerReferences[0], want) {
				t.Errorf("pod %s ownerReferences %+v, want [%+v]", p.Name, p.OwnerReferences, want)
			}
		}
		controllertest.Eventually(t, 30*time.Second, "status 3/3/3/3", func() (bool, error) {
			rs := getRS(t, client, ns, "frontend")
			s := rs.Status
			return s.Replicas == 3 && s.ReadyReplicas == 3 && s.AvailableReplicas == 3 && s.FullyLabeledReplicas == 3 &&
				s.ObservedGeneration == rs.Generation, nil
		})
		out := a.MustKubectl("", "get", "rs", "frontend", "-n", ns, "--no-headers")
		if f := strings.Fields(out); len(f) < 4 || f[1] != "3" || f[2] != "3" || f[3] != "3" {
			t.Errorf("kubectl get rs: %q, want DESIRED CURRENT READY 3 3 3", out)
		}
		created := events(t, client, ns, replicaset.ReasonSuccessfulCreate)
		if len(created) != 3 {
			t.Errorf("%d SuccessfulCreate events, want 3", len(created))
		}
		for _, e := range created {
			if e.Source.Component != "replicaset-controller" || e.Type != corev1.EventTypeNormal ||
				!strings.HasPrefix(e.Message, "Created pod: frontend-") || e.InvolvedObject.Name != "frontend" {
				t.Errorf("event %s/%s from %s: %q", e.Type, e.Reason, e.Source.Component, e.Message)
			}
		}

		// Delete one pod: a replacement appears.
		victim := pods[0].Name
		if err := client.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		controllertest.Eventually(t, 30*time.Second, "replacement of the deleted pod", func() (bool, error) {
			pods, err := ownedPods(client, ns, rs)
			if err != nil || len(pods) != 3 {
				return false, err
			}
			for _, p := range pods {
				if p.Name == victim {
					return false, nil
				}
			}
			return true, nil
		})

		// Relabel one pod: released (no controller reference) and replaced.
		pods = waitOwned(t, client, ns, rs, 3)
		relabelled := pods[0].Name
		a.MustKubectl("", "label", "pod", relabelled, "-n", ns, "tier=debug", "--overwrite")
		controllertest.Eventually(t, 30*time.Second, "release of the relabelled pod", func() (bool, error) {
			p, err := client.CoreV1().Pods(ns).Get(ctx, relabelled, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return len(p.OwnerReferences) == 0, nil
		})
		pods = waitOwned(t, client, ns, rs, 3)
		for _, p := range pods {
			if p.Name == relabelled {
				t.Errorf("relabelled pod %s still counted", p.Name)
			}
		}

		// Bare matching pods are adopted and, being surplus, deleted.
		a.MustKubectl(podRSYAML, "apply", "-n", ns, "-f", "-")
		controllertest.Eventually(t, 30*time.Second, "pod1 and pod2 gone", func() (bool, error) {
			pods, err := controllertest.ActivePods(client, ns)
			if err != nil {
				return false, err
			}
			for _, p := range pods {
				if p.Name == "pod1" || p.Name == "pod2" {
					return false, nil
				}
			}
			return true, nil
		})
		waitOwned(t, client, ns, rs, 3)
		// The event recorder writes events asynchronously: wait for both.
		controllertest.Eventually(t, 30*time.Second, "SuccessfulDelete events for pod1 and pod2", func() (bool, error) {
			var msgs []string
			for _, e := range events(t, client, ns, replicaset.ReasonSuccessfulDelete) {
				msgs = append(msgs, e.Message)
			}
			got := strings.Join(msgs, ",")
			if !strings.Contains(got, "Deleted pod: pod1") || !strings.Contains(got, "Deleted pod: pod2") {
				return false, fmt.Errorf("SuccessfulDelete events %q, want pod1 and pod2", got)
			}
			return true, nil
		})
	})

	// Pods first, then the ReplicaSet: both adopted, exactly one pod created.
	t.Run("adopt-existing", func(t *testing.T) {
		const ns = "rs-adopt"
		controllertest.Namespace(t, client, ns)
		a.MustKubectl(podRSYAML, "apply", "-n", ns, "-f", "-")
		a.MustKubectl(frontendYAML, "apply", "-n", ns, "-f", "-")
		rs := getRS(t, client, ns, "frontend")
		pods := waitOwned(t, client, ns, rs, 3)
		names := map[string]bool{}
		for _, p := range pods {
			names[p.Name] = true
			if !metav1.IsControlledBy(&p, rs) || !*metav1.GetControllerOf(&p).BlockOwnerDeletion {
				t.Errorf("pod %s not controlled by frontend", p.Name)
			}
		}
		if !names["pod1"] || !names["pod2"] {
			t.Errorf("owned pods %v, want pod1 and pod2 among them", names)
		}
		// The adopted pods keep their own spec.
		p1, _ := client.CoreV1().Pods(ns).Get(ctx, "pod1", metav1.GetOptions{})
		if p1.Spec.Containers[0].Image != "gcr.io/google-samples/hello-app:2.0" {
			t.Errorf("pod1 image changed to %s", p1.Spec.Containers[0].Image)
		}
		controllertest.Eventually(t, 10*time.Second, "status replicas 3", func() (bool, error) {
			return getRS(t, client, ns, "frontend").Status.Replicas == 3, nil
		})
		// Events are recorded asynchronously: wait for the one create to show.
		controllertest.Eventually(t, 10*time.Second, "the SuccessfulCreate event", func() (bool, error) {
			return len(events(t, client, ns, replicaset.ReasonSuccessfulCreate)) > 0, nil
		})
		// Each create's add event and the status write sync the set again within milliseconds:
		// a double create and its event would show within a second.
		controllertest.Consistently(t, time.Second, "exactly one pod created", func() (bool, error) {
			if n := len(events(t, client, ns, replicaset.ReasonSuccessfulCreate)); n != 1 {
				return false, fmt.Errorf("%d pods created, want exactly 1", n)
			}
			return true, nil
		})
		if pods := waitOwned(t, client, ns, rs, 3); len(pods) != 3 {
			t.Errorf("%d pods", len(pods))
		}
	})

	// Scale-down deletes unscheduled, then pending, then not ready, then the pod
	// ready for the shortest time, then (same readiness) more restarts, then the newest.
	t.Run("scale-down-order", func(t *testing.T) {
		const ns = "rs-scaledown"
		controllertest.Namespace(t, client, ns)
		a.MustKubectl(strings.Replace(frontendYAML, "replicas: 3", "replicas: 7", 1), "apply", "-n", ns, "-f", "-")
		rs := getRS(t, client, ns, "frontend")
		pods := waitOwned(t, client, ns, rs, 7)
		// Give each pod a distinct state (the test plays scheduler and node agent).
		bind := func(p *corev1.Pod) {
			err := client.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name},
				Target: corev1.ObjectReference{Kind: "Node", Name: "node-" + p.Name}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("bind %s: %v", p.Name, err)
			}
		}
		fresh := func(name string) *corev1.Pod {
			p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		now := time.Now()
		names := make([]string, 7)
		for i := range pods {
			names[i] = pods[i].Name
		}
		// 0: unscheduled. 1: scheduled, Pending. 2: Running, not ready.
		// 3: ready for 1 minute. 4: ready for 1 hour with 5 restarts. 5: ready for 1 hour,
		// no restarts, the newer of 5/6. 6: ready for 1 hour, no restarts.
		for i := 1; i < 7; i++ {
			bind(&pods[i])
		}
		p2 := fresh(names[2])
		p2.Status.Phase = corev1.PodRunning
		if _, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, p2, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := controllertest.MarkReady(ctx, client, fresh(names[3]), now.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{4, 5, 6} {
			if err := controllertest.MarkReady(ctx, client, fresh(names[i]), now.Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		p4 := fresh(names[4])
		p4.Status.ContainerStatuses[0].RestartCount = 5
		if _, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, p4, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// 5 and 6 differ only in age: recreate 6's twin order by creation time.
		c5, c6 := fresh(names[5]).CreationTimestamp, fresh(names[6]).CreationTimestamp
		newer, older := 5, 6
		if c6.After(c5.Time) {
			newer, older = 6, 5
		} else if c6.Equal(&c5) {
			newer, older = -1, -1 // same second: the order between them is not defined
		}
		order := []int{0, 1, 2, 3, 4}
		if newer >= 0 {
			order = append(order, newer)
		}
		for step, want := range order {
			replicas := 6 - step
			a.MustKubectl("", "scale", "rs/frontend", "-n", ns, fmt.Sprintf("--replicas=%d", replicas))
			controllertest.Eventually(t, 30*time.Second, fmt.Sprintf("scale to %d", replicas), func() (bool, error) {
				pods, err := ownedPods(client, ns, rs)
				return len(pods) == replicas, err
			})
			left, _ := ownedPods(client, ns, rs)
			for _, p := range left {
				if p.Name == names[want] {
					t.Fatalf("scale to %d kept pod %d (%s); pods left %v", replicas, want, p.Name, podNames(left))
				}
			}
		}
		if older >= 0 {
			left, _ := ownedPods(client, ns, rs)
			if len(left) != 1 || left[0].Name != names[older] {
				t.Errorf("last pod %v, want the oldest %s", podNames(left), names[older])
			}
		}
	})
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
