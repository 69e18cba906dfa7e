package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/test/framework"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// drainManifests are a Deployment and a StatefulSet of 3 pods each, spread over the hosts,
// each under a PodDisruptionBudget that lets one pod go at a time.
const drainManifests = `apiVersion: v1
kind: Namespace
metadata: {name: drain}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: drain}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
      containers:
      - name: hello
        image: flotilla.local/hello:latest
        imagePullPolicy: IfNotPresent
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: drain}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: drain}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 5
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: db}}}
      containers:
      - name: hello
        image: flotilla.local/hello:latest
        imagePullPolicy: IfNotPresent
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 1
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: drain}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db, namespace: drain}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: db}}
`

// budgetState is what the test reads of a PodDisruptionBudget.
type budgetState struct {
	expected, desired, healthy, allowed int32
	disrupted                           int
}

func readBudget(c kubernetes.Interface, name string) (budgetState, error) {
	pdb, err := c.PolicyV1().PodDisruptionBudgets("drain").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return budgetState{}, err
	}
	if pdb.Status.ObservedGeneration != pdb.Generation {
		return budgetState{}, fmt.Errorf("PDB %s: status of generation %d, spec is %d", name, pdb.Status.ObservedGeneration, pdb.Generation)
	}
	s := pdb.Status
	return budgetState{s.ExpectedPods, s.DesiredHealthy, s.CurrentHealthy, s.DisruptionsAllowed, len(s.DisruptedPods)}, nil
}

// drainPods returns the pods of app (web or db) that are not being deleted.
func drainPods(c kubernetes.Interface, app string) ([]corev1.Pod, error) {
	list, err := c.CoreV1().Pods("drain").List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out, nil
}

// settled reports whether app has 3 Ready pods, none on avoid, and its budget says so with
// one disruption allowed and no eviction pending.
func settled(c kubernetes.Interface, app, avoid string) (bool, string) {
	pods, err := drainPods(c, app)
	if err != nil {
		return false, err.Error()
	}
	ready := 0
	var where []string
	for _, p := range pods {
		where = append(where, p.Name+"@"+p.Spec.NodeName)
		if podReady(&p) && p.Spec.NodeName != avoid {
			ready++
		}
	}
	b, err := readBudget(c, app)
	if err != nil {
		return false, err.Error()
	}
	want := budgetState{expected: 3, desired: 2, healthy: 3, allowed: 1}
	return ready == 3 && len(pods) == 3 && b == want, fmt.Sprintf("%s: %d ready of %v; budget %+v, want %+v", app, ready, where, b, want)
}

// TestDrain drains a host whose pods are under PodDisruptionBudgets with kubectl: the
// evictions go one at a time within each budget (kubectl retries those the budget refuses),
// never leaving fewer than 2 ready pods of an app, the pods come back Ready on the other
// hosts, and the host takes pods again once uncordoned.
func TestDrain(t *testing.T) {
	s, c := startPodSite(t, 3)
	ctx := context.Background()
	h := s.Hosts[0]
	if out, err := h.Kubectl(ctx, drainManifests, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	for _, app := range []string{"web", "db"} {
		waitFor(t, 3*time.Minute, app+" Ready under its budget", func() (bool, string) { return settled(c, app, "") })
	}

	// Drain the host with the most budgeted pods (at least 2 of the 6).
	perHost := map[string][]string{}
	for _, app := range []string{"web", "db"} {
		pods, err := drainPods(c, app)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			perHost[p.Spec.NodeName] = append(perHost[p.Spec.NodeName], p.Name)
		}
	}
	victim := ""
	for _, host := range s.Hosts {
		if victim == "" || len(perHost[host.Name]) > len(perHost[victim]) {
			victim = host.Name
		}
	}
	t.Logf("draining %s, which runs %v (placement %v)", victim, perHost[victim], perHost)

	// Watch the apps and their budgets while the drain runs: never fewer than 2 Ready pods
	// of an app, and never a status claiming otherwise.
	watchCtx, stopWatch := context.WithCancel(ctx)
	var (
		mu         sync.Mutex
		minReady   = map[string]int{"web": 3, "db": 3}
		minHealthy = map[string]int32{"web": 3, "db": 3}
		refused    bool
		wg         sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for watchCtx.Err() == nil {
			for _, app := range []string{"web", "db"} {
				pods, err := drainPods(c, app)
				b, berr := readBudget(c, app)
				mu.Lock()
				if err == nil {
					ready := 0
					for _, p := range pods {
						if podReady(&p) {
							ready++
						}
					}
					minReady[app] = min(minReady[app], ready)
				}
				if berr == nil {
					minHealthy[app] = min(minHealthy[app], b.healthy)
					if b.allowed == 0 {
						refused = true
					}
				}
				mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	start := time.Now()
	drainCtx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	out, err := h.Kubectl(drainCtx, "", "drain", victim, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m")
	cancel()
	took := time.Since(start)
	stopWatch()
	wg.Wait()
	if err != nil {
		t.Fatalf("drain %s after %s: %v\n%s", victim, took.Round(time.Millisecond), err, out)
	}
	framework.Figure(t, "kubectl drain of a host with a Deployment and a StatefulSet under PodDisruptionBudgets took %s", took.Round(time.Millisecond))
	t.Logf("kubectl drain %s:\n%s", victim, out)
	if !strings.Contains(out, "drained") {
		t.Errorf("drain output does not say the node is drained:\n%s", out)
	}
	for _, name := range perHost[victim] {
		if !strings.Contains(out, "pod/"+name+" evicted") {
			t.Errorf("drain output does not report the eviction of %s:\n%s", name, out)
		}
	}
	mu.Lock()
	for _, app := range []string{"web", "db"} {
		if minReady[app] < 2 {
			t.Errorf("%s went down to %d Ready pods during the drain; its budget keeps 2", app, minReady[app])
		}
		if minHealthy[app] < 2 {
			t.Errorf("PDB %s reported currentHealthy %d during the drain; its budget keeps 2", app, minHealthy[app])
		}
	}
	if len(perHost[victim]) >= 2 && !refused {
		t.Errorf("no budget ever reached disruptionsAllowed 0 while %d budgeted pods left %s", len(perHost[victim]), victim)
	}
	mu.Unlock()

	node, err := c.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !node.Spec.Unschedulable {
		t.Errorf("node %s not cordoned after the drain", victim)
	}
	for _, app := range []string{"web", "db"} {
		waitFor(t, 3*time.Minute, app+" Ready again away from "+victim, func() (bool, string) { return settled(c, app, victim) })
	}
	for _, app := range []string{"web", "db"} {
		waitFor(t, time.Minute, "PDB "+app+" without pending evictions", func() (bool, string) {
			b, err := readBudget(c, app)
			if err != nil {
				return false, err.Error()
			}
			return b.disrupted == 0, fmt.Sprintf("%+v", b)
		})
	}

	// An eviction past the budget is refused while the app is short of a pod.
	pods, err := drainPods(c, "db")
	if err != nil || len(pods) != 3 {
		t.Fatalf("db pods: %d, %v", len(pods), err)
	}
	if err := c.CoreV1().Pods("drain").EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods[0].Name, Namespace: "drain"}}); err != nil {
		t.Fatalf("evict %s within the budget: %v", pods[0].Name, err)
	}
	err = c.CoreV1().Pods("drain").EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods[1].Name, Namespace: "drain"}})
	if err == nil || !strings.Contains(err.Error(), "disruption budget") {
		t.Errorf("second eviction of a db pod at once: %v, want 429 naming the disruption budget", err)
	}
	waitFor(t, 3*time.Minute, "db Ready again", func() (bool, string) { return settled(c, "db", victim) })

	// Uncordon: the host is schedulable and takes a new pod.
	if out, err := h.Kubectl(ctx, "", "uncordon", victim); err != nil {
		t.Fatalf("uncordon: %v\n%s", err, out)
	}
	node, err = c.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.Unschedulable {
		t.Fatalf("node %s still unschedulable after uncordon", victim)
	}
	// The node lifecycle controller takes the unschedulable taint off once it sees the
	// uncordon.
	waitFor(t, 30*time.Second, "taint "+corev1.TaintNodeUnschedulable+" gone from "+victim, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeUnschedulable {
				return false, fmt.Sprint(n.Spec.Taints)
			}
		}
		return true, ""
	})
	back := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "back", Namespace: "drain"},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{corev1.LabelHostname: victim},
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Containers:                    []corev1.Container{{Name: "hello", Image: hello, ImagePullPolicy: corev1.PullIfNotPresent}}}}
	if _, err := c.CoreV1().Pods("drain").Create(ctx, back, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "pod back Ready on "+victim, func() (bool, string) {
		p, err := c.CoreV1().Pods("drain").Get(ctx, "back", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == victim && podReady(p), describe(p)
	})
}
