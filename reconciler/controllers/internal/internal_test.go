package internal

import (
	"errors"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name, node string, phase corev1.PodPhase, ready bool, readyFor time.Duration, restarts int32, age time.Duration, cost string) *corev1.Pod {
	now := time.Now()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{RestartCount: restarts}}},
	}
	if cost != "" {
		p.Annotations = map[string]string{PodDeletionCostAnnotation: cost}
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-readyFor))}}
	return p
}

// Which of two pods a scale-down deletes first, as upstream ranks them.
func TestDeletionLess(t *testing.T) {
	h := time.Hour
	for _, tc := range []struct {
		name  string
		first *corev1.Pod // deleted first
		then  *corev1.Pod
	}{
		{"unscheduled before scheduled", pod("a", "", corev1.PodPending, false, 0, 0, h, ""), pod("b", "n", corev1.PodRunning, true, h, 0, 2*h, "")},
		{"pending before running", pod("a", "n", corev1.PodPending, false, 0, 0, 2*h, ""), pod("b", "n", corev1.PodRunning, false, 0, 0, h, "")},
		{"unknown before running", pod("a", "n", corev1.PodUnknown, false, 0, 0, 2*h, ""), pod("b", "n", corev1.PodRunning, false, 0, 0, h, "")},
		{"not ready before ready", pod("a", "n", corev1.PodRunning, false, 0, 0, 2*h, ""), pod("b", "n", corev1.PodRunning, true, h, 0, h, "")},
		{"lower deletion cost first", pod("a", "n", corev1.PodRunning, true, 0, 0, 2*h, "-5"), pod("b", "n", corev1.PodRunning, true, h, 0, h, "")},
		{"ready for less time first", pod("a", "n", corev1.PodRunning, true, time.Minute, 0, 2*h, ""), pod("b", "n", corev1.PodRunning, true, h, 0, h, "")},
		{"more restarts first", pod("a", "n", corev1.PodRunning, false, 0, 3, 2*h, ""), pod("b", "n", corev1.PodRunning, false, 0, 1, h, "")},
		{"newer first", pod("a", "n", corev1.PodRunning, false, 0, 0, h, ""), pod("b", "n", corev1.PodRunning, false, 0, 0, 2*h, "")},
	} {
		if !DeletionLess(tc.first, tc.then, 1, 1) {
			t.Errorf("%s: first not ranked before", tc.name)
		}
		if DeletionLess(tc.then, tc.first, 1, 1) {
			t.Errorf("%s: order not strict", tc.name)
		}
	}
	// Doubled-up pods go first among otherwise equal pods.
	a, b := pod("a", "n1", corev1.PodRunning, false, 0, 0, h, ""), pod("b", "n2", corev1.PodRunning, false, 0, 0, h, "")
	b.CreationTimestamp = a.CreationTimestamp
	if !DeletionLess(a, b, 2, 1) || DeletionLess(b, a, 1, 2) {
		t.Error("pods on a node with more replicas should go first")
	}
}

func TestPodsToDelete(t *testing.T) {
	h := time.Hour
	pods := []*corev1.Pod{
		pod("ready-old", "n", corev1.PodRunning, true, h, 0, 3*h, ""),
		pod("unscheduled", "", corev1.PodPending, false, 0, 0, 3*h, ""),
		pod("ready-new", "n", corev1.PodRunning, true, time.Minute, 0, 3*h, ""),
		pod("notready", "n", corev1.PodRunning, false, 0, 0, 3*h, ""),
	}
	got := PodsToDelete(pods, 3)
	want := []string{"unscheduled", "notready", "ready-new"}
	for i := range want {
		if got[i].Name != want[i] {
			t.Fatalf("PodsToDelete = %v, want %v", names(got), want)
		}
	}
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestIsPodAvailable(t *testing.T) {
	now := time.Now()
	p := pod("a", "n", corev1.PodRunning, true, 5*time.Second, 0, time.Hour, "")
	for _, tc := range []struct {
		minReady int32
		want     bool
	}{{0, true}, {3, true}, {10, false}} {
		if got := IsPodAvailable(p, tc.minReady, now); got != tc.want {
			t.Errorf("ready 5s, minReadySeconds %d: available %v, want %v", tc.minReady, got, tc.want)
		}
	}
	if IsPodAvailable(pod("b", "n", corev1.PodRunning, false, 0, 0, time.Hour, ""), 0, now) {
		t.Error("a not-ready pod is not available")
	}
}

func TestSlowStartBatch(t *testing.T) {
	var calls atomic.Int32
	ok, err := SlowStartBatch(10, 1, func() error { calls.Add(1); return nil })
	if ok != 10 || err != nil || calls.Load() != 10 {
		t.Errorf("all succeed: %d ok, %v, %d calls", ok, err, calls.Load())
	}
	// Batches 1, 2, 4: the 4th call fails, so the batch of 4 is the last one.
	calls.Store(0)
	ok, err = SlowStartBatch(10, 1, func() error {
		if calls.Add(1) >= 4 {
			return errors.New("quota")
		}
		return nil
	})
	if err == nil || calls.Load() != 7 || ok != 3 {
		t.Errorf("failing: %d ok, %v, %d calls; want 3 ok after 7 calls", ok, err, calls.Load())
	}
}

func TestExpectations(t *testing.T) {
	e := NewExpectations()
	if !e.Satisfied("ns/rs") {
		t.Fatal("unknown key should be satisfied")
	}
	e.ExpectCreations("ns/rs", 2)
	e.CreationObserved("ns/rs")
	if e.Satisfied("ns/rs") {
		t.Fatal("one creation still pending")
	}
	e.CreationObserved("ns/rs")
	if !e.Satisfied("ns/rs") {
		t.Fatal("all creations observed")
	}
	e.ExpectDeletions("ns/rs", []string{"ns/a", "ns/b"})
	e.DeletionObserved("ns/rs", "ns/a")
	e.DeletionObserved("ns/rs", "ns/a") // seen twice (update with deletionTimestamp, then delete)
	if e.Satisfied("ns/rs") {
		t.Fatal("ns/b still pending")
	}
	e.now = func() time.Time { return time.Now().Add(ExpectationsTimeout + time.Second) }
	if !e.Satisfied("ns/rs") {
		t.Fatal("expired expectations should not block")
	}
}

func TestComputeHash(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:v1"}}},
	}
	h1 := ComputeHash(tmpl, nil)
	if h1 != ComputeHash(tmpl.DeepCopy(), nil) {
		t.Error("hash is not stable")
	}
	if !regexp.MustCompile(`^[bcdfghjklmnpqrstvwxz2456789]{1,10}$`).MatchString(h1) {
		t.Errorf("hash %q is not SafeEncodeString output", h1)
	}
	one := int32(1)
	if ComputeHash(tmpl, &one) == h1 {
		t.Error("collisionCount does not change the hash")
	}
	v2 := tmpl.DeepCopy()
	v2.Spec.Containers[0].Image = "example.com/app:v2"
	if ComputeHash(v2, nil) == h1 {
		t.Error("a different template has the same hash")
	}
	// The ReplicaSet's template (with the hash label) equals the Deployment's, ignoring it.
	labelled := tmpl.DeepCopy()
	labelled.Labels[PodTemplateHashLabel] = h1
	if !EqualIgnoreHash(labelled, tmpl) || EqualIgnoreHash(labelled, v2) {
		t.Error("EqualIgnoreHash")
	}
}
