package localpv

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestRoot(t *testing.T) {
	for _, c := range []struct {
		params map[string]string
		want   string
		err    bool
	}{
		{nil, DefaultPath, false},
		{map[string]string{ParamPath: "/srv/vols/"}, "/srv/vols", false},
		{map[string]string{ParamPath: "/srv/../data"}, "/data", false},
		{map[string]string{ParamPath: "vols"}, "", true},
		{map[string]string{ParamPath: ""}, "", true},
	} {
		got, err := Root(c.params)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("Root(%v) = %q, %v; want %q, error %v", c.params, got, err, c.want, c.err)
		}
	}
}

func TestAffinityNodeAndFinalizers(t *testing.T) {
	pinned := func(exprs ...corev1.NodeSelectorRequirement) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: exprs}}}}}}
	}
	in := func(key string, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
	}
	if n, ok := AffinityNode(pinned(in("zone", "a"), in(corev1.LabelHostname, "edge-a"))); !ok || n != "edge-a" {
		t.Errorf("pinned: %q %v", n, ok)
	}
	for _, pv := range []*corev1.PersistentVolume{{}, pinned(in(corev1.LabelHostname, "a", "b")), pinned(in("zone", "a")),
		pinned(corev1.NodeSelectorRequirement{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a"}})} {
		if n, ok := AffinityNode(pv); ok {
			t.Errorf("%+v: pinned to %q", pv.Spec.NodeAffinity, n)
		}
	}
	pv := &corev1.PersistentVolume{}
	pv.Finalizers = []string{"a", Finalizer, "b"}
	if !HasFinalizer(pv) || !slices.Equal(WithoutFinalizer(pv.Finalizers), []string{"a", "b"}) || WithoutFinalizer([]string{Finalizer}) != nil {
		t.Errorf("finalizers %v", WithoutFinalizer(pv.Finalizers))
	}
	if NodeSelector("edge-a") != LabelNode+"=edge-a" {
		t.Error(NodeSelector("edge-a"))
	}
}
