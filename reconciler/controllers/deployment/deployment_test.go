package deployment_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/deployment"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/replicaset"
	"github.com/flotilla-dev/flotilla/test/controllertest"
	"github.com/flotilla-dev/flotilla/test/framework"
)

func deploymentYAML(name, strategy string, replicas int, extra string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
  annotations:
    kubernetes.io/change-cause: first release
spec:
  replicas: %[3]d
%[4]s  strategy:
%[2]s
  selector:
    matchLabels:
      app: %[1]s
  template:
    metadata:
      labels:
        app: %[1]s
    spec:
      containers:
      - name: app
        image: example.com/app:v1
`, name, strategy, replicas, extra)
}

const rolling25 = `    type: RollingUpdate
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 25%`

// podWatcher checks an invariant on every pod event of a namespace.
type podWatcher struct {
	mu       sync.Mutex
	pods     map[string]*corev1.Pod
	maxTotal int
	minReady int
	armed    bool
	log      []string
}

func watchPods(t *testing.T, client kubernetes.Interface, ns string) *podWatcher {
	w := &podWatcher{pods: map[string]*corev1.Pod{}, minReady: 1 << 30}
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); wi.Stop(); <-done })
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			w.mu.Lock()
			if ev.Type == watch.Deleted || pod.DeletionTimestamp != nil {
				delete(w.pods, pod.Name)
			} else {
				w.pods[pod.Name] = pod
			}
			total, ready := len(w.pods), 0
			for _, p := range w.pods {
				if internal.IsPodReady(p) {
					ready++
				}
			}
			if w.armed {
				w.maxTotal = max(w.maxTotal, total)
				w.minReady = min(w.minReady, ready)
				w.log = append(w.log, fmt.Sprintf("%s %s: total=%d ready=%d", ev.Type, pod.Name, total, ready))
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *podWatcher) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.maxTotal, w.minReady, w.log = true, 0, 1<<30, nil
}

func (w *podWatcher) result() (int, int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxTotal, w.minReady, append([]string(nil), w.log...)
}

func ownedRSs(t *testing.T, client kubernetes.Interface, ns, name string) []appsv1.ReplicaSet {
	t.Helper()
	d, err := client.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := client.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []appsv1.ReplicaSet
	for _, rs := range list.Items {
		if metav1.IsControlledBy(&rs, d) {
			out = append(out, rs)
		}
	}
	return out
}

func getDeploy(t *testing.T, client kubernetes.Interface, ns, name string) *appsv1.Deployment {
	t.Helper()
	d, err := client.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func condition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

func rolloutStatus(t *testing.T, a *framework.Agent, ns, name string) {
	t.Helper()
	out := a.MustKubectl("", "rollout", "status", "deploy/"+name, "-n", ns, "--timeout=50s")
	if !strings.Contains(out, "successfully rolled out") {
		t.Fatalf("rollout status: %q", out)
	}
}

func TestDeployment(t *testing.T) {
	a, client := controllertest.Start(t, replicaset.New, deployment.New)
	ctx := context.Background()

	// A rolling update v1 -> v2 and the undo back to v1 stay within maxSurge and
	// maxUnavailable on every pod event; rollout status, history and undo work through kubectl.
	t.Run("rolling-update-and-undo", func(t *testing.T) {
		const ns, name = "deploy-rolling", "web"
		controllertest.Namespace(t, client, ns)
		controllertest.Kubelet(t, client, ns, 300*time.Millisecond, nil)
		w := watchPods(t, client, ns)
		a.MustKubectl(deploymentYAML(name, rolling25, 4, ""), "apply", "-n", ns, "-f", "-")
		rolloutStatus(t, a, ns, name)

		d := getDeploy(t, client, ns, name)
		rss := ownedRSs(t, client, ns, name)
		if len(rss) != 1 {
			t.Fatalf("%d replica sets, want 1", len(rss))
		}
		v1 := rss[0]
		hash := internal.ComputeHash(&d.Spec.Template, d.Status.CollisionCount)
		if v1.Name != name+"-"+hash || v1.Labels["pod-template-hash"] != hash ||
			v1.Spec.Selector.MatchLabels["pod-template-hash"] != hash || v1.Spec.Template.Labels["pod-template-hash"] != hash {
			t.Errorf("replica set %s labels %v selector %v, want hash %s everywhere", v1.Name, v1.Labels, v1.Spec.Selector, hash)
		}
		wantAnn := map[string]string{deployment.RevisionAnnotation: "1", deployment.DesiredReplicasAnnotation: "4",
			deployment.MaxReplicasAnnotation: "5", "kubernetes.io/change-cause": "first release"}
		for k, v := range wantAnn {
			if v1.Annotations[k] != v {
				t.Errorf("replica set annotation %s=%q, want %q", k, v1.Annotations[k], v)
			}
		}
		if d.Annotations[deployment.RevisionAnnotation] != "1" {
			t.Errorf("deployment revision %q, want 1", d.Annotations[deployment.RevisionAnnotation])
		}
		if c := condition(d, appsv1.DeploymentAvailable); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "MinimumReplicasAvailable" ||
			c.Message != "Deployment has minimum availability." {
			t.Errorf("Available condition %+v", c)
		}
		if c := condition(d, appsv1.DeploymentProgressing); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "NewReplicaSetAvailable" ||
			c.Message != fmt.Sprintf("ReplicaSet %q has successfully progressed.", v1.Name) {
			t.Errorf("Progressing condition %+v", c)
		}
		pods, _ := controllertest.ActivePods(client, ns)
		for _, p := range pods {
			if p.Labels["pod-template-hash"] != hash || !strings.HasPrefix(p.Name, v1.Name+"-") {
				t.Errorf("pod %s labels %v", p.Name, p.Labels)
			}
		}
		ev := a.MustKubectl("", "get", "events", "-n", ns, "--field-selector", "reason=ScalingReplicaSet", "-o", "custom-columns=MSG:.message", "--no-headers")
		if !strings.Contains(ev, fmt.Sprintf("Scaled up replica set %s to 4 from 0", v1.Name)) {
			t.Errorf("ScalingReplicaSet events %q", ev)
		}

		// v1 -> v2.
		w.arm()
		a.MustKubectl("", "set", "image", "deploy/"+name, "-n", ns, "app=example.com/app:v2")
		a.MustKubectl("", "annotate", "deploy/"+name, "-n", ns, "kubernetes.io/change-cause=second release", "--overwrite")
		rolloutStatus(t, a, ns, name)
		maxTotal, minReady, log := w.result()
		t.Logf("v1->v2: %d pod events, max pods %d, min ready %d", len(log), maxTotal, minReady)
		if maxTotal > 5 || minReady < 3 {
			t.Errorf("rollout v1->v2: max pods %d (limit 5), min ready %d (limit 3)\n%s", maxTotal, minReady, strings.Join(log, "\n"))
		}
		if len(log) == 0 {
			t.Fatal("watcher saw no pod event during the rollout")
		}
		rss = ownedRSs(t, client, ns, name)
		if len(rss) != 2 {
			t.Fatalf("%d replica sets after v2, want 2", len(rss))
		}
		for _, rs := range rss {
			wantReplicas, wantRev := int32(4), "2"
			if rs.Name == v1.Name {
				wantReplicas, wantRev = 0, "1"
			}
			if *rs.Spec.Replicas != wantReplicas || rs.Annotations[deployment.RevisionAnnotation] != wantRev {
				t.Errorf("rs %s replicas %d revision %s, want %d %s", rs.Name, *rs.Spec.Replicas, rs.Annotations[deployment.RevisionAnnotation], wantReplicas, wantRev)
			}
		}
		hist := a.MustKubectl("", "rollout", "history", "deploy/"+name, "-n", ns)
		if !strings.Contains(hist, "1         first release") && !strings.Contains(hist, "first release") || !strings.Contains(hist, "second release") {
			t.Errorf("rollout history:\n%s", hist)
		}

		// Undo: back to v1, through the v1 ReplicaSet (same hash), as revision 3.
		w.arm()
		a.MustKubectl("", "rollout", "undo", "deploy/"+name, "-n", ns)
		rolloutStatus(t, a, ns, name)
		maxTotal, minReady, log = w.result()
		t.Logf("undo: %d pod events, max pods %d, min ready %d", len(log), maxTotal, minReady)
		if maxTotal > 5 || minReady < 3 {
			t.Errorf("undo: max pods %d (limit 5), min ready %d (limit 3)\n%s", maxTotal, minReady, strings.Join(log, "\n"))
		}
		d = getDeploy(t, client, ns, name)
		if img := d.Spec.Template.Spec.Containers[0].Image; img != "example.com/app:v1" {
			t.Errorf("image after undo %s, want v1", img)
		}
		rss = ownedRSs(t, client, ns, name)
		if len(rss) != 2 {
			t.Fatalf("%d replica sets after undo, want 2 (the v1 one reused)", len(rss))
		}
		for _, rs := range rss {
			if rs.Name != v1.Name {
				continue
			}
			if *rs.Spec.Replicas != 4 || rs.Annotations[deployment.RevisionAnnotation] != "3" || rs.Annotations[deployment.RevisionHistoryAnnotation] != "1" {
				t.Errorf("v1 rs after undo: replicas %d annotations %v", *rs.Spec.Replicas, rs.Annotations)
			}
		}
		pods, _ = controllertest.ActivePods(client, ns)
		for _, p := range pods {
			if p.Spec.Containers[0].Image != "example.com/app:v1" {
				t.Errorf("pod %s runs %s after undo", p.Name, p.Spec.Containers[0].Image)
			}
		}

		// Scaling is not a rollout: the one active ReplicaSet takes the new size.
		a.MustKubectl("", "scale", "deploy/"+name, "-n", ns, "--replicas=2")
		rolloutStatus(t, a, ns, name)
		ev = a.MustKubectl("", "get", "events", "-n", ns, "--field-selector", "reason=ScalingReplicaSet", "-o", "custom-columns=MSG:.message", "--no-headers")
		if !strings.Contains(ev, fmt.Sprintf("Scaled down replica set %s to 2 from 4", v1.Name)) {
			t.Errorf("ScalingReplicaSet events %q", ev)
		}
	})

	// Recreate: no new pod before every old one is gone.
	t.Run("recreate", func(t *testing.T) {
		const ns, name = "deploy-recreate", "db"
		controllertest.Namespace(t, client, ns)
		controllertest.Kubelet(t, client, ns, 100*time.Millisecond, nil)
		w := watchPods(t, client, ns)
		a.MustKubectl(deploymentYAML(name, "    type: Recreate", 3, ""), "apply", "-n", ns, "-f", "-")
		rolloutStatus(t, a, ns, name)
		w.arm()
		a.MustKubectl("", "set", "image", "deploy/"+name, "-n", ns, "app=example.com/app:v2")
		rolloutStatus(t, a, ns, name)
		maxTotal, _, log := w.result()
		if maxTotal > 3 {
			t.Errorf("recreate: %d pods at once\n%s", maxTotal, strings.Join(log, "\n"))
		}
		pods, _ := controllertest.ActivePods(client, ns)
		for _, p := range pods {
			if p.Spec.Containers[0].Image != "example.com/app:v2" {
				t.Errorf("pod %s runs %s", p.Name, p.Spec.Containers[0].Image)
			}
		}
	})

	// Paused deployments do not roll out; revisionHistoryLimit prunes old ReplicaSets.
	t.Run("paused-and-history-limit", func(t *testing.T) {
		const ns, name = "deploy-paused", "api"
		controllertest.Namespace(t, client, ns)
		controllertest.Kubelet(t, client, ns, 50*time.Millisecond, nil)
		a.MustKubectl(deploymentYAML(name, rolling25, 2, "  revisionHistoryLimit: 1\n"), "apply", "-n", ns, "-f", "-")
		rolloutStatus(t, a, ns, name)
		a.MustKubectl("", "rollout", "pause", "deploy/"+name, "-n", ns)
		a.MustKubectl("", "set", "image", "deploy/"+name, "-n", ns, "app=example.com/app:v2")
		controllertest.Eventually(t, 20*time.Second, "Progressing DeploymentPaused", func() (bool, error) {
			d := getDeploy(t, client, ns, name)
			c := condition(d, appsv1.DeploymentProgressing)
			return c != nil && c.Status == corev1.ConditionUnknown && c.Reason == "DeploymentPaused" && c.Message == "Deployment is paused" &&
				d.Status.ObservedGeneration == d.Generation, nil
		})
		// observedGeneration of the new template is written by a sync that would have created
		// the new replica set before it; its status write syncs once more within milliseconds,
		// so a second covers that too.
		controllertest.Consistently(t, time.Second, "one replica set while paused", func() (bool, error) {
			if n := len(ownedRSs(t, client, ns, name)); n != 1 {
				return false, fmt.Errorf("%d replica sets while paused, want 1", n)
			}
			return true, nil
		})
		a.MustKubectl("", "rollout", "resume", "deploy/"+name, "-n", ns)
		rolloutStatus(t, a, ns, name)
		a.MustKubectl("", "set", "image", "deploy/"+name, "-n", ns, "app=example.com/app:v3")
		rolloutStatus(t, a, ns, name)
		controllertest.Eventually(t, 20*time.Second, "history pruned to 1 old replica set", func() (bool, error) {
			return len(ownedRSs(t, client, ns, name)) == 2, nil
		})
	})

	// No progress for progressDeadlineSeconds: Progressing=False ProgressDeadlineExceeded
	// and kubectl rollout status fails.
	t.Run("progress-deadline", func(t *testing.T) {
		const ns, name = "deploy-stuck", "stuck"
		controllertest.Namespace(t, client, ns)
		a.MustKubectl(deploymentYAML(name, rolling25, 2, "  progressDeadlineSeconds: 2\n"), "apply", "-n", ns, "-f", "-")
		controllertest.Eventually(t, 30*time.Second, "ProgressDeadlineExceeded", func() (bool, error) {
			d := getDeploy(t, client, ns, name)
			c := condition(d, appsv1.DeploymentProgressing)
			return c != nil && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" &&
				strings.HasSuffix(c.Message, "has timed out progressing."), nil
		})
		d := getDeploy(t, client, ns, name)
		if c := condition(d, appsv1.DeploymentAvailable); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "MinimumReplicasUnavailable" {
			t.Errorf("Available condition %+v", c)
		}
		out, errOut, err := a.Kubectl("", "rollout", "status", "deploy/"+name, "-n", ns, "--timeout=20s")
		if err == nil || !strings.Contains(errOut, "exceeded its progress deadline") {
			t.Errorf("rollout status of a stuck deployment: err %v\n%s%s", err, out, errOut)
		}
	})
	_ = ctx
}
