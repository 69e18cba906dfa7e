package scheduler

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

func TestScoreLeastAllocatedAndBalanced(t *testing.T) {
	cases := []struct {
		name           string
		pod            *corev1.Pod
		ni             *NodeInfo
		least, balance int64
	}{
		// (4000-1000)/4000 = 75, (8192-2048)/8192 = 75.
		{"quarter used", pod("p", 1000, 2048), info(node("n", 4000, 8192, 110)), 75, 100},
		// cpu 3000/4000 = 75% -> 25 free; memory 2048/8192 -> 75 free; std |0.75-0.25|/2 = 0.25.
		{"cpu heavy", pod("p", 1000, 1024), info(node("n", 4000, 8192, 110), pod("o", 2000, 1024)), 50, 75},
		// Best-effort pods count 100m / 200 MiB for spreading, nothing for balance.
		{"best effort", pod("p", 0, 0), info(node("n", 1000, 1000, 110)), (90 + 80) / 2, 100},
		{"over allocatable scores 0", pod("p", 5000, 0), info(node("n", 4000, 8192, 110)), (0 + 97) / 2, 50},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pi := NewPodInfo(tc.pod)
			if got := scoreLeastAllocated(pi, tc.ni); got != tc.least {
				t.Errorf("least allocated %d, want %d", got, tc.least)
			}
			if got := scoreBalancedAllocation(pi, tc.ni); got != tc.balance {
				t.Errorf("balanced %d, want %d", got, tc.balance)
			}
		})
	}
}

func TestScoreTaintTolerationAndNormalize(t *testing.T) {
	n0 := node("n0", 1, 1, 1)
	n1 := node("n1", 1, 1, 1, withTaint("a", "1", corev1.TaintEffectPreferNoSchedule))
	n2 := node("n2", 1, 1, 1, withTaint("a", "1", corev1.TaintEffectPreferNoSchedule), withTaint("b", "", corev1.TaintEffectPreferNoSchedule),
		withTaint("hard", "", corev1.TaintEffectNoSchedule))
	p := pod("p", 0, 0)
	raw := []int64{scoreTaintToleration(p, n0), scoreTaintToleration(p, n1), scoreTaintToleration(p, n2)}
	if !reflect.DeepEqual(raw, []int64{0, 1, 2}) {
		t.Fatalf("raw %v", raw)
	}
	normalize(raw, true)
	if !reflect.DeepEqual(raw, []int64{100, 50, 0}) {
		t.Fatalf("normalized %v", raw)
	}
	tol := pod("p", 0, 0, tolerate("a", "1", corev1.TaintEffectPreferNoSchedule), tolerate("b", "", ""))
	if got := scoreTaintToleration(tol, n2); got != 0 {
		t.Fatalf("tolerated PreferNoSchedule taints still count: %d", got)
	}
}

func TestScoreNodeAffinity(t *testing.T) {
	pref, err := nodeaffinity.NewPreferredSchedulingTerms([]corev1.PreferredSchedulingTerm{
		{Weight: 80, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}}},
		{Weight: 20, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	raw := []int64{
		scoreNodeAffinity(pref, node("both", 1, 1, 1, withLabels("disk", "ssd", "zone", "a"))),
		scoreNodeAffinity(pref, node("ssd", 1, 1, 1, withLabels("disk", "ssd"))),
		scoreNodeAffinity(pref, node("none", 1, 1, 1)),
	}
	normalize(raw, false)
	if !reflect.DeepEqual(raw, []int64{100, 80, 0}) {
		t.Fatalf("got %v", raw)
	}
}

func TestScoreImageLocality(t *testing.T) {
	const mb = 1024 * 1024
	withImage := func(size int64, names ...string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: names, SizeBytes: size})
		}
	}
	has := info(node("has", 1, 1, 1, withImage(500*mb, "docker.io/library/busybox:latest")))
	lacks := info(node("lacks", 1, 1, 1))
	snap := NewSnapshot(has, lacks)
	p := pod("p", 0, 0) // image "busybox": normalized to docker.io/library/busybox:latest
	// 500 MB * 1/2 nodes = 250 MB; (250-23)/(1000-23) * 100 = 23.
	if got := scoreImageLocality(NewPodInfo(p), has, snap.ImageNodes, len(snap.Nodes)); got != 23 {
		t.Fatalf("has image: %d", got)
	}
	if got := scoreImageLocality(NewPodInfo(p), lacks, snap.ImageNodes, len(snap.Nodes)); got != 0 {
		t.Fatalf("lacks image: %d", got)
	}
	for in, want := range map[string]string{
		"busybox":                   "docker.io/library/busybox:latest",
		"nginx:1.27":                "docker.io/library/nginx:1.27",
		"example/app":               "docker.io/example/app:latest",
		"registry.k8s.io/pause:3.9": "registry.k8s.io/pause:3.9",
		"localhost:5000/app":        "localhost:5000/app:latest",
		"busybox@sha256:abc":        "docker.io/library/busybox@sha256:abc",
	} {
		if got := normalizeImageName(in); got != want {
			t.Errorf("normalize %q = %q, want %q", in, got, want)
		}
	}
}

func TestScoreSpreadAndInterPodAffinity(t *testing.T) {
	zone := corev1.LabelTopologyZone
	web := map[string]string{"app": "web"}
	snap := NewSnapshot(
		info(node("a1", 4000, 4096, 110, withLabels(zone, "a")), pod("w1", 0, 0, podLabels("app", "web")), pod("w2", 0, 0, podLabels("app", "web"))),
		info(node("b1", 4000, 4096, 110, withLabels(zone, "b")), pod("w3", 0, 0, podLabels("app", "web"))),
		info(node("c1", 4000, 4096, 110, withLabels(zone, "c"))),
	)
	p := pod("new", 0, 0, podLabels("app", "web"), spreadBy(zone, 1, corev1.ScheduleAnyway, web))
	st := newSpreadState(NewPodInfo(p), snap, corev1.ScheduleAnyway)
	raw, ok := make([]int64, 3), make([]bool, 3)
	for i, ni := range snap.Nodes {
		raw[i], ok[i] = scoreTopologySpread(st, ni)
	}
	normalizeSpread(raw, ok)
	if !(raw[2] > raw[1] && raw[1] > raw[0]) {
		t.Fatalf("soft spread should prefer the emptiest zone: %v", raw)
	}

	// Preferred affinity to web pods: zone a (2 pods) beats b (1) beats c (0).
	pa := pod("friend", 0, 0, func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 10, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: zone, LabelSelector: &metav1.LabelSelector{MatchLabels: web}}}}}}
	})
	scores := affinityScores(NewPodInfo(pa), snap)
	raw = []int64{scoreInterPodAffinity(scores, snap.Nodes[0].Node), scoreInterPodAffinity(scores, snap.Nodes[1].Node), scoreInterPodAffinity(scores, snap.Nodes[2].Node)}
	normalizeMinMax(raw)
	if !reflect.DeepEqual(raw, []int64{100, 50, 0}) {
		t.Fatalf("preferred affinity: %v", raw)
	}
}
