package namespace

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func condition(s *corev1.NamespaceStatus, t corev1.NamespaceConditionType) *corev1.NamespaceCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

func TestConditions(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	t2 := metav1.NewTime(t0.Add(2 * time.Minute))
	status := &corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}

	p := &progress{
		remaining: map[schema.GroupVersionResource]int{
			{Version: "v1", Resource: "pods"}:                       2,
			{Group: "apps", Version: "v1", Resource: "deployments"}: 1,
		},
		finalizers: map[string]int{"example.com/hold": 1},
		deleteErrs: []error{errors.New("delete collection of b: boom"), errors.New("delete collection of a: boom")},
	}
	if !applyConditions(status, p.conditions(), t0) {
		t.Fatal("first pass: no change reported")
	}
	want := map[corev1.NamespaceConditionType][3]string{
		corev1.NamespaceDeletionDiscoveryFailure: {"False", "ResourcesDiscovered", "All resources successfully discovered"},
		corev1.NamespaceDeletionContentFailure: {"True", "ContentDeletionFailed",
			"Failed to delete all resource types, 2 remaining: delete collection of a: boom, delete collection of b: boom"},
		corev1.NamespaceContentRemaining: {"True", "SomeResourcesRemain",
			"Some resources are remaining: deployments.apps has 1 resource instances, pods. has 2 resource instances"},
		corev1.NamespaceFinalizersRemaining: {"True", "SomeFinalizersRemain",
			"Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"},
	}
	for ct, w := range want {
		c := condition(status, ct)
		if c == nil || string(c.Status) != w[0] || c.Reason != w[1] || c.Message != w[2] || !c.LastTransitionTime.Equal(&t0) {
			t.Errorf("%s = %+v, want %v at %v", ct, c, w, t0)
		}
	}

	// The same outcome again changes nothing.
	if applyConditions(status, p.conditions(), t1) {
		t.Error("identical pass reported a change")
	}

	// Content gone: every condition turns False with its OK reason; the time moves.
	done := &progress{remaining: map[schema.GroupVersionResource]int{}, finalizers: map[string]int{}}
	if !done.done() {
		t.Error("empty pass not done")
	}
	if !applyConditions(status, done.conditions(), t2) {
		t.Fatal("no change reported")
	}
	if len(status.Conditions) != 4 {
		t.Errorf("conditions = %d, want 4 (one per type)", len(status.Conditions))
	}
	for _, ct := range conditionTypes {
		c := condition(status, ct.t)
		if c.Status != corev1.ConditionFalse || c.Reason != ct.okReason || c.Message != ct.okMessage {
			t.Errorf("%s = %+v", ct.t, c)
		}
		wantTime := t2
		if ct.t == corev1.NamespaceDeletionDiscoveryFailure {
			wantTime = t0 // was already False
		}
		if !c.LastTransitionTime.Equal(&wantTime) {
			t.Errorf("%s transition time = %v, want %v", ct.t, c.LastTransitionTime, wantTime)
		}
	}
}
