package internal

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ResolveControllerRef returns the owner a controller reference points to when it is of kind
// and still the same object (same UID); get reads it from a lister by name.
func ResolveControllerRef[T metav1.Object](ref *metav1.OwnerReference, kind schema.GroupVersionKind, get func(name string) (T, error)) (T, bool) {
	var zero T
	if ref.Kind != kind.Kind || ref.APIVersion != kind.GroupVersion().String() {
		return zero, false
	}
	owner, err := get(ref.Name)
	if err != nil || owner.GetUID() != ref.UID {
		return zero, false
	}
	return owner, true
}

// SelectingOwners returns the owners whose non-empty selector matches an orphan's labels.
func SelectingOwners[T any](owners []T, selector func(T) *metav1.LabelSelector, orphanLabels map[string]string) []T {
	var out []T
	for _, o := range owners {
		sel, err := metav1.LabelSelectorAsSelector(selector(o))
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(orphanLabels)) {
			continue
		}
		out = append(out, o)
	}
	return out
}
