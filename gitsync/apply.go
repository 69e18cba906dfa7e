package gitsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

const (
	// FieldManager owns the fields gitsync applies.
	FieldManager = "flotilla-gitsync"
	// SourceLabel carries "<namespace>.<name>" of the GitSource an object was applied from.
	SourceLabel = "flotilla.dev/source"
	// PruneAnnotation set to "disabled" keeps an object when it leaves git.
	PruneAnnotation = "flotilla.dev/prune"
	// CreatedByAnnotation marks a Namespace that a source created (only those are pruned).
	CreatedByAnnotation = "flotilla.dev/created-by"
)

// Applier applies and prunes arbitrary kinds through the dynamic client.
type Applier struct {
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
}

// ResetMapper is implemented by discovery-backed mappers that can forget what they cached.
type resetMapper interface{ Reset() }

// ID is the inventory id of u: "<namespace>_<name>_<group>_<kind>".
func ID(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	return u.GetNamespace() + "_" + u.GetName() + "_" + gvk.Group + "_" + gvk.Kind
}

func describe(o Object) string {
	id := o.Obj.GetKind() + " " + o.Obj.GetName()
	if ns := o.Obj.GetNamespace(); ns != "" {
		id = o.Obj.GetKind() + " " + ns + "/" + o.Obj.GetName()
	}
	if o.File != "" {
		return o.File + ": " + id
	}
	return id
}

func (a *Applier) mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil && meta.IsNoMatchError(err) {
		if r, ok := a.Mapper.(resetMapper); ok {
			r.Reset()
			m, err = a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
	}
	return m, err
}

// Prepare labels every object with the source, gives namespaced objects without a
// namespace "default", clears the namespace of cluster-scoped ones and sorts them in apply
// order. Objects whose kind the API does not serve are returned as failures.
func (a *Applier) Prepare(objs []Object, source string) ([]Object, []string) {
	var fails []string
	var out []Object
	for _, o := range objs {
		m, err := a.mapping(o.Obj.GroupVersionKind())
		if err != nil {
			fails = append(fails, fmt.Sprintf("%s: kind %s is not served by the API", describe(o), o.Obj.GroupVersionKind()))
			continue
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if o.Obj.GetNamespace() == "" {
				o.Obj.SetNamespace("default")
			}
		} else {
			o.Obj.SetNamespace("")
		}
		l := o.Obj.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[SourceLabel] = source
		o.Obj.SetLabels(l)
		out = append(out, o)
	}
	sort.SliceStable(out, func(i, j int) bool { return a.rank(out[i]) < a.rank(out[j]) })
	return out, fails
}

// rank orders the apply: Namespaces, other cluster-scoped kinds (CRDs among them), config
// and identities, other namespaced kinds, Services, workloads.
func (a *Applier) rank(o Object) int {
	gk := o.Obj.GroupVersionKind().GroupKind()
	switch {
	case gk.Group == "" && gk.Kind == "Namespace":
		return 0
	case o.Obj.GetNamespace() == "":
		return 1
	case gk.Group == "" && (gk.Kind == "ConfigMap" || gk.Kind == "Secret" || gk.Kind == "ServiceAccount"):
		return 2
	case gk.Group == "" && gk.Kind == "Service":
		return 4
	case gk.Group == "apps" || gk.Group == "batch" || (gk.Group == "" && (gk.Kind == "Pod" || gk.Kind == "ReplicationController")):
		return 5
	default:
		return 3
	}
}

func (a *Applier) patch(ctx context.Context, o Object, dryRun bool) error {
	m, err := a.mapping(o.Obj.GroupVersionKind())
	if err != nil {
		return err
	}
	obj := o.Obj
	ri := a.Dynamic.Resource(m.Resource)
	var res dynamic.ResourceInterface = ri
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if dryRun {
			// A namespace this revision creates does not exist yet; the object's own
			// validity does not depend on it, so check it in "default".
			if _, err := a.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				obj = obj.DeepCopy()
				obj.SetNamespace("default")
				ns = "default"
			}
		}
		res = ri.Namespace(ns)
	}
	b, err := json.Marshal(obj.Object)
	if err != nil {
		return err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: &force, FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = res.Patch(ctx, obj.GetName(), types.ApplyPatchType, b, opts)
	return err
}

// Validate dry-runs every object (dryRun=All, fieldValidation=Strict) and returns one line
// per failing object: "file: Kind namespace/name: field: message".
func (a *Applier) Validate(ctx context.Context, objs []Object) []string {
	var fails []string
	for _, o := range objs {
		if err := a.patch(ctx, o, true); err != nil {
			if ctx.Err() != nil {
				return append(fails, ctx.Err().Error())
			}
			fails = append(fails, describe(o)+": "+errorText(err))
		}
	}
	return fails
}

// Apply applies the objects in order (Prepare sorted them). Namespaces get
// CreatedByAnnotation when they do not exist yet or already carry it for this source.
func (a *Applier) Apply(ctx context.Context, objs []Object, source string) error {
	var errs []error
	for _, o := range objs {
		if o.Obj.GroupVersionKind().GroupKind() == (schema.GroupKind{Kind: "Namespace"}) {
			live, err := a.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, o.Obj.GetName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && live.GetAnnotations()[CreatedByAnnotation] == source) {
				o.Obj = o.Obj.DeepCopy()
				ann := o.Obj.GetAnnotations()
				if ann == nil {
					ann = map[string]string{}
				}
				ann[CreatedByAnnotation] = source
				o.Obj.SetAnnotations(ann)
			} else if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", describe(o), err))
				continue
			}
		}
		if err := a.patch(ctx, o, false); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s", describe(o), errorText(err)))
		}
	}
	return errors.Join(errs...)
}

// errorText is the API's message with each invalid field spelled "field: message".
func errorText(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		if s.Details != nil && len(s.Details.Causes) > 0 {
			var parts []string
			for _, c := range s.Details.Causes {
				if c.Field != "" {
					parts = append(parts, c.Field+": "+c.Message)
				} else {
					parts = append(parts, c.Message)
				}
			}
			return strings.Join(parts, "; ")
		}
		return s.Message
	}
	return err.Error()
}
