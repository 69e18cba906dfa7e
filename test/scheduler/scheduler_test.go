// Package scheduler tests the scheduler (reconciler/scheduler) against a real agent: real API
// server, etcd commit of pods/binding, the real volumebinding controller.
package scheduler

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	sched "github.com/flotilla-dev/flotilla/reconciler/scheduler"
)

// Test100PodsNeverExceedAllocatable: a burst of 100 pods on 3 nodes with room for 60. The
// assume cache must keep every node within allocatable; the 40 left stay
// Pending with the upstream message.
func Test100PodsNeverExceedAllocatable(t *testing.T) {
	a, c := startAgent(t)
	ctx := context.Background()
	createNodes(t, c,
		fakeNode("n1", 2000, 8192, 110, nil), fakeNode("n2", 2000, 8192, 110, nil), fakeNode("n3", 2000, 8192, 110, nil))
	s := startScheduler(t, a.RESTConfig(), sched.Options{})
	for _, name := range podNames("burst", 100) {
		createPod(t, c, testPod(name, 100, 64, nil))
	}
	const wantMsg = "0/4 nodes are available: 1 node(s) were unschedulable, 3 Insufficient cpu."
	waitFor(t, 60*time.Second, "60 pods bound and 40 Unschedulable", func() (bool, string) {
		bound, unsched := 0, 0
		for _, p := range listPods(t, c, "default") {
			if p.Spec.NodeName != "" {
				bound++
			} else if cond := scheduledCondition(&p); cond != nil && cond.Status == corev1.ConditionFalse &&
				cond.Reason == corev1.PodReasonUnschedulable && cond.Message == wantMsg {
				unsched++
			}
		}
		return bound == 60 && unsched == 40, fmt.Sprintf("bound %d, unschedulable %d", bound, unsched)
	})
	used := map[string]*resource.Quantity{}
	for _, p := range listPods(t, c, "default") {
		if p.Spec.NodeName == "" {
			continue
		}
		if used[p.Spec.NodeName] == nil {
			used[p.Spec.NodeName] = resource.NewMilliQuantity(0, resource.DecimalSI)
		}
		used[p.Spec.NodeName].Add(p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU])
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if used[n] == nil || used[n].MilliValue() != 2000 {
			t.Errorf("node %s: cpu requests %v, want exactly the 2000m allocatable", n, used[n])
		}
	}
	if st := s.Stats(); st.Bound != 60 {
		t.Errorf("scheduler bound %d pods, want 60", st.Bound)
	}
	// The pending pods said why, as events too.
	waitFor(t, 30*time.Second, "FailedScheduling events", func() (bool, string) {
		evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", sched.ReasonFailedScheduling).String()})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Message == wantMsg && e.Source.Component == "default-scheduler" && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
	// Room frees up: deleting 5 bound pods lets 5 pending ones in at once (no backoff wait).
	var freed []string
	for _, p := range listPods(t, c, "default") {
		if p.Spec.NodeName != "" && len(freed) < 5 {
			freed = append(freed, p.Name)
			zero := int64(0)
			if err := c.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 30*time.Second, "pending pods to take the freed room", func() (bool, string) {
		bound := 0
		for _, p := range listPods(t, c, "default") {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				bound++
			}
		}
		return bound == 60, fmt.Sprintf("bound %d", bound)
	})
}

// TestUntoleratedTaintThenToleration: the pod waits with the upstream message, then adding
// the toleration (tolerations may only be added, which a pod update allows) schedules it.
func TestUntoleratedTaintThenToleration(t *testing.T) {
	a, c := startAgent(t)
	ctx := context.Background()
	createNodes(t, c,
		fakeNode("tainted", 4000, 8192, 110, nil, corev1.Taint{Key: "key", Value: "value", Effect: corev1.TaintEffectNoSchedule}),
		fakeNode("small-1", 1000, 8192, 110, nil), fakeNode("small-2", 1000, 8192, 110, nil))
	startScheduler(t, a.RESTConfig(), sched.Options{})
	createPod(t, c, testPod("web", 2000, 64, nil))
	const wantMsg = "0/4 nodes are available: 1 node(s) had untolerated taint {key: value}, 1 node(s) were unschedulable, 2 Insufficient cpu."
	waitFor(t, 30*time.Second, "the Unschedulable condition", func() (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := scheduledCondition(p)
		if cond == nil {
			return false, "no PodScheduled condition"
		}
		return p.Spec.NodeName == "" && p.Status.Phase == corev1.PodPending && cond.Status == corev1.ConditionFalse &&
			cond.Reason == "Unschedulable" && cond.Message == wantMsg, fmt.Sprintf("%+v node %q", cond, p.Spec.NodeName)
	})
	// The cycle that wrote the condition did not bind the pod; a second more covers a retry
	// after the 1 s initial backoff, should the failed pod be retried at all without a change.
	holdsFor(t, time.Second, "the pod unbound while the taint is not tolerated", func() (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == "", "pod bound to " + p.Spec.NodeName + " despite the taint"
	})
	p, err := c.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "key", Operator: corev1.TolerationOpEqual, Value: "value", Effect: corev1.TaintEffectNoSchedule})
	if _, err := c.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("add toleration: %v", err)
	}
	waitFor(t, 15*time.Second, "the tolerating pod bound to the tainted node", func() (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := scheduledCondition(p)
		return p.Spec.NodeName == "tainted" && cond != nil && cond.Status == corev1.ConditionTrue, fmt.Sprintf("node %q", p.Spec.NodeName)
	})
	waitFor(t, 15*time.Second, "the Scheduled event", func() (bool, string) {
		evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", sched.ReasonScheduled).String()})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "web" && e.Message == "Successfully assigned default/web to tainted" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Scheduled events", len(evs.Items))
	})
}

// TestTopologySpreadThreeZones: maxSkew 1 over 3 zones places 9 pods 3/3/3, though zone a
// has two nodes and far more room.
func TestTopologySpreadThreeZones(t *testing.T) {
	a, c := startAgent(t)
	zone := corev1.LabelTopologyZone
	createNodes(t, c,
		fakeNode("a-1", 16000, 32768, 110, map[string]string{zone: "a"}),
		fakeNode("a-2", 16000, 32768, 110, map[string]string{zone: "a"}),
		fakeNode("b-1", 2000, 4096, 110, map[string]string{zone: "b"}),
		fakeNode("c-1", 2000, 4096, 110, map[string]string{zone: "c"}))
	startScheduler(t, a.RESTConfig(), sched.Options{})
	for _, name := range podNames("spread", 9) {
		p := testPod(name, 100, 64, map[string]string{"app": "spread"})
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zone,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		createPod(t, c, p)
	}
	zoneOf := map[string]string{"a-1": "a", "a-2": "a", "b-1": "b", "c-1": "c"}
	waitFor(t, 30*time.Second, "9 pods spread 3/3/3", func() (bool, string) {
		per := map[string]int{}
		for _, p := range listPods(t, c, "default") {
			if p.Spec.NodeName != "" {
				per[zoneOf[p.Spec.NodeName]]++
			}
		}
		return per["a"] == 3 && per["b"] == 3 && per["c"] == 3, fmt.Sprint(per)
	})
}

// TestTwoSchedulersRacing: two scheduler instances without the Lease on the same pods; the
// binding commit decides, so every pod is bound exactly once and never moves.
func TestTwoSchedulersRacing(t *testing.T) {
	a, c := startAgent(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var nodes []*corev1.Node
	for i := 0; i < 3; i++ {
		nodes = append(nodes, fakeNode(fmt.Sprintf("r%d", i), 64000, 131072, 500, nil))
	}
	createNodes(t, c, nodes...)

	// Record every nodeName each pod ever shows, from the watch (every revision).
	w, err := c.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		history = map[string][]string{}
	)
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			mu.Lock()
			h := history[p.Name]
			if p.Spec.NodeName != "" && (len(h) == 0 || h[len(h)-1] != p.Spec.NodeName) {
				history[p.Name] = append(h, p.Spec.NodeName)
			}
			mu.Unlock()
		}
	}()
	s1 := startScheduler(t, a.RESTConfig(), sched.Options{})
	s2 := startScheduler(t, a.RESTConfig(), sched.Options{})
	const n = 200
	for _, name := range podNames("race", n) {
		createPod(t, c, testPod(name, 10, 16, nil))
	}
	waitFor(t, 60*time.Second, "every pod bound", func() (bool, string) {
		bound := 0
		for _, p := range listPods(t, c, "default") {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == n, fmt.Sprintf("bound %d/%d", bound, n)
	})
	// Let in-flight bindings finish and report.
	waitFor(t, 30*time.Second, "the two schedulers' counts to add up", func() (bool, string) {
		st1, st2 := s1.Stats(), s2.Stats()
		return st1.Bound+st2.Bound == n, fmt.Sprintf("s1 %+v s2 %+v", st1, st2)
	})
	st1, st2 := s1.Stats(), s2.Stats()
	t.Logf("scheduler 1: %+v; scheduler 2: %+v", st1, st2)
	mu.Lock()
	defer mu.Unlock()
	for _, name := range podNames("race", n) {
		if h := history[name]; len(h) != 1 {
			t.Errorf("pod %s: nodeName history %v, want exactly one binding", name, h)
		}
	}
	for _, p := range listPods(t, c, "default") {
		if cond := scheduledCondition(&p); cond == nil || cond.Status != corev1.ConditionTrue {
			t.Errorf("pod %s: PodScheduled %+v", p.Name, cond)
		}
	}
	if strings.Contains(a.Logs(), "panic") {
		t.Error("agent logged a panic")
	}
}

// TestLocalVolumeSelectedNode: a WaitForFirstConsumer (flotilla-local) claim learns its node
// from the scheduler (volume.kubernetes.io/selected-node), and the volumebinding controller
// binds it to the local volume on that node; a pod whose claim is bound to a local volume
// goes where the volume is.
func TestLocalVolumeSelectedNode(t *testing.T) {
	a, c := startAgent(t)
	ctx := context.Background()
	createNodes(t, c, fakeNode("v1", 4000, 8192, 110, nil), fakeNode("v2", 4000, 8192, 110, nil), fakeNode("v3", 4000, 8192, 110, nil))
	startScheduler(t, a.RESTConfig(), sched.Options{})
	class := "flotilla-local"
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "local-v3"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/data/v3"}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"v3"}}},
			}}}},
		},
	}
	if _, err := c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := c.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	withClaim := func(name string, nodeSelector map[string]string) *corev1.Pod {
		p := testPod(name, 100, 64, nil)
		p.Spec.NodeSelector = nodeSelector
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		return p
	}
	// The first consumer is steered to v3 (where the local volume is) by its selector.
	createPod(t, c, withClaim("first", map[string]string{corev1.LabelHostname: "v3"}))
	waitFor(t, 30*time.Second, "claim bound to the local volume on v3", func() (bool, string) {
		got, err := c.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Annotations["volume.kubernetes.io/selected-node"] == "v3" && got.Spec.VolumeName == "local-v3" && got.Status.Phase == corev1.ClaimBound,
			fmt.Sprintf("annotations %v volume %q phase %s", got.Annotations, got.Spec.VolumeName, got.Status.Phase)
	})
	waitFor(t, 15*time.Second, "first pod on v3", func() (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "first", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == "v3", p.Spec.NodeName
	})
	// A second consumer without any selector follows the bound volume's node affinity.
	createPod(t, c, withClaim("second", nil))
	waitFor(t, 15*time.Second, "second pod on v3", func() (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "second", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == "v3", p.Spec.NodeName
	})
	// A consumer that cannot go to v3 waits with the volume conflict.
	createPod(t, c, withClaim("third", map[string]string{corev1.LabelHostname: "v1"}))
	const wantMsg = "0/4 nodes are available: 1 node(s) had volume node affinity conflict, 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."
	waitFor(t, 15*time.Second, "third pod Unschedulable", func() (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "third", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := scheduledCondition(p)
		return cond != nil && cond.Message == wantMsg, fmt.Sprintf("%+v", cond)
	})
}

// TestAgentSchedules: the agent's own scheduler (default controllers, elected leader) places
// a pod, so the wiring in `flotilla agent` works, not just the package.
func TestAgentSchedules(t *testing.T) {
	_, c := startAgent(t, "--controllers=*")
	createNodes(t, c, fakeNode("w1", 4000, 8192, 110, nil))
	createPod(t, c, testPod("hello", 100, 64, nil))
	waitFor(t, 60*time.Second, "the agent's scheduler to bind the pod", func() (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(context.Background(), "hello", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == "w1", fmt.Sprintf("node %q", p.Spec.NodeName)
	})
}

// TestSchedulingGates: a pod created with scheduling gates says so (PodScheduled=False,
// SchedulingGated, shown by kubectl) and is left alone while a pod created after it is placed;
// once its gates are removed it is placed too.
func TestSchedulingGates(t *testing.T) {
	a, c := startAgent(t)
	ctx := context.Background()
	createNodes(t, c, fakeNode("node-1", 4000, 8192, 110, nil))
	startScheduler(t, a.RESTConfig(), sched.Options{})
	gated := testPod("gated", 100, 64, nil)
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
	createPod(t, c, gated)
	createPod(t, c, testPod("free", 100, 64, nil))
	bound := func(name string) func() (bool, string) {
		return func() (bool, string) {
			p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cond := scheduledCondition(p)
			return p.Spec.NodeName == "node-1" && cond != nil && cond.Status == corev1.ConditionTrue, fmt.Sprintf("node %q, condition %+v", p.Spec.NodeName, cond)
		}
	}
	waitFor(t, 30*time.Second, "pod free, created after the gated one, bound", bound("free"))
	p, err := c.CoreV1().Pods("default").Get(ctx, "gated", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cond := scheduledCondition(p)
	if p.Spec.NodeName != "" || cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != corev1.PodReasonSchedulingGated ||
		cond.Message != "Scheduling is blocked due to non-empty scheduling gates" {
		t.Fatalf("gated pod: node %q, PodScheduled %+v; want unbound, False, SchedulingGated", p.Spec.NodeName, cond)
	}
	if out := a.MustKubectl("", "get", "pod", "gated", "--no-headers"); !strings.Contains(out, "SchedulingGated") {
		t.Errorf("kubectl get pod gated = %q, want STATUS SchedulingGated", out)
	}
	p.Spec.SchedulingGates = nil
	if _, err := c.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("remove the gates: %v", err)
	}
	waitFor(t, 30*time.Second, "pod gated bound once its gates are gone", bound("gated"))
}
