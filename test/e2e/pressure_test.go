package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// memAvailable reads MemAvailable (bytes) of this machine, which the hosts share.
func memAvailable(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}

// TestMemoryPressureEviction: a host whose memory.available threshold sits 3 GiB below what
// the machine has free runs a BestEffort pod that takes 4 GiB next to a Burstable pod within
// its request. The host reports MemoryPressure, its Node is tainted, the BestEffort pod is
// evicted as the kubelet would (Failed, reason Evicted, the kubelet's message) and the other
// keeps running; once memory is back and the transition period is over, the condition and
// the taint go. The Node's allocatable leaves out --kube-reserved and the threshold.
func TestMemoryPressureEviction(t *testing.T) {
	s := newSite(t, 1)
	sideLoad(t, s)
	threshold := (memAvailable(t) - 3<<30) >> 20
	if threshold < 512 {
		t.Skipf("this machine has %d MiB free: too little to make memory pressure safely", memAvailable(t)>>20)
	}
	startSite(t, s, fmt.Sprintf("--eviction-hard=memory.available<%dMi", threshold), "--eviction-pressure-transition-period=15s",
		"--kube-reserved=cpu=100m,memory=256Mi")
	h := s.Hosts[0]
	c := clientOf(t, h)
	ctx := context.Background()
	waitFor(t, 2*time.Minute, "1 Ready node", func() (bool, string) {
		n, state := readyNodes(h)
		return n == 1, state
	})
	node, err := c.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capMem, allocMem := node.Status.Capacity[corev1.ResourceMemory], node.Status.Allocatable[corev1.ResourceMemory]
	if want := capMem.Value() - 256<<20 - threshold<<20; allocMem.Value() != want {
		t.Errorf("allocatable memory %s, want capacity %s less 256Mi reserved and the %dMi threshold", allocMem.String(), capMem.String(), threshold)
	}

	quiet := newPod("quiet", h.Name, corev1.RestartPolicyAlways, tool("quiet", "alloc", "16"))
	quiet.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	create(t, c, quiet)
	waitPod(t, c, "quiet", 90*time.Second, "Ready", podReady)
	create(t, c, newPod("hog", h.Name, corev1.RestartPolicyAlways, tool("hog", "alloc", "4096")))
	started := time.Now()

	var sawPressure, sawTaint bool
	hog := waitPod(t, c, "hog", 3*time.Minute, "evicted", func(p *corev1.Pod) bool {
		if n, err := c.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{}); err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeMemoryPressure && cond.Status == corev1.ConditionTrue {
					sawPressure = true
				}
			}
			for _, taint := range n.Spec.Taints {
				if taint.Key == corev1.TaintNodeMemoryPressure && taint.Effect == corev1.TaintEffectNoSchedule {
					sawTaint = true
				}
			}
		}
		return p.Status.Phase == corev1.PodFailed
	})
	framework.Figure(t, "BestEffort pod taking 4 GiB evicted %s after its creation", time.Since(started).Round(100*time.Millisecond))
	if hog.Status.Reason != "Evicted" || !strings.Contains(hog.Status.Message, "The node was low on resource: memory.") ||
		!strings.Contains(hog.Status.Message, "Container hog was using") {
		t.Errorf("evicted pod status: reason %q, message %q", hog.Status.Reason, hog.Status.Message)
	}
	waitFor(t, 30*time.Second, "the Node tainted for memory pressure (seen while the pod was evicted)", func() (bool, string) {
		return sawPressure && sawTaint, fmt.Sprintf("MemoryPressure seen %v, taint seen %v", sawPressure, sawTaint)
	})
	p, err := getPod(c, "quiet")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.Reason == "Evicted" || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the Burstable pod within its request was touched: phase %s reason %q statuses %+v", p.Status.Phase, p.Status.Reason, p.Status.ContainerStatuses)
	}
	waitFor(t, 90*time.Second, "MemoryPressure False and the taint gone after the transition period", func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeMemoryPressure {
				return false, "still tainted"
			}
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeMemoryPressure {
				return cond.Status == corev1.ConditionFalse, string(cond.Status) + " " + cond.Message
			}
		}
		return false, "no MemoryPressure condition"
	})
}
