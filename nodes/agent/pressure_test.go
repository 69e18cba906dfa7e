package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestParseThresholds(t *testing.T) {
	got, err := ParseThresholds(DefaultEvictionHard)
	if err != nil || len(got) != 5 {
		t.Fatalf("the default thresholds: %v, %v", got, err)
	}
	if got[0].String() != "memory.available<100Mi" || got[1].String() != "nodefs.available<10%" {
		t.Errorf("parsed as %v", got)
	}
	if none, err := ParseThresholds(""); err != nil || len(none) != 0 {
		t.Errorf("empty: %v, %v", none, err)
	}
	for _, bad := range []string{"memory.available>100Mi", "memory.free<1Gi", "memory.available<0", "nodefs.available<150%", "memory.available<1Gi,memory.available<2Gi", "pid.available<many"} {
		if _, err := ParseThresholds(bad); err == nil {
			t.Errorf("ParseThresholds(%q) accepted", bad)
		}
	}
}

type recordingEvictor struct{ got []MetThreshold }

func (r *recordingEvictor) EvictForPressure(_ context.Context, m MetThreshold) (bool, error) {
	r.got = append(r.got, m)
	return true, nil
}

// TestPressureMonitor: a threshold met sets its condition and asks for one eviction, memory
// before disk; the condition stays True for the transition period after the last time.
func TestPressureMonitor(t *testing.T) {
	hard, err := ParseThresholds("memory.available<100Mi,nodefs.available<10%,pid.available<1000")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	obs := map[Signal]observation{
		SignalMemoryAvailable: {available: 2 << 30, capacity: 8 << 30},
		SignalNodeFSAvailable: {available: 50 << 30, capacity: 100 << 30},
		SignalPIDAvailable:    {available: 30000, capacity: 32768},
	}
	p := NewPressureMonitor(PressureConfig{Hard: hard, Transition: 5 * time.Minute,
		observe: func() map[Signal]observation { return obs }, now: func() time.Time { return now }})
	ev := &recordingEvictor{}
	status := func() map[corev1.NodeConditionType]corev1.ConditionStatus {
		out := map[corev1.NodeConditionType]corev1.ConditionStatus{}
		for _, c := range p.Conditions(metav1.NewTime(now)) {
			out[c.Type] = c.Status
		}
		return out
	}
	if met := p.measure(); len(met) != 0 {
		t.Fatalf("nothing low, met %v", met)
	}
	if s := status(); s[corev1.NodeMemoryPressure] != corev1.ConditionFalse || s[corev1.NodeDiskPressure] != corev1.ConditionFalse {
		t.Fatalf("no pressure: %v", s)
	}
	obs[SignalNodeFSAvailable] = observation{available: 5 << 30, capacity: 100 << 30}
	obs[SignalMemoryAvailable] = observation{available: 60 << 20, capacity: 8 << 30}
	met := p.measure()
	p.evict(context.Background(), ev, met)
	if len(ev.got) != 1 || ev.got[0].Signal != SignalMemoryAvailable {
		t.Fatalf("evictions asked: %+v, want one, for memory", ev.got)
	}
	if msg := ev.got[0].Message(); msg != "The node was low on resource: memory. Threshold quantity: 100Mi, available: 60Mi." {
		t.Errorf("message %q", msg)
	}
	if s := status(); s[corev1.NodeMemoryPressure] != corev1.ConditionTrue || s[corev1.NodeDiskPressure] != corev1.ConditionTrue || s[corev1.NodePIDPressure] != corev1.ConditionFalse {
		t.Errorf("under memory and disk pressure: %v", s)
	}
	obs[SignalMemoryAvailable] = observation{available: 2 << 30, capacity: 8 << 30}
	obs[SignalNodeFSAvailable] = observation{available: 50 << 30, capacity: 100 << 30}
	now = now.Add(4 * time.Minute)
	p.measure()
	if s := status(); s[corev1.NodeMemoryPressure] != corev1.ConditionTrue {
		t.Errorf("4 minutes after the last pressure, within the transition period: %v", s)
	}
	now = now.Add(2 * time.Minute)
	p.measure()
	if s := status(); s[corev1.NodeMemoryPressure] != corev1.ConditionFalse || s[corev1.NodeDiskPressure] != corev1.ConditionFalse {
		t.Errorf("after the transition period: %v", s)
	}
}

func pod(name string, priority int32, memRequest string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Priority: ptr.To(priority),
		Containers: []corev1.Container{{Name: "c"}}}}
	if memRequest != "" {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memRequest)}
	}
	return p
}

// TestRankForMemoryPressure follows the kubelet's order: usage above requests first, then
// lower priority, then usage over requests.
func TestRankForMemoryPressure(t *testing.T) {
	mi := int64(1 << 20)
	cands := []pressureCandidate{
		{pod: pod("guaranteed-within", 0, "512Mi"), usage: 300 * mi, request: 512 * mi},
		{pod: pod("burstable-over-high-prio", 1000, "100Mi"), usage: 900 * mi, request: 100 * mi},
		{pod: pod("besteffort-small", 0, ""), usage: 50 * mi},
		{pod: pod("besteffort-big", 0, ""), usage: 700 * mi},
	}
	rankForPressure(SignalMemoryAvailable, cands)
	var order []string
	for _, c := range cands {
		order = append(order, c.pod.Name)
	}
	if got, want := strings.Join(order, " "), "besteffort-big besteffort-small burstable-over-high-prio guaranteed-within"; got != want {
		t.Errorf("eviction order %s, want %s", got, want)
	}
}

func TestAllocatable(t *testing.T) {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("110")}
	system, err := ParseReserved("memory=256Mi")
	if err != nil {
		t.Fatal(err)
	}
	kube, err := ParseReserved("cpu=200m,memory=512Mi")
	if err != nil {
		t.Fatal(err)
	}
	hard, _ := ParseThresholds("memory.available<100Mi,nodefs.available<10%")
	alloc := Allocatable(capacity, Reserved(system, kube, hard, 4<<30, 100<<30))
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "1800m", corev1.ResourceMemory: "3228Mi",
		corev1.ResourceEphemeralStorage: "90Gi", corev1.ResourcePods: "110"} {
		got := alloc[name]
		if got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("allocatable %s = %s, want %s", name, got.String(), want)
		}
	}
	for _, bad := range []string{"memory", "gpu=1", "memory=-1Mi", "cpu=1,cpu=2"} {
		if _, err := ParseReserved(bad); err == nil {
			t.Errorf("ParseReserved(%q) accepted", bad)
		}
	}
	huge, _ := ParseReserved("cpu=8")
	if got := Allocatable(capacity, huge)[corev1.ResourceCPU]; got.Sign() != 0 {
		t.Errorf("reserving more than capacity: allocatable cpu %s, want 0", got.String())
	}
}
