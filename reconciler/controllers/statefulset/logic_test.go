package statefulset

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func testSet() *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "set-uid"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: new(int32(3)), ServiceName: "web",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "hello", Image: "ghcr.io/example/hello:1.0"}},
					Volumes: []corev1.Volume{{Name: "www"}, {Name: "cfg"}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "www"}}},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: new(int32(0))}},
		},
	}
}

func TestParentAndOrdinal(t *testing.T) {
	for _, tc := range []struct {
		name, parent string
		ordinal      int
	}{
		{"web-0", "web", 0}, {"web-12", "web", 12}, {"my-db-3", "my-db", 3}, {"web", "", -1}, {"web-x", "", -1}, {"web-", "", -1},
	} {
		p, o := parentAndOrdinal(tc.name)
		if p != tc.parent || o != tc.ordinal {
			t.Errorf("%s: %q %d, want %q %d", tc.name, p, o, tc.parent, tc.ordinal)
		}
	}
}

// A new pod gets its stable name, hostname, subdomain, identity labels and claim volumes.
func TestNewPod(t *testing.T) {
	set := testSet()
	p := newPod(set, 1, "web-abc")
	if p.Name != "web-1" || p.Spec.Hostname != "web-1" || p.Spec.Subdomain != "web" {
		t.Errorf("name %s hostname %s subdomain %s", p.Name, p.Spec.Hostname, p.Spec.Subdomain)
	}
	want := map[string]string{"app": "web", PodNameLabel: "web-1", PodIndexLabel: "1", RevisionLabel: "web-abc"}
	for k, v := range want {
		if p.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, p.Labels[k], v)
		}
	}
	if len(p.Spec.Volumes) != 2 || p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "www-web-1" || p.Spec.Volumes[1].Name != "cfg" {
		t.Errorf("volumes %+v", p.Spec.Volumes)
	}
	if !identityMatches(set, p) || !isMemberOf(set, p) {
		t.Error("a new pod does not match its identity")
	}
	if set.Spec.Template.Labels[PodNameLabel] != "" {
		t.Error("newPod changed the set's template")
	}
}

func TestClaimOwners(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-2", UID: "pod-uid"}}
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "x"}
	for _, tc := range []struct {
		deleted, scaled string
		condemned       bool
		want            []string // owner kinds, "ConfigMap" always kept
	}{
		{"Retain", "Retain", false, []string{"ConfigMap"}},
		{"Retain", "Retain", true, []string{"ConfigMap"}},
		{"Delete", "Retain", false, []string{"ConfigMap", "StatefulSet"}},
		{"Delete", "Retain", true, []string{"ConfigMap", "StatefulSet"}},
		{"Retain", "Delete", false, []string{"ConfigMap"}},
		{"Retain", "Delete", true, []string{"ConfigMap", "Pod"}},
		{"Delete", "Delete", false, []string{"ConfigMap", "StatefulSet"}},
		{"Delete", "Delete", true, []string{"ConfigMap", "Pod"}},
	} {
		set := testSet()
		set.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: appsv1.PersistentVolumeClaimRetentionPolicyType(tc.deleted), WhenScaled: appsv1.PersistentVolumeClaimRetentionPolicyType(tc.scaled)}
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{
			other, *metav1.NewControllerRef(set, controllerKind), {APIVersion: "v1", Kind: "Pod", Name: "web-2", UID: "old"}}}}
		var got []string
		for _, r := range claimOwners(claim, set, pod, tc.condemned) {
			got = append(got, r.Kind)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s/%s condemned=%v: owners %v, want %v", tc.deleted, tc.scaled, tc.condemned, got, tc.want)
		}
	}
}

// A rolling update replaces the highest ordinal first, honours the partition, waits for
// unavailable pods and replaces at most maxUnavailable at once.
func TestRollingVictims(t *testing.T) {
	pods := func(revs ...string) []*corev1.Pod {
		var out []*corev1.Pod
		for i, r := range revs {
			out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName(testSet(), i), Labels: map[string]string{RevisionLabel: r}}})
		}
		return out
	}
	allAvailable := func(*corev1.Pod) bool { return true }
	for _, tc := range []struct {
		name                  string
		replicas              []*corev1.Pod
		partition, maxUnavail int
		available             func(*corev1.Pod) bool
		want                  []string
	}{
		{"highest first", pods("old", "old", "old"), 0, 1, allAvailable, []string{"web-2"}},
		{"skips updated", pods("old", "old", "new"), 0, 1, allAvailable, []string{"web-1"}},
		{"partition 2", pods("old", "old", "new"), 2, 1, allAvailable, nil},
		{"partition beyond replicas", pods("old", "old", "old"), 5, 1, allAvailable, nil},
		{"waits for unavailable", pods("old", "old", "new"), 0, 1, func(p *corev1.Pod) bool { return p.Name != "web-2" }, nil},
		{"maxUnavailable 2", pods("old", "old", "old"), 0, 2, allAvailable, []string{"web-2", "web-1"}},
		{"maxUnavailable 2 one down", pods("old", "old", "new"), 0, 2, func(p *corev1.Pod) bool { return p.Name != "web-2" }, []string{"web-1"}},
	} {
		var got []string
		for _, p := range rollingVictims(tc.replicas, 0, tc.partition, tc.maxUnavail, "new", tc.available) {
			got = append(got, p.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMaxUnavailableAndPartition(t *testing.T) {
	set := testSet()
	set.Spec.Replicas = new(int32(10))
	for _, tc := range []struct {
		v    *intstr.IntOrString
		want int
	}{{nil, 1}, {new(intstr.FromInt32(3)), 3}, {new(intstr.FromString("25%")), 2}, {new(intstr.FromString("1%")), 1}} {
		set.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = tc.v
		if got := maxUnavailable(set); got != tc.want {
			t.Errorf("maxUnavailable %v: %d, want %d", tc.v, got, tc.want)
		}
	}
	set.Spec.UpdateStrategy.RollingUpdate.Partition = new(int32(2))
	if needsCurrentRevision(set, 2) || !needsCurrentRevision(set, 1) {
		t.Error("ordinals below the partition come back at the current revision, the rest at the update revision")
	}
	set.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	if needsCurrentRevision(set, 0) {
		t.Error("OnDelete recreates from the update revision")
	}
}

// Equal templates give equal revisions; the data is a $patch: replace
// patch that gives the template back.
func TestRevisions(t *testing.T) {
	set := testSet()
	r1, err := newRevision(set, 1, new(int32(0)))
	if err != nil {
		t.Fatal(err)
	}
	r1b, _ := newRevision(set.DeepCopy(), 7, new(int32(0)))
	if r1.Name != r1b.Name || !equalRevision(r1, r1b) || r1.Labels["app"] != "web" || r1.Labels[RevisionLabel] == "" {
		t.Errorf("revisions %s/%s differ for one template, labels %v", r1.Name, r1b.Name, r1.Labels)
	}
	if r, _ := newRevision(set, 1, new(int32(1))); r.Name == r1.Name {
		t.Error("collision count does not change the name")
	}
	v2 := set.DeepCopy()
	v2.Spec.Template.Spec.Containers[0].Image = "ghcr.io/example/hello:1.1"
	r2, _ := newRevision(v2, 2, new(int32(0)))
	if r2.Name == r1.Name || equalRevision(r1, r2) {
		t.Error("different templates give equal revisions")
	}
	back, err := applyRevision(v2, r1)
	if err != nil || back.Spec.Template.Spec.Containers[0].Image != "ghcr.io/example/hello:1.0" {
		t.Errorf("applyRevision: %v %+v", err, back.Spec.Template.Spec.Containers)
	}
	if string(r1.Data.Raw) != string(r1b.Data.Raw) || !strings.HasPrefix(string(r1.Data.Raw), `{"spec":{"template":{`) ||
		!strings.Contains(string(r1.Data.Raw), `"$patch":"replace"`) {
		t.Errorf("data %s", r1.Data.Raw)
	}
	revs := []*appsv1.ControllerRevision{r2, r1}
	sortRevisions(revs)
	if revs[0] != r1 || nextRevision(revs) != 3 {
		t.Error("sort/next revision")
	}
	mk := func(n string) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: n}}
	}
	all := []*appsv1.ControllerRevision{mk("a"), mk("b"), mk("c"), mk("d")}
	var got []string
	for _, r := range historyToDelete(all, map[string]bool{"a": true, "d": true}, 1) {
		got = append(got, r.Name)
	}
	if !slices.Equal(got, []string{"b"}) {
		t.Errorf("historyToDelete = %v, want [b]", got)
	}
}
