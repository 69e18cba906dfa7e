package nodelifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Taint keys the controller owns (the well-known node.kubernetes.io taints).
const (
	TaintNotReady           = "node.kubernetes.io/not-ready"
	TaintUnreachable        = "node.kubernetes.io/unreachable"
	TaintUnschedulable      = "node.kubernetes.io/unschedulable"
	TaintMemoryPressure     = "node.kubernetes.io/memory-pressure"
	TaintDiskPressure       = "node.kubernetes.io/disk-pressure"
	TaintPIDPressure        = "node.kubernetes.io/pid-pressure"
	TaintNetworkUnavailable = "node.kubernetes.io/network-unavailable"
)

// Condition reasons and messages written for a node whose heartbeats stopped, as upstream.
const (
	ReasonStatusUnknown      = "NodeStatusUnknown"
	MessageStatusUnknown     = "Kubelet stopped posting node status."
	ReasonStatusNeverUpdated = "NodeStatusNeverUpdated"
	MessageNeverUpdated      = "Kubelet never posted node status."
)

// managedKeys are the taint keys this controller adds and removes; taints with other keys are
// left alone.
var managedKeys = map[string]bool{
	TaintNotReady: true, TaintUnreachable: true, TaintUnschedulable: true, TaintMemoryPressure: true,
	TaintDiskPressure: true, TaintPIDPressure: true, TaintNetworkUnavailable: true,
}

// conditionTaints maps a node condition that is True to the NoSchedule taint it implies.
var conditionTaints = []struct {
	cond corev1.NodeConditionType
	key  string
}{
	{corev1.NodeMemoryPressure, TaintMemoryPressure},
	{corev1.NodeDiskPressure, TaintDiskPressure},
	{corev1.NodePIDPressure, TaintPIDPressure},
	{corev1.NodeNetworkUnavailable, TaintNetworkUnavailable},
}

// unknownConditions are the conditions set to Unknown when a node stops posting status.
var unknownConditions = []corev1.NodeConditionType{
	corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure,
}

// FullDisruption reports upstream's partition rule: when every node is
// unhealthy the controller suspects its own connectivity and does not evict. A cluster with no
// nodes is not disrupted.
func FullDisruption(ready, notReady int) bool {
	return ready == 0 && notReady > 0
}

// readyStatus is the status of the node's Ready condition, Unknown when it has none.
func readyStatus(node *corev1.Node) corev1.ConditionStatus {
	if c := condition(node, corev1.NodeReady); c != nil {
		return c.Status
	}
	return corev1.ConditionUnknown
}

func condition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// markUnknown sets the node's Ready and pressure conditions to Unknown and reports whether
// anything changed. The heartbeat time is kept: it records the last time the host spoke.
func markUnknown(status *corev1.NodeStatus, now metav1.Time) bool {
	changed := false
	for _, t := range unknownConditions {
		var cur *corev1.NodeCondition
		for i := range status.Conditions {
			if status.Conditions[i].Type == t {
				cur = &status.Conditions[i]
			}
		}
		if cur == nil {
			status.Conditions = append(status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionUnknown,
				Reason: ReasonStatusNeverUpdated, Message: MessageNeverUpdated, LastTransitionTime: now})
			changed = true
			continue
		}
		if cur.Status == corev1.ConditionUnknown {
			continue
		}
		cur.Status = corev1.ConditionUnknown
		cur.Reason = ReasonStatusUnknown
		cur.Message = MessageStatusUnknown
		cur.LastTransitionTime = now
		changed = true
	}
	return changed
}

// DesiredTaints returns the managed taints a node should carry. stale is the controller's own
// view that heartbeats stopped (the Ready condition may not say so yet); in a full disruption
// the NoExecute health taints are withheld so that nothing is evicted, while the NoSchedule ones
// stay to keep new pods away.
func DesiredTaints(node *corev1.Node, stale, fullDisruption bool) []corev1.Taint {
	var out []corev1.Taint
	if node.Spec.Unschedulable {
		out = append(out, corev1.Taint{Key: TaintUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	}
	health := ""
	switch {
	case stale || readyStatus(node) == corev1.ConditionUnknown:
		health = TaintUnreachable
	case readyStatus(node) == corev1.ConditionFalse:
		health = TaintNotReady
	}
	if health != "" {
		out = append(out, corev1.Taint{Key: health, Effect: corev1.TaintEffectNoSchedule})
		if !fullDisruption {
			out = append(out, corev1.Taint{Key: health, Effect: corev1.TaintEffectNoExecute})
		}
	}
	if health != TaintUnreachable {
		// An unreachable node's conditions are all Unknown, and stale ones mean nothing.
		for _, ct := range conditionTaints {
			if c := condition(node, ct.cond); c != nil && c.Status == corev1.ConditionTrue {
				out = append(out, corev1.Taint{Key: ct.key, Effect: corev1.TaintEffectNoSchedule})
			}
		}
	}
	return out
}

// ReconcileTaints merges the desired managed taints into the node's current ones: taints with
// other keys are kept in place, managed taints no longer wanted are dropped, taints already
// present keep their timeAdded (it drives eviction timers) and new NoExecute taints get now.
// It reports whether the list changed.
func ReconcileTaints(cur, desired []corev1.Taint, now time.Time) ([]corev1.Taint, bool) {
	want := map[corev1.Taint]bool{}
	for _, t := range desired {
		want[corev1.Taint{Key: t.Key, Effect: t.Effect}] = true
	}
	var out []corev1.Taint
	have := map[corev1.Taint]bool{}
	changed := false
	for _, t := range cur {
		id := corev1.Taint{Key: t.Key, Effect: t.Effect}
		if managedKeys[t.Key] && (!want[id] || have[id]) {
			changed = true
			continue
		}
		if t.Effect == corev1.TaintEffectNoExecute && t.TimeAdded == nil {
			// Eviction timers count from timeAdded; stamp taints added without one (by hand).
			added := metav1.NewTime(now)
			t.TimeAdded = &added
			changed = true
		}
		have[id] = true
		out = append(out, t)
	}
	for _, t := range desired {
		id := corev1.Taint{Key: t.Key, Effect: t.Effect}
		if have[id] {
			continue
		}
		if t.Effect == corev1.TaintEffectNoExecute && t.TimeAdded == nil {
			added := metav1.NewTime(now)
			t.TimeAdded = &added
		}
		have[id] = true
		out = append(out, t)
		changed = true
	}
	return out, changed
}

// EvictionTime decides what the NoExecute taints of a pod's node mean for it: evict is false
// when the pod tolerates every taint forever (or there is none); otherwise the pod is to be
// deleted at `at`, which is the zero time when some taint is not tolerated at all. With several
// tolerated taints the earliest expiry wins; a taint's expiry is its timeAdded plus the smallest
// tolerationSeconds among the pod's tolerations that match it (a bounded toleration is stricter
// than an unbounded one, as upstream). A taint without timeAdded counts as added now.
func EvictionTime(tolerations []corev1.Toleration, taints []corev1.Taint, now time.Time) (at time.Time, evict bool) {
	for i := range taints {
		taint := &taints[i]
		if taint.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		tolerated := false
		var seconds *int64
		for j := range tolerations {
			tol := &tolerations[j]
			if !tol.ToleratesTaint(klog.Background(), taint, true) {
				continue
			}
			tolerated = true
			if tol.TolerationSeconds != nil && (seconds == nil || *tol.TolerationSeconds < *seconds) {
				s := *tol.TolerationSeconds
				seconds = &s
			}
		}
		if !tolerated {
			return time.Time{}, true
		}
		if seconds == nil {
			continue
		}
		added := now
		if taint.TimeAdded != nil {
			added = taint.TimeAdded.Time
		}
		expiry := added.Add(time.Duration(max(*seconds, 0)) * time.Second)
		if !evict || expiry.Before(at) {
			at, evict = expiry, true
		}
	}
	return at, evict
}
