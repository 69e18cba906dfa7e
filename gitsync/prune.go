package gitsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// protectedNamespaces are never pruned, whoever created them.
var protectedNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// Inventory lists objects as inventory entries, sorted by id.
func Inventory(objs []Object) []v1alpha1.ResourceRef {
	out := make([]v1alpha1.ResourceRef, 0, len(objs))
	for _, o := range objs {
		out = append(out, v1alpha1.ResourceRef{ID: ID(o.Obj), Version: o.Obj.GroupVersionKind().Version})
	}
	slices.SortFunc(out, func(a, b v1alpha1.ResourceRef) int { return strings.Compare(a.ID, b.ID) })
	return slices.CompactFunc(out, func(a, b v1alpha1.ResourceRef) bool { return a.ID == b.ID })
}

// Stale returns the entries of old that are not in cur.
func Stale(old, cur []v1alpha1.ResourceRef) []v1alpha1.ResourceRef {
	keep := map[string]bool{}
	for _, r := range cur {
		keep[r.ID] = true
	}
	var out []v1alpha1.ResourceRef
	for _, r := range old {
		if !keep[r.ID] {
			out = append(out, r)
		}
	}
	return out
}

// parseID splits "<namespace>_<name>_<group>_<kind>".
func parseID(ref v1alpha1.ResourceRef) (ns, name string, gvk schema.GroupVersionKind, err error) {
	p := strings.Split(ref.ID, "_")
	if len(p) != 4 {
		return "", "", gvk, fmt.Errorf("inventory id %q: want <namespace>_<name>_<group>_<kind>", ref.ID)
	}
	return p[0], p[1], schema.GroupVersionKind{Group: p[2], Version: ref.Version, Kind: p[3]}, nil
}

// Prune deletes the stale inventory entries that still carry the source's label, except
// objects annotated flotilla.dev/prune: disabled, the protected namespaces and namespaces the
// source did not create. It returns the ids it deleted (or found gone) and the ids it kept.
func (a *Applier) Prune(ctx context.Context, stale []v1alpha1.ResourceRef, source string) (deleted, kept []string, err error) {
	return a.PruneWith(ctx, stale, source, nil)
}

// PruneWith is Prune that also keeps the objects for which keep (when not nil) gives a
// reason.
func (a *Applier) PruneWith(ctx context.Context, stale []v1alpha1.ResourceRef, source string, keep func(*unstructured.Unstructured) string) (deleted, kept []string, err error) {
	var errs []error
	// Namespaces last, so their contents are deleted by us first and not by cascade.
	slices.SortStableFunc(stale, func(x, y v1alpha1.ResourceRef) int {
		return boolInt(strings.HasSuffix(x.ID, "__Namespace")) - boolInt(strings.HasSuffix(y.ID, "__Namespace"))
	})
	for _, ref := range stale {
		ns, name, gvk, perr := parseID(ref)
		if perr != nil {
			errs = append(errs, perr)
			continue
		}
		m, merr := a.mapping(gvk)
		if merr != nil {
			kept = append(kept, ref.ID) // kind no longer served: nothing to delete
			continue
		}
		var res = a.Dynamic.Resource(m.Resource)
		get := res.Get
		del := res.Delete
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			get, del = res.Namespace(ns).Get, res.Namespace(ns).Delete
		}
		live, gerr := get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) {
			deleted = append(deleted, ref.ID)
			continue
		}
		if gerr != nil {
			errs = append(errs, fmt.Errorf("prune %s: %w", ref.ID, gerr))
			continue
		}
		if PruneKeepReason(live, source) != "" || (keep != nil && keep(live) != "") {
			kept = append(kept, ref.ID)
			continue
		}
		policy := metav1.DeletePropagationBackground
		uid := live.GetUID()
		if derr := del(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &uid}}); derr != nil && !apierrors.IsNotFound(derr) {
			errs = append(errs, fmt.Errorf("prune %s: %w", ref.ID, derr))
			continue
		}
		deleted = append(deleted, ref.ID)
	}
	return deleted, kept, errors.Join(errs...)
}

// entriesOf returns the entries of refs whose id is in ids.
func entriesOf(refs []v1alpha1.ResourceRef, ids []string) []v1alpha1.ResourceRef {
	var out []v1alpha1.ResourceRef
	for _, r := range refs {
		if slices.Contains(ids, r.ID) {
			out = append(out, r)
		}
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// PruneKeepReason says why gitsync's Prune keeps the live object of a stale inventory
// entry for source, or "" when it would delete it.
func PruneKeepReason(live *unstructured.Unstructured, source string) string {
	isNS := live.GroupVersionKind().GroupKind() == (schema.GroupKind{Kind: "Namespace"})
	switch {
	case live.GetLabels()[SourceLabel] != source:
		return fmt.Sprintf("label %s is %q, not %q: the object is no longer this source's", SourceLabel, live.GetLabels()[SourceLabel], source)
	case live.GetAnnotations()[PruneAnnotation] == "disabled":
		return "annotated " + PruneAnnotation + ": disabled"
	case isNS && slices.Contains(protectedNamespaces, live.GetName()):
		return "namespace " + live.GetName() + " is never pruned"
	case isNS && live.GetAnnotations()[CreatedByAnnotation] != source:
		return "namespace was not created by this source (no " + CreatedByAnnotation + ": " + source + ")"
	}
	return ""
}
