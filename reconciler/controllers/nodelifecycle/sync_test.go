package nodelifecycle

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestFullDisruption(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ready, notReady int
		want            bool
	}{
		{"no nodes", 0, 0, false},
		{"all healthy", 3, 0, false},
		{"one of three down", 2, 1, false},
		{"all but one down", 1, 4, false},
		{"every node down", 0, 3, true},
		{"single node down", 0, 1, true},
	} {
		if got := FullDisruption(tc.ready, tc.notReady); got != tc.want {
			t.Errorf("%s: FullDisruption(%d, %d) = %v, want %v", tc.name, tc.ready, tc.notReady, got, tc.want)
		}
	}
}

func node(ready corev1.ConditionStatus, unschedulable bool, extra ...corev1.NodeCondition) *corev1.Node {
	n := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
	if ready != "" {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: ready})
	}
	n.Status.Conditions = append(n.Status.Conditions, extra...)
	return n
}

func keys(ts []corev1.Taint) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Key+":"+string(t.Effect))
	}
	return out
}

func TestDesiredTaints(t *testing.T) {
	pressure := corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue}
	for _, tc := range []struct {
		name       string
		node       *corev1.Node
		stale, dis bool
		want       []string
	}{
		{"healthy", node(corev1.ConditionTrue, false), false, false, nil},
		{"cordoned", node(corev1.ConditionTrue, true), false, false, []string{"node.kubernetes.io/unschedulable:NoSchedule"}},
		{"not ready", node(corev1.ConditionFalse, false), false, false,
			[]string{"node.kubernetes.io/not-ready:NoSchedule", "node.kubernetes.io/not-ready:NoExecute"}},
		{"unknown", node(corev1.ConditionUnknown, false), false, false,
			[]string{"node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"}},
		{"no ready condition", node("", false), false, false,
			[]string{"node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"}},
		{"stale before status written", node(corev1.ConditionTrue, false), true, false,
			[]string{"node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"}},
		{"full disruption keeps NoSchedule only", node(corev1.ConditionUnknown, true), true, true,
			[]string{"node.kubernetes.io/unschedulable:NoSchedule", "node.kubernetes.io/unreachable:NoSchedule"}},
		{"disk pressure", node(corev1.ConditionTrue, false, pressure), false, false,
			[]string{"node.kubernetes.io/disk-pressure:NoSchedule"}},
		{"pressure ignored when unreachable", node(corev1.ConditionUnknown, false, pressure), false, false,
			[]string{"node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"}},
	} {
		if got := keys(DesiredTaints(tc.node, tc.stale, tc.dis)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReconcileTaints(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	old := metav1.NewTime(now.Add(-time.Hour))
	user := corev1.Taint{Key: "example.com/gpu", Value: "yes", Effect: corev1.TaintEffectNoSchedule}
	unreachNS := corev1.Taint{Key: TaintUnreachable, Effect: corev1.TaintEffectNoSchedule}
	unreachNE := corev1.Taint{Key: TaintUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &old}

	// Existing taints keep their timeAdded; user taints stay; nothing to do is no change.
	got, changed := ReconcileTaints([]corev1.Taint{user, unreachNS, unreachNE},
		[]corev1.Taint{{Key: TaintUnreachable, Effect: corev1.TaintEffectNoSchedule}, {Key: TaintUnreachable, Effect: corev1.TaintEffectNoExecute}}, now)
	if changed || !reflect.DeepEqual(got, []corev1.Taint{user, unreachNS, unreachNE}) {
		t.Errorf("steady state: changed=%v got %v", changed, got)
	}
	// Healthy again: managed taints go, the user's stays.
	got, changed = ReconcileTaints([]corev1.Taint{user, unreachNS, unreachNE}, nil, now)
	if !changed || !reflect.DeepEqual(got, []corev1.Taint{user}) {
		t.Errorf("recovery: changed=%v got %v", changed, got)
	}
	// New NoExecute taints are stamped with now; so are hand-made ones without timeAdded.
	hand := corev1.Taint{Key: "example.com/drain", Effect: corev1.TaintEffectNoExecute}
	got, changed = ReconcileTaints([]corev1.Taint{hand}, []corev1.Taint{{Key: TaintNotReady, Effect: corev1.TaintEffectNoExecute}}, now)
	if !changed || len(got) != 2 || !got[0].TimeAdded.Time.Equal(now) || got[1].Key != TaintNotReady || !got[1].TimeAdded.Time.Equal(now) {
		t.Errorf("stamping: changed=%v got %v", changed, got)
	}
}

func TestEvictionTime(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	added := metav1.NewTime(now.Add(-10 * time.Second))
	unreach := corev1.Taint{Key: TaintUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added}
	notReadyNS := corev1.Taint{Key: TaintNotReady, Effect: corev1.TaintEffectNoSchedule}
	tol := func(key string, secs *int64) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs}
	}
	for _, tc := range []struct {
		name   string
		tols   []corev1.Toleration
		taints []corev1.Taint
		at     time.Time
		evict  bool
	}{
		{"no taints", nil, nil, time.Time{}, false},
		{"NoSchedule only", nil, []corev1.Taint{notReadyNS}, time.Time{}, false},
		{"not tolerated", nil, []corev1.Taint{unreach}, time.Time{}, true},
		{"other key tolerated", []corev1.Toleration{tol(TaintNotReady, nil)}, []corev1.Taint{unreach}, time.Time{}, true},
		{"tolerated forever", []corev1.Toleration{tol(TaintUnreachable, nil)}, []corev1.Taint{unreach}, time.Time{}, false},
		{"tolerate everything", []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, []corev1.Taint{unreach}, time.Time{}, false},
		{"300 s from timeAdded", []corev1.Toleration{tol(TaintUnreachable, ptr.To[int64](300))}, []corev1.Taint{unreach},
			added.Add(300 * time.Second), true},
		{"expired", []corev1.Toleration{tol(TaintUnreachable, ptr.To[int64](2))}, []corev1.Taint{unreach}, added.Add(2 * time.Second), true},
		{"bounded beats unbounded", []corev1.Toleration{tol(TaintUnreachable, nil), tol(TaintUnreachable, ptr.To[int64](60))},
			[]corev1.Taint{unreach}, added.Add(60 * time.Second), true},
		{"no timeAdded counts from now", []corev1.Toleration{tol("example.com/x", ptr.To[int64](5))},
			[]corev1.Taint{{Key: "example.com/x", Effect: corev1.TaintEffectNoExecute}}, now.Add(5 * time.Second), true},
	} {
		at, evict := EvictionTime(tc.tols, tc.taints, now)
		if evict != tc.evict || !at.Equal(tc.at) {
			t.Errorf("%s: got (%v, %v), want (%v, %v)", tc.name, at, evict, tc.at, tc.evict)
		}
	}
}
