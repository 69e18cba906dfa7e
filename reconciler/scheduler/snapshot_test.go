package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSnapshotAddPod places pods one after the other on one snapshot, as flotilla plan
// simulates: each placement counts for the next decision, including the required
// anti-affinity of the pods placed (which a snapshot skips while it counts none).
func TestSnapshotAddPod(t *testing.T) {
	snap := NewSnapshot(info(node("n1", 1000, 1024, 110)), info(node("n2", 1000, 1024, 110)))
	anti := func(p *corev1.Pod) {
		p.Labels["app"] = "web"
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey:   corev1.LabelHostname,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			}},
		}}
	}
	var placed []string
	for _, name := range []string{"web-0", "web-1", "web-2"} {
		p := pod(name, 100, 100, anti)
		pi := NewPodInfo(p)
		d, _ := Schedule(pi, snap, 0, 0, firstRand)
		if d.Fit != nil {
			if want := "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."; d.Fit.Error() != want {
				t.Fatalf("%s: %q, want %q", name, d.Fit.Error(), want)
			}
			continue
		}
		if !snap.AddPod(d.Node, pi) {
			t.Fatalf("AddPod(%s) refused", d.Node)
		}
		placed = append(placed, d.Node)
	}
	if len(placed) != 2 || placed[0] == placed[1] {
		t.Fatalf("placed on %v, want one pod on each node", placed)
	}
	if snap.PodsWithAffinity != 2 {
		t.Errorf("PodsWithAffinity = %d, want 2", snap.PodsWithAffinity)
	}
	if snap.AddPod("nowhere", NewPodInfo(pod("x", 0, 0))) {
		t.Error("AddPod on an unknown node succeeded")
	}
	if got := snap.Get("n1").Requested.MilliCPU + snap.Get("n2").Requested.MilliCPU; got != 200 {
		t.Errorf("requested cpu = %dm, want 200m", got)
	}
}
