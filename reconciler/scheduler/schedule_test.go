package scheduler

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFitErrorMessage(t *testing.T) {
	cases := []struct {
		name string
		fit  FitError
		want string
	}{
		{"taint and insufficient cpu", FitError{NumAllNodes: 3, NodeReasons: map[string][]string{
			"n1": {"node(s) had untolerated taint {key: value}"}, "n2": {"Insufficient cpu"}, "n3": {"Insufficient cpu"}}},
			"0/3 nodes are available: 1 node(s) had untolerated taint {key: value}, 2 Insufficient cpu."},
		{"pinned DaemonSet surge pod with its host port taken", FitError{NumAllNodes: 3, NodeReasons: map[string][]string{
			"n1": {reasonPorts}, "n2": {reasonNotInPreFilter}, "n3": {reasonNotInPreFilter}}},
			"0/3 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."},
		{"several reasons of one node", FitError{NumAllNodes: 2, NodeReasons: map[string][]string{
			"n1": {"Insufficient cpu", "Insufficient memory"}, "n2": {"Insufficient memory"}}},
			"0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient memory."},
		{"unbound immediate claim in prefilter", FitError{NumAllNodes: 3, PreFilterMsg: reasonUnboundImmediate},
			"0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."},
		{"no nodes", FitError{}, "no nodes available to schedule pods"},
	}
	for _, tc := range cases {
		if got := tc.fit.Error(); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func firstRand(int) int { return 1 } // never replaces the first best node

func TestScheduleMessageAndPin(t *testing.T) {
	snap := NewSnapshot(
		info(node("n1", 1000, 1024, 110, withTaint("key", "value", corev1.TaintEffectNoSchedule))),
		info(node("n2", 500, 1024, 110)),
		info(node("n3", 500, 1024, 110)),
	)
	d, _ := Schedule(NewPodInfo(pod("big", 800, 0)), snap, 0, 0, firstRand)
	if d.Fit == nil || d.Fit.Error() != "0/3 nodes are available: 1 node(s) had untolerated taint {key: value}, 2 Insufficient cpu." {
		t.Fatalf("got %+v", d)
	}
	// A DaemonSet pod pinned to n2 with a host port in use there.
	snap2 := NewSnapshot(info(node("n1", 1000, 1024, 110)), info(node("n2", 1000, 1024, 110), pod("old", 0, 0, hostPortOn("", 9100))), info(node("n3", 1000, 1024, 110)))
	ds := pod("ds", 0, 0, hostPortOn("", 9100), func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
				Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{"n2"}}}}}}}}
	})
	d, _ = Schedule(NewPodInfo(ds), snap2, 0, 0, firstRand)
	want := "0/3 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
	if d.Fit == nil || d.Fit.Error() != want {
		t.Fatalf("got %+v", d.Fit)
	}
	ds.Spec.Containers[0].Ports = nil
	if d, _ = Schedule(NewPodInfo(ds), snap2, 0, 0, firstRand); d.Node != "n2" {
		t.Fatalf("pinned pod went to %q", d.Node)
	}
}

// TestScheduleBurstWithCache places a burst through the cache's assumptions: requests never
// exceed allocatable and spread evens out zones.
func TestScheduleBurstWithCache(t *testing.T) {
	c := NewCache()
	for i, z := range []string{"a", "b", "c"} {
		c.SetNode(node(fmt.Sprintf("n%d", i), 1000, 4096, 110, withLabels(corev1.LabelTopologyZone, z)))
	}
	placed := map[string]int{}
	for i := 0; i < 40; i++ {
		pi := NewPodInfo(pod(fmt.Sprintf("p%d", i), 100, 100))
		snap := c.RLock()
		d, _ := Schedule(pi, snap, 0, 0, firstRand)
		c.RUnlock()
		if d.Fit != nil {
			if i < 30 {
				t.Fatalf("pod %d unschedulable while room is left: %v", i, d.Fit)
			}
			if want := "0/3 nodes are available: 3 Insufficient cpu."; d.Fit.Error() != want {
				t.Fatalf("got %q", d.Fit.Error())
			}
			continue
		}
		if i >= 30 {
			t.Fatalf("pod %d placed on %s beyond allocatable", i, d.Node)
		}
		if !c.Assume(pi, d.Node) {
			t.Fatal("assume refused")
		}
		placed[d.Node]++
	}
	for n, k := range placed {
		if k != 10 {
			t.Fatalf("node %s got %d pods: %v", n, k, placed)
		}
	}

	// Hard spread over 3 zones: 9 pods go 3/3/3 even when one zone is much bigger.
	c2 := NewCache()
	c2.SetNode(node("a1", 64000, 65536, 110, withLabels(corev1.LabelTopologyZone, "a")))
	c2.SetNode(node("b1", 2000, 4096, 110, withLabels(corev1.LabelTopologyZone, "b")))
	c2.SetNode(node("c1", 2000, 4096, 110, withLabels(corev1.LabelTopologyZone, "c")))
	zones := map[string]int{}
	for i := 0; i < 9; i++ {
		pi := NewPodInfo(pod(fmt.Sprintf("s%d", i), 100, 100, podLabels("app", "spread"),
			spreadBy(corev1.LabelTopologyZone, 1, corev1.DoNotSchedule, map[string]string{"app": "spread"})))
		snap := c2.RLock()
		d, _ := Schedule(pi, snap, 0, 0, firstRand)
		c2.RUnlock()
		if d.Fit != nil {
			t.Fatalf("spread pod %d: %v", i, d.Fit)
		}
		c2.Assume(pi, d.Node)
		zones[d.Node]++
	}
	if zones["a1"] != 3 || zones["b1"] != 3 || zones["c1"] != 3 {
		t.Fatalf("spread %v, want 3/3/3", zones)
	}
}

func TestNumFeasibleToFind(t *testing.T) {
	for _, tc := range []struct{ all, pct, want int }{
		{3, 0, 3}, {99, 0, 99}, {100, 0, 100}, {1000, 0, 420}, {5000, 0, 500}, {10000, 0, 500}, {1000, 100, 1000}, {200, 10, 100},
	} {
		if got := numFeasibleToFind(tc.all, tc.pct); got != tc.want {
			t.Errorf("numFeasibleToFind(%d, %d) = %d, want %d", tc.all, tc.pct, got, tc.want)
		}
	}
}

func TestCacheAssumeConfirmForget(t *testing.T) {
	c := NewCache()
	c.SetNode(node("n1", 1000, 1024, 110))
	p := pod("p", 300, 0)
	pi := NewPodInfo(p)
	if !c.Assume(pi, "n1") || c.Assume(pi, "n1") {
		t.Fatal("assume twice")
	}
	requested := func() int64 { s := c.RLock(); defer c.RUnlock(); return s.Get("n1").Requested.MilliCPU }
	if requested() != 300 {
		t.Fatal("assumed pod not counted")
	}
	c.Forget(string(p.UID))
	if requested() != 0 {
		t.Fatal("forgotten pod still counted")
	}
	// Confirmed by the informer: Forget and Expire leave it alone.
	c.Assume(pi, "n1")
	bound := p.DeepCopy()
	bound.Spec.NodeName = "n1"
	c.SetPod(bound)
	c.Forget(string(p.UID))
	if requested() != 300 || c.IsAssumed(string(p.UID)) {
		t.Fatal("confirmed pod dropped")
	}
	// An assumption never confirmed expires after its TTL.
	q := pod("q", 200, 0)
	c.Assume(NewPodInfo(q), "n1")
	now := time.Now()
	c.FinishBinding(string(q.UID), now, time.Second)
	if c.Expire(now) != 0 || requested() != 500 {
		t.Fatal("expired too early")
	}
	if c.Expire(now.Add(2*time.Second)) != 1 || requested() != 300 {
		t.Fatal("not expired")
	}
	// Pods bound to a node not seen yet wait for it, and a removed node leaves the list.
	c.SetPod(pod("early", 100, 0, onNode("n2")))
	if s := c.RLock(); len(s.Nodes) != 1 {
		c.RUnlock()
		t.Fatal("placeholder node listed")
	}
	c.RUnlock()
	c.SetNode(node("n2", 1000, 1024, 110))
	s := c.RLock()
	if len(s.Nodes) != 2 || s.Get("n2").Requested.MilliCPU != 100 {
		c.RUnlock()
		t.Fatal("pod bound before its node not counted")
	}
	c.RUnlock()
	c.RemoveNode("n2")
	if s := c.RLock(); len(s.Nodes) != 1 {
		c.RUnlock()
		t.Fatal("removed node listed")
	}
	c.RUnlock()
}

func TestQueue(t *testing.T) {
	now := time.Unix(1000, 0)
	q := NewQueue(time.Second, 10*time.Second, time.Minute, func() time.Time { return now })
	low, high := pod("low", 0, 0), pod("high", 0, 0)
	prio := int32(100)
	high.Spec.Priority = &prio
	q.Add(low)
	now = now.Add(time.Millisecond)
	q.Add(high)
	p := q.Pop()
	if p.Name != "high" {
		t.Fatalf("popped %s first", p.Name)
	}
	// Unschedulable: waits for a change.
	q.Failed(p, true)
	if a, b, u := q.Stats(); a != 1 || b != 0 || u != 1 {
		t.Fatalf("stats %d %d %d", a, b, u)
	}
	// A status-only update keeps it waiting; a spec change (toleration added) moves it.
	q.Update(high, false)
	if _, _, u := q.Stats(); u != 1 {
		t.Fatal("status update moved the pod")
	}
	now = now.Add(2 * time.Second) // past the 1 s backoff
	q.Add(high)
	if a, _, u := q.Stats(); a != 2 || u != 0 {
		t.Fatalf("spec update did not move: active %d unschedulable %d", a, u)
	}
	p = q.Pop()
	if p.Name != "high" {
		t.Fatal("priority order lost")
	}
	// Second failure: backoff 2 s. A move within the backoff goes to backoff, not active.
	q.Failed(p, true)
	q.MoveAll(nil)
	if _, b, _ := q.Stats(); b != 1 {
		t.Fatal("move during backoff should wait in backoff")
	}
	q.Flush()
	if _, b, _ := q.Stats(); b != 1 {
		t.Fatal("flushed before the backoff ended")
	}
	now = now.Add(2 * time.Second)
	q.Flush()
	if a, b, _ := q.Stats(); a != 2 || b != 0 {
		t.Fatal("backoff did not end")
	}
	// A relevant move request during a cycle sends the failed pod to backoff (it must not
	// miss it); an irrelevant one (a pod event, for a pod without pod constraints) does not.
	p = q.Pop()
	q.MoveAll(nil)
	q.Failed(p, true)
	if _, b, u := q.Stats(); b != 1 || u != 0 {
		t.Fatalf("missed move: backoff %d unschedulable %d", b, u)
	}
	p = q.Pop() // low
	q.MoveAll(dependsOnPods)
	q.Failed(p, true)
	if _, b, u := q.Stats(); b != 1 || u != 1 {
		t.Fatalf("irrelevant move: backoff %d unschedulable %d", b, u)
	}
	q.Delete(low)
	now = now.Add(10 * time.Second)
	q.Flush()
	// Backoff doubles up to the cap.
	for attempts, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 9: 10 * time.Second} {
		if got := q.backoffFor(attempts); got != want {
			t.Errorf("backoff(%d) = %v, want %v", attempts, got, want)
		}
	}
	// Unschedulable pods are retried after maxUnschedulable without any change.
	p = q.Pop()
	q.Failed(p, true)
	now = now.Add(2 * time.Minute)
	q.Flush()
	if _, _, u := q.Stats(); u != 0 {
		t.Fatal("unschedulable pod never retried")
	}
	q.Delete(low)
	q.Delete(high)
	if a, b, u := q.Stats(); a+b+u != 0 {
		t.Fatal("delete left pods")
	}
	q.Close()
	if p := q.Pop(); p != nil {
		t.Fatal("pop after close")
	}
}

// BenchmarkSchedule measures the decision alone (filters, scores, assume) on 1000 nodes
// filling up: ns/op is the cost of placing one pod, without any API call.
func BenchmarkSchedule(b *testing.B) {
	c := NewCache()
	for i := 0; i < 1000; i++ {
		c.SetNode(node(fmt.Sprintf("n%04d", i), 32000, 131072, 110, withLabels(corev1.LabelTopologyZone, fmt.Sprintf("z%d", i%3))))
	}
	start := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pi := NewPodInfo(pod(fmt.Sprintf("p%d", i), 100, 64))
		snap := c.RLock()
		d, examined := Schedule(pi, snap, start, 0, firstRand)
		start = (start + examined) % len(snap.Nodes)
		c.RUnlock()
		if d.Fit != nil {
			b.Fatalf("pod %d: %v", i, d.Fit)
		}
		c.Assume(pi, d.Node)
	}
}
