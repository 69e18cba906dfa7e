package volumebinding

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

type pvOpt func(*corev1.PersistentVolume)

func mkPV(name, size, class string, opts ...pvOpt) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/srv/" + name}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
	for _, o := range opts {
		o(pv)
	}
	return pv
}

func modes(m ...corev1.PersistentVolumeAccessMode) pvOpt {
	return func(pv *corev1.PersistentVolume) { pv.Spec.AccessModes = m }
}

func pvLabels(l map[string]string) pvOpt {
	return func(pv *corev1.PersistentVolume) { pv.Labels = l }
}

func onNode(host string) pvOpt {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{host}}},
		}}}}
	}
}

func claimRef(ns, name, uid string) pvOpt {
	return func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: name, UID: k8stypes.UID(uid)}
	}
}

func phase(p corev1.PersistentVolumePhase) pvOpt {
	return func(pv *corev1.PersistentVolume) { pv.Status.Phase = p }
}

func block(pv *corev1.PersistentVolume) { pv.Spec.VolumeMode = new(corev1.PersistentVolumeBlock) }

func mkClaim(size, class string, m ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	if len(m) == 0 {
		m = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "data", UID: "uid-1"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      m,
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

func TestFindBestMatch(t *testing.T) {
	nodeA := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{corev1.LabelHostname: "a"}}}
	withSelector := mkClaim("1Gi", "")
	withSelector.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	betaClass := mkClaim("1Gi", "ignored")
	betaClass.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: "fast"}
	rwx := mkClaim("1Gi", "", corev1.ReadWriteMany)
	blockClaim := mkClaim("1Gi", "")
	blockClaim.Spec.VolumeMode = new(corev1.PersistentVolumeBlock)
	tests := []struct {
		name    string
		claim   *corev1.PersistentVolumeClaim
		volumes []*corev1.PersistentVolume
		node    *corev1.Node
		want    string
	}{
		{"smallest that fits", mkClaim("1500Mi", ""), []*corev1.PersistentVolume{
			mkPV("big", "10Gi", ""), mkPV("small", "1Gi", ""), mkPV("mid", "2Gi", ""), mkPV("mid2", "5Gi", "")}, nil, "mid"},
		{"equal size fits", mkClaim("1Gi", ""), []*corev1.PersistentVolume{mkPV("one", "1Gi", "")}, nil, "one"},
		{"ties broken by name", mkClaim("1Gi", ""), []*corev1.PersistentVolume{mkPV("b", "1Gi", ""), mkPV("a", "1Gi", "")}, nil, "a"},
		{"class must match", mkClaim("1Gi", "fast"), []*corev1.PersistentVolume{mkPV("none", "1Gi", ""), mkPV("slow", "1Gi", "slow")}, nil, ""},
		{"empty class matches empty only", mkClaim("1Gi", ""), []*corev1.PersistentVolume{mkPV("fast", "1Gi", "fast"), mkPV("plain", "5Gi", "")}, nil, "plain"},
		{"beta annotation wins over storageClassName", betaClass, []*corev1.PersistentVolume{mkPV("ig", "1Gi", "ignored"), mkPV("f", "1Gi", "fast")}, nil, "f"},
		{"access modes must be a superset", rwx, []*corev1.PersistentVolume{mkPV("rwo", "1Gi", ""),
			mkPV("multi", "1Gi", "", modes(corev1.ReadWriteOnce, corev1.ReadWriteMany))}, nil, "multi"},
		{"volume mode must be equal", blockClaim, []*corev1.PersistentVolume{mkPV("fs", "1Gi", ""), mkPV("blk", "1Gi", "", block)}, nil, "blk"},
		{"selector must match labels", withSelector, []*corev1.PersistentVolume{mkPV("silver", "1Gi", "", pvLabels(map[string]string{"tier": "silver"})),
			mkPV("gold", "9Gi", "", pvLabels(map[string]string{"tier": "gold"}))}, nil, "gold"},
		{"claimed by another is skipped", mkClaim("1Gi", ""), []*corev1.PersistentVolume{mkPV("taken", "1Gi", "", claimRef("default", "other", "uid-9"), phase(corev1.VolumeBound)),
			mkPV("free", "3Gi", "")}, nil, "free"},
		{"only Available volumes", mkClaim("1Gi", ""), []*corev1.PersistentVolume{mkPV("pending", "1Gi", "", phase(corev1.VolumePending)),
			mkPV("released", "1Gi", "", phase(corev1.VolumeReleased))}, nil, ""},
		{"pre-bound volume wins over a smaller one", mkClaim("1Gi", ""), []*corev1.PersistentVolume{mkPV("small", "1Gi", ""),
			mkPV("mine", "4Gi", "other-class", claimRef("default", "data", ""))}, nil, "mine"},
		{"volume already bound to this claim by UID", mkClaim("1Gi", ""), []*corev1.PersistentVolume{mkPV("small", "1Gi", ""),
			mkPV("mine", "4Gi", "", claimRef("default", "data", "uid-1"), phase(corev1.VolumeBound))}, nil, "mine"},
		{"claimRef to an older claim of the same name is not ours", mkClaim("1Gi", ""), []*corev1.PersistentVolume{
			mkPV("old", "1Gi", "", claimRef("default", "data", "uid-0"), phase(corev1.VolumeReleased))}, nil, ""},
		{"too small pre-bound volume is not used", mkClaim("5Gi", ""), []*corev1.PersistentVolume{mkPV("mine", "1Gi", "", claimRef("default", "data", ""))}, nil, ""},
		{"node affinity: only the node's volume", mkClaim("1Gi", "flotilla-local"), []*corev1.PersistentVolume{
			mkPV("on-b", "1Gi", "flotilla-local", onNode("b")), mkPV("on-a", "2Gi", "flotilla-local", onNode("a"))}, nodeA, "on-a"},
		{"node affinity ignored without node", mkClaim("1Gi", ""), []*corev1.PersistentVolume{mkPV("on-b", "1Gi", "", onNode("b"))}, nil, "on-b"},
		{"volume without affinity fits any node", mkClaim("1Gi", ""), []*corev1.PersistentVolume{mkPV("anywhere", "1Gi", "")}, nodeA, "anywhere"},
		{"deleting volume is skipped", mkClaim("1Gi", ""), []*corev1.PersistentVolume{mkPV("gone", "1Gi", "", func(pv *corev1.PersistentVolume) {
			pv.DeletionTimestamp = &metav1.Time{}
		})}, nil, ""},
		{"nothing at all", mkClaim("1Gi", ""), nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FindBestMatch(tt.claim, tt.volumes, tt.node)
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tt.want {
				t.Errorf("FindBestMatch = %q, want %q", name, tt.want)
			}
		})
	}
}

func TestNodeAffinityMatches(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "z1", "disk": "ssd", "gen": "5"}}}
	term := func(exprs []corev1.NodeSelectorRequirement, fields []corev1.NodeSelectorRequirement) *corev1.PersistentVolume {
		pv := mkPV("v", "1Gi", "")
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: exprs, MatchFields: fields}}}}
		return pv
	}
	req := func(k string, op corev1.NodeSelectorOperator, v ...string) []corev1.NodeSelectorRequirement {
		return []corev1.NodeSelectorRequirement{{Key: k, Operator: op, Values: v}}
	}
	tests := []struct {
		name string
		pv   *corev1.PersistentVolume
		want bool
	}{
		{"no affinity", mkPV("v", "1Gi", ""), true},
		{"In", term(req("zone", corev1.NodeSelectorOpIn, "z1", "z2"), nil), true},
		{"In other", term(req("zone", corev1.NodeSelectorOpIn, "z2"), nil), false},
		{"NotIn", term(req("disk", corev1.NodeSelectorOpNotIn, "hdd"), nil), true},
		{"Exists", term(req("disk", corev1.NodeSelectorOpExists), nil), true},
		{"DoesNotExist", term(req("disk", corev1.NodeSelectorOpDoesNotExist), nil), false},
		{"Gt", term(req("gen", corev1.NodeSelectorOpGt, "4"), nil), true},
		{"Lt", term(req("gen", corev1.NodeSelectorOpLt, "4"), nil), false},
		{"metadata.name field", term(nil, req("metadata.name", corev1.NodeSelectorOpIn, "n1")), true},
		{"metadata.name field other", term(nil, req("metadata.name", corev1.NodeSelectorOpIn, "n2")), false},
		{"empty term matches nothing", term(nil, nil), false},
	}
	for _, tt := range tests {
		if got := NodeAffinityMatches(tt.pv, node); got != tt.want {
			t.Errorf("%s: NodeAffinityMatches = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDelayBinding(t *testing.T) {
	local := mkClaim("1Gi", LocalClass)
	selected := mkClaim("1Gi", "")
	selected.Annotations = map[string]string{AnnSelectedNode: "a"}
	if !DelayBinding(local) || !DelayBinding(selected) || DelayBinding(mkClaim("1Gi", "fast")) || DelayBinding(mkClaim("1Gi", "")) {
		t.Error("DelayBinding: want true for flotilla-local and for a claim with a selected node only")
	}
}
