package disruption

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func pod(name, owner string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	if owner != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: types.UID(owner), Controller: &yes}}
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	return p
}

func TestExpectedAndDesired(t *testing.T) {
	scales := map[string]int32{"a": 5, "b": 2}
	find := func(ref *metav1.OwnerReference, _ string) (types.UID, int32, bool, error) {
		n, ok := scales[ref.Name]
		return ref.UID, n, ok, nil
	}
	three := []*corev1.Pod{pod("a1", "a", true), pod("a2", "a", true), pod("b1", "b", true)}
	for _, tc := range []struct {
		name              string
		minAvail, maxUnav string
		pods              []*corev1.Pod
		expected, desired int32
		unmanaged         []string
		err               string
	}{
		// An integer minAvailable needs no controller: expected is the matched pods.
		{name: "minAvailable int", minAvail: "2", pods: three, expected: 3, desired: 2},
		{name: "minAvailable int, bare pods", minAvail: "4", pods: []*corev1.Pod{pod("x", "", true)}, expected: 1, desired: 4},
		// Percentages are of the sum of the controllers' scales (5+2), rounded up.
		{name: "minAvailable 50%", minAvail: "50%", pods: three, expected: 7, desired: 4},
		{name: "minAvailable 100%", minAvail: "100%", pods: three, expected: 7, desired: 7},
		{name: "maxUnavailable 1", maxUnav: "1", pods: three, expected: 7, desired: 6},
		{name: "maxUnavailable 30%", maxUnav: "30%", pods: three, expected: 7, desired: 4},
		{name: "maxUnavailable above scale", maxUnav: "9", pods: three, expected: 7, desired: 0},
		{name: "maxUnavailable 0%", maxUnav: "0%", pods: three, expected: 7, desired: 7},
		{name: "unmanaged left out", maxUnav: "1", pods: append([]*corev1.Pod{pod("z", "", true), pod("y", "", true)}, three...),
			expected: 7, desired: 6, unmanaged: []string{"y", "z"}},
		{name: "missing controller", minAvail: "50%", pods: []*corev1.Pod{pod("c1", "c", true)},
			err: `found no controller for pod "c1": its controller ReplicaSet "c" (apps/v1) does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pdb := &policyv1.PodDisruptionBudget{}
			if tc.minAvail != "" {
				v := intstr.Parse(tc.minAvail)
				pdb.Spec.MinAvailable = &v
			}
			if tc.maxUnav != "" {
				v := intstr.Parse(tc.maxUnav)
				pdb.Spec.MaxUnavailable = &v
			}
			expected, desired, unmanaged, err := expectedAndDesired(pdb, tc.pods, find)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || expected != tc.expected || desired != tc.desired || strings.Join(unmanaged, ",") != strings.Join(tc.unmanaged, ",") {
				t.Errorf("got expected %d desired %d unmanaged %v err %v, want %d %d %v", expected, desired, unmanaged, err, tc.expected, tc.desired, tc.unmanaged)
			}
		})
	}
	// A finder's error names the pod.
	pdb := &policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &intstr.IntOrString{Type: intstr.Int, IntVal: 1}}}
	_, _, _, err := expectedAndDesired(pdb, three, func(*metav1.OwnerReference, string) (types.UID, int32, bool, error) {
		return "", 0, false, errors.New("boom")
	})
	if err == nil || err.Error() != `pod "a1": boom` {
		t.Errorf("finder error: %v", err)
	}
}

func TestStatusCounts(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	deleting := pod("deleting", "a", true)
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	pods := []*corev1.Pod{pod("ready", "a", true), pod("unready", "a", false), deleting,
		pod("evicted", "a", true), pod("stale", "a", true)}
	recorded := map[string]metav1.Time{
		"evicted":  metav1.NewTime(now.Add(-30 * time.Second)),
		"stale":    metav1.NewTime(now.Add(-DeletionTimeout - time.Second)),
		"deleting": metav1.NewTime(now),
		"gone":     metav1.NewTime(now),
	}
	kept, recheck, expired := disruptedPods(pods, recorded, now)
	if len(kept) != 1 || !kept["evicted"].Time.Equal(now.Add(-30*time.Second)) {
		t.Errorf("kept %v, want only evicted", kept)
	}
	if recheck != DeletionTimeout-30*time.Second {
		t.Errorf("recheck in %v, want %v", recheck, DeletionTimeout-30*time.Second)
	}
	if len(expired) != 1 || expired[0].Name != "stale" {
		t.Errorf("expired %v, want stale", expired)
	}
	// ready and stale count; unready, deleting and evicted do not.
	if n := countHealthy(pods, kept, now); n != 2 {
		t.Errorf("healthy %d, want 2", n)
	}

	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	for _, tc := range []struct {
		healthy, desired, expected, allowed int32
		reason                              string
	}{
		{healthy: 3, desired: 2, expected: 3, allowed: 1, reason: policyv1.SufficientPodsReason},
		{healthy: 2, desired: 2, expected: 3, allowed: 0, reason: policyv1.InsufficientPodsReason},
		{healthy: 1, desired: 2, expected: 3, allowed: 0, reason: policyv1.InsufficientPodsReason},
		// No expected pods: nothing is allowed, whatever is healthy.
		{healthy: 2, desired: 0, expected: 0, allowed: 0, reason: policyv1.InsufficientPodsReason},
	} {
		s := newStatus(pdb, tc.healthy, tc.desired, tc.expected, nil)
		if s.DisruptionsAllowed != tc.allowed || s.ObservedGeneration != 3 || len(s.Conditions) != 1 ||
			s.Conditions[0].Reason != tc.reason || s.Conditions[0].ObservedGeneration != 3 || s.Conditions[0].LastTransitionTime.IsZero() {
			t.Errorf("%+v: status %+v", tc, s)
		}
	}
}
