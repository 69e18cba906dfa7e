package namespace

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// conditionTypes are the namespace conditions this controller maintains, each with the
// reason and message it has while nothing is wrong (status False).
var conditionTypes = []struct {
	t         corev1.NamespaceConditionType
	okReason  string
	okMessage string
}{
	{corev1.NamespaceDeletionDiscoveryFailure, "ResourcesDiscovered", "All resources successfully discovered"},
	{corev1.NamespaceDeletionContentFailure, "ContentDeleted", "All content successfully deleted, may be waiting on finalization"},
	{corev1.NamespaceContentRemaining, "ContentRemoved", "All content successfully removed"},
	{corev1.NamespaceFinalizersRemaining, "ContentHasNoFinalizers", "All content-preserving finalizers finished"},
}

// progress is what one pass over a namespace's content found.
type progress struct {
	discoveryErr error
	deleteErrs   []error
	// remaining counts objects still present per resource, finalizers the objects still
	// present per finalizer they carry.
	remaining  map[schema.GroupVersionResource]int
	finalizers map[string]int
}

func (p *progress) done() bool {
	return p.discoveryErr == nil && len(p.deleteErrs) == 0 && len(p.remaining) == 0
}

// conditions turns a pass into the failing conditions (status True); types not returned are fine.
func (p *progress) conditions() map[corev1.NamespaceConditionType]corev1.NamespaceCondition {
	out := map[corev1.NamespaceConditionType]corev1.NamespaceCondition{}
	if p.discoveryErr != nil {
		msg := p.discoveryErr.Error()
		if derr, ok := p.discoveryErr.(*discovery.ErrGroupDiscoveryFailed); ok {
			msg = fmt.Sprintf("Discovery failed for some groups, %d failing: %v", len(derr.Groups), derr)
		}
		out[corev1.NamespaceDeletionDiscoveryFailure] = corev1.NamespaceCondition{
			Type: corev1.NamespaceDeletionDiscoveryFailure, Status: corev1.ConditionTrue, Reason: "DiscoveryFailed", Message: msg}
	}
	if len(p.deleteErrs) > 0 {
		msgs := make([]string, 0, len(p.deleteErrs))
		for _, e := range p.deleteErrs {
			msgs = append(msgs, e.Error())
		}
		sort.Strings(msgs)
		out[corev1.NamespaceDeletionContentFailure] = corev1.NamespaceCondition{
			Type: corev1.NamespaceDeletionContentFailure, Status: corev1.ConditionTrue, Reason: "ContentDeletionFailed",
			Message: fmt.Sprintf("Failed to delete all resource types, %d remaining: %s", len(msgs), strings.Join(msgs, ", "))}
	}
	if len(p.remaining) > 0 {
		var parts []string
		for gvr, n := range p.remaining {
			parts = append(parts, fmt.Sprintf("%s.%s has %d resource instances", gvr.Resource, gvr.Group, n))
		}
		sort.Strings(parts)
		out[corev1.NamespaceContentRemaining] = corev1.NamespaceCondition{
			Type: corev1.NamespaceContentRemaining, Status: corev1.ConditionTrue, Reason: "SomeResourcesRemain",
			Message: "Some resources are remaining: " + strings.Join(parts, ", ")}
	}
	if len(p.finalizers) > 0 {
		var parts []string
		for f, n := range p.finalizers {
			parts = append(parts, fmt.Sprintf("%s in %d resource instances", f, n))
		}
		sort.Strings(parts)
		out[corev1.NamespaceFinalizersRemaining] = corev1.NamespaceCondition{
			Type: corev1.NamespaceFinalizersRemaining, Status: corev1.ConditionTrue, Reason: "SomeFinalizersRemain",
			Message: "Some content in the namespace has finalizers remaining: " + strings.Join(parts, ", ")}
	}
	return out
}

// applyConditions sets status's conditions to what the pass found and reports whether
// anything changed. The transition time moves only when a condition's status does.
func applyConditions(status *corev1.NamespaceStatus, failing map[corev1.NamespaceConditionType]corev1.NamespaceCondition, now metav1.Time) bool {
	changed := false
	for _, ct := range conditionTypes {
		want, ok := failing[ct.t]
		if !ok {
			want = corev1.NamespaceCondition{Type: ct.t, Status: corev1.ConditionFalse, Reason: ct.okReason, Message: ct.okMessage}
		}
		i := -1
		for j := range status.Conditions {
			if status.Conditions[j].Type == ct.t {
				i = j
				break
			}
		}
		if i < 0 {
			want.LastTransitionTime = now
			status.Conditions = append(status.Conditions, want)
			changed = true
			continue
		}
		cur := &status.Conditions[i]
		if cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message {
			continue
		}
		if cur.Status != want.Status {
			cur.LastTransitionTime = now
		}
		cur.Status, cur.Reason, cur.Message = want.Status, want.Reason, want.Message
		changed = true
	}
	return changed
}
