package gitsync

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

func rollbackDeployment(image string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: %s
`, image)
}

const (
	rollbackPVC = `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: demo
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`
	rollbackExtraCM = `apiVersion: v1
kind: ConfigMap
metadata:
  name: extra
  namespace: demo
data: {a: b}
`
)

// TestRollbackAgainstAgent: a source with spec.rollback whose new revision does not become
// healthy in time (a pod of its Deployment crash-loops) re-applies the last healthy revision,
// says so (Ready False RolledBack with the pod's reason, status.rolledBack, an event), keeps
// the claim the bad revision added but prunes its ConfigMap, does not apply the bad revision
// again on the next fetches, and applies the next commit normally. The agent runs no
// controllers: the test writes the Deployment's status and the crash-looping pod's status as
// the deployment controller and a host would.
func TestRollbackAgainstAgent(t *testing.T) {
	r := newRepo(t)
	good := r.commit(map[string]string{"ns.yaml": nsYAML, "deploy.yaml": rollbackDeployment("hello:v1")})
	e := start(t)
	ctx := context.Background()
	e.createSource(map[string]any{"url": "file://" + r.dir, "interval": "1m", "serviceAccountName": testSA,
		"wait": true, "rollback": map[string]any{"enabled": true, "healthTimeout": "10s"}})
	ready := func() *metav1.Condition {
		return apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady)
	}
	available := func() {
		t.Helper()
		d, err := e.client.AppsV1().Deployments("demo").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d.Status.ObservedGeneration = d.Generation
		d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 1, 1, 1, 1
		if _, err := e.client.AppsV1().Deployments("demo").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("the first revision applied, Ready False while its Deployment progresses", func() bool {
		c := ready()
		return e.source().Status.LastAppliedRevision == "main@sha1:"+good && c != nil && c.Status == metav1.ConditionFalse &&
			c.Reason == ReasonProgressing && strings.Contains(c.Message, "Deployment demo/web")
	})
	available()
	e.waitFor("the first revision healthy: Ready, and the last healthy revision", func() bool {
		return e.readyAt(good)() && e.source().Status.LastHealthyRevision == "main@sha1:"+good
	})

	bad := r.commit(map[string]string{"deploy.yaml": rollbackDeployment("hello:crash"), "pvc.yaml": rollbackPVC, "extra.yaml": rollbackExtraCM})
	requestFetch(t, e.cctx.Dynamic, "default", "apps")
	e.waitFor("the bad revision applied", func() bool { return e.source().Status.LastAppliedRevision == "main@sha1:"+bad })
	began := time.Now()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-crash-1", Namespace: "demo", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "hello:crash"}}}}
	pod, err := e.client.CoreV1().Pods("demo").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Image: "hello:crash",
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}}, RestartCount: 2}}}
	if _, err := e.client.CoreV1().Pods("demo").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	const podReason = "pod web-crash-1: container web CrashLoopBackOff, last exit code 3 (Error)"
	e.waitFor("the crash loop seen in the health, Ready False while the timeout runs", func() bool {
		c := ready()
		return c != nil && c.Reason == ReasonProgressing && strings.Contains(c.Message, podReason) && e.source().Status.Health == v1alpha1.HealthDegraded
	})
	var st v1alpha1.GitSourceStatus
	e.waitFor("the rollback", func() bool {
		st = e.source().Status
		c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonRolledBack && st.LastAppliedRevision == "main@sha1:"+good
	})
	t.Logf("rolled back %s after the bad revision was applied (health timeout 10s): %s", time.Since(began).Round(100*time.Millisecond), ready().Message)
	if rb := st.RolledBack; rb == nil || rb.Revision != "main@sha1:"+bad || rb.To != "main@sha1:"+good || !strings.Contains(rb.Reason, "Deployment demo/web: "+podReason) {
		t.Fatalf("status.rolledBack = %+v, want revision %s, to %s, reason naming Deployment demo/web and %q", st.RolledBack, bad, good, podReason)
	}
	if m := ready().Message; !strings.Contains(m, bad) || !strings.Contains(m, podReason) {
		t.Fatalf("Ready message %q does not name the bad revision and the pod's reason", m)
	}
	if rs := e.eventReasons("apps"); rs[ReasonRolledBack] == "" {
		t.Fatalf("no %s event: %v", ReasonRolledBack, rs)
	}
	image := func() string {
		d, err := e.client.AppsV1().Deployments("demo").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Spec.Containers[0].Image
	}
	if got := image(); got != "hello:v1" {
		t.Fatalf("after the rollback the Deployment runs %s, want hello:v1", got)
	}
	if !e.exists(func() (metav1.Object, error) {
		return e.client.CoreV1().PersistentVolumeClaims("demo").Get(ctx, "data", metav1.GetOptions{})
	}) {
		t.Fatal("the rollback deleted the claim the bad revision added")
	}
	if e.exists(func() (metav1.Object, error) {
		return e.client.CoreV1().ConfigMaps("demo").Get(ctx, "extra", metav1.GetOptions{})
	}) {
		t.Fatal("the rollback kept the ConfigMap the bad revision added")
	}
	inInventory := func(id string) bool {
		for _, en := range e.source().Status.Inventory.Entries {
			if en.ID == id {
				return true
			}
		}
		return false
	}
	if !inInventory("demo_data__PersistentVolumeClaim") {
		t.Fatalf("the kept claim left the inventory: %+v", e.source().Status.Inventory)
	}

	// The same head fetched again: the healthy revision stays applied.
	requestFetch(t, e.cctx.Dynamic, "default", "apps")
	e.waitFor("the fetch after the rollback", func() bool {
		return e.source().Status.LastAttemptedRevision == "main@sha1:"+bad && ready().Reason == ReasonRolledBack
	})
	e.holds(3*time.Second, "the bad revision is not applied again", func() string {
		if got := image(); got != "hello:v1" {
			return "the Deployment runs " + got
		}
		return ""
	})

	fixed := r.commit(map[string]string{"deploy.yaml": rollbackDeployment("hello:v2"), "pvc.yaml": "", "extra.yaml": ""})
	requestFetch(t, e.cctx.Dynamic, "default", "apps")
	e.waitFor("the next commit applied normally", func() bool {
		st := e.source().Status
		return st.LastAppliedRevision == "main@sha1:"+fixed && st.RolledBack == nil && image() == "hello:v2"
	})
	if err := e.client.CoreV1().Pods("demo").Delete(ctx, "web-crash-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	available()
	e.waitFor("the next commit healthy", func() bool {
		return e.readyAt(fixed)() && e.source().Status.LastHealthyRevision == "main@sha1:"+fixed
	})
	// Pruned: deleted, or Terminating (the in-use finalizer holds every claim until the
	// volumeprotection controller, not run here, lets it go).
	claim, err := e.client.CoreV1().PersistentVolumeClaims("demo").Get(ctx, "data", metav1.GetOptions{})
	if err == nil && claim.DeletionTimestamp == nil {
		t.Fatal("a revision without the claim did not prune it")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
