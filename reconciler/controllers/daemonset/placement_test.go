package daemonset

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The user's toleration first, then the automatic ones in order, with
// their exact effects, operator Exists and no tolerationSeconds.
func TestAddDaemonTolerations(t *testing.T) {
	exists := corev1.TolerationOpExists
	cp := corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: exists, Effect: corev1.TaintEffectNoSchedule}
	want := []corev1.Toleration{
		cp,
		{Key: TaintNodeNotReady, Operator: exists, Effect: corev1.TaintEffectNoExecute},
		{Key: TaintNodeUnreachable, Operator: exists, Effect: corev1.TaintEffectNoExecute},
		{Key: TaintNodeDiskPressure, Operator: exists, Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintNodeMemoryPressure, Operator: exists, Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintNodePIDPressure, Operator: exists, Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintNodeUnschedulable, Operator: exists, Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintNodeNetworkUnavailable, Operator: exists, Effect: corev1.TaintEffectNoSchedule},
	}
	spec := &corev1.PodSpec{HostNetwork: true, Tolerations: []corev1.Toleration{cp}}
	AddDaemonTolerations(spec)
	if !reflect.DeepEqual(spec.Tolerations, want) {
		t.Errorf("hostNetwork tolerations:\n got %+v\nwant %+v", spec.Tolerations, want)
	}
	AddDaemonTolerations(spec) // idempotent
	if len(spec.Tolerations) != 8 {
		t.Errorf("second call: %d tolerations, want 8", len(spec.Tolerations))
	}
	spec = &corev1.PodSpec{}
	AddDaemonTolerations(spec)
	if !reflect.DeepEqual(spec.Tolerations, want[1:7]) {
		t.Errorf("tolerations without hostNetwork:\n got %+v\nwant %+v", spec.Tolerations, want[1:7])
	}
}

// The pin replaces only the metadata.name field requirement and keeps the user's expressions.
func TestPinToNode(t *testing.T) {
	pin := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"k8s-node-1"}}
	got := PinToNode(nil, "k8s-node-1")
	want := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{pin}}}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PinToNode(nil) = %+v", got)
	}
	gpu := corev1.NodeSelectorRequirement{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}
	user := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{gpu},
			MatchFields:      []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"old"}}},
		}}}}}
	got = PinToNode(user, "k8s-node-1")
	term := got.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
	if !reflect.DeepEqual(term.MatchExpressions, []corev1.NodeSelectorRequirement{gpu}) || !reflect.DeepEqual(term.MatchFields, []corev1.NodeSelectorRequirement{pin}) {
		t.Errorf("PinToNode(user affinity) term = %+v", term)
	}
	if n := TargetNode(&corev1.Pod{Spec: corev1.PodSpec{Affinity: got}}); n != "k8s-node-1" {
		t.Errorf("TargetNode = %q", n)
	}
}

// Which nodes run a daemon pod: selectors, taints, cordon, tolerate-everything.
func TestShouldRun(t *testing.T) {
	node := func(lbls map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: lbls}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	ds := func(mut func(*corev1.PodSpec)) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{}
		if mut != nil {
			mut(&d.Spec.Template.Spec)
		}
		return d
	}
	cp := corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}
	noExec := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoExecute}
	for _, tc := range []struct {
		name             string
		node             *corev1.Node
		ds               *appsv1.DaemonSet
		run, stayRunning bool
	}{
		{"plain", node(nil), ds(nil), true, true},
		{"nodeSelector matches", node(map[string]string{"gpu": "true"}), ds(func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"gpu": "true"} }), true, true},
		{"nodeSelector misses", node(nil), ds(func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"gpu": "true"} }), false, false},
		{"affinity misses", node(map[string]string{"zone": "a"}), ds(func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a"}}}}}}}}
		}), false, false},
		{"control-plane taint untolerated", node(nil, cp), ds(nil), false, true},
		{"control-plane taint tolerated", node(nil, cp), ds(func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: cp.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}), true, true},
		{"cordoned", node(nil, corev1.Taint{Key: TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}), ds(nil), true, true},
		{"not ready", node(nil, corev1.Taint{Key: TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}), ds(nil), true, true},
		{"NoExecute untolerated", node(nil, noExec), ds(nil), false, false},
		{"tolerate everything", node(nil, noExec, cp), ds(func(s *corev1.PodSpec) { s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}} }), true, true},
		{"PreferNoSchedule ignored", node(nil, corev1.Taint{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}), ds(nil), true, true},
		{"template nodeName elsewhere", node(nil), ds(func(s *corev1.PodSpec) { s.NodeName = "n2" }), false, false},
	} {
		run, stay := ShouldRun(tc.node, tc.ds)
		if run != tc.run || stay != tc.stayRunning {
			t.Errorf("%s: ShouldRun = %v, %v; want %v, %v", tc.name, run, stay, tc.run, tc.stayRunning)
		}
	}
}
