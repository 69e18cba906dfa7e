package disruption_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/deployment"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/disruption"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/replicaset"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/statefulset"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

// budget is what a test expects of a PodDisruptionBudget's status.
type budget struct {
	expected, desired, healthy, allowed int32
	reason                              string
}

func (b budget) String() string {
	return fmt.Sprintf("expected %d desired %d healthy %d allowed %d %s", b.expected, b.desired, b.healthy, b.allowed, b.reason)
}

func statusOf(pdb *policyv1.PodDisruptionBudget) budget {
	b := budget{expected: pdb.Status.ExpectedPods, desired: pdb.Status.DesiredHealthy,
		healthy: pdb.Status.CurrentHealthy, allowed: pdb.Status.DisruptionsAllowed}
	if c := meta.FindStatusCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition); c != nil {
		b.reason = c.Reason
	}
	return b
}

// waitBudget waits until the budget's status is want and describes its current generation.
func waitBudget(t *testing.T, client kubernetes.Interface, ns, name string, want budget) *policyv1.PodDisruptionBudget {
	t.Helper()
	var pdb *policyv1.PodDisruptionBudget
	var got budget
	controllertest.Eventually(t, 30*time.Second, fmt.Sprintf("PDB %s/%s status %v", ns, name, want), func() (bool, error) {
		var err error
		pdb, err = client.PolicyV1().PodDisruptionBudgets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = statusOf(pdb)
		if got != want {
			return false, fmt.Errorf("status %v", got)
		}
		return pdb.Status.ObservedGeneration == pdb.Generation, nil
	})
	c := meta.FindStatusCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition)
	if wantStatus := metav1.ConditionStatus(map[bool]string{true: "True", false: "False"}[want.allowed > 0]); c.Status != wantStatus {
		t.Errorf("PDB %s condition %s = %s, want %s", name, c.Type, c.Status, wantStatus)
	}
	return pdb
}

func createPDB(t *testing.T, client kubernetes.Interface, ns, name string, spec policyv1.PodDisruptionBudgetSpec) {
	t.Helper()
	if spec.Selector == nil {
		spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	}
	_, err := client.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(),
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create PDB %s/%s: %v", ns, name, err)
	}
}

func intOrString(s string) *intstr.IntOrString {
	v := intstr.Parse(s)
	return &v
}

var podSpec = corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}

// createPods creates n pods labelled app=web, with owner as their controller when it is set,
// and marks them ready.
func createPods(t *testing.T, client kubernetes.Interface, ns string, n int, owner *metav1.OwnerReference) []*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var out []*corev1.Pod
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Labels: map[string]string{"app": "web"}}, Spec: podSpec}
		if owner != nil {
			pod.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		created, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		if err := controllertest.MarkReady(ctx, client, created, time.Now()); err != nil {
			t.Fatalf("mark %s ready: %v", created.Name, err)
		}
		out = append(out, created)
	}
	return out
}

// updatePDB changes the spec of a PodDisruptionBudget with change, read again when the
// controller wrote its status in between.
func updatePDB(t *testing.T, client kubernetes.Interface, ns, name string, change func(*policyv1.PodDisruptionBudget)) {
	t.Helper()
	ctx := context.Background()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pdb, err := client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(pdb)
		_, err = client.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, pdb, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("update PodDisruptionBudget %s/%s: %v", ns, name, err)
	}
}

// setReady turns the Ready condition of a pod to status.
func setReady(t *testing.T, client kubernetes.Interface, ns, name string, status corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pod.Status.Conditions {
		if c := &pod.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status, c.LastTransitionTime = status, metav1.Now()
		}
	}
	if _, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set %s Ready=%s: %v", name, status, err)
	}
}

func evict(client kubernetes.Interface, ns, name string) error {
	return client.CoreV1().Pods(ns).EvictV1(context.Background(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
}

// mustRefuse checks that err is the 429 of a budget without disruptions left.
func mustRefuse(t *testing.T, err error, what string) {
	t.Helper()
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("%s: %v, want 429 TooManyRequests", what, err)
	}
	if !strings.Contains(err.Error(), "disruption budget") {
		t.Errorf("%s: %q does not name the disruption budget", what, err)
	}
}

func isActive(client kubernetes.Interface, ns, name string) bool {
	p, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	return err == nil && p.DeletionTimestamp == nil
}

// TestBudgets checks the status of budgets over pods without controllers (integer
// minAvailable), pods becoming unready, spec changes, and evictions against the status.
func TestBudgets(t *testing.T) {
	_, client := controllertest.Start(t, disruption.New)
	ctx := context.Background()

	t.Run("minAvailable integer", func(t *testing.T) {
		const ns = "pdb-min-int"
		controllertest.Namespace(t, client, ns)
		createPods(t, client, ns, 3, nil)
		createPDB(t, client, ns, "web", policyv1.PodDisruptionBudgetSpec{MinAvailable: intOrString("2")})
		waitBudget(t, client, ns, "web", budget{3, 2, 3, 1, policyv1.SufficientPodsReason})

		// One pod unready: the budget is exactly met and allows nothing.
		setReady(t, client, ns, "web-0", corev1.ConditionFalse)
		waitBudget(t, client, ns, "web", budget{3, 2, 2, 0, policyv1.InsufficientPodsReason})
		setReady(t, client, ns, "web-0", corev1.ConditionTrue)
		waitBudget(t, client, ns, "web", budget{3, 2, 3, 1, policyv1.SufficientPodsReason})

		// A spec change is observed (generation 2).
		updatePDB(t, client, ns, "web", func(pdb *policyv1.PodDisruptionBudget) { pdb.Spec.MinAvailable = intOrString("1") })
		if pdb := waitBudget(t, client, ns, "web", budget{3, 1, 3, 2, policyv1.SufficientPodsReason}); pdb.Generation != 2 {
			t.Errorf("generation %d after one spec change, want 2", pdb.Generation)
		}
	})

	t.Run("eviction within and past the budget", func(t *testing.T) {
		const ns = "pdb-evict"
		controllertest.Namespace(t, client, ns)
		createPods(t, client, ns, 3, nil)
		createPDB(t, client, ns, "web", policyv1.PodDisruptionBudgetSpec{MinAvailable: intOrString("2")})
		waitBudget(t, client, ns, "web", budget{3, 2, 3, 1, policyv1.SufficientPodsReason})

		if err := evict(client, ns, "web-0"); err != nil {
			t.Fatalf("evict web-0 within the budget: %v", err)
		}
		if isActive(client, ns, "web-0") {
			t.Error("web-0 still active after its eviction")
		}
		// The budget was consumed at once, before the controller saw the deletion.
		mustRefuse(t, evict(client, ns, "web-1"), "evict web-1 past the budget")
		if !isActive(client, ns, "web-1") {
			t.Error("web-1 deleted although its eviction was refused")
		}
		waitBudget(t, client, ns, "web", budget{2, 2, 2, 0, policyv1.InsufficientPodsReason})
		mustRefuse(t, evict(client, ns, "web-2"), "evict web-2 with the budget exactly met")

		// Dry run checks the budget but changes nothing.
		createPods(t, client, ns, 1, nil) // web-0 again
		waitBudget(t, client, ns, "web", budget{3, 2, 3, 1, policyv1.SufficientPodsReason})
		err := client.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
		if err != nil || !isActive(client, ns, "web-1") {
			t.Errorf("dry-run eviction: %v, pod active %v; want success and the pod kept", err, isActive(client, ns, "web-1"))
		}
		if pdb := waitBudget(t, client, ns, "web", budget{3, 2, 3, 1, policyv1.SufficientPodsReason}); len(pdb.Status.DisruptedPods) != 0 {
			t.Errorf("dry run recorded disrupted pods %v", pdb.Status.DisruptedPods)
		}
	})

	t.Run("disruptedPods", func(t *testing.T) {
		// A pod recorded as evicted does not count as healthy until it is gone or its entry
		// is older than the deletion timeout.
		const ns = "pdb-disrupted"
		controllertest.Namespace(t, client, ns)
		createPods(t, client, ns, 3, nil)
		createPDB(t, client, ns, "web", policyv1.PodDisruptionBudgetSpec{MinAvailable: intOrString("1")})
		pdb := waitBudget(t, client, ns, "web", budget{3, 1, 3, 2, policyv1.SufficientPodsReason})
		pdb.Status.DisruptedPods = map[string]metav1.Time{
			"web-0": metav1.Now(), "web-1": metav1.NewTime(time.Now().Add(-disruption.DeletionTimeout - time.Second)), "gone": metav1.Now(),
		}
		pdb.Status.DisruptionsAllowed = 0
		if _, err := client.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		pdb = waitBudget(t, client, ns, "web", budget{3, 1, 2, 1, policyv1.SufficientPodsReason})
		if _, ok := pdb.Status.DisruptedPods["web-0"]; !ok || len(pdb.Status.DisruptedPods) != 1 {
			t.Errorf("disruptedPods %v, want only web-0 (web-1 expired, gone does not exist)", pdb.Status.DisruptedPods)
		}
	})

	t.Run("unhealthy pod eviction policy", func(t *testing.T) {
		const ns = "pdb-unhealthy"
		controllertest.Namespace(t, client, ns)
		createPods(t, client, ns, 4, nil)
		createPDB(t, client, ns, "web", policyv1.PodDisruptionBudgetSpec{MinAvailable: intOrString("2")})
		waitBudget(t, client, ns, "web", budget{4, 2, 4, 2, policyv1.SufficientPodsReason})

		// IfHealthyBudget (the default): an unready pod goes while the budget is met,
		// without consuming it.
		setReady(t, client, ns, "web-0", corev1.ConditionFalse)
		waitBudget(t, client, ns, "web", budget{4, 2, 3, 1, policyv1.SufficientPodsReason})
		if err := evict(client, ns, "web-0"); err != nil {
			t.Fatalf("evict unready web-0 with the budget met: %v", err)
		}
		pdb := waitBudget(t, client, ns, "web", budget{3, 2, 3, 1, policyv1.SufficientPodsReason})
		if len(pdb.Status.DisruptedPods) != 0 {
			t.Errorf("evicting an unready pod recorded %v", pdb.Status.DisruptedPods)
		}
		// Below the budget an unready pod stays.
		setReady(t, client, ns, "web-1", corev1.ConditionFalse)
		setReady(t, client, ns, "web-2", corev1.ConditionFalse)
		waitBudget(t, client, ns, "web", budget{3, 2, 1, 0, policyv1.InsufficientPodsReason})
		mustRefuse(t, evict(client, ns, "web-1"), "evict unready web-1 with the budget not met (IfHealthyBudget)")

		// AlwaysAllow: it goes anyway; a ready pod is still protected.
		always := policyv1.AlwaysAllow
		updatePDB(t, client, ns, "web", func(pdb *policyv1.PodDisruptionBudget) { pdb.Spec.UnhealthyPodEvictionPolicy = &always })
		waitBudget(t, client, ns, "web", budget{3, 2, 1, 0, policyv1.InsufficientPodsReason})
		if err := evict(client, ns, "web-1"); err != nil {
			t.Fatalf("evict unready web-1 with AlwaysAllow: %v", err)
		}
		mustRefuse(t, evict(client, ns, "web-3"), "evict ready web-3 with the budget not met (AlwaysAllow)")
	})

	t.Run("no controller to scale", func(t *testing.T) {
		// A percentage needs the pods' controllers: bare pods are left out of expectedPods
		// (an UnmanagedPods event says so), a controller without scale fails the sync.
		const ns = "pdb-noscale"
		controllertest.Namespace(t, client, ns)
		createPods(t, client, ns, 2, nil)
		createPDB(t, client, ns, "web", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: intOrString("50%")})
		waitBudget(t, client, ns, "web", budget{0, 0, 2, 0, policyv1.InsufficientPodsReason})
		controllertest.Eventually(t, 30*time.Second, "UnmanagedPods event", func() (bool, error) {
			evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=UnmanagedPods"})
			return err == nil && len(evs.Items) > 0 && strings.Contains(evs.Items[0].Message, "web-0, web-1"), err
		})

		cm, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		yes := true
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "owned", Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: cm.UID, Controller: &yes}}}, Spec: podSpec}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var msg string
		controllertest.Eventually(t, 30*time.Second, "SyncFailed condition", func() (bool, error) {
			pdb, err := client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition)
			if c == nil || c.Reason != policyv1.SyncFailedReason {
				return false, nil
			}
			msg = c.Message
			return c.Status == metav1.ConditionFalse && pdb.Status.DisruptionsAllowed == 0, nil
		})
		for _, want := range []string{`"owned"`, "configmaps", "no scale subresource", "integer minAvailable"} {
			if !strings.Contains(msg, want) {
				t.Errorf("SyncFailed message %q does not contain %q", msg, want)
			}
		}
		// Fixing the budget (an integer minAvailable) clears the failure.
		updatePDB(t, client, ns, "web", func(pdb *policyv1.PodDisruptionBudget) {
			pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable = nil, intOrString("1")
		})
		waitBudget(t, client, ns, "web", budget{3, 1, 2, 1, policyv1.SufficientPodsReason})
	})
}

// TestControllerScale checks budgets taken of the scale of Deployments, ReplicaSets and
// StatefulSets run by their controllers, and evictions as a drain makes them.
func TestControllerScale(t *testing.T) {
	_, client := controllertest.Start(t, disruption.New, deployment.New, replicaset.New, statefulset.New)
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec}
	replicas := func(n int32) *int32 { return &n }

	t.Run("deployment maxUnavailable", func(t *testing.T) {
		const ns = "pdb-deploy"
		controllertest.Namespace(t, client, ns)
		controllertest.Kubelet(t, client, ns, time.Second, nil)
		_, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: appsv1.DeploymentSpec{Replicas: replicas(3), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		createPDB(t, client, ns, "web", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: intOrString("1")})
		waitBudget(t, client, ns, "web", budget{3, 2, 3, 1, policyv1.SufficientPodsReason})

		pods, err := controllertest.ActivePods(client, ns)
		if err != nil || len(pods) != 3 {
			t.Fatalf("pods %d, %v", len(pods), err)
		}
		if err := evict(client, ns, pods[0].Name); err != nil {
			t.Fatalf("evict %s within the budget: %v", pods[0].Name, err)
		}
		mustRefuse(t, evict(client, ns, pods[1].Name), "second eviction before the replacement is ready")
		// The replacement becomes ready: the budget allows one again.
		waitBudget(t, client, ns, "web", budget{3, 2, 3, 1, policyv1.SufficientPodsReason})
		if err := evict(client, ns, pods[1].Name); err != nil {
			t.Fatalf("evict %s once the replacement is ready: %v", pods[1].Name, err)
		}

		// Scaling the Deployment moves expectedPods. The deployment controller writes the
		// Deployment's status meanwhile: a scale read before that is retried.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			sc, err := client.AppsV1().Deployments(ns).GetScale(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			sc.Spec.Replicas = 5
			_, err = client.AppsV1().Deployments(ns).UpdateScale(ctx, "web", sc, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		waitBudget(t, client, ns, "web", budget{5, 4, 5, 1, policyv1.SufficientPodsReason})
	})

	t.Run("replicaset minAvailable percent", func(t *testing.T) {
		const ns = "pdb-rs"
		controllertest.Namespace(t, client, ns)
		controllertest.Kubelet(t, client, ns, 100*time.Millisecond, nil)
		_, err := client.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: appsv1.ReplicaSetSpec{Replicas: replicas(4), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// 30% of 4 is 1.2: 2 pods must stay, as upstream rounds up.
		createPDB(t, client, ns, "web", policyv1.PodDisruptionBudgetSpec{MinAvailable: intOrString("30%")})
		waitBudget(t, client, ns, "web", budget{4, 2, 4, 2, policyv1.SufficientPodsReason})
	})

	t.Run("statefulset minAvailable and maxUnavailable percent", func(t *testing.T) {
		const ns = "pdb-sts"
		controllertest.Namespace(t, client, ns)
		controllertest.Kubelet(t, client, ns, 100*time.Millisecond, nil)
		_, err := client.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: appsv1.StatefulSetSpec{Replicas: replicas(3), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template,
				ServiceName: "web"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// 50% of 3 is 1.5: 2 must stay. maxUnavailable 34% of 3 rounds up to 2 unavailable.
		createPDB(t, client, ns, "min", policyv1.PodDisruptionBudgetSpec{MinAvailable: intOrString("50%")})
		createPDB(t, client, ns, "max", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: intOrString("34%")})
		waitBudget(t, client, ns, "min", budget{3, 2, 3, 1, policyv1.SufficientPodsReason})
		waitBudget(t, client, ns, "max", budget{3, 1, 3, 2, policyv1.SufficientPodsReason})
		// Two budgets select the pods: the eviction subresource refuses to choose.
		if err := evict(client, ns, "web-0"); !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "more than one PodDisruptionBudget") {
			t.Errorf("evict a pod of two budgets: %v, want 500 naming the two budgets", err)
		}
	})
}
