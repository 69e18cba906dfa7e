package gitsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

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
	_, err := a.patchObject(ctx, o, dryRun, nil)
	return err
}

// patchObject server-side applies o and returns the object the API answered with.
// nsExists caches, for dry runs, which namespaces exist (nil: no cache).
func (a *Applier) patchObject(ctx context.Context, o Object, dryRun bool, nsExists *nsCache) (*unstructured.Unstructured, error) {
	m, err := a.mapping(o.Obj.GroupVersionKind())
	if err != nil {
		return nil, err
	}
	obj := o.Obj
	ri := a.Dynamic.Resource(m.Resource)
	var res dynamic.ResourceInterface = ri
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if dryRun {
			// A namespace this revision creates does not exist yet; the object's own
			// validity does not depend on it, so check it in "default".
			exists, known := nsExists.get(ns)
			if !known {
				_, err := a.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, ns, metav1.GetOptions{})
				exists = !apierrors.IsNotFound(err)
				nsExists.set(ns, exists)
			}
			if !exists {
				obj = obj.DeepCopy()
				obj.SetNamespace("default")
				ns = "default"
			}
		}
		res = ri.Namespace(ns)
	}
	b, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: &force, FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return res.Patch(ctx, obj.GetName(), types.ApplyPatchType, b, opts)
}

// applyParallelism bounds the requests in flight while validating and applying: the apply is
// latency-bound (one etcd write each), not CPU-bound.
const applyParallelism = 8

// nsCache remembers which namespaces exist during one Validate.
type nsCache struct {
	mu sync.Mutex
	m  map[string]bool
}

func (c *nsCache) get(ns string) (exists, known bool) {
	if c == nil {
		return false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	exists, known = c.m[ns]
	return exists, known
}

func (c *nsCache) set(ns string, exists bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[ns] = exists
}

// parallel runs fn(i) for i in [0, n) with at most applyParallelism at once.
func parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, applyParallelism)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}

// Validate dry-runs every object (dryRun=All, fieldValidation=Strict) and returns one line
// per failing object, in order: "file: Kind namespace/name: field: message".
func (a *Applier) Validate(ctx context.Context, objs []Object) []string {
	lines := make([]string, len(objs))
	cache := &nsCache{m: map[string]bool{}}
	parallel(len(objs), func(i int) {
		if ctx.Err() != nil {
			return
		}
		if _, err := a.patchObject(ctx, objs[i], true, cache); err != nil && ctx.Err() == nil {
			lines[i] = describe(objs[i]) + ": " + errorText(err)
		}
	})
	var fails []string
	if ctx.Err() != nil {
		fails = append(fails, "validation interrupted: "+ctx.Err().Error())
	}
	for _, l := range lines {
		if l != "" {
			fails = append(fails, l)
		}
	}
	return fails
}

// Apply applies the objects in order (Prepare sorted them). Namespaces get
// CreatedByAnnotation when they do not exist yet or already carry it for this source.
func (a *Applier) Apply(ctx context.Context, objs []Object, source string) error {
	_, err := a.ApplyObjects(ctx, objs, source)
	return err
}

// ApplyObjects is Apply that also returns the objects as the API answered (status
// included), in order, for the health check; failed objects are left out. Objects of one
// apply rank (see Prepare) are applied concurrently, ranks one after the other.
func (a *Applier) ApplyObjects(ctx context.Context, objs []Object, source string) ([]*unstructured.Unstructured, error) {
	got := make([]*unstructured.Unstructured, len(objs))
	errs := make([]error, len(objs))
	for lo := 0; lo < len(objs); {
		hi := lo + 1
		for hi < len(objs) && a.rank(objs[hi]) == a.rank(objs[lo]) {
			hi++
		}
		parallel(hi-lo, func(i int) {
			got[lo+i], errs[lo+i] = a.applyOne(ctx, objs[lo+i], source)
		})
		lo = hi
	}
	applied := make([]*unstructured.Unstructured, 0, len(objs))
	for _, u := range got {
		if u != nil {
			applied = append(applied, u)
		}
	}
	return applied, errors.Join(errs...)
}

func (a *Applier) applyOne(ctx context.Context, o Object, source string) (*unstructured.Unstructured, error) {
	if o.Obj.GroupVersionKind().GroupKind() == (schema.GroupKind{Kind: "Namespace"}) {
		cur, err := a.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, o.Obj.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.GetAnnotations()[CreatedByAnnotation] == source) {
			o.Obj = o.Obj.DeepCopy()
			ann := o.Obj.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[CreatedByAnnotation] = source
			o.Obj.SetAnnotations(ann)
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", describe(o), err)
		}
	}
	got, err := a.patchObject(ctx, o, false, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", describe(o), errorText(err))
	}
	return got, nil
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
