package deployment

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func ios(s string) *intstr.IntOrString { v := intstr.Parse(s); return &v }

func TestResolveFenceposts(t *testing.T) {
	for _, tc := range []struct {
		surge, unavailable string
		desired            int32
		wantS, wantU       int32
	}{
		{"25%", "25%", 4, 1, 1},
		{"25%", "25%", 10, 3, 2}, // surge rounds up (2.5 -> 3), unavailable down (2.5 -> 2)
		{"25%", "25%", 1, 1, 0},
		{"0", "0", 3, 0, 1}, // both 0: one unavailable so a rollout can move
		{"0%", "0%", 3, 0, 1},
		{"1", "0", 3, 1, 0},
		{"30%", "10%", 5, 2, 0},
		{"2", "50%", 5, 2, 2},
	} {
		s, u, err := ResolveFenceposts(ios(tc.surge), ios(tc.unavailable), tc.desired)
		if err != nil || s != tc.wantS || u != tc.wantU {
			t.Errorf("surge %s unavailable %s of %d: got %d/%d (%v), want %d/%d", tc.surge, tc.unavailable, tc.desired, s, u, err, tc.wantS, tc.wantU)
		}
	}
}

func deploy(replicas int32, surge, unavailable string) *appsv1.Deployment {
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &replicas, Strategy: appsv1.DeploymentStrategy{
		Type:          appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ios(surge), MaxUnavailable: ios(unavailable)}}}}
	return d
}

func rs(name string, spec, status, available int32) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.ReplicaSetSpec{Replicas: &spec},
		Status: appsv1.ReplicaSetStatus{Replicas: status, AvailableReplicas: available}}
}

func TestMaxSurgeUnavailable(t *testing.T) {
	d := deploy(10, "25%", "25%")
	if MaxSurge(d) != 3 || MaxUnavailable(d) != 2 {
		t.Errorf("10 replicas 25%%/25%%: %d/%d", MaxSurge(d), MaxUnavailable(d))
	}
	d = deploy(2, "0", "5")
	if MaxUnavailable(d) != 2 {
		t.Errorf("maxUnavailable capped at replicas: %d", MaxUnavailable(d))
	}
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	if MaxSurge(d) != 0 || MaxUnavailable(d) != 0 {
		t.Error("Recreate has no surge or unavailability budget")
	}
}

func TestNewRSNewReplicas(t *testing.T) {
	d := deploy(4, "25%", "25%") // surge 1
	for _, tc := range []struct {
		name string
		old  *appsv1.ReplicaSet
		new  *appsv1.ReplicaSet
		want int32
	}{
		{"start of rollout", rs("old", 4, 4, 4), rs("new", 0, 0, 0), 1},
		{"at the surge limit", rs("old", 4, 4, 4), rs("new", 1, 1, 0), 1},
		{"old scaled down", rs("old", 3, 3, 3), rs("new", 1, 1, 1), 2},
		{"old scaled down but pods not gone yet", rs("old", 3, 4, 3), rs("new", 1, 1, 1), 1},
		{"never above replicas", rs("old", 0, 0, 0), rs("new", 3, 3, 3), 4},
	} {
		if got := NewRSNewReplicas(d, []*appsv1.ReplicaSet{tc.old, tc.new}, tc.new); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestMaxScaledDown(t *testing.T) {
	// Upstream's example: 10 replicas, maxUnavailable 2, 13 pods, 5 new pods unavailable.
	if got := MaxScaledDown(13, 10, 2, 5); got != 0 {
		t.Errorf("crashlooping new pods: %d, want 0", got)
	}
	if got := MaxScaledDown(13, 10, 2, 1); got != 4 {
		t.Errorf("after rollback: %d, want 4", got)
	}
}

func TestGetProportion(t *testing.T) {
	// Scaling a 10-replica deployment (surge 3, annotated max 13) mid-rollout to 20 (max 25):
	// each ReplicaSet grows in proportion to its size.
	d := deploy(20, "3", "2")
	a, b := rs("a", 8, 8, 8), rs("b", 5, 5, 5)
	a.Annotations = map[string]string{MaxReplicasAnnotation: "13"}
	b.Annotations = map[string]string{MaxReplicasAnnotation: "13"}
	pa := GetProportion(a, d, 10, 0)
	pb := GetProportion(b, d, 10, pa)
	if pa != 6 || pb != 4 { // 8*23/13 = 14.2 -> +6, 5*23/13 = 8.8 -> +4
		t.Errorf("proportions %d/%d, want 6/4", pa, pb)
	}
	if GetProportion(rs("z", 0, 0, 0), d, 10, 0) != 0 {
		t.Error("an empty ReplicaSet gets no share")
	}
}

func TestRevisionHistory(t *testing.T) {
	r := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{RevisionAnnotation: "1"}}}
	d := deploy(3, "1", "0")
	if !setNewReplicaSetAnnotations(d, r, "3", true) || r.Annotations[RevisionAnnotation] != "3" || r.Annotations[RevisionHistoryAnnotation] != "1" {
		t.Errorf("rollback to revision 1 as 3: %v", r.Annotations)
	}
	setNewReplicaSetAnnotations(d, r, "5", true)
	if r.Annotations[RevisionHistoryAnnotation] != "1,3" {
		t.Errorf("history %q, want 1,3", r.Annotations[RevisionHistoryAnnotation])
	}
	if setNewReplicaSetAnnotations(d, r, "4", true) {
		t.Error("a lower revision must not change anything")
	}
}
