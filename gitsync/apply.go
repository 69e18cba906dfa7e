package gitsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
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
	// EstablishTimeout bounds how long ApplyObjects waits for the CustomResourceDefinitions
	// it applied to be established (0: DefaultEstablishTimeout).
	EstablishTimeout time.Duration
	// Access, when set, reviews the access of the identity Dynamic acts as (a GitSource's
	// ServiceAccount, impersonated): Validate asks it whether that identity may create and
	// patch the objects a dry-run cannot check where they will live, the custom resources of
	// a CustomResourceDefinition of the revision and the objects of a namespace that does not
	// exist yet, so that a revision with an object the identity may not change is refused
	// whole. Nil: the Applier acts as gitsync itself, which may do anything.
	Access authorizationv1client.SelfSubjectAccessReviewInterface
	// User is the user name of the identity Access reviews, for messages.
	User string
}

// DefaultEstablishTimeout is how long ApplyObjects waits by default for a
// CustomResourceDefinition to be established and its kind to be served.
const DefaultEstablishTimeout = 30 * time.Second

// establishPoll is how often a CustomResourceDefinition (and discovery) is read again while
// waiting for it.
const establishPoll = 200 * time.Millisecond

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
// order. The scope of a kind a CustomResourceDefinition of the revision defines is that
// definition's; objects of any other kind the API does not serve are returned as failures.
func (a *Applier) Prepare(objs []Object, source string) ([]Object, []string) {
	scopes := crdScopes(objs)
	var fails []string
	var out []Object
	for _, o := range objs {
		namespaced, ok := scopes[o.Obj.GroupVersionKind().GroupKind()]
		if !ok {
			m, err := a.mapping(o.Obj.GroupVersionKind())
			if err != nil {
				fails = append(fails, fmt.Sprintf("%s: kind %s is not served by the API", describe(o), o.Obj.GroupVersionKind()))
				continue
			}
			namespaced = m.Scope.Name() == meta.RESTScopeNameNamespace
		}
		if namespaced {
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

// Apply ranks, in apply order. ApplyObjects waits after rankCRD until the definitions it
// applied are established, so the custom resources of later ranks can be applied.
const (
	rankNamespace = iota
	rankCRD
	rankClusterScoped
	rankConfig
	rankNamespaced
	rankService
	rankWorkload
)

// rank orders the apply: Namespaces, CustomResourceDefinitions, other cluster-scoped kinds,
// config and identities, other namespaced kinds, Services, workloads.
func (a *Applier) rank(o Object) int {
	gk := o.Obj.GroupVersionKind().GroupKind()
	switch {
	case gk.Group == "" && gk.Kind == "Namespace":
		return rankNamespace
	case gk == crdGroupKind:
		return rankCRD
	case o.Obj.GetNamespace() == "":
		return rankClusterScoped
	case gk.Group == "" && (gk.Kind == "ConfigMap" || gk.Kind == "Secret" || gk.Kind == "ServiceAccount"):
		return rankConfig
	case gk.Group == "" && gk.Kind == "Service":
		return rankService
	case gk.Group == "apps" || gk.Group == "batch" || (gk.Group == "" && (gk.Kind == "Pod" || gk.Kind == "ReplicationController")):
		return rankWorkload
	default:
		return rankNamespaced
	}
}

func (a *Applier) patch(ctx context.Context, o Object, dryRun bool) error {
	_, _, err := a.patchObject(ctx, o, dryRun, nil)
	return err
}

// patchObject server-side applies o and returns the object the API answered with and the
// warnings it answered (see CollectWarnings). nsExists caches, for dry runs, which
// namespaces exist (nil: no cache).
func (a *Applier) patchObject(ctx context.Context, o Object, dryRun bool, nsExists *nsCache) (*unstructured.Unstructured, []string, error) {
	m, err := a.mapping(o.Obj.GroupVersionKind())
	if err != nil {
		return nil, nil, err
	}
	obj := o.Obj
	ri := a.Dynamic.Resource(m.Resource)
	var res dynamic.ResourceInterface = ri
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if dryRun {
			// A namespace this revision creates does not exist yet; the object's own
			// validity does not depend on it, so check it in "default", once the
			// identity's access to it where it will live is.
			exists, known := nsExists.get(ns)
			if !known {
				_, err := a.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, ns, metav1.GetOptions{})
				exists = !apierrors.IsNotFound(err)
				nsExists.set(ns, exists)
			}
			if !exists {
				if err := a.mayApply(ctx, m.Resource.GroupResource(), ns, obj.GetName()); err != nil {
					return nil, nil, err
				}
				obj = obj.DeepCopy()
				obj.SetNamespace("default")
				ns = "default"
			}
		}
		res = ri.Namespace(ns)
	}
	b, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, nil, err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: &force, FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	wctx, warnings := withWarnings(ctx)
	got, err := res.Patch(wctx, obj.GetName(), types.ApplyPatchType, b, opts)
	return got, warnings.list(), err
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
// per failing object, in order: "file: Kind namespace/name: field: message". A custom
// resource whose CustomResourceDefinition is in objs cannot be dry-run before that
// definition is applied: it is checked offline against it (CRDCheck), and the definition
// itself is checked as the server checks a new one before it is dry-run. The dry-runs are
// made with the Applier's identity: an object it may not change fails with the API's 403
// ("Kind namespace/name: kinds \"name\" is forbidden: User ... cannot patch ..."), as does
// one that Access says it may not create or patch where the dry-run could not be made.
func (a *Applier) Validate(ctx context.Context, objs []Object) []string {
	fails, _ := a.validate(ctx, objs)
	return fails
}

// validate is Validate that also counts the objects refused with 403 Forbidden.
func (a *Applier) validate(ctx context.Context, objs []Object) (fails []string, forbidden int) {
	lines := make([]string, len(objs))
	refused := make([]bool, len(objs))
	cache := &nsCache{m: map[string]bool{}}
	crds := NewCRDCheck(objs)
	parallel(len(objs), func(i int) {
		if ctx.Err() != nil {
			return
		}
		o := objs[i]
		var err error
		switch gk := o.Obj.GroupVersionKind().GroupKind(); {
		case isCRD(o):
			if lines[i] = crds.CheckCRD(o); lines[i] != "" {
				return
			}
		case crds.Defines(gk):
			if err = a.mayApply(ctx, schema.GroupResource{Group: gk.Group, Resource: crds.Resource(gk)}, o.Obj.GetNamespace(), o.Obj.GetName()); err == nil {
				lines[i] = crds.Check(ctx, o)
				return
			}
		}
		if err == nil {
			// The apply that follows answers the same warnings: they are reported from there.
			_, _, err = a.patchObject(ctx, o, true, cache)
		}
		if err != nil && ctx.Err() == nil {
			lines[i] = describe(o) + ": " + errorText(err)
			refused[i] = apierrors.IsForbidden(err)
		}
	})
	if ctx.Err() != nil {
		fails = append(fails, "validation interrupted: "+ctx.Err().Error())
	}
	for i, l := range lines {
		if l != "" {
			fails = append(fails, l)
		}
		if refused[i] {
			forbidden++
		}
	}
	return fails, forbidden
}

// mayApply asks Access whether the Applier's identity may server-side apply object name of
// resource gr in namespace ns ("" for a cluster-scoped one) that does not exist yet: the API
// authorizes patch, and create for an object it creates. It returns nil when it may (or when
// there is no Access: the Applier acts as gitsync), otherwise a 403 Forbidden error worded as
// the API words its own.
func (a *Applier) mayApply(ctx context.Context, gr schema.GroupResource, ns, name string) error {
	if a.Access == nil {
		return nil
	}
	for _, verb := range []string{"create", "patch"} {
		r, err := a.Access.Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: gr.Group, Resource: gr.Resource, Name: name},
		}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("review the access of %s: %w", a.User, err)
		}
		if !r.Status.Allowed {
			msg := fmt.Sprintf("User %q cannot %s resource %q in API group %q", a.User, verb, gr.Resource, gr.Group)
			if ns != "" {
				msg += fmt.Sprintf(" in the namespace %q", ns)
			}
			if r.Status.Reason != "" {
				msg += ": " + r.Status.Reason
			}
			return apierrors.NewForbidden(gr, name, errors.New(msg))
		}
	}
	return nil
}

// Apply applies the objects in order (Prepare sorted them). Namespaces get
// CreatedByAnnotation when they do not exist yet or already carry it for this source.
func (a *Applier) Apply(ctx context.Context, objs []Object, source string) error {
	_, _, err := a.ApplyObjects(ctx, objs, source)
	return err
}

// ApplyObjects is Apply that also returns the objects as the API answered (status
// included), in order, for the health check; failed objects are left out. Objects of one
// apply rank (see Prepare) are applied concurrently, ranks one after the other. After the
// CustomResourceDefinitions it waits (EstablishTimeout) until each is established and the
// API serves its kind; the objects of a definition that failed or is not established are
// not applied, with one error naming the definition. The warnings the API answered to the
// applies (see CollectWarnings), those of failed objects included, are returned as
// "Kind namespace/name: warning", each once, in apply order.
func (a *Applier) ApplyObjects(ctx context.Context, objs []Object, source string) ([]*unstructured.Unstructured, []string, error) {
	got := make([]*unstructured.Unstructured, len(objs))
	errs := make([]error, len(objs))
	warned := make([][]string, len(objs))
	// Kinds whose definition (named) this apply could not establish.
	notReady := map[schema.GroupKind]string{}
	skipped := map[schema.GroupKind]int{}
	for lo := 0; lo < len(objs); {
		hi := lo + 1
		for hi < len(objs) && a.rank(objs[hi]) == a.rank(objs[lo]) {
			hi++
		}
		var mu sync.Mutex
		parallel(hi-lo, func(i int) {
			o := objs[lo+i]
			if _, ok := notReady[o.Obj.GroupVersionKind().GroupKind()]; ok {
				mu.Lock()
				skipped[o.Obj.GroupVersionKind().GroupKind()]++
				mu.Unlock()
				return
			}
			got[lo+i], warned[lo+i], errs[lo+i] = a.applyOne(ctx, o, source)
		})
		if a.rank(objs[lo]) == rankCRD {
			a.establish(ctx, objs[lo:hi], got[lo:hi], errs[lo:hi], notReady)
		}
		lo = hi
	}
	for _, gk := range slices.SortedFunc(maps.Keys(skipped), func(x, y schema.GroupKind) int { return strings.Compare(x.String(), y.String()) }) {
		errs = append(errs, fmt.Errorf("%d %s object(s) not applied: their CustomResourceDefinition %s is not established", skipped[gk], gk.Kind, notReady[gk]))
	}
	applied := make([]*unstructured.Unstructured, 0, len(objs))
	var warnings []string
	for i, u := range got {
		if u != nil {
			applied = append(applied, u)
		}
		warnings = appendDistinct(warnings, objectWarnings(objs[i], warned[i])...)
	}
	return applied, warnings, errors.Join(errs...)
}

// crdKinds returns the kind a CustomResourceDefinition defines and its served versions.
func crdKinds(u *unstructured.Unstructured) (schema.GroupKind, []schema.GroupVersionKind) {
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
	gk := schema.GroupKind{Group: group, Kind: kind}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	var out []schema.GroupVersionKind
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if name, _ := m["name"].(string); name != "" && m["served"] == true {
			out = append(out, gk.WithVersion(name))
		}
	}
	return gk, out
}

// establish waits until every CustomResourceDefinition of one rank that was applied
// (got[i] != nil) is established, then refreshes the RESTMapper (its discovery was read
// before these kinds existed) and waits until it maps every served version. A definition
// that fails gets its error in errs and its kind in notReady (with its name), as does one
// whose apply failed.
func (a *Applier) establish(ctx context.Context, objs []Object, got []*unstructured.Unstructured, errs []error, notReady map[schema.GroupKind]string) {
	timeout := a.EstablishTimeout
	if timeout <= 0 {
		timeout = DefaultEstablishTimeout
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var mu sync.Mutex
	served := make([][]schema.GroupVersionKind, len(objs))
	parallel(len(objs), func(i int) {
		gk, versions := crdKinds(objs[i].Obj)
		if got[i] == nil {
			mu.Lock()
			notReady[gk] = objs[i].Obj.GetName()
			mu.Unlock()
			return
		}
		live, err := a.waitEstablished(ctx, wctx, got[i], timeout)
		if err != nil {
			errs[i] = fmt.Errorf("%s: %w", describe(objs[i]), err)
			mu.Lock()
			notReady[gk] = objs[i].Obj.GetName()
			mu.Unlock()
			return
		}
		got[i], served[i] = live, versions
	})
	if r, ok := a.Mapper.(resetMapper); ok {
		r.Reset()
	}
	for i, versions := range served {
		for _, gvk := range versions {
			if err := a.waitMapping(wctx, gvk); err != nil {
				errs[i] = fmt.Errorf("%s: established, but the API does not serve %s after %s: %v", describe(objs[i]), gvk, timeout, err)
				notReady[gvk.GroupKind()] = objs[i].Obj.GetName()
				break
			}
		}
	}
}

// waitEstablished polls the CustomResourceDefinition applied as u until its Established
// condition is True and returns it as last read. It gives up at once when the server
// refused its names, and when wctx ends with what the conditions said.
func (a *Applier) waitEstablished(ctx, wctx context.Context, u *unstructured.Unstructured, timeout time.Duration) (*unstructured.Unstructured, error) {
	name := u.GetName()
	cur := u
	why := ""
	for {
		if cur != nil {
			established, w, refused := crdEstablished(cur)
			if established {
				return cur, nil
			}
			if w != "" {
				why = w
			}
			if refused {
				return nil, fmt.Errorf("CustomResourceDefinition %s is not established: %s", name, why)
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if why == "" {
				why = "the server has not set its Established condition"
			}
			return nil, fmt.Errorf("CustomResourceDefinition %s is not established after %s: %s", name, timeout, why)
		case <-time.After(establishPoll):
		}
		live, err := a.Dynamic.Resource(crdResource).Get(wctx, name, metav1.GetOptions{})
		if err != nil {
			if wctx.Err() == nil {
				why = "read: " + errorText(err)
			}
			cur = nil
			continue
		}
		cur = live
	}
}

// waitMapping waits until the RESTMapper maps gvk (discovery may lag behind the
// Established condition), resetting it between tries.
func (a *Applier) waitMapping(wctx context.Context, gvk schema.GroupVersionKind) error {
	for {
		_, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil || !meta.IsNoMatchError(err) {
			return err
		}
		select {
		case <-wctx.Done():
			return err
		case <-time.After(establishPoll):
		}
		if r, ok := a.Mapper.(resetMapper); ok {
			r.Reset()
		}
	}
}

func (a *Applier) applyOne(ctx context.Context, o Object, source string) (*unstructured.Unstructured, []string, error) {
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
			return nil, nil, fmt.Errorf("%s: %w", describe(o), err)
		}
	}
	got, warnings, err := a.patchObject(ctx, o, false, nil)
	if err != nil {
		return nil, warnings, fmt.Errorf("%s: %s", describe(o), errorText(err))
	}
	return got, warnings, nil
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
